//! Prometheus metrics, rendered in the text exposition format (0.0.4).
//!
//! A handful of series, kept in ordered maps so the output is stable; no
//! registry crate is needed for this.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency histogram, in seconds. Admission is a
/// lookup in memory: most requests finish well under a millisecond; the API
/// server gives up after `timeoutSeconds: 3`.
const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; LATENCY_BUCKETS.len()],
    sum: f64,
    count: u64,
}

/// Labels of one request series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestLabels<'a> {
    pub endpoint: &'static str,
    pub kind: &'a str,
    pub operation: &'static str,
    pub decision: &'static str,
}

/// Request counts by kind, then by (endpoint, operation, decision): a
/// request finds its counter without allocating (the kind is the only
/// label that is not a constant).
type RequestCounts = BTreeMap<String, BTreeMap<(&'static str, &'static str, &'static str), u64>>;

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<RequestCounts>,
    latency: Mutex<BTreeMap<&'static str, Histogram>>,
    exemptions: Mutex<BTreeMap<(String, String), u64>>,
    cache_objects: Mutex<BTreeMap<&'static str, u64>>,
    bad_requests: AtomicU64,
    tls_reloads: AtomicU64,
    tls_errors: AtomicU64,
    connections_open: AtomicU64,
    connections_accepted: AtomicU64,
    connections_rejected: AtomicU64,
    connections_evicted: AtomicU64,
    handshake_errors: AtomicU64,
    timed_out: [AtomicU64; TIMEOUT_PHASES.len()],
}

/// What a client was too slow for: `meshscope_webhook_timeouts_total{phase}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    Handshake,
    Header,
    Body,
    Idle,
}

