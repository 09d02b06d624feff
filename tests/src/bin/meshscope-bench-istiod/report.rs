//! The report: the tables, the targets and the JSON of each scale.

use std::collections::BTreeMap;

use meshscope_e2e::dist::Dist;

use crate::measure::Calibration;
use crate::probe::some;
use crate::summary::Summary;

pub fn kb(b: f64) -> String {
    format!("{:.1} KB", b / 1000.0)
}

/// (scale, measure, value, target, met) rows.
pub fn targets(s: &Summary) -> Vec<[String; 5]> {
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    let k = format!("{}x", s.scale);
    let mut rows = Vec::new();
    let (b, a) = (&s.before["all"], &s.after["all"]);
    let ratio = b.mean / a.mean.max(1.0);
    rows.push([
        k.clone(),
        "mean xDS per proxy, before / after".into(),
        format!("{} / {} = {ratio:.1}x", kb(b.mean), kb(a.mean)),
        ">= 2x".into(),
        yes(ratio >= 2.0),
    ]);
    for (role, d) in &s.before {
        if role == "all" {
            continue;
        }
        let after = s.after.get(role).map(|x| x.p95).unwrap_or(0);
        rows.push([
            k.clone(),
            format!("p95 xDS per {role} proxy ({}), before / after", d.proxies),
            format!("{} / {}", kb(d.p95 as f64), kb(after as f64)),
            "after < before".into(),
            yes(after < d.p95),
        ]);
    }
    for p in &s.probes {
        rows.push(p.row(&k));
    }
    rows.push([
        k.clone(),
        format!(
            "observed edges that lost their cluster or route (of {})",
            s.safety_edges
        ),
        s.lost.len().to_string(),
        "0".into(),
        yes(s.lost.is_empty()),
    ]);
    for (phase, c) in [
        ("before", &s.calibration_before),
        ("after", &s.calibration_after),
    ] {
        rows.push([
            k.clone(),
            format!("{phase}: proxies with clusters and listeners as predicted"),
            format!(
                "{} and {} of {} ({} of {} compared)",
                c.clusters_equal, c.listeners_equal, s.proxies, c.proxies, s.proxies
            ),
            "all".into(),
            yes(c.proxies == s.proxies
                && c.clusters_equal == s.proxies
                && c.listeners_equal == s.proxies),
        ]);
        rows.push([
            k.clone(),
            format!(
                "{phase}: predicted bytes per proxy, worst ({})",
                c.worst_proxy
            ),
            format!(
                "{:+.1}%, {} beyond ±15%",
                c.worst_bytes_error * 100.0,
                c.beyond_15
            ),
            "within ±15% on every proxy".into(),
            yes(c.beyond_15 == 0 && c.proxies > 0),
        ]);
        rows.push([
            k.clone(),
            format!("{phase}: predicted / actual bytes, all proxies"),
            format!("{:.3}", c.total_ratio()),
            "0.95..1.05".into(),
            yes((c.total_ratio() - 1.0).abs() <= 0.05),
        ]);
    }
    rows
}

