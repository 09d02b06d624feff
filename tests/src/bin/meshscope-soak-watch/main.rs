//! `meshscope-soak-watch`: two `kubectl meshscope apply --watch` replicas
//! sharing a Lease, for an hour of random faults under changing traffic
//! (run by `tests/bench/run watch-faults`).
//!
//! Real components: the test control plane (its own, in
//! `MESHSCOPE_CLUSTER_DIR`), a real istiod with simulated sidecars that
//! ACK its pushes, and a real Prometheus (scraping istiod). The replicas
//! reach all three through [`FaultProxy`]s, so that each can fail while
//! istiod keeps serving the sidecars: an API server, istiod or Prometheus
//! that is down (connections cut and refused) or hangs (accepted, never
//! answered), Prometheus answering 500. Besides: the access log rotated
//! by rename and by copytruncate, and the leading replica killed with
//! SIGKILL or stopped with SIGTERM (restarted 5–15 s later, as a
//! Deployment would). One fault at a time, 10–40 s each, 5–20 s apart.
//!
//! Traffic: 6 clients and 10 Services; each client calls its active
//! destinations every 3 s (one access-log line each, stamped with the
//! time it is written). Every ~15 s a client starts calling a new
//! destination, and every ~15 s an edge stops being called.
//!
//! Counted, each a target of 0 (exit 1 on a miss):
//! - **lost edges**: an edge that was called but whose host its client's
//!   Sidecar never held (polled every 2 s), or an edge still called at the
//!   end whose host its Sidecar or its sidecar's clusters do not hold after
//!   a minute without faults;
//! - **wrong narrowings**: a host that left a client's Sidecar while the
//!   client still called it, or less than `--prune-after` after its last
//!   call;
//! - **double writes**: a host widened twice in a row (by either replica)
//!   with no narrowing between, and any write reported by a replica whose
//!   last word on the Lease was that it follows;
//! - **missed narrowings**: a host still in its client's Sidecar at the end
//!   although its edge stopped before the fault-free minute and a half
//!   began. That is more than `--prune-after` (40 s), a Lease takeover
//!   (15 s) and a write confirmed within `--wait` (10 s) together, so a
//!   watcher that narrows has narrowed it by then.
//!
//! A run that widened or narrowed nothing fails too: its zeros would say
//! nothing. Reported, not targets: the replicas' exits other than the soak's own
//! kills, with their last stderr lines. Knobs: `MESHSCOPE_SOAK_DURATION`
//! (seconds, default 3600), `MESHSCOPE_SOAK_SEED`.
//! Prints a markdown table, then one JSON object as the last line.

mod book;
mod fault;
mod report;
mod settings;
mod soak;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use meshscope_e2e::bench::Rng;
use meshscope_e2e::cluster::{Cluster, Prometheus};
use meshscope_e2e::faults::{api_server, kubeconfig_through, FaultProxy};

use crate::book::Book;
use crate::fault::Proxies;
use crate::report::report;
use crate::settings::{CLIENTS, DESTS, INTERVAL, PRUNE_AFTER, WAIT};
use crate::soak::{run, setup_world, upstream_of, Replica, Soak};

fn main() -> std::process::ExitCode {
    meshscope_e2e::tool_exit(try_main())
}

fn try_main() -> Result<()> {
    let duration = Duration::from_secs(
        std::env::var("MESHSCOPE_SOAK_DURATION")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3600),
    );
    let seed = std::env::var("MESHSCOPE_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| u64::from(std::process::id()) * 7919)
        | 1;
    eprintln!(
        "[soak] MESHSCOPE_SOAK_SEED={seed} MESHSCOPE_SOAK_DURATION={}",
        duration.as_secs()
    );
    let c = Cluster::shared();
    let (ns, sc, istiod, sim) = setup_world(c)?;
    let prom = Prometheus::scraping(&istiod.monitoring, "5s")?;
    let api_addr = api_server(&c.kubeconfig)?;
    let proxies = Proxies {
        api: FaultProxy::start(&api_addr)?,
        istiod: FaultProxy::start(&istiod.monitoring)?,
        prom: FaultProxy::start(&upstream_of(&prom.url))?,
    };
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("proxied.kubeconfig");
    kubeconfig_through(&c.kubeconfig, &proxies.api, &kubeconfig)?;
    let log = dir.path().join("access.log");
    let args: Vec<String> = [
        "-n",
        &ns,
        "--access-log",
        log.to_str().unwrap(),
        "--prometheus",
        &format!("http://{}", proxies.prom.addr),
        "--istiod-url",
        &format!("http://{}", proxies.istiod.addr),
        "--interval",
        INTERVAL,
        "--prune-after",
        &format!("{}s", PRUNE_AFTER.as_secs()),
        &format!("--wait={WAIT}"),
        "--lease",
        &format!("{ns}/meshscope-watch"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut soak = Soak {
        c,
        ns: ns.clone(),
        sc,
        sim,
        log,
        kubeconfig,
        args,
        book: Book {
            ns: ns.clone(),
            ..Book::default()
        },
        replicas: ["r0", "r1"]
            .iter()
            .map(|id| Replica {
                id: id.to_string(),
                run: None,
                leading: false,
                restart_at: None,
                exits: Vec::new(),
                stopped_by_soak: false,
            })
            .collect(),
        rng: Rng::new(seed),
        faults: BTreeMap::new(),
        n: 0,
        started: Instant::now(),
    };
    for c in 0..CLIENTS {
        for d in [c % DESTS, (c + 3) % DESTS] {
            soak.book.edges.entry((c, d)).or_default().active = true;
        }
    }
    soak.calls()?;
    soak.start_replica(0);
    soak.start_replica(1);
    let result = run(&mut soak, &proxies, duration);
    for r in soak.replicas.iter_mut() {
        if let Some(w) = r.run.as_mut() {
            w.stop();
        }
    }
    if let Err(e) = soak.sc.world.delete(c) {
        eprintln!("[soak] cleanup: {e:#}");
    }
    drop(istiod);
    result?;
    report(&soak, duration, seed)
}
