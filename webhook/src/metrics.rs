//! Prometheus metrics: typed series in a [`prometheus_client`] [`Registry`],
//! rendered in the Prometheus text exposition format (0.0.4) by
//! [`prometheus_text::encode`].
//!
//! The series (counters end in `_total`):
//!
//! - `meshscope_webhook_requests_total{endpoint,kind,operation,decision}`:
//!   admission requests, by decision (allow, warn, patch, exempt, deny,
//!   unchecked).
//! - `meshscope_webhook_request_duration_seconds{endpoint}` (histogram,
//!   buckets from 0.5 ms to 2.5 s): time to decide a request, from the body
//!   read to the response.
//! - `meshscope_webhook_exemptions_total{kind,namespace}`: objects allowed
//!   because of a `meshscope.io/exempt` annotation.
//! - `meshscope_webhook_cache_objects{resource}` (gauge): objects in each
//!   watch cache.
//! - `meshscope_webhook_cache_synced`, `meshscope_webhook_cache_stale`
//!   (gauges, 0 or 1): every cache has listed once; a cache is failing to
//!   refresh. Both are set from the caller's state at each render.
//! - `meshscope_webhook_bad_requests_total`: HTTP 400 answers.
//! - `meshscope_webhook_tls_reloads_total`,
//!   `meshscope_webhook_tls_reload_errors_total`: certificate (re)loads,
//!   and loads that failed (the previous pair stays in use).
//! - `meshscope_webhook_connections_open` (gauge),
//!   `meshscope_webhook_connections_{accepted,rejected,evicted}_total`: the
//!   HTTPS connections and the `--max-connections` cap.
//! - `meshscope_webhook_tls_handshake_errors_total`: failed handshakes.
//! - `meshscope_webhook_timeouts_total{phase}`: clients too slow for a
//!   [`Timeout`] (every phase is present from the start, at 0).
//!
//! To add a metric: a field in [`Metrics`], registered in
//! [`Metrics::default`] (the registration order is the order of the
//! exposition), and a method that updates it. Register a counter without
//! its `_total`, which the encoder adds; a help text's final full stop is
//! added by the registry too. A labelled series is a [`Family`] keyed by a
//! struct deriving [`EncodeLabelSet`] (its fields, in order, are the
//! labels).

use std::borrow::Cow;
use std::time::Duration;

use meshscope_shared::admission::VALIDATED;
use prometheus_client::encoding::{
    prometheus_text, EncodeLabelSet, EncodeLabelValue, LabelValueEncoder,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

/// Upper bounds of the latency histogram, in seconds. Admission is a
/// lookup in memory: most requests finish well under a millisecond; the API
/// server gives up after `timeoutSeconds: 3`.
const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Labels of one request series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestLabels<'a> {
    pub endpoint: &'static str,
    pub kind: &'a str,
    pub operation: &'static str,
    pub decision: &'static str,
}

/// `kind` without allocating when it is one the webhook is registered for
/// ([`meshscope_shared::admission::VALIDATED`]): a request finds its
/// counter without a copy of the kind.
fn static_kind(kind: &str) -> Cow<'static, str> {
    VALIDATED.iter().find(|(_, _, k)| *k == kind).map_or_else(
        || Cow::Owned(kind.to_string()),
        |(_, _, k)| Cow::Borrowed(*k),
    )
}

/// [`RequestLabels`] as the key of `meshscope_webhook_requests_total`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestSeries {
    endpoint: &'static str,
    kind: Cow<'static, str>,
    operation: &'static str,
    decision: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EndpointLabel {
    endpoint: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ExemptionLabels {
    kind: String,
    namespace: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResourceLabel {
    resource: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PhaseLabel {
    phase: Timeout,
}

/// A gauge of a count (`u64`, as the values it reports).
type CountGauge = Gauge<u64, std::sync::atomic::AtomicU64>;

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestSeries, Counter>,
    latency: Family<EndpointLabel, Histogram, fn() -> Histogram>,
    exemptions: Family<ExemptionLabels, Counter>,
    cache_objects: Family<ResourceLabel, CountGauge>,
    cache_synced: CountGauge,
    cache_stale: CountGauge,
    bad_requests: Counter,
    tls_reloads: Counter,
    tls_errors: Counter,
    connections_open: CountGauge,
    connections_accepted: Counter,
    connections_rejected: Counter,
    connections_evicted: Counter,
    handshake_errors: Counter,
    timed_out: Family<PhaseLabel, Counter>,
}

/// What a client was too slow for: `meshscope_webhook_timeouts_total{phase}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Timeout {
    Handshake,
    Header,
    Body,
    Idle,
}

impl Timeout {
    const ALL: [Timeout; 4] = [
        Timeout::Handshake,
        Timeout::Header,
        Timeout::Body,
        Timeout::Idle,
    ];

    /// The `phase` label value.
    fn as_str(self) -> &'static str {
        match self {
            Timeout::Handshake => "handshake",
            Timeout::Header => "header",
            Timeout::Body => "body",
            Timeout::Idle => "idle",
        }
    }
}

