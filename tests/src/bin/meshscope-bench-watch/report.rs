//! The report: whether each result meets the targets, and the tables.

use serde_json::Value;

/// Whether `r` meets every target; the misses, named.
pub fn misses(r: &Value) -> Vec<String> {
    let mut m = Vec::new();
    let tag = format!(
        "{} proxies, {}",
        r["proxies"],
        r["source"].as_str().unwrap_or("")
    );
    let target = r["latency_target_s"].as_f64().unwrap_or(0.0);
    match r["latency_s"]["p95"].as_f64() {
        Some(p95) if p95 <= target => {}
        Some(p95) => m.push(format!("{tag}: latency p95 {p95} s > {target} s")),
        None => m.push(format!("{tag}: no latency measured")),
    }
    let never = r["never_widened"].as_array().map_or(0, Vec::len);
    if never > 0 {
        m.push(format!(
            "{tag}: {never} new edges never reached the caller's sidecar"
        ));
    }
    // Narrowing while widening: without a narrowing, 0 dangling
    // references would say nothing (widening alone cannot open a window).
    match r["narrowed"].as_u64() {
        Some(0) => m.push(format!(
            "{tag}: no narrowing, so the dangling-reference count says nothing"
        )),
        Some(_) => {}
        None => m.push(format!("{tag}: narrowings not counted")),
    }
    match r["dangling_write_caused"].as_u64() {
        Some(0) => {}
        Some(n) => m.push(format!(
            "{tag}: {n} listeners or routes named a cluster the proxy did not get in the same push cycle, or kept naming it (named-before-cluster, persistent)"
        )),
        None => m.push(format!("{tag}: dangling references not counted")),
    }
    match r["write_order"]["violation_count"].as_u64() {
        Some(0) => {}
        Some(n) => m.push(format!(
            "{tag}: {n} narrowings reached a proxy before the widenings reported before them were ACKed"
        )),
        None => m.push(format!("{tag}: write order not checked")),
    }
    for (k, what) in [
        ("sidecar_writes", "Sidecar writes"),
        ("pushes_received", "pushes"),
    ] {
        match r["steady"][k].as_u64() {
            Some(0) => {}
            Some(n) => m.push(format!("{tag}: {n} {what} at a steady mesh")),
            None => m.push(format!("{tag}: {what} at a steady mesh not counted")),
        }
    }
    m
}

pub fn print_tables(results: &[Value]) {
    let d = |v: &Value| {
        if v["n"].as_u64().unwrap_or(0) == 0 {
            "-".to_string()
        } else {
            format!("{} / {} / {}", v["p50"], v["p95"], v["worst"])
        }
    };
    println!("| proxies | source | new edges | first request → caller's ACK, s (p50 / p95 / worst) | target p95 | never widened | requests via passthrough per edge (p50 / p95 / worst) | watcher's confirmed_in, s (p50 / p95 / worst) |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in results {
        println!(
            "| {} | {} | {} | {} | ≤ {} s | {} | {} | {} |",
            r["proxies"],
            r["source"].as_str().unwrap_or(""),
            r["new_edges"],
            d(&r["latency_s"]),
            r["latency_target_s"],
            r["never_widened"].as_array().map_or(0, Vec::len),
            d(&r["passthrough_requests_per_edge"]),
            d(&r["watcher_confirmed_in_s"]),
        );
    }
    println!();
    println!("| proxies | source | steady window | Sidecar writes (per hour, extrapolated) | pushes received (per hour, extrapolated) | watcher events | passes | watcher CPU in the window | watcher CPU, whole run | watcher RSS / peak |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in results {
        let st = &r["steady"];
        println!(
            "| {} | {} | {} s | {} ({}) | {} ({}) | {} | {} | {} s ({}% of a core) | {} s over {} passes | {} MB / {} MB |",
            r["proxies"],
            r["source"].as_str().unwrap_or(""),
            st["seconds"],
            st["sidecar_writes"],
            st["sidecar_writes_per_hour_extrapolated"],
            st["pushes_received"],
            st["pushes_per_hour_extrapolated"],
            st["watcher_events"],
            st["passes"],
            st["watcher_cpu_s"],
            st["watcher_cpu_pct_of_a_core"],
            r["watcher"]["cpu_s_total"],
            r["watcher"]["passes"],
            r["watcher"]["rss_mb"],
            r["watcher"]["peak_rss_mb"],
        );
    }
    println!();
    println!("| proxies | source | --prune-after | known edges stopped | narrowings | stopped edges never narrowed | stop → caller's drop, s (p50 / p95 / worst) | dangling: write-caused (target 0) | dangling: istiod's cds-before-lds-rds | write order: groups widening and narrowing (compared) | write-order violations |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in results {
        let o = &r["write_order"];
        println!(
            "| {} | {} | {} s | {} | {} | {} | {} | {} | {} | {} ({}) | {} |",
            r["proxies"],
            r["source"].as_str().unwrap_or(""),
            r["prune_after_s"],
            r["stopped_edges"],
            r["narrowed"],
            r["stopped_edges_never_narrowed"]
                .as_array()
                .map_or(0, Vec::len),
            d(&r["stop_to_drop_s"]),
            r["dangling_write_caused"],
            r["dangling_cds_before_lds_rds"],
            o["widened_and_narrowed"],
            o["compared"],
            o["violation_count"],
        );
    }
}
