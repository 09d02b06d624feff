//! The targets' rules on made-up reports, and how the watcher's writes
//! are grouped for the write-order check.

use std::time::{Duration, Instant};

use meshscope_e2e::watcher::WriteKind;
use serde_json::{json, Value};

use crate::figures::reported_passes;
use crate::report::misses;

/// A report that meets every target.
fn met() -> Value {
    json!({
        "proxies": 420,
        "source": "pod-logs",
        "latency_s": {"n": 20, "p50": 5.0, "p95": 9.0, "worst": 10.0},
        "latency_target_s": 15,
        "never_widened": [],
        "narrowed": 12,
        "dangling_write_caused": 0,
        "dangling_cds_before_lds_rds": 7,
        "write_order": {"widened_and_narrowed": 3, "compared": 3, "violation_count": 0},
        "steady": {"sidecar_writes": 0, "pushes_received": 0},
    })
}

/// `misses` of `met()` changed by `f`: exactly one, naming `what`.
fn missed(f: impl FnOnce(&mut Value), what: &str) {
    let mut r = met();
    f(&mut r);
    let m = misses(&r);
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(m[0].contains(what), "{m:?} does not say {what:?}");
}

#[test]
fn a_report_meeting_every_target_misses_none() {
    assert_eq!(misses(&met()), Vec::<String>::new());
}

#[test]
fn each_target_can_be_missed() {
    missed(
        |r| r["latency_s"]["p95"] = json!(15.5),
        "latency p95 15.5 s > 15 s",
    );
    missed(|r| r["latency_s"] = json!({"n": 0}), "no latency measured");
    missed(
        |r| r["never_widened"] = json!(["sleep-1 -> httpbin-9"]),
        "1 new edges never reached",
    );
    missed(|r| r["narrowed"] = json!(0), "no narrowing");
    missed(|r| r["narrowed"] = Value::Null, "narrowings not counted");
    missed(
        |r| r["dangling_write_caused"] = json!(2),
        "2 listeners or routes",
    );
    missed(
        |r| r["dangling_write_caused"] = Value::Null,
        "dangling references not counted",
    );
    missed(
        |r| r["write_order"]["violation_count"] = json!(1),
        "1 narrowings reached a proxy before",
    );
    missed(
        |r| r["write_order"] = Value::Null,
        "write order not checked",
    );
    missed(
        |r| r["steady"]["sidecar_writes"] = json!(3),
        "3 Sidecar writes at a steady mesh",
    );
    missed(
        |r| r["steady"]["pushes_received"] = json!(40),
        "40 pushes at a steady mesh",
    );
    missed(
        |r| r["steady"] = json!({"pushes_received": 0}),
        "Sidecar writes at a steady mesh not counted",
    );
    missed(
        |r| r["steady"] = json!({"sidecar_writes": 0}),
        "pushes at a steady mesh not counted",
    );
}

/// istiod's own CDS-before-LDS/RDS windows are reported, not a target.
#[test]
fn istiods_push_order_windows_are_not_a_miss() {
    let mut r = met();
    r["dangling_cds_before_lds_rds"] = json!(500);
    assert!(misses(&r).is_empty());
}

#[test]
fn narrowings_go_with_the_widenings_reported_before_them() {
    let t = Instant::now();
    let ev = |e: &str| json!({"event": e, "namespace": "n", "sidecar": "s", "hosts": ["n/h"]});
    let events: Vec<(Instant, Value)> = [
        "widened",
        "created",
        "narrowed",
        "narrowed",
        "narrowed",
        "widened",
        "not-confirmed",
        "narrowed",
    ]
    .iter()
    .enumerate()
    .map(|(i, e)| (t + Duration::from_millis(i as u64), ev(e)))
    .collect();
    let kinds: Vec<Vec<WriteKind>> = reported_passes(&events)
        .iter()
        .map(|p| p.writes.iter().map(|w| w.kind).collect())
        .collect();
    use WriteKind::*;
    assert_eq!(
        kinds,
        [
            vec![Widen, Create, Narrow, Narrow, Narrow],
            vec![Widen],
            vec![Narrow]
        ]
    );
}
