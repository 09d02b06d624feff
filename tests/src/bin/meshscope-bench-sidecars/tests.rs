//! The probes', the fits' and the targets' rules, on made-up points.

use std::collections::{BTreeMap, BTreeSet};

use meshscope_e2e::dist::Dist;
use meshscope_e2e::xdsbench::PushResult;

use crate::mesh::projected;
use crate::point::{Mode, Point, Probe, Skipped, NAMED};
use crate::report::{fits, reach, targets, Report, AKS_QUOTE};

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// A change on a Service called from `ns/a` and `ns/b`, pushed to `to`.
fn probe(to: &[&str]) -> Probe {
    let push = PushResult {
        fanout: to.len(),
        names: to.iter().map(|n| n.to_string()).collect(),
        ..PushResult::default()
    };
    Probe::new("leaf.ns".into(), &set(&["ns/a", "ns/b"]), push)
}

/// A point of `mode` at `n` proxies, with istiod at `rss` MB, a p50 of
/// 1 KB unscoped and 20 B scoped, and its probes reaching exactly their
/// callers.
fn point(mode: Mode, n: usize, rss: f64) -> Point {
    let all = Dist {
        proxies: n,
        p50: if mode == Mode::Scoped { 20 } else { 1_000 },
        ..Dist::default()
    };
    Point {
        mode,
        proxies: n,
        not_ready: 0,
        connect_s: 1.0,
        istiod_cpu_connect_s: 1.0,
        istiod_rss_mb: rss,
        istiod_hwm_mb: rss,
        sim_rss_mb: 100.0,
        sim_heap_mb: 100.0,
        from: None,
        xds: BTreeMap::from([("all".to_string(), all)]),
        hub: probe(&["ns/a", "ns/b"]),
        leaf: probe(&["ns/a", "ns/b"]),
        safety_edges: 1,
        lost: Vec::new(),
    }
}

/// Unscoped points at 500..2000 growing by `per` MB a proxy, scoped
/// points at 2000 and 4000 (istiod at 500 and 600 MB), 4000 sidecars.
fn report(per: f64, scoped: Vec<Point>) -> Report {
    let mut points: Vec<Point> = [500, 1_000, 1_500, 2_000]
        .into_iter()
        .map(|n| point(Mode::Unscoped, n, 1_000.0 + per * n as f64))
        .collect();
    points.extend(scoped);
    let mut r = Report {
        commit: "test".into(),
        seed: 1,
        services: 10,
        sidecars: 4_000,
        workloads: 10,
        sidecars_written: 10,
        deploy_s: 0.0,
        fits: fits(&points),
        points,
        skipped: vec![Skipped {
            mode: Mode::Unscoped,
            proxies: 3_000,
            why: "skipped: projected ...".into(),
        }],
        aks_quote: AKS_QUOTE,
        targets: Vec::new(),
        met: false,
    };
    r.targets = targets(&r);
    r
}

fn scoped() -> Vec<Point> {
    vec![
        point(Mode::Scoped, 2_000, 500.0),
        point(Mode::Scoped, 4_000, 600.0),
    ]
}

fn row<'a>(r: &'a Report, measure: &str) -> &'a [String; 4] {
    r.targets
        .iter()
        .find(|t| t[0].starts_with(measure))
        .unwrap_or_else(|| panic!("no target {measure:?} in {:?}", r.targets))
}

#[test]
fn a_change_reaching_none_of_its_callers_misses_the_target() {
    let p = probe(&[]);
    assert_eq!((p.missed, p.outside), (2, 0));
    let row = p.row("leaf", 4_000);
    assert_eq!(row[3], "no");
    assert!(row[1].contains("callers missed: ns/a, ns/b;"), "{}", row[1]);
}

#[test]
fn a_change_missing_one_caller_misses_the_target_and_names_it() {
    let p = probe(&["ns/a"]);
    assert_eq!(p.missed_names, ["ns/b"]);
    let row = p.row("leaf", 4_000);
    assert_eq!(row[3], "no");
    assert!(row[1].contains("callers missed: ns/b;"), "{}", row[1]);
}

#[test]
fn a_change_pushed_outside_its_callers_misses_the_target() {
    let p = probe(&["ns/a", "ns/b", "ns/c"]);
    assert_eq!((p.missed, p.outside), (0, 1));
    let row = p.row("hub", 4_000);
    assert_eq!(row[3], "no");
    assert!(row[1].contains("pushed outside: ns/c"), "{}", row[1]);
}

#[test]
fn a_change_reaching_exactly_its_callers_meets_the_target() {
    let p = probe(&["ns/b", "ns/a"]);
    let row = p.row("hub", 4_000);
    assert_eq!(row[3], "yes", "{row:?}");
    assert!(p.push.names.is_empty(), "the JSON keeps counts");
}

#[test]
fn many_misses_are_counted_and_the_first_named() {
    let callers: BTreeSet<String> = (0..25).map(|i| format!("ns/p{i:02}")).collect();
    let p = Probe::new("hub.ns".into(), &callers, PushResult::default());
    assert_eq!((p.missed, p.missed_names.len()), (25, NAMED));
    assert!(p.row("hub", 25)[1].contains("callers missed: 25: ns/p00, "));
}

