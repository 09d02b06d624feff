//! The soak's report: the counts held to 0, the faults injected, and one
//! JSON line; exit 1 on a miss.

use std::time::Duration;

use anyhow::Result;
use serde_json::{json, Value};

use crate::soak::Soak;

pub fn report(soak: &Soak, duration: Duration, seed: u64) -> Result<()> {
    let book = &soak.book;
    let called = book
        .edges
        .values()
        .filter(|e| e.first_call.is_some())
        .count();
    let exits: Vec<Value> = soak
        .replicas
        .iter()
        .flat_map(|r| {
            r.exits
                .iter()
                .map(move |(st, tail)| json!({"replica": r.id, "status": st, "stderr": tail}))
        })
        .collect();
    println!(
        "| soak: {} min, seed {seed} | count | target | met |",
        duration.as_secs() / 60
    );
    println!("|---|---|---|---|");
    for (what, found) in book.rows() {
        let met = if found.is_empty() { "yes" } else { "no" };
        println!("| {what} | {} | 0 | {met} |", found.len());
    }
    println!();
    println!("| faults injected | count |\n|---|---|");
    for (f, n) in &soak.faults {
        println!("| {f} | {n} |");
    }
    let unexercised = book.unexercised();
    for why in &unexercised {
        println!("| {why} | | | no |");
    }
    println!();
    println!(
        "Edges called: {called}; Sidecar writes reported: {} (hosts widened {}, narrowed {}); replica exits the soak did not cause: {}; hosts narrowed as their calls resumed, after the narrowing pass read (not a target: no watcher can know of them): {}.",
        book.writes,
        book.widened,
        book.narrowed,
        exits.len(),
        book.resumed.len()
    );
    for (_, found) in book.rows() {
        for line in found {
            eprintln!("[soak] {line}");
        }
    }
    for line in &book.resumed {
        eprintln!("[soak] not counted: {line}");
    }
    let out = json!({
        "duration_s": duration.as_secs(),
        "seed": seed,
        "edges_called": called,
        "writes": book.writes,
        "hosts_widened": book.widened,
        "hosts_narrowed": book.narrowed,
        "lost_edges": book.lost,
        "wrong_narrowings": book.wrong_narrowings,
        "double_writes": book.double_writes,
        "missed_narrowings": book.missed_narrowings,
        "narrowed_as_calls_resumed": book.resumed,
        "faults": soak.faults,
        "unexpected_exits": exits,
    });
    println!("{out}");
    if book.rows().iter().any(|(_, found)| !found.is_empty()) || !unexercised.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
