//! The report: the sizes, the targets, istiod's cost, and one JSON line.

use std::collections::BTreeMap;

use crate::measure::Dist;
use crate::results::Results;

pub fn kb(b: u64) -> String {
    format!("{:.1} KB", b as f64 / 1000.0)
}

pub fn mb(kb: u64) -> String {
    format!("{} MB", kb / 1024)
}

pub fn print_sizes(r: &Results) {
    println!("| role | proxies | phase | p50 xDS per proxy | p95 | max (worst proxy) | CDS p50 | LDS p50 | RDS p50 | EDS p50 |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for role in ["all", "caller", "hub", "leaf", "idle"] {
        for (phase, d) in [("before", &r.before[role]), ("after", &r.after[role])] {
            let t = |k: &str| kb(d.p50_by_type.get(k).copied().unwrap_or(0));
            println!(
                "| {role} | {} | {phase} | {} | {} | {} ({}) | {} | {} | {} | {} |",
                d.proxies,
                kb(d.p50),
                kb(d.p95),
                kb(d.max),
                d.worst,
                t("cds"),
                t("lds"),
                t("rds"),
                t("eds")
            );
        }
    }
}

/// (measure, before, after, target, met) rows; also the exit status.
pub fn targets(r: &Results) -> Vec<[String; 5]> {
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    let (b, a) = (&r.push_before, &r.push_after);
    // Exactly the proxies of the namespaces the VirtualService is exported
    // to (no Sidecar here: each of them imports it), and fewer than before.
    let fan_ok = a.fanout == r.vs_exported_proxies && a.fanout < b.fanout;
    let (p50b, p50a) = (r.before["all"].p50, r.after["all"].p50);
    let (rss0, rss1) = (r.istiod_without.rss_kb, r.istiod_with.rss_kb);
    let dark_dropped = r.dark_ns.iter().all(|ns| r.dropped.contains(ns));
    vec![
        [
            format!("observed edges lost ({} edges, {} through a VirtualService; after: exports, then also discoverySelectors)", r.edges, r.routed_edges),
            r.lost_before.len().to_string(),
            format!("{}, {}", r.lost_after.len(), r.lost_with_selectors.len()),
            "0".into(),
            yes(r.lost_after.is_empty() && r.lost_with_selectors.is_empty() && r.lost_before.is_empty()),
        ],
        [
            format!("auth VirtualService change pushed to (of {} proxies)", r.proxies),
            format!("{} ({})", b.fanout, kb(b.bytes)),
            format!("{} ({})", a.fanout, kb(a.bytes)),
            format!("= {} (the proxies in {}), < before", r.vs_exported_proxies, r.vs_exported_to.join(",")),
            yes(fan_ok),
        ],
        [
            "p50 xDS per proxy".into(),
            kb(p50b),
            kb(p50a),
            "after < before".into(),
            yes(p50a < p50b),
        ],
        [
            format!(
                "Services in istiod's registry (of them in the {} namespaces with no proxy and no traffic)",
                r.dark_ns.len()
            ),
            format!("{} ({})", r.registry_without.0, r.registry_without.1),
            format!("{} ({})", r.registry_with.0, r.registry_with.1),
            format!("the {} namespaces dropped: none of their {} Services", r.dark_ns.len(), r.dark_services),
            yes(dark_dropped && r.registry_without.1 == r.dark_services && r.registry_with.1 == 0),
        ],
        [
            format!("istiod RSS, fresh start, sidecars connected (without / with discoverySelectors dropping {} namespaces)", r.dropped.len()),
            mb(rss0),
            mb(rss1),
            "with < without".into(),
            yes(rss1 < rss0),
        ],
        [
            "apply --exports, one namespace at a time: objects narrowed; until pushes settled".into(),
            "-".into(),
            format!("{}; {:.1} s", r.exports_narrowed, r.exports_apply_s),
            "-".into(),
            "n.a.".into(),
        ],
    ]
}

pub fn print_targets(rows: &[[String; 5]]) {
    println!("| measure | before | after | target | met |");
    println!("|---|---|---|---|---|");
    for [m, b, a, t, ok] in rows {
        println!("| {m} | {b} | {a} | {t} | {ok} |");
    }
}

pub fn print_istiod(r: &Results) {
    println!("| istiod (exports applied) | namespaces watched | RSS | peak RSS | Go heap in use | CPU since start |");
    println!("|---|---|---|---|---|---|");
    let n = r.mesh_services;
    for (what, u, heap, watched) in [
        (
            "without discoverySelectors",
            &r.istiod_without,
            r.heap_mb_without,
            format!("all ({n} mesh Services + {} plain)", r.dark_services),
        ),
        (
            "with audit's discoverySelectors",
            &r.istiod_with,
            r.heap_mb_with,
            format!("all but {}", r.dropped.join(", ")),
        ),
    ] {
        println!(
            "| {what} | {watched} | {} | {} | {heap:.1} MB | {:.1} s |",
            mb(u.rss_kb),
            mb(u.hwm_kb),
            u.cpu_s
        );
    }
}

pub fn json(r: &Results, met: bool) -> serde_json::Value {
    let d = |m: &BTreeMap<String, Dist>, k: &str| {
        let x = &m[k];
        serde_json::json!({"proxies": x.proxies, "p50": x.p50, "p95": x.p95, "max": x.max, "worst": x.worst})
    };
    let roles = ["all", "caller", "hub", "leaf", "idle"];
    serde_json::json!({
        "scale": r.scale, "seed": r.seed, "proxies": r.proxies,
        "mesh_services": r.mesh_services, "dark_services": r.dark_services,
        "edges": r.edges, "routed_edges": r.routed_edges,
        "before": roles.iter().map(|k| (k.to_string(), d(&r.before, k))).collect::<serde_json::Map<_, _>>(),
        "after": roles.iter().map(|k| (k.to_string(), d(&r.after, k))).collect::<serde_json::Map<_, _>>(),
        "fanout_before": r.push_before.fanout, "fanout_after": r.push_after.fanout,
        "push_bytes_before": r.push_before.bytes, "push_bytes_after": r.push_after.bytes,
        "vs_exported_to": r.vs_exported_to, "vs_exported_proxies": r.vs_exported_proxies,
        "lost_before": r.lost_before.len(), "lost_after": r.lost_after.len(),
        "lost_with_selectors": r.lost_with_selectors.len(),
        "exports_narrowed": r.exports_narrowed, "exports_apply_s": (r.exports_apply_s * 10.0).round() / 10.0,
        "ms0020": r.ms0020, "dropped": r.dropped,
        "istiod_rss_mb_without": r.istiod_without.rss_kb / 1024, "istiod_rss_mb_with": r.istiod_with.rss_kb / 1024,
        "istiod_hwm_mb_without": r.istiod_without.hwm_kb / 1024, "istiod_hwm_mb_with": r.istiod_with.hwm_kb / 1024,
        "istiod_cpu_s_without": r.istiod_without.cpu_s, "istiod_cpu_s_with": r.istiod_with.cpu_s,
        "heap_mb_without": r.heap_mb_without, "heap_mb_with": r.heap_mb_with,
        "registry_services_without": r.registry_without.0, "registry_services_with": r.registry_with.0,
        "registry_dark_services_without": r.registry_without.1, "registry_dark_services_with": r.registry_with.1,
        "p50_with_selectors": r.p50_with_selectors,
        "met": met,
    })
}