#[test]
fn a_scoped_point_whose_leaf_change_misses_a_caller_fails_the_run() {
    let mut s = scoped();
    s[1].leaf = probe(&["ns/a"]);
    let r = report(1.0, s);
    assert_eq!(row(&r, "scoped 4000: leaf change")[3], "no");
    assert_eq!(row(&r, "scoped 2000: leaf change")[3], "yes");
    assert_eq!(row(&r, "scoped 4000: hub change")[3], "yes");
}

#[test]
fn the_unscoped_comparison_says_what_was_measured_and_what_extrapolated() {
    let r = report(1.0, scoped());
    let t = row(&r, "istiod RSS at 4000 sidecars");
    // Unscoped: 1000 + 4000 = 5000 MB, scoped 600 MB.
    assert_eq!(t[3], "yes", "{t:?}");
    assert!(t[1].starts_with("600 MB / 5000 MB;"), "{}", t[1]);
    assert!(t[1].contains("scoped at 4000: the fit at a measured point"));
    assert!(t[1].contains("unscoped measured at 500, 1000, 1500, 2000 (R² 1.000)"));
    assert!(t[1].contains("not at 3000 (skipped)"));
    assert!(
        t[1].contains("at 4000: extrapolated, 2.0× beyond the largest measured point (2000)"),
        "{}",
        t[1]
    );
}

#[test]
fn the_unscoped_comparison_fails_when_scoping_saves_too_little() {
    // Unscoped: 1000 + 0.02·4000 = 1080 MB; scoped 600 MB > 540 MB.
    let r = report(0.02, scoped());
    assert_eq!(row(&r, "istiod RSS at 4000 sidecars")[3], "no");
}

#[test]
fn the_unscoped_comparison_fails_with_too_few_unscoped_points() {
    let mut r = report(1.0, scoped());
    r.points
        .retain(|p| p.mode == Mode::Scoped || p.proxies > 1_000);
    r.fits = fits(&r.points);
    let t = targets(&r);
    let t = t.iter().find(|t| t[0].starts_with("istiod RSS")).unwrap();
    assert_eq!(t[1], "2 unscoped points (4 needed)");
    assert_eq!(t[3], "no");
}

#[test]
fn every_target_is_met_by_a_good_run_and_each_fails_on_its_own_miss() {
    let good = report(1.0, scoped());
    assert!(
        good.targets.iter().all(|t| t[3] == "yes"),
        "{:?}",
        good.targets
    );
    let retarget = |f: &dyn Fn(&mut Report)| {
        let mut r = report(1.0, scoped());
        f(&mut r);
        r.fits = fits(&r.points);
        r.targets = targets(&r);
        r
    };
    // The largest scoped point short of --sidecars, or a proxy without config.
    let r = retarget(&|r| r.sidecars = 5_000);
    assert_eq!(row(&r, "scoped run at 5000")[3], "no");
    let r = retarget(&|r| r.points[5].not_ready = 1);
    assert_eq!(row(&r, "scoped run at 4000")[3], "no");
    // The simulator over 4 GB at the largest scoped point.
    let r = retarget(&|r| r.points[5].sim_heap_mb = 4_097.0);
    assert_eq!(row(&r, "simulator memory")[3], "no");
    // One lost edge.
    let r = retarget(&|r| r.points[4].lost = vec!["ns/a -> ns/b".into()]);
    assert_eq!(row(&r, "safety")[3], "no");
    // Scoped xDS more than a quarter of unscoped at the common point.
    let r = retarget(&|r| r.points[4].xds.get_mut("all").unwrap().p50 = 251);
    assert_eq!(
        row(&r, "xDS p50 per proxy, scoped / unscoped at 2000")[3],
        "no"
    );
    // No scoped point beside an unscoped one.
    let r = retarget(&|r| r.points[4].proxies = 2_500);
    let t = row(&r, "xDS p50 per proxy");
    assert_eq!((t[1].as_str(), t[3].as_str()), ("no common point", "no"));
    // No scoped point at all.
    let r = retarget(&|r| r.points.retain(|p| p.mode == Mode::Unscoped));
    assert_eq!(row(&r, "scoped run at")[3], "no");
    assert_eq!(row(&r, "istiod RSS at")[3], "no");
}

#[test]
fn reach_names_measured_interpolated_and_extrapolated_values() {
    let xs = [500, 1_000, 3_500];
    assert_eq!(reach(&xs, 1_000), "at 1000: the fit at a measured point");
    assert_eq!(
        reach(&xs, 2_000),
        "at 2000: interpolated between measured points"
    );
    assert_eq!(
        reach(&xs, 20_000),
        "at 20000: extrapolated, 5.7× beyond the largest measured point (3500)"
    );
    assert_eq!(reach(&[], 20_000), "at 20000: no measured point");
}

#[test]
fn an_earlier_runs_does_not_fit_is_read_as_a_projection() {
    assert_eq!(
        projected("does not fit: istiod and the simulator would need about 14.9 GB, 13.4 GB is available"),
        "skipped, projected not to fit (not tried): istiod and the simulator would need about 14.9 GB, 13.4 GB is available"
    );
    assert_eq!(projected("failed: boom"), "failed: boom");
}
