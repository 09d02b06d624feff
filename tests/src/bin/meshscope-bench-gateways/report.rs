//! The report: the tables, the targets and the JSON summary.

use crate::measure::{Group, Q};
use crate::scale::ScaleResult;
use crate::wouldbreak::WouldBreakResult;

/// The scale the CDS targets apply at.
pub const TARGET_SCALE: usize = 4;
/// With the flag on, gateways' CDS p50 is at least this many times smaller.
pub const CDS_RATIO: f64 = 20.0;

fn kb(b: u64) -> String {
    format!("{:.1} KB", b as f64 / 1000.0)
}

fn q(x: &Q, f: fn(u64) -> String) -> String {
    format!("{} / {} / {}", f(x.p50), f(x.p95), f(x.max))
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// (scale, measure, value, target, met) rows.
pub fn targets(s: &ScaleResult) -> Vec<[String; 5]> {
    let k = format!("{}x", s.scale);
    let mut rows = Vec::new();
    for (name, off, on) in [
        ("ingress", &s.off.ingress, &s.on.ingress),
        ("egress", &s.off.egress, &s.on.egress),
    ] {
        let ratio = off.cds_bytes.p50 as f64 / on.cds_bytes.p50.max(1) as f64;
        let at = s.scale == TARGET_SCALE;
        rows.push([
            k.clone(),
            format!(
                "{name} gateways' CDS p50 ({} proxies), flag off / on",
                on.proxies
            ),
            format!(
                "{} / {} = {ratio:.1}x",
                kb(off.cds_bytes.p50),
                kb(on.cds_bytes.p50)
            ),
            if at {
                format!(">= {CDS_RATIO}x")
            } else {
                "-".into()
            },
            if at {
                yes(ratio >= CDS_RATIO)
            } else {
                "n.a.".into()
            },
        ]);
    }
    rows.push([
        k.clone(),
        "gateway workloads audit finds safe (MS0026)".into(),
        format!("{} of {}", s.safe(), s.readiness.len()),
        "all".into(),
        yes(s.safe() == s.readiness.len() && s.gateways == s.readiness.len()),
    ]);
    rows.push([
        k.clone(),
        format!(
            "observed gateway edges lost with the flag on (of {} edge × proxy)",
            s.on.edges_checked
        ),
        s.on.lost.len().to_string(),
        "0".into(),
        yes(s.on.lost.is_empty() && s.on.edges_checked > 0),
    ]);
    for ch in s.changes.iter().filter(|c| c.kind == "unrouted") {
        let ingress = ingress_reached(&ch.on);
        rows.push([
            k.clone(),
            format!(
                "unrouted change ({}): ingress proxies pushed, flag on",
                ch.service
            ),
            ingress.to_string(),
            "0".into(),
            yes(ingress == 0),
        ]);
    }
    if let Some(w) = &s.would_break {
        rows.extend(would_break_rows(&k, w));
    }
    rows
}

fn ingress_reached(m: &std::collections::BTreeMap<String, usize>) -> usize {
    m.iter()
        .filter(|(g, _)| g.starts_with("Deployment/istio-ingress/"))
        .map(|(_, n)| n)
        .sum()
}

fn would_break_rows(k: &str, w: &WouldBreakResult) -> Vec<[String; 5]> {
    let n = w.clusters.len();
    vec![
        [
            k.into(),
            format!("would-break clusters MS0025 names ({})", w.gateway),
            format!("{} of {n}", w.named.len()),
            "100%".into(),
            yes(n > 0 && w.named.len() == n),
        ],
        [
            k.into(),
            "would-break clusters absent with the flag on / present with it off (cluster × proxy)"
                .into(),
            format!("{} / {} of {}", w.absent_on, w.present_off, w.pairs),
            "all / all".into(),
            yes(w.pairs > 0 && w.absent_on == w.pairs && w.present_off == w.pairs),
        ],
    ]
}

fn group_row(scale: usize, name: &str, flag: &str, g: &Group) {
    println!(
        "| {scale}x | {name} | {} | {flag} | {} | {} | {} | {} |",
        g.proxies,
        q(&g.cds_bytes, kb),
        q(&g.clusters, |n| n.to_string()),
        q(&g.total_bytes, kb),
        g.largest
    );
}

pub fn print_tables(sums: &[ScaleResult], rows: &[[String; 5]]) {
    println!("Connected: the gateways' router proxies only (no sidecar: nothing measured depends on them).");
    println!();
    println!("| scale | gateways | proxies | flag | CDS bytes p50 / p95 / max | clusters p50 / p95 / max | xDS bytes p50 / p95 / max | most CDS |");
    println!("|---|---|---|---|---|---|---|---|");
    for s in sums {
        for (flag, r) in [("off", &s.off), ("on", &s.on)] {
            group_row(s.scale, "ingress", flag, &r.ingress);
            group_row(s.scale, "egress", flag, &r.egress);
        }
    }
    println!();
    print_changes(sums);
    println!();
    print_engine(sums);
    println!();
    println!("| scale | measure | value | target | met |");
    println!("|---|---|---|---|---|");
    for [k, m, v, t, ok] in rows {
        println!("| {k} | {m} | {v} | {t} | {ok} |");
    }
}

fn print_changes(sums: &[ScaleResult]) {
    let total = |m: &std::collections::BTreeMap<String, usize>| -> usize { m.values().sum() };
    println!("| scale | a port added to | flag off: gateway proxies pushed (ingress) | impact now | flag on: pushed (ingress) | impact gateways_if_filtered | impact = istiod |");
    println!("|---|---|---|---|---|---|---|");
    for s in sums {
        for ch in &s.changes {
            let agree = ch.off == ch.impact.off && ch.on == ch.impact.on;
            println!(
                "| {}x | {} ({}) | {} ({}) | {} | {} ({}) | {} | {} |",
                s.scale,
                ch.service,
                ch.kind,
                total(&ch.off),
                ingress_reached(&ch.off),
                total(&ch.impact.off),
                total(&ch.on),
                ingress_reached(&ch.on),
                total(&ch.impact.on),
                yes(agree)
            );
            if !agree {
                eprintln!(
                    "[gateways-bench] {}x {}: istiod off {:?} on {:?}; impact now {:?} if filtered {:?}",
                    s.scale, ch.service, ch.off, ch.on, ch.impact.off, ch.impact.on
                );
            }
        }
    }
}

fn print_engine(sums: &[ScaleResult]) {
    println!("| scale | gateways whose explain clusters (flag on) equal istiod's | observed gateway flows | readiness |");
    println!("|---|---|---|---|");
    for s in sums {
        let codes: Vec<String> = s
            .readiness
            .iter()
            .filter(|(_, r)| r.code != "MS0026")
            .map(|(g, r)| format!("{g}: {}", r.code))
            .collect();
        println!(
            "| {}x | {} of {} | {} | {} |",
            s.scale,
            s.on.engine_equal,
            s.on.engine_compared,
            s.observed_flows,
            if codes.is_empty() {
                format!("MS0026 for all {}", s.readiness.len())
            } else {
                codes.join("; ")
            }
        );
        for m in s.on.engine_mismatches.iter().chain(&s.on.lost) {
            eprintln!("[gateways-bench] {}x: {m}", s.scale);
        }
        for (g, r) in s.readiness.iter().filter(|(_, r)| r.code != "MS0026") {
            eprintln!(
                "[gateways-bench] {}x {g}: {} {}",
                s.scale, r.code, r.message
            );
        }
    }
    for s in sums {
        if let Some(w) = &s.would_break {
            print_would_break(s.scale, w);
        }
    }
}

fn print_would_break(scale: usize, w: &WouldBreakResult) {
    eprintln!("[gateways-bench] would-break: {} {}", w.code, w.message);
    println!();
    println!(
        "Would-break corpus at {}x on {}: {} names {} of {} clusters ({}); the cluster its EnvoyFilter's annotation lists ({}) is {} by the finding and {} with the flag on.",
        scale,
        w.gateway,
        w.code,
        w.named.len(),
        w.clusters.len(),
        w.clusters.join(", "),
        w.annotated,
        if w.annotated_named { "named" } else { "not named" },
        if w.annotated_kept_on { "kept" } else { "dropped" }
    );
}
