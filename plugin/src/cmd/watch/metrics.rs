//! `apply --watch --metrics-addr`: the watcher's metrics in Prometheus'
//! text format (0.0.4) on `/metrics`; `/healthz` (liveness: the loop runs)
//! and `/readyz` (readiness: it also does its job, no run of
//! [`UNREADY_AFTER`] failed passes).
//!
//! The metrics are typed series in a [`prometheus_client`] [`Registry`],
//! written by [`prometheus_text::encode`] (counters end in `_total`):
//!
//! - `meshscope_watch_passes_total`: passes run (each reads the traffic
//!   since the previous one); `meshscope_watch_early_passes_total`: those
//!   started before `--interval` was up because the Prometheus probe saw a
//!   new PassthroughCluster or BlackHoleCluster series;
//!   `meshscope_watch_pass_errors_total`: those that ended in an error.
//! - `meshscope_watch_widenings_total`, `meshscope_watch_narrowings_total`:
//!   managed Sidecars created or widened, and narrowed by `--prune-after`;
//!   `meshscope_watch_write_failures_total`: Sidecar writes that failed or
//!   were skipped on a conflict.
//! - `meshscope_watch_edges_outside_scope_total{meets}`: observed edges
//!   (per pass) that their scope does not hold, by what they met.
//! - `meshscope_watch_scope_latency_seconds` (histogram, [`BUCKETS`]): from
//!   the first sample showing a call outside a scope to istiod confirming
//!   the widened scope.
//! - `meshscope_watch_failing_passes` (gauge): passes failed in a row;
//!   `/readyz` fails from [`UNREADY_AFTER`].
//! - `meshscope_watch_leader` (gauge): 1 while this replica holds the Lease
//!   (or runs without `--lease`).
//!
//! To add a metric: a field in [`Metrics`], registered in
//! [`Metrics::new`]'s helpers (the registration order is the order of the
//! exposition), and a method that updates it. Register a counter without
//! its `_total`, which the encoder adds; a help text's final full stop is
//! added by the registry too. A labelled series is a [`Family`] keyed by a
//! struct deriving [`EncodeLabelSet`] (its fields, in order, are the
//! labels).

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use prometheus_client::encoding::{prometheus_text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

/// Upper bounds (seconds) of the scope-latency histogram's buckets.
const BUCKETS: [f64; 12] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];

/// `/readyz` fails after this many passes in a row failed.
pub const UNREADY_AFTER: u64 = 3;

/// The label of `meshscope_watch_edges_outside_scope_total`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct MeetsLabel {
    meets: &'static str,
}

/// The watcher's metrics, shared with the HTTP server.
pub struct Metrics {
    registry: Registry,
    passes: Counter,
    early_passes: Counter,
    pass_errors: Counter,
    widenings: Counter,
    narrowings: Counter,
    write_failures: Counter,
    /// By what the edge met (passthrough, blackholed, ...).
    outside: Family<MeetsLabel, Counter>,
    scope_latency: Histogram,
    /// Passes that failed since the last that did not.
    failing: Gauge<u64, AtomicU64>,
    leader: Gauge<u64, AtomicU64>,
    /// The end of the last pass, or the start.
    alive: Mutex<Instant>,
    /// `/healthz` fails once no pass ended for this long.
    stale_after: Duration,
}

/// Registers `metric` (a handle sharing its value) under `name`.
fn add(registry: &mut Registry, name: &str, help: &str, metric: impl Metric) {
    // The registry appends a full stop to the help text.
    registry.register(name, help.strip_suffix('.').unwrap_or(help), metric);
}

impl Metrics {
    pub fn new(stale_after: Duration) -> Arc<Metrics> {
        let mut m = Metrics {
            registry: Registry::default(),
            passes: Counter::default(),
            early_passes: Counter::default(),
            pass_errors: Counter::default(),
            widenings: Counter::default(),
            narrowings: Counter::default(),
            write_failures: Counter::default(),
            outside: Family::default(),
            scope_latency: Histogram::new(BUCKETS),
            failing: Gauge::default(),
            leader: Gauge::default(),
            alive: Mutex::new(Instant::now()),
            stale_after,
        };
        m.register_passes();
        m.register_scopes();
        Arc::new(m)
    }

