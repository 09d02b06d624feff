//! The probes' and the targets' rules, on made-up runs.

use std::collections::BTreeMap;

use meshscope_e2e::dist::Dist;
use meshscope_e2e::xdsbench::PushResult;

use crate::measure::Calibration;
use crate::probe::{some, Probe};
use crate::report::targets;
use crate::summary::Summary;

fn pushed(names: &[&str]) -> PushResult {
    PushResult {
        fanout: names.len(),
        names: names.iter().map(|n| n.to_string()).collect(),
        ..PushResult::default()
    }
}

/// A leaf probe with callers `a` and `b` among four proxies, pushed to
/// all four before the apply and to `after` after it.
fn probe(after: &[&str]) -> Probe {
    let mut p = Probe::new("leaf", "leaf.ns".into(), vec!["ns/a".into(), "ns/b".into()]);
    p.before = pushed(&["ns/a", "ns/b", "ns/c", "ns/d"]);
    p.after = pushed(after);
    p.finish();
    p
}

#[test]
fn a_change_reaching_none_of_its_callers_misses_the_target() {
    let p = probe(&[]);
    assert_eq!(p.after_missed, ["ns/a", "ns/b"]);
    let row = p.row("1x");
    assert_eq!(row[4], "no");
    assert!(row[2].contains("callers missed: ns/a, ns/b"), "{}", row[2]);
}

#[test]
fn a_change_missing_one_caller_misses_the_target_and_names_it() {
    let p = probe(&["ns/a"]);
    assert_eq!(p.after_missed, ["ns/b"]);
    assert!(p.after_outside.is_empty());
    let row = p.row("1x");
    assert_eq!(row[4], "no");
    assert!(row[2].contains("callers missed: ns/b;"), "{}", row[2]);
}

#[test]
fn a_change_pushed_outside_its_callers_misses_the_target() {
    let p = probe(&["ns/a", "ns/b", "ns/c"]);
    assert!(p.after_missed.is_empty());
    assert_eq!(p.after_outside, ["ns/c"]);
    let row = p.row("1x");
    assert_eq!(row[4], "no");
    assert!(row[2].contains("pushed outside: ns/c"), "{}", row[2]);
}

#[test]
fn a_change_reaching_exactly_its_callers_meets_the_target() {
    let p = probe(&["ns/a", "ns/b"]);
    let row = p.row("1x");
    assert_eq!(row[4], "yes", "{row:?}");
    assert_eq!(row[2], "4 / 2; callers missed: none; pushed outside: none");
}

#[test]
fn a_change_pushed_to_as_many_as_before_misses_the_target() {
    let mut p = probe(&["ns/a", "ns/b"]);
    p.before = pushed(&["ns/a", "ns/b"]);
    assert_eq!(p.row("1x")[4], "no");
}

fn dist(proxies: usize, mean: f64, p95: u64) -> Dist {
    Dist {
        proxies,
        mean,
        p95,
        ..Dist::default()
    }
}

/// Four proxies, 100 KB each before and 10 KB after, the exact probe,
/// no edge lost, every proxy predicted.
fn summary() -> Summary {
    let cal = Calibration {
        proxies: 4,
        clusters_equal: 4,
        listeners_equal: 4,
        routes_equal: 4,
        total_predicted: 1_000,
        total_actual: 1_000,
        ..Calibration::default()
    };
    let roles = |bytes: f64| {
        BTreeMap::from([
            ("all".to_string(), dist(4, bytes, bytes as u64)),
            ("caller".to_string(), dist(2, bytes, bytes as u64)),
        ])
    };
    Summary {
        scale: 1,
        proxies: 4,
        before: roles(100_000.0),
        after: roles(10_000.0),
        probes: vec![probe(&["ns/a", "ns/b"])],
        safety_edges: 2,
        calibration_before: cal.clone(),
        calibration_after: cal,
        ..Summary::default()
    }
}

fn met(s: &Summary, measure: &str) -> String {
    let rows = targets(s);
    let row = rows
        .iter()
        .find(|r| r[1].starts_with(measure))
        .unwrap_or_else(|| panic!("no target {measure:?} in {rows:?}"));
    row[4].clone()
}

#[test]
fn every_target_is_met_by_a_good_run_and_each_fails_on_its_own_miss() {
    let good = summary();
    assert!(
        targets(&good).iter().all(|r| r[4] == "yes"),
        "{:?}",
        targets(&good)
    );
    let missed = |f: &dyn Fn(&mut Summary), measure: &str| {
        let mut s = summary();
        f(&mut s);
        assert_eq!(met(&s, measure), "no", "{measure}");
    };
    missed(
        &|s| s.after.get_mut("all").unwrap().mean = 60_000.0,
        "mean xDS per proxy",
    );
    missed(
        &|s| s.after.get_mut("caller").unwrap().p95 = 100_000,
        "p95 xDS per caller proxy",
    );
    missed(&|s| s.probes = vec![probe(&["ns/a"])], "leaf change");
    missed(&|s| s.lost = vec!["ns/a -> ns/b".into()], "observed edges");
    missed(
        &|s| s.calibration_after.listeners_equal = 3,
        "after: proxies with clusters and listeners",
    );
    missed(
        &|s| s.calibration_before.proxies = 3,
        "before: proxies with clusters and listeners",
    );
    missed(
        &|s| s.calibration_after.beyond_15 = 1,
        "after: predicted bytes per proxy",
    );
    missed(
        &|s| s.calibration_before.total_predicted = 1_051,
        "before: predicted / actual bytes",
    );
}

#[test]
fn many_names_are_counted_and_the_first_five_named() {
    let names: Vec<String> = (0..7).map(|i| format!("ns/p{i}")).collect();
    assert_eq!(some(&names), "7: ns/p0, ns/p1, ns/p2, ns/p3, ns/p4, ...");
}