pub fn print_tables(scenario: &str, sums: &[Summary], rows: &[[String; 5]]) {
    println!("Scenario: {scenario}");
    println!();
    println!("| scale | role | proxies | phase | p50 xDS per proxy | p95 | max (worst proxy) | mean | CDS p50 | LDS p50 | RDS p50 | EDS p50 |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for s in sums {
        let mut roles: Vec<&String> = s.before.keys().collect();
        roles.sort_by_key(|r| (*r != "all", *r));
        for role in roles {
            for (phase, m) in [("before", &s.before), ("after", &s.after)] {
                let Some(d) = m.get(role) else { continue };
                let t = |k: &str| kb(d.p50_by_type.get(k).copied().unwrap_or(0) as f64);
                println!(
                    "| {}x | {role} | {} | {phase} | {} | {} | {} ({}) | {} | {} | {} | {} | {} |",
                    s.scale,
                    d.proxies,
                    kb(d.p50 as f64),
                    kb(d.p95 as f64),
                    kb(d.max as f64),
                    d.worst,
                    kb(d.mean),
                    t("cds"),
                    t("lds"),
                    t("rds"),
                    t("eds")
                );
            }
        }
    }
    println!();
    println!("| scale | VirtualService change on | its callers' proxies | before: pushed to | bytes | after: pushed to | bytes | after, callers missed | after, pushed outside its callers |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for s in sums {
        for p in &s.probes {
            println!(
                "| {}x | {} ({}) | {} | {} of {} | {} | {} | {} | {} | {} |",
                s.scale,
                p.host,
                p.role,
                p.callers.len(),
                p.before.fanout,
                s.proxies,
                kb(p.before.bytes as f64),
                p.after.fanout,
                kb(p.after.bytes as f64),
                some(&p.after_missed),
                some(&p.after_outside)
            );
        }
    }
    println!();
    println!("| scale | phase | proxies | clusters equal | listeners equal | routes equal | CDS pred/actual | LDS pred/actual | RDS pred/actual | EDS pred/actual | total pred/actual | beyond ±15% | worst proxy |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for s in sums {
        for (phase, cal) in [
            ("before", &s.calibration_before),
            ("after", &s.calibration_after),
        ] {
            let t = |k: &str| {
                let (p, a) = cal.bytes.get(k).copied().unwrap_or_default();
                format!("{:.2}", p as f64 / a.max(1) as f64)
            };
            println!(
                "| {}x | {phase} | {} | {} | {} | {} | {} | {} | {} | {} | {:.3} | {} | {:+.1}% ({}) |",
                s.scale,
                cal.proxies,
                cal.clusters_equal,
                cal.listeners_equal,
                cal.routes_equal,
                t("cds"),
                t("lds"),
                t("rds"),
                t("eds"),
                cal.total_ratio(),
                cal.beyond_15,
                cal.worst_bytes_error * 100.0,
                cal.worst_proxy
            );
            for m in &cal.mismatches {
                eprintln!("[istiod-bench] {}x {phase}: {m}", s.scale);
            }
        }
    }
    for s in sums {
        for m in &s.lost {
            eprintln!("[istiod-bench] {}x SAFETY: {m}", s.scale);
        }
    }
    println!();
    println!("| scale | proxies | edges | istiod RSS before / after | istiod CPU: connect / apply | apply --wait: push and ACK | proxies waited for | converged (12 s quiet) |");
    println!("|---|---|---|---|---|---|---|---|");
    for s in sums {
        println!(
            "| {}x | {} | {} | {} / {} MB | {:.1} / {:.1} s | {:.2} s | {} | {:.1} s |",
            s.scale,
            s.proxies,
            s.edges,
            s.istiod_before.rss_kb / 1024,
            s.istiod_after.rss_kb / 1024,
            s.istiod_cpu_connect_s,
            s.istiod_cpu_apply_s,
            s.apply_wait_s,
            s.apply_waited_proxies,
            s.apply_converged_s
        );
    }
    println!();
    println!("| scale | measure | value | target | met |");
    println!("|---|---|---|---|---|");
    for [k, m, v, t, ok] in rows {
        println!("| {k} | {m} | {v} | {t} | {ok} |");
    }
}

pub fn summary_json(s: &Summary) -> serde_json::Value {
    let d = |m: &BTreeMap<String, Dist>| -> serde_json::Value {
        m.iter()
            .map(|(k, x)| {
                (
                    k.clone(),
                    serde_json::json!({"proxies": x.proxies, "p50": x.p50, "p95": x.p95,
                        "max": x.max, "worst": x.worst, "mean": x.mean.round()}),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let cal = |c: &Calibration| {
        serde_json::json!({"proxies": c.proxies, "clusters_equal": c.clusters_equal,
            "listeners_equal": c.listeners_equal, "routes_equal": c.routes_equal,
            "total_ratio": (c.total_ratio() * 1000.0).round() / 1000.0,
            "worst_error": (c.worst_bytes_error * 1000.0).round() / 1000.0,
            "worst_proxy": c.worst_proxy, "beyond_15": c.beyond_15})
    };
    serde_json::json!({
        "scale": s.scale, "proxies": s.proxies, "services": s.services, "edges": s.edges,
        "before": d(&s.before), "after": d(&s.after),
        "probes": s.probes.iter().map(|p| serde_json::json!({
            "role": p.role, "host": p.host, "callers": p.callers.len(),
            "fanout_before": p.before.fanout, "fanout_after": p.after.fanout,
            "push_bytes_before": p.before.bytes, "push_bytes_after": p.after.bytes,
            "after_names": p.after.names, "after_outside": p.after_outside,
            "after_missed": p.after_missed,
        })).collect::<Vec<_>>(),
        "safety_edges": s.safety_edges, "lost": s.lost,
        "calibration_before": cal(&s.calibration_before),
        "calibration_after": cal(&s.calibration_after),
        "istiod_rss_mb_before": s.istiod_before.rss_kb / 1024,
        "istiod_rss_mb_after": s.istiod_after.rss_kb / 1024,
        "istiod_cpu_connect_s": s.istiod_cpu_connect_s,
        "istiod_cpu_apply_s": s.istiod_cpu_apply_s,
        "apply_converged_s": (s.apply_converged_s * 1000.0).round() / 1000.0,
        "apply_wait_s": s.apply_wait_s,
        "apply_waited_proxies": s.apply_waited_proxies,
        "sidecars_written": s.sidecars_written,
        "reference": s.extra,
    })
}