impl EncodeLabelValue for Timeout {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Registers `metric` (a handle sharing its value) under `name`.
fn add(registry: &mut Registry, name: &str, help: &str, metric: impl Metric) {
    // The registry appends a full stop to the help text.
    registry.register(name, help.strip_suffix('.').unwrap_or(help), metric);
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut m = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            exemptions: Family::default(),
            cache_objects: Family::default(),
            cache_synced: Gauge::default(),
            cache_stale: Gauge::default(),
            bad_requests: Counter::default(),
            tls_reloads: Counter::default(),
            tls_errors: Counter::default(),
            connections_open: Gauge::default(),
            connections_accepted: Counter::default(),
            connections_rejected: Counter::default(),
            connections_evicted: Counter::default(),
            handshake_errors: Counter::default(),
            timed_out: Family::default(),
        };
        for phase in Timeout::ALL {
            drop(m.timed_out.get_or_create(&PhaseLabel { phase }));
        }
        m.register_admission();
        m.register_connections();
        m
    }
}

impl Metrics {
    /// The series about admission requests and the caches they read.
    fn register_admission(&mut self) {
        let r = &mut self.registry;
        add(
            r,
            "meshscope_webhook_requests",
            "Admission requests by endpoint, kind, operation and decision (allow, warn, patch, exempt, deny, unchecked).",
            self.requests.clone(),
        );
        add(
            r,
            "meshscope_webhook_request_duration_seconds",
            "Time to decide an admission request, from the body read to the response.",
            self.latency.clone(),
        );
        add(
            r,
            "meshscope_webhook_exemptions",
            "Objects allowed because of a meshscope.io/exempt annotation.",
            self.exemptions.clone(),
        );
        add(
            r,
            "meshscope_webhook_cache_objects",
            "Objects in the watch caches, by resource.",
            self.cache_objects.clone(),
        );
        add(
            r,
            "meshscope_webhook_cache_synced",
            "1 once every watch cache has completed its first list.",
            self.cache_synced.clone(),
        );
        add(
            r,
            "meshscope_webhook_cache_stale",
            "1 while a watch cache is failing to refresh (decisions still come from the last state it listed, with a warning).",
            self.cache_stale.clone(),
        );
        add(
            r,
            "meshscope_webhook_bad_requests",
            "Requests answered with HTTP 400 (malformed or oversized bodies).",
            self.bad_requests.clone(),
        );
    }

    /// The series about certificates and HTTPS connections.
    fn register_connections(&mut self) {
        let r = &mut self.registry;
        add(
            r,
            "meshscope_webhook_tls_reloads",
            "Times the serving certificate was (re)loaded from disk.",
            self.tls_reloads.clone(),
        );
        add(
            r,
            "meshscope_webhook_tls_reload_errors",
            "Times the certificate files could not be loaded (the previous one stays in use).",
            self.tls_errors.clone(),
        );
        add(
            r,
            "meshscope_webhook_connections_open",
            "Open HTTPS connections, handshaking ones included (at most --max-connections).",
            self.connections_open.clone(),
        );
        add(
            r,
            "meshscope_webhook_connections_accepted",
            "HTTPS connections accepted under the cap.",
            self.connections_accepted.clone(),
        );
        add(
            r,
            "meshscope_webhook_connections_rejected",
            "Connections closed at once because --max-connections were open and none was idle.",
            self.connections_rejected.clone(),
        );
        add(
            r,
            "meshscope_webhook_connections_evicted",
            "Idle connections closed to make room for a new one at --max-connections.",
            self.connections_evicted.clone(),
        );
        add(
            r,
            "meshscope_webhook_tls_handshake_errors",
            "TLS handshakes that failed (not TLS, nothing in common, or closed early).",
            self.handshake_errors.clone(),
        );
        add(
            r,
            "meshscope_webhook_timeouts",
            "Connections closed (handshake, header, idle) or requests answered 408 (body) because the client was too slow.",
            self.timed_out.clone(),
        );
    }

