//! The soak's figures from its records: per phase and in all, how fast
//! the flips were followed, the certificates seen, and the targets;
//! printed as a markdown table and one JSON line.

use std::collections::BTreeMap;
use std::process::ExitStatus;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::mix::{expect, Expect, Kind, Verdict};
use crate::records::{Outcome, PhaseStats, Record};
use crate::settings::Args;
use crate::state::Soak;
use crate::targets::{targets, Judged};
use crate::timeline::Phase;

/// How the load ended: what the generator saw and the webhook's exit.
pub struct Ended {
    /// When the load was due to end.
    pub end: Instant,
    pub late_ticks: u64,
    pub rss_before: u64,
    pub rss_after: u64,
    pub status: ExitStatus,
    pub exited_at: Instant,
    /// When SIGTERM was sent (the exit, if it was not).
    pub sig: Instant,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// The records counted by phase, with what the targets need besides.
#[derive(Default)]
struct Tally {
    by_phase: BTreeMap<Phase, (PhaseStats, Vec<Duration>)>,
    total: PhaseStats,
    unchecked_outside_outage: u64,
    wrong_by_kind: BTreeMap<String, u64>,
    lost_before_sigterm: u64,
    refused_before_sigterm: u64,
}

impl Tally {
    fn of(s: &Soak, records: &[Record]) -> Tally {
        let mut t = Tally::default();
        let outage_end = s.start + Duration::from_secs_f64(s.plan.flip_phase);
        let kill_at = s.start + Duration::from_secs_f64(s.plan.kill);
        for r in records {
            let (st, lat) = t.by_phase.entry(r.phase).or_default();
            st.sent += 1;
            match r.outcome {
                Outcome::Answered { status, verdict } => {
                    st.answered += 1;
                    lat.push(r.latency);
                    match verdict {
                        Verdict::Right => {}
                        Verdict::RightFromStale => st.from_stale += 1,
                        // The soak starts once the caches have synced: stale
                        // caches still decide, so nothing may pass unchecked.
                        Verdict::Unchecked => {
                            st.unchecked += 1;
                            st.wrong += 1;
                            if r.sent < kill_at || r.sent > outage_end {
                                t.unchecked_outside_outage += 1;
                            }
                        }
                        Verdict::Wrong => {
                            st.wrong += 1;
                            *t.wrong_by_kind.entry(format!("{:?}", r.kind)).or_default() += 1;
                        }
                    }
                    if status == 400 {
                        st.bad_requests_400 += 1;
                    } else if !(200..300).contains(&status) {
                        st.unexpected_non_2xx += 1;
                    } else if matches!(verdict, Verdict::Right | Verdict::RightFromStale)
                        && matches!(
                            expect(r.kind, s.flip.lock().unwrap().at(r.sent).0),
                            Expect::Deny(_)
                        )
                    {
                        st.expected_denials += 1;
                    }
                }
                Outcome::Refused => {
                    st.refused += 1;
                    if !r.after_sigterm {
                        t.refused_before_sigterm += 1;
                    }
                }
                Outcome::Reset => {
                    st.resets += 1;
                    if !r.after_sigterm {
                        t.lost_before_sigterm += 1;
                    }
                }
            }
        }
        t.sum();
        t
    }