const TIMEOUT_PHASES: [&str; 4] = ["handshake", "header", "body", "idle"];

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding a metrics lock leaves plain counters behind.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Metrics {
    pub fn request(&self, labels: RequestLabels<'_>, elapsed: Duration) {
        let endpoint = labels.endpoint;
        let series = (labels.endpoint, labels.operation, labels.decision);
        {
            let mut requests = lock(&self.requests);
            let by_kind = match requests.get_mut(labels.kind) {
                Some(m) => m,
                None => requests.entry(labels.kind.to_string()).or_default(),
            };
            *by_kind.entry(series).or_default() += 1;
        }
        let secs = elapsed.as_secs_f64();
        let mut lat = lock(&self.latency);
        let h = lat.entry(endpoint).or_default();
        for (i, le) in LATENCY_BUCKETS.iter().enumerate() {
            if secs <= *le {
                h.counts[i] += 1;
            }
        }
        h.sum += secs;
        h.count += 1;
    }

    pub fn exemption(&self, kind: &str, namespace: &str) {
        *lock(&self.exemptions)
            .entry((kind.to_string(), namespace.to_string()))
            .or_default() += 1;
    }

    pub fn cache_objects(&self, resource: &'static str, n: usize) {
        lock(&self.cache_objects).insert(resource, n as u64);
    }

    pub fn bad_request(&self) {
        self.bad_requests.fetch_add(1, Ordering::Relaxed);
    }

    pub fn tls_reload(&self) {
        self.tls_reloads.fetch_add(1, Ordering::Relaxed);
    }

    pub fn tls_error(&self) {
        self.tls_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection was accepted (under the cap) and is now open.
    pub fn connection_opened(&self) {
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
        self.connections_open.fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn connections_open(&self) -> u64 {
        self.connections_open.load(Ordering::Relaxed)
    }

    /// The cap was reached and no open connection was idle.
    pub fn connection_rejected(&self) {
        self.connections_rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// An idle connection was closed to make room under the cap.
    pub fn connection_evicted(&self) {
        self.connections_evicted.fetch_add(1, Ordering::Relaxed);
    }

    /// A TLS handshake failed (not TLS, no shared version or cipher, ...).
    pub fn handshake_error(&self) {
        self.handshake_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn timed_out(&self, what: Timeout) {
        self.timed_out[what as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The text exposition, with the cache state passed in by the caller.
    pub fn render(&self, synced: bool, stale: bool) -> String {
        let mut out = String::new();
        header(
            &mut out,
            "meshscope_webhook_requests_total",
            "counter",
            "Admission requests by endpoint, kind, operation and decision (allow, warn, patch, exempt, deny, unchecked).",
        );
        let requests = lock(&self.requests);
        let mut series: Vec<(RequestLabels<'_>, u64)> = requests
            .iter()
            .flat_map(|(kind, m)| {
                m.iter().map(|(&(endpoint, operation, decision), &n)| {
                    let labels = RequestLabels {
                        endpoint,
                        kind,
                        operation,
                        decision,
                    };
                    (labels, n)
                })
            })
            .collect();
        series.sort();
        for (l, n) in series {
            let _ = writeln!(
                out,
                "meshscope_webhook_requests_total{{endpoint=\"{}\",kind=\"{}\",operation=\"{}\",decision=\"{}\"}} {n}",
                esc(l.endpoint),
                esc(l.kind),
                esc(l.operation),
                esc(l.decision)
            );
        }
        drop(requests);
        header(
            &mut out,
            "meshscope_webhook_request_duration_seconds",
            "histogram",
            "Time to decide an admission request, from the body read to the response.",
        );
        for (endpoint, h) in lock(&self.latency).iter() {
            for (i, le) in LATENCY_BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "meshscope_webhook_request_duration_seconds_bucket{{endpoint=\"{endpoint}\",le=\"{le}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "meshscope_webhook_request_duration_seconds_bucket{{endpoint=\"{endpoint}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "meshscope_webhook_request_duration_seconds_sum{{endpoint=\"{endpoint}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "meshscope_webhook_request_duration_seconds_count{{endpoint=\"{endpoint}\"}} {}",
                h.count
            );
        }
        header(
            &mut out,
            "meshscope_webhook_exemptions_total",
            "counter",
            "Objects allowed because of a meshscope.io/exempt annotation.",
        );
        for ((kind, ns), n) in lock(&self.exemptions).iter() {
            let _ = writeln!(
                out,
                "meshscope_webhook_exemptions_total{{kind=\"{}\",namespace=\"{}\"}} {n}",
                esc(kind),
                esc(ns)
            );
        }
        header(
            &mut out,
            "meshscope_webhook_cache_objects",
            "gauge",
            "Objects in the watch caches, by resource.",
        );
        for (r, n) in lock(&self.cache_objects).iter() {
            let _ = writeln!(
                out,
                "meshscope_webhook_cache_objects{{resource=\"{r}\"}} {n}"
            );
        }
        gauge(
            &mut out,
            "meshscope_webhook_cache_synced",
            "1 once every watch cache has completed its first list.",
            synced as u64,
        );
        gauge(
            &mut out,
            "meshscope_webhook_cache_stale",
            "1 while a watch cache is failing to refresh (decisions still come from the last state it listed, with a warning).",
            stale as u64,
        );
        counter(
            &mut out,
            "meshscope_webhook_bad_requests_total",
            "Requests answered with HTTP 400 (malformed or oversized bodies).",
            self.bad_requests.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "meshscope_webhook_tls_reloads_total",
            "Times the serving certificate was (re)loaded from disk.",
            self.tls_reloads.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "meshscope_webhook_tls_reload_errors_total",
            "Times the certificate files could not be loaded (the previous one stays in use).",
            self.tls_errors.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "meshscope_webhook_connections_open",
            "Open HTTPS connections, handshaking ones included (at most --max-connections).",
            self.connections_open.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "meshscope_webhook_connections_accepted_total",
            "HTTPS connections accepted under the cap.",
            self.connections_accepted.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "meshscope_webhook_connections_rejected_total",
            "Connections closed at once because --max-connections were open and none was idle.",
            self.connections_rejected.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "meshscope_webhook_connections_evicted_total",
            "Idle connections closed to make room for a new one at --max-connections.",
            self.connections_evicted.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "meshscope_webhook_tls_handshake_errors_total",
            "TLS handshakes that failed (not TLS, nothing in common, or closed early).",
            self.handshake_errors.load(Ordering::Relaxed),
        );
        header(
            &mut out,
            "meshscope_webhook_timeouts_total",
            "counter",
            "Connections closed (handshake, header, idle) or requests answered 408 (body) because the client was too slow.",
        );
        for (i, phase) in TIMEOUT_PHASES.iter().enumerate() {
            let _ = writeln!(
                out,
                "meshscope_webhook_timeouts_total{{phase=\"{phase}\"}} {}",
                self.timed_out[i].load(Ordering::Relaxed)
            );
        }
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn gauge(out: &mut String, name: &str, help: &str, v: u64) {
    header(out, name, "gauge", help);
    let _ = writeln!(out, "{name} {v}");
}

fn counter(out: &mut String, name: &str, help: &str, v: u64) {
    header(out, name, "counter", help);
    let _ = writeln!(out, "{name} {v}");
}

/// Label value escaping of the text format.
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_gauges() {
        let m = Metrics::default();
        m.request(
            RequestLabels {
                endpoint: "validate",
                kind: "Deployment",
                operation: "CREATE",
                decision: "deny",
            },
            Duration::from_micros(700),
        );
        m.exemption("Deployment", "shop");
        m.cache_objects("sidecars", 3);
        let text = m.render(true, false);
        assert!(text.contains("meshscope_webhook_requests_total{endpoint=\"validate\",kind=\"Deployment\",operation=\"CREATE\",decision=\"deny\"} 1\n"), "{text}");
        assert!(text.contains("meshscope_webhook_request_duration_seconds_bucket{endpoint=\"validate\",le=\"0.0005\"} 0\n"));
        assert!(text.contains("meshscope_webhook_request_duration_seconds_bucket{endpoint=\"validate\",le=\"0.001\"} 1\n"));
        assert!(text.contains(
            "meshscope_webhook_request_duration_seconds_count{endpoint=\"validate\"} 1\n"
        ));
        assert!(text.contains(
            "meshscope_webhook_exemptions_total{kind=\"Deployment\",namespace=\"shop\"} 1\n"
        ));
        assert!(text.contains("meshscope_webhook_cache_objects{resource=\"sidecars\"} 3\n"));
        assert!(text.contains("meshscope_webhook_cache_synced 1\n"));
        m.connection_opened();
        m.connection_opened();
        m.connection_closed();
        m.timed_out(Timeout::Body);
        m.connection_rejected();
        let text = m.render(true, false);
        assert!(
            text.contains("meshscope_webhook_connections_open 1\n"),
            "{text}"
        );
        assert!(text.contains("meshscope_webhook_connections_accepted_total 2\n"));
        assert!(text.contains("meshscope_webhook_connections_rejected_total 1\n"));
        assert!(text.contains("meshscope_webhook_timeouts_total{phase=\"body\"} 1\n"));
        assert!(text.contains("meshscope_webhook_timeouts_total{phase=\"header\"} 0\n"));
        assert_eq!(esc("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
