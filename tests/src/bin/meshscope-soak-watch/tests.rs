//! The book's counts, each on its own: wrong and missed narrowings,
//! double writes, lost edges, and a run that exercised nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::book::Book;
use crate::settings::{host, CALL_EVERY, PRUNE_AFTER};

fn book() -> Book {
    let mut b = Book {
        ns: "wfs".into(),
        ..Book::default()
    };
    b.sidecar_client.insert("client-0-pod-meshscope".into(), 0);
    b
}

fn held(hosts: &[usize]) -> BTreeMap<usize, BTreeSet<usize>> {
    BTreeMap::from([(0, hosts.iter().copied().collect())])
}

fn write(kind: &str, d: usize) -> Value {
    json!({"event": kind, "sidecar": "client-0-pod-meshscope", "hosts": [format!("wfs/{}", host("wfs", d))]})
}

/// An edge of client 0 to destination 1, called every 3 s over
/// `span` up to `end`, then polled held at its first call and gone at
/// `end + poll`: what the book makes of the narrowing.
fn narrowed(active: bool, span: Duration, end: Duration, poll: Duration) -> Book {
    let t0 = Instant::now();
    let mut b = book();
    let mut t = end.saturating_sub(span);
    while t <= end {
        b.called(0, 1, t0 + t);
        t += CALL_EVERY;
    }
    b.edges.get_mut(&(0, 1)).unwrap().active = active;
    b.polled(&held(&[1]), t0 + end.saturating_sub(span));
    b.polled(&held(&[]), t0 + end + poll);
    b
}

#[test]
fn a_host_narrowed_while_called_or_too_soon_is_a_wrong_narrowing() {
    let s = Duration::from_secs;
    // Called all along: calls the narrowing pass read were seconds old.
    let b = narrowed(true, s(120), s(120), s(1));
    assert_eq!(b.wrong_narrowings.len(), 1, "still called");
    assert!(b.wrong_narrowings[0].contains("still called: true"));
    // Stopped 20 s before: too soon.
    let b = narrowed(false, s(60), s(60), PRUNE_AFTER / 2);
    assert_eq!(b.wrong_narrowings.len(), 1, "too soon");
    // Stopped over --prune-after before: right.
    let b = narrowed(false, s(60), s(60), PRUNE_AFTER + s(1));
    assert!(b.wrong_narrowings.is_empty(), "{:?}", b.wrong_narrowings);
    assert!(b.resumed.is_empty());
}

#[test]
fn a_host_narrowed_as_its_calls_resume_after_a_long_silence_is_reported_not_counted() {
    let t0 = Instant::now();
    let mut b = book();
    b.called(0, 1, t0);
    b.polled(&held(&[1]), t0);
    // Silent for 50 s, called again, and gone at the next poll: the
    // narrowing pass read before the call.
    let again = t0 + Duration::from_secs(50);
    b.called(0, 1, again);
    b.edges.get_mut(&(0, 1)).unwrap().active = true;
    b.polled(&held(&[]), again + Duration::from_secs(1));
    assert!(b.wrong_narrowings.is_empty(), "{:?}", b.wrong_narrowings);
    assert_eq!(b.resumed.len(), 1);
    // Silent for only 20 s before: the pass could read the old call.
    let mut b = book();
    b.called(0, 1, t0);
    b.polled(&held(&[1]), t0);
    let again = t0 + Duration::from_secs(20);
    b.called(0, 1, again);
    b.polled(&held(&[]), again + Duration::from_secs(1));
    assert_eq!(b.wrong_narrowings.len(), 1);
}

#[test]
fn a_second_widening_without_a_narrowing_or_a_followers_write_is_a_double_write() {
    let mut b = book();
    b.wrote("r0", true, &write("widened", 2));
    b.wrote("r1", true, &write("widened", 2));
    assert_eq!(b.double_writes.len(), 1, "{:?}", b.double_writes);

    let mut b = book();
    b.wrote("r0", true, &write("widened", 2));
    b.wrote("r0", true, &write("narrowed", 2));
    b.wrote("r1", true, &write("widened", 2));
    assert!(b.double_writes.is_empty(), "{:?}", b.double_writes);

    // A narrowing whose event was lost (its replica killed before it
    // said so) shows in the polls: the widening after it is new.
    let mut b = book();
    b.wrote("r0", true, &write("widened", 2));
    let t = Instant::now();
    b.polled(&held(&[2]), t);
    b.polled(&held(&[]), t);
    b.wrote("r1", true, &write("widened", 2));
    assert!(b.double_writes.is_empty(), "{:?}", b.double_writes);

    let mut b = book();
    b.wrote("r1", false, &write("widened", 3));
    assert_eq!(b.double_writes.len(), 1, "a follower wrote");
    assert_eq!(b.writes, 1);
}

#[test]
fn a_run_without_a_widening_or_a_narrowing_exercised_nothing() {
    let mut b = book();
    assert_eq!(b.unexercised().len(), 2);
    b.wrote("r0", true, &write("widened", 1));
    assert_eq!(b.unexercised(), ["no host was narrowed"]);
    b.wrote("r0", true, &write("narrowed", 1));
    assert!(b.unexercised().is_empty());
}

#[test]
fn a_called_edge_never_held_or_missing_at_the_end_is_lost() {
    let t0 = Instant::now();
    let mut b = book();
    for d in [1, 2, 3] {
        b.called(0, d, t0);
        b.edges.get_mut(&(0, d)).unwrap().active = true;
    }
    b.edges.entry((0, 4)).or_default().active = false;
    b.polled(&held(&[1, 2]), t0);
    b.settle(|_, d| d == 1);
    assert_eq!(b.lost.len(), 2, "{:?}", b.lost);
    assert!(b.lost[0].contains("dst-2") && b.lost[0].contains("clusters: false"));
    assert!(b.lost[1].contains("dst-3") && b.lost[1].contains("never"));
    assert!(b.missed_narrowings.is_empty(), "{:?}", b.missed_narrowings);
}

#[test]
fn a_host_kept_after_its_edge_stopped_before_the_quiet_end_is_a_missed_narrowing() {
    let t0 = Instant::now();
    let mut b = book();
    for (d, active) in [(1, true), (2, false), (3, false)] {
        b.called(0, d, t0);
        b.edges.get_mut(&(0, d)).unwrap().active = active;
    }
    b.polled(&held(&[1, 2, 3]), t0);
    b.polled(&held(&[1, 2]), t0 + PRUNE_AFTER * 2);
    b.settle(|_, _| true);
    assert_eq!(b.missed_narrowings.len(), 1, "{:?}", b.missed_narrowings);
    assert!(b.missed_narrowings[0].contains("dst-2"));
    assert!(b.lost.is_empty() && b.wrong_narrowings.is_empty());
}