    /// Each phase's latencies, and the phases added up.
    fn sum(&mut self) {
        let total = &mut self.total;
        let mut all_lat = Vec::new();
        for (s, lat) in self.by_phase.values_mut() {
            lat.sort();
            s.p50_ms = percentile(lat, 0.50);
            s.p99_ms = percentile(lat, 0.99);
            s.max_ms = lat.last().map(|d| d.as_secs_f64() * 1000.0).unwrap_or(0.0);
            total.sent += s.sent;
            total.answered += s.answered;
            total.expected_denials += s.expected_denials;
            total.bad_requests_400 += s.bad_requests_400;
            total.unexpected_non_2xx += s.unexpected_non_2xx;
            total.wrong += s.wrong;
            total.unchecked += s.unchecked;
            total.from_stale += s.from_stale;
            total.refused += s.refused;
            total.resets += s.resets;
            all_lat.extend_from_slice(lat);
        }
        all_lat.sort();
        total.p50_ms = percentile(&all_lat, 0.5);
        total.p99_ms = percentile(&all_lat, 0.99);
        total.max_ms = all_lat
            .last()
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or(0.0);
    }
}

/// Flip latency: the last answer still in the old policy, after the
/// label change returned.
fn flip_latency_ms(s: &Soak, records: &[Record], exited_at: Instant) -> Vec<f64> {
    let changes = s.flip.lock().unwrap().changes.clone();
    let mut flip_latency_ms = Vec::new();
    for (k, &(_, done, to)) in changes.iter().enumerate() {
        let until = changes.get(k + 1).map(|c| c.0).unwrap_or(exited_at);
        let mut last_old: Option<Instant> = None;
        for r in records
            .iter()
            .filter(|r| r.kind == Kind::DeployFlip && r.sent >= changes[k].0 && r.sent < until)
        {
            // The old policy: denied when leaving enforce, allowed when
            // leaving warn.
            if r.denied == Some(!to) {
                last_old = Some(last_old.map_or(r.sent, |l: Instant| l.max(r.sent)));
            }
        }
        let ms = last_old.map_or(0.0, |l| {
            l.saturating_duration_since(done).as_secs_f64() * 1000.0
        });
        flip_latency_ms.push(ms);
    }
    flip_latency_ms
}

/// Computes, prints and judges the figures; whether every target was met.
pub fn report(args: &Args, s: &Soak, records: &[Record], e: &Ended) -> bool {
    let t = Tally::of(s, records);
    let flip_latency_ms = flip_latency_ms(s, records, e.exited_at);
    let tls = &s.tls;
    let seen = tls.seen.lock().unwrap().clone();
    let stale_certs = tls.stale_certs.load(Ordering::Relaxed);
    let generations = tls.generations.lock().unwrap().len();
    let (rss_before, rss_after) = (e.rss_before, e.rss_after);
    let rss_growth = if rss_before > 0 {
        (rss_after as f64 - rss_before as f64) / rss_before as f64 * 100.0
    } else {
        0.0
    };
    let achieved_rate = records.iter().filter(|r| r.sent < e.end).count() as f64 / s.plan.end;
    let o = s.observed.lock().unwrap();
    let targets = targets(&Judged {
        lost_before_sigterm: t.lost_before_sigterm,
        refused_before_sigterm: t.refused_before_sigterm,
        resets_after_sigterm: t.by_phase.get(&Phase::Sigterm).map_or(0, |s| s.0.resets),
        wrong: t.total.wrong,
        unexpected_non_2xx: t.total.unexpected_non_2xx,
        rss_growth_pct: rss_growth,
        flip_latency_ms: &flip_latency_ms,
        stale_certs,
        generations_seen: seen.len(),
        generations,
        stale_seen: o.stale_seen_after_kill_s.is_some(),
        stale_gauge_seen: o.metrics_stale_gauge_seen,
        fresh_again: o.fresh_again_after_restart_s.is_some(),
        exit_ok: e.status.success(),
    });

    println!(
        "Webhook soak: {} req/s asked for {} s ({} sent before SIGTERM, {:.0} req/s achieved; {} ticks late by > 5 ms), {} HTTP/1.1 + {} HTTP/2 connections, on {} cores",
        args.rate,
        args.duration,
        records.iter().filter(|r| !r.after_sigterm).count(),
        achieved_rate,
        e.late_ticks,
        args.h1_connections,
        args.h2_connections,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );
    print_table(&t);
    println!(
        "RSS {} KiB before, {} KiB after ({rss_growth:+.1}%); {} TLS connections made ({} failed), certificate generations seen {:?}, {} stale; flips followed after {:?} ms; stale after kill {:?} s, fresh {:?} s after restart",
        rss_before,
        rss_after,
        tls.connects.load(Ordering::Relaxed),
        tls.connect_errors.load(Ordering::Relaxed),
        seen,
        stale_certs,
        flip_latency_ms,
        o.stale_seen_after_kill_s,
        o.fresh_again_after_restart_s
    );
    for (name, ok) in &targets {
        println!("- {} {name}", if *ok { "met:" } else { "MISSED:" });
    }
    let phases: BTreeMap<&str, &PhaseStats> =
        t.by_phase.iter().map(|(p, (s, _))| (p.name(), s)).collect();
    let line = json!({
        "rate_asked": args.rate,
        "rate_achieved": (achieved_rate * 10.0).round() / 10.0,
        "duration_s": args.duration,
        "late_ticks": e.late_ticks,
        "phases": phases,
        "total": t.total,
        "lost_before_sigterm": t.lost_before_sigterm,
        "refused_before_sigterm": t.refused_before_sigterm,
        "unchecked_outside_outage": t.unchecked_outside_outage,
        "wrong_by_kind": t.wrong_by_kind,
        "rss_before_kib": rss_before,
        "rss_after_kib": rss_after,
        "rss_growth_pct": (rss_growth * 10.0).round() / 10.0,
        "tls_connections": tls.connects.load(Ordering::Relaxed),
        "tls_connect_errors": tls.connect_errors.load(Ordering::Relaxed),
        "cert_generations": generations,
        "cert_generations_seen": seen.len(),
        "stale_certs": stale_certs,
        "flip_follow_ms": flip_latency_ms,
        "outage": &*o,
        "exit": e.status.code(),
        "drain_s": (e.exited_at - e.sig).as_secs_f64(),
        "targets_met": targets.iter().all(|(_, ok)| *ok),
    });
    println!("{line}");
    targets.iter().all(|(_, ok)| *ok)
}

/// The markdown table, a row per phase and one for all, between blank
/// lines.
fn print_table(t: &Tally) {
    println!();
    println!("| phase | sent | answered | expected denials | 400s | unexpected non-2xx | wrong | unchecked | from stale caches | refused | resets | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let row = |name: &str, s: &PhaseStats| {
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.1} |",
            s.sent,
            s.answered,
            s.expected_denials,
            s.bad_requests_400,
            s.unexpected_non_2xx,
            s.wrong,
            s.unchecked,
            s.from_stale,
            s.refused,
            s.resets,
            s.p50_ms,
            s.p99_ms,
            s.max_ms
        )
    };
    for (p, (s, _)) in &t.by_phase {
        row(p.name(), s);
    }
    row("**all**", &t.total);
    println!();
}