    /// The series about passes and the Sidecars they write.
    fn register_passes(&mut self) {
        let r = &mut self.registry;
        add(
            r,
            "meshscope_watch_passes",
            "Passes run (each reads the traffic since the previous one).",
            self.passes.clone(),
        );
        add(
            r,
            "meshscope_watch_early_passes",
            "Passes started before --interval was up because Prometheus showed a new PassthroughCluster or BlackHoleCluster series.",
            self.early_passes.clone(),
        );
        add(
            r,
            "meshscope_watch_pass_errors",
            "Passes that ended in an error (retried next pass).",
            self.pass_errors.clone(),
        );
        add(
            r,
            "meshscope_watch_widenings",
            "Managed Sidecars created or widened.",
            self.widenings.clone(),
        );
        add(
            r,
            "meshscope_watch_narrowings",
            "Managed Sidecars narrowed by --prune-after.",
            self.narrowings.clone(),
        );
        add(
            r,
            "meshscope_watch_write_failures",
            "Sidecar writes that failed or were skipped on a conflict.",
            self.write_failures.clone(),
        );
    }

    /// The series about scopes, readiness and the Lease.
    fn register_scopes(&mut self) {
        let r = &mut self.registry;
        add(
            r,
            "meshscope_watch_edges_outside_scope",
            "Observed edges (workload to host:port, per pass) that their current scope does not hold, by what they met.",
            self.outside.clone(),
        );
        add(
            r,
            "meshscope_watch_scope_latency_seconds",
            "From the first sample showing a call outside a scope (the first PassthroughCluster or BlackHoleCluster line of the pass in pod logs, or the first second Prometheus held a new such series; else the pass's read) to istiod confirming the widened scope.",
            self.scope_latency.clone(),
        );
        add(
            r,
            "meshscope_watch_failing_passes",
            &format!("Passes that failed in a row, up to now (0 after one that did not); /readyz fails from {UNREADY_AFTER}."),
            self.failing.clone(),
        );
        add(
            r,
            "meshscope_watch_leader",
            "1 while this replica holds the Lease (or runs without --lease).",
            self.leader.clone(),
        );
    }

    /// A pass ended (`ok`: without an error).
    pub fn pass(&self, ok: bool) {
        self.passes.inc();
        if ok {
            self.failing.set(0);
        } else {
            self.pass_errors.inc();
            self.failing.inc();
        }
        self.alive();
    }

    /// Sidecar writes so far (widenings and narrowings).
    pub fn writes(&self) -> u64 {
        self.widenings.get() + self.narrowings.get()
    }

    /// The next pass starts early: the probe saw a new series outside
    /// every scope.
    pub fn early_pass(&self) {
        self.early_passes.inc();
    }

    /// The loop is alive (a replica that does not lead, between passes).
    pub fn alive(&self) {
        *self.alive.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub fn leader(&self, leading: bool) {
        self.leader.set(leading.into());
    }

    pub fn outside(&self, meets: &'static str, n: u64) {
        self.outside.get_or_create(&MeetsLabel { meets }).inc_by(n);
    }

    pub fn widened(&self, n: u64) {
        self.widenings.inc_by(n);
    }

    pub fn narrowed(&self, n: u64) {
        self.narrowings.inc_by(n);
    }

    pub fn write_failed(&self, n: u64) {
        self.write_failures.inc_by(n);
    }

    /// A widened scope was confirmed `seconds` after its first sample.
    pub fn scope_latency(&self, seconds: f64) {
        self.scope_latency.observe(seconds);
    }

    pub fn healthy(&self) -> bool {
        let alive = *self.alive.lock().unwrap_or_else(|e| e.into_inner());
        alive.elapsed() <= self.stale_after
    }

    /// Alive, and fewer than [`UNREADY_AFTER`] passes in a row failed.
    pub fn ready(&self) -> bool {
        self.healthy() && self.failing.get() < UNREADY_AFTER
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let mut o = String::new();
        // Only the writer could fail, and a String does not.
        let _ = prometheus_text::encode(&mut o, &self.registry);
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

    /// The lines the tests under tests/ read (verify/watch, the watch
    /// benchmark), in the Prometheus text format 0.0.4 (no OpenMetrics
    /// `# EOF`).
    #[test]
    fn renders_the_lines_the_cluster_tests_read() {
        let m = Metrics::new(Duration::from_secs(60));
        m.pass(true);
        m.early_pass();
        m.leader(true);
        m.outside("passthrough", 1);
        m.scope_latency(0.25);
        let text = m.render();
        for line in [
            "\nmeshscope_watch_passes_total 1\n",
            "\nmeshscope_watch_early_passes_total 1\n",
            "\nmeshscope_watch_widenings_total 0\n",
            "\nmeshscope_watch_narrowings_total 0\n",
            "\nmeshscope_watch_edges_outside_scope_total{meets=\"passthrough\"} 1\n",
            "\nmeshscope_watch_scope_latency_seconds_sum 0.25\n",
            "\nmeshscope_watch_scope_latency_seconds_count 1\n",
            "\nmeshscope_watch_leader 1\n",
            "\n# TYPE meshscope_watch_passes_total counter\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("# EOF"), "{text}");
    }
}
