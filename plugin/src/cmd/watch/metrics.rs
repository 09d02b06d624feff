//! `apply --watch --metrics-addr`: the watcher's counters in Prometheus'
//! text format on `/metrics`; `/healthz` (liveness: the loop runs) and
//! `/readyz` (readiness: it also does its job, no run of
//! [`UNREADY_AFTER`] failed passes).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Upper bounds (seconds) of the scope-latency histogram's buckets.
const BUCKETS: [f64; 12] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];

/// `/readyz` fails after this many passes in a row failed.
pub const UNREADY_AFTER: u64 = 3;

#[derive(Default)]
struct State {
    passes: u64,
    /// Passes that failed since the last that did not.
    failing: u64,
    /// Passes started before the interval was up, by the probe.
    early_passes: u64,
    pass_errors: u64,
    widenings: u64,
    narrowings: u64,
    write_failures: u64,
    /// By what the edge met (passthrough, blackholed, ...).
    outside: BTreeMap<&'static str, u64>,
    latency_buckets: [u64; BUCKETS.len()],
    latency_count: u64,
    latency_sum: f64,
    leader: bool,
    /// The end of the last pass, or the start.
    alive: Option<Instant>,
}

/// The watcher's counters, shared with the HTTP server.
pub struct Metrics {
    state: Mutex<State>,
    /// `/healthz` fails once no pass ended for this long.
    stale_after: Duration,
}

impl Metrics {
    pub fn new(stale_after: Duration) -> Arc<Metrics> {
        let state = State {
            alive: Some(Instant::now()),
            ..State::default()
        };
        Arc::new(Metrics {
            state: Mutex::new(state),
            stale_after,
        })
    }

    fn with(&self, f: impl FnOnce(&mut State)) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut s);
    }

    /// A pass ended (`ok`: without an error).
    pub fn pass(&self, ok: bool) {
        self.with(|s| {
            s.passes += 1;
            if ok {
                s.failing = 0;
            } else {
                s.pass_errors += 1;
                s.failing += 1;
            }
            s.alive = Some(Instant::now());
        });
    }

    /// Sidecar writes so far (widenings and narrowings).
    pub fn writes(&self) -> u64 {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.widenings + s.narrowings
    }

    /// The next pass starts early: the probe saw a new series outside
    /// every scope.
    pub fn early_pass(&self) {
        self.with(|s| s.early_passes += 1);
    }

    /// The loop is alive (a replica that does not lead, between passes).
    pub fn alive(&self) {
        self.with(|s| s.alive = Some(Instant::now()));
    }

    pub fn leader(&self, leading: bool) {
        self.with(|s| s.leader = leading);
    }

    pub fn outside(&self, meets: &'static str, n: u64) {
        self.with(|s| *s.outside.entry(meets).or_default() += n);
    }

    pub fn widened(&self, n: u64) {
        self.with(|s| s.widenings += n);
    }

    pub fn narrowed(&self, n: u64) {
        self.with(|s| s.narrowings += n);
    }

    pub fn write_failed(&self, n: u64) {
        self.with(|s| s.write_failures += n);
    }

    /// A widened scope was confirmed `seconds` after its first sample.
    pub fn scope_latency(&self, seconds: f64) {
        self.with(|s| {
            for (i, b) in BUCKETS.iter().enumerate() {
                if seconds <= *b {
                    s.latency_buckets[i] += 1;
                }
            }
            s.latency_count += 1;
            s.latency_sum += seconds;
        });
    }

    pub fn healthy(&self) -> bool {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.alive.is_some_and(|t| t.elapsed() <= self.stale_after)
    }

    /// Alive, and fewer than [`UNREADY_AFTER`] passes in a row failed.
    pub fn ready(&self) -> bool {
        self.healthy()
            && self.state.lock().unwrap_or_else(|e| e.into_inner()).failing < UNREADY_AFTER
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut o = String::new();
        let counter = |o: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        counter(
            &mut o,
            "meshscope_watch_passes_total",
            "Passes run (each reads the traffic since the previous one).",
            s.passes,
        );
        counter(
            &mut o,
            "meshscope_watch_early_passes_total",
            "Passes started before --interval was up because Prometheus showed a new PassthroughCluster or BlackHoleCluster series.",
            s.early_passes,
        );
        counter(
            &mut o,
            "meshscope_watch_pass_errors_total",
            "Passes that ended in an error (retried next pass).",
            s.pass_errors,
        );
        counter(
            &mut o,
            "meshscope_watch_widenings_total",
            "Managed Sidecars created or widened.",
            s.widenings,
        );
        counter(
            &mut o,
            "meshscope_watch_narrowings_total",
            "Managed Sidecars narrowed by --prune-after.",
            s.narrowings,
        );
        counter(
            &mut o,
            "meshscope_watch_write_failures_total",
            "Sidecar writes that failed or were skipped on a conflict.",
            s.write_failures,
        );
        let _ = writeln!(o, "# HELP meshscope_watch_edges_outside_scope_total Observed edges (workload to host:port, per pass) that their current scope does not hold, by what they met.\n# TYPE meshscope_watch_edges_outside_scope_total counter");
        for (meets, n) in &s.outside {
            let _ = writeln!(
                o,
                "meshscope_watch_edges_outside_scope_total{{meets=\"{meets}\"}} {n}"
            );
        }
        let name = "meshscope_watch_scope_latency_seconds";
        let _ = writeln!(o, "# HELP {name} From the first sample showing a call outside a scope (the first PassthroughCluster or BlackHoleCluster line of the pass in pod logs, or the first second Prometheus held a new such series; else the pass's read) to istiod confirming the widened scope.\n# TYPE {name} histogram");
        for (b, n) in BUCKETS.iter().zip(s.latency_buckets) {
            let _ = writeln!(o, "{name}_bucket{{le=\"{b}\"}} {n}");
        }
        let _ = writeln!(
            o,
            "{name}_bucket{{le=\"+Inf\"}} {c}\n{name}_sum {}\n{name}_count {c}",
            s.latency_sum,
            c = s.latency_count
        );
        let _ = writeln!(o, "# HELP meshscope_watch_failing_passes Passes that failed in a row, up to now (0 after one that did not); /readyz fails from {UNREADY_AFTER}.\n# TYPE meshscope_watch_failing_passes gauge\nmeshscope_watch_failing_passes {}", s.failing);
        let _ = writeln!(o, "# HELP meshscope_watch_leader 1 while this replica holds the Lease (or runs without --lease).\n# TYPE meshscope_watch_leader gauge\nmeshscope_watch_leader {}", u8::from(s.leader));
        o
    }
}