    pub fn request(&self, labels: RequestLabels<'_>, elapsed: Duration) {
        let series = RequestSeries {
            endpoint: labels.endpoint,
            kind: static_kind(labels.kind),
            operation: labels.operation,
            decision: labels.decision,
        };
        self.requests.get_or_create(&series).inc();
        let endpoint = EndpointLabel {
            endpoint: labels.endpoint,
        };
        self.latency
            .get_or_create(&endpoint)
            .observe(elapsed.as_secs_f64());
    }

    pub fn exemption(&self, kind: &str, namespace: &str) {
        let labels = ExemptionLabels {
            kind: kind.to_string(),
            namespace: namespace.to_string(),
        };
        self.exemptions.get_or_create(&labels).inc();
    }

    pub fn cache_objects(&self, resource: &'static str, n: usize) {
        let labels = ResourceLabel { resource };
        self.cache_objects.get_or_create(&labels).set(n as u64);
    }

    pub fn bad_request(&self) {
        self.bad_requests.inc();
    }

    pub fn tls_reload(&self) {
        self.tls_reloads.inc();
    }

    pub fn tls_error(&self) {
        self.tls_errors.inc();
    }

    /// A connection was accepted (under the cap) and is now open.
    pub fn connection_opened(&self) {
        self.connections_accepted.inc();
        self.connections_open.inc();
    }

    pub fn connection_closed(&self) {
        self.connections_open.dec();
    }

    pub fn connections_open(&self) -> u64 {
        self.connections_open.get()
    }

    /// The cap was reached and no open connection was idle.
    pub fn connection_rejected(&self) {
        self.connections_rejected.inc();
    }

    /// An idle connection was closed to make room under the cap.
    pub fn connection_evicted(&self) {
        self.connections_evicted.inc();
    }

    /// A TLS handshake failed (not TLS, no shared version or cipher, ...).
    pub fn handshake_error(&self) {
        self.handshake_errors.inc();
    }

    pub fn timed_out(&self, what: Timeout) {
        self.timed_out
            .get_or_create(&PhaseLabel { phase: what })
            .inc();
    }

    /// The text exposition, with the cache state passed in by the caller.
    pub fn render(&self, synced: bool, stale: bool) -> String {
        self.cache_synced.set(synced.into());
        self.cache_stale.set(stale.into());
        let mut out = String::new();
        // Only the writer could fail, and a String does not.
        let _ = prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_kind_labels_a_request_without_a_copy() {
        for (_, _, kind) in VALIDATED {
            assert!(matches!(static_kind(kind), Cow::Borrowed(k) if k == *kind));
        }
        assert!(matches!(static_kind("Widget"), Cow::Owned(k) if k == "Widget"));
    }

    /// A label value as the exposition writes it (here an exemption's kind).
    fn esc(value: &str) -> String {
        let m = Metrics::default();
        m.exemption(value, "ns");
        let text = m.render(true, false);
        let start = text.find("{kind=\"").expect("the exemption series") + "{kind=\"".len();
        let end = start + text[start..].find("\",namespace=\"ns\"}").unwrap();
        text[start..end].to_string()
    }

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

    /// The lines the tests under tests/ read (webhook_hostile, e2e/webhook,
    /// the soak), in the Prometheus text format 0.0.4 (no OpenMetrics
    /// `# EOF`).
    #[test]
    fn renders_the_lines_the_cluster_tests_read() {
        let m = Metrics::default();
        m.connection_evicted();
        m.handshake_error();
        m.bad_request();
        m.timed_out(Timeout::Handshake);
        m.exemption("Deployment", "strict");
        let text = m.render(true, true);
        for line in [
            "\nmeshscope_webhook_timeouts_total{phase=\"header\"} 0\n",
            "\nmeshscope_webhook_timeouts_total{phase=\"handshake\"} 1\n",
            "\nmeshscope_webhook_connections_open 0\n",
            "\nmeshscope_webhook_connections_evicted_total 1\n",
            "\nmeshscope_webhook_bad_requests_total 1\n",
            "\nmeshscope_webhook_tls_handshake_errors_total 1\n",
            "\nmeshscope_webhook_exemptions_total{kind=\"Deployment\",namespace=\"strict\"} 1\n",
            "\nmeshscope_webhook_cache_synced 1\n",
            "\nmeshscope_webhook_cache_stale 1\n",
            "\n# TYPE meshscope_webhook_tls_reloads_total counter\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("# EOF"), "{text}");
    }
}