/// Binds `addr` (so that a taken port is an error before the first pass)
/// and serves `/metrics` and `/healthz` on `rt` until the process ends.
pub fn serve(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    m: Arc<Metrics>,
) -> Result<SocketAddr> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(addr))
        .with_context(|| format!("--metrics-addr {addr}: cannot listen"))?;
    let bound = listener.local_addr()?;
    let (m1, m2, m3) = (m.clone(), m.clone(), m);
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = m1.clone();
                async move { ([("content-type", "text/plain; version=0.0.4")], m.render()) }
            }),
        )
        .route(
            "/healthz",
            get(move || {
                let m = m2.clone();
                async move {
                    if m.healthy() {
                        (StatusCode::OK, "ok\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "no pass ended recently\n")
                    }
                }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let m = m3.clone();
                async move {
                    if m.ready() {
                        (StatusCode::OK, "ok\n")
                    } else if !m.healthy() {
                        (StatusCode::SERVICE_UNAVAILABLE, "no pass ended recently\n")
                    } else {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            "the last passes failed (see the pass-error events)\n",
                        )
                    }
                }
            }),
        );
    rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_counts_and_buckets() {
        let m = Metrics::new(Duration::from_secs(60));
        m.pass(true);
        m.pass(false);
        m.widened(2);
        m.outside("passthrough", 3);
        m.scope_latency(1.5);
        m.scope_latency(40.0);
        let text = m.render();
        assert!(text.contains("meshscope_watch_passes_total 2\n"), "{text}");
        assert!(text.contains("meshscope_watch_pass_errors_total 1\n"));
        assert!(text.contains("meshscope_watch_widenings_total 2\n"));
        assert!(
            text.contains("meshscope_watch_edges_outside_scope_total{meets=\"passthrough\"} 3\n")
        );
        assert!(text.contains("meshscope_watch_scope_latency_seconds_bucket{le=\"1\"} 0\n"));
        assert!(text.contains("meshscope_watch_scope_latency_seconds_bucket{le=\"2\"} 1\n"));
        assert!(text.contains("meshscope_watch_scope_latency_seconds_bucket{le=\"60\"} 2\n"));
        assert!(text.contains("meshscope_watch_scope_latency_seconds_count 2\n"));
        assert!(m.healthy());
        assert!(!Metrics::new(Duration::ZERO).healthy());
    }

    #[test]
    fn readiness_fails_after_a_run_of_failed_passes_and_comes_back() {
        let m = Metrics::new(Duration::from_secs(60));
        assert!(m.ready());
        for _ in 0..UNREADY_AFTER - 1 {
            m.pass(false);
        }
        assert!(m.ready(), "{}", m.render());
        m.pass(false);
        assert!(!m.ready());
        assert!(m.healthy(), "alive all the same");
        assert!(m
            .render()
            .contains(&format!("meshscope_watch_failing_passes {UNREADY_AFTER}\n")));
        m.pass(true);
        assert!(m.ready());
        assert!(m.render().contains("meshscope_watch_failing_passes 0\n"));
    }
}
