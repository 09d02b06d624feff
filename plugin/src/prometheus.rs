//! Edges from Istio's standard metrics in Prometheus (`docs/istio-semantics.md` §8).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use k8s_openapi::jiff::Timestamp;
use meshscope_shared::observe::{Observations, Unregistered};
use meshscope_shared::MeshSnapshot;
use serde::Deserialize;

#[derive(Deserialize)]
struct Response {
    status: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    data: Option<Data>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(default)]
    result: Vec<Sample>,
}

#[derive(Deserialize)]
struct Sample {
    metric: Labels,
    value: (f64, String),
}

/// The labels the queries group by, and only those: a series' other
/// labels are skipped while parsing, so an answer takes less memory parsed
/// than as text.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Labels {
    source_workload_namespace: String,
    source_workload: String,
    destination_service_namespace: String,
    destination_service_name: String,
    destination_service: String,
    destination_workload_namespace: String,
    destination_workload: String,
}

/// The requests (or connections) each series of `selector` counted within
/// `window`: `increase` for a series that existed before the window, and
/// the whole value for one that appeared within it. A series appears with
/// its first request already counted (Istio creates it on that request),
/// and `increase` needs two samples that differ, so without the second
/// term a dependency called once, or the first calls of a new one until
/// the counter next moves, would never be seen.
fn in_window(selector: &str, window: &str) -> String {
    format!("(increase({selector}[{window}]) and {selector} offset {window}) or (last_over_time({selector}[{window}]) unless {selector} offset {window})")
}

/// `sum by (by)` of requests and of TCP connections within `window`,
/// for series matching `filter`, keeping the groups that counted any.
fn counted(by: &str, filter: &str, window: &str) -> String {
    let http = in_window(&format!("istio_requests_total{filter}"), window);
    let tcp = in_window(
        &format!("istio_tcp_connections_opened_total{filter}"),
        window,
    );
    format!("sum by ({by}) ({http}) > 0 or sum by ({by}) ({tcp}) > 0")
}

/// The PromQL for client-side edges over `window` from one reporter.
pub fn edge_query(reporter: &str, window: &str) -> String {
    let by = "source_workload_namespace, source_workload, destination_service_namespace, destination_service_name, destination_service, destination_workload_namespace, destination_workload";
    counted(by, &format!("{{reporter=\"{reporter}\"}}"), window)
}

/// The PromQL for workloads that served traffic (they are alive).
pub fn inbound_query(window: &str) -> String {
    counted(
        "destination_workload_namespace, destination_workload",
        "",
        window,
    )
}

/// An HTTP client whose every call ends within `timeout`.
fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into()
}

/// The most of an error answer's body read to say what Prometheus said.
const ERROR_BODY_LIMIT: u64 = 64 * 1024;

/// The largest query result read: 256 MiB, ten times the 25 MB of JSON
/// that the edges of 20k workloads calling three Services each take (above
/// ureq's default of 10 MB). It is parsed as it is read, never held whole,
/// into the few labels the queries group by, so the largest answer takes
/// less memory than its size (`deploy/watch/` leaves room for it).
const RESULT_LIMIT: u64 = 256 << 20;

fn query(agent: &ureq::Agent, base: &str, q: &str) -> Result<Vec<Sample>> {
    query_within(agent, base, q, RESULT_LIMIT)
}

/// [`query`], reading at most `limit` bytes of the answer.
fn query_within(agent: &ureq::Agent, base: &str, q: &str, limit: u64) -> Result<Vec<Sample>> {
    let url = format!("{}/api/v1/query", base.trim_end_matches('/'));
    let mut resp = agent
        .get(&url)
        .query("query", q)
        .call()
        .map_err(|e| anyhow!("cannot query Prometheus at {base}: {e}; check --prometheus"))?;
    let status = resp.status();
    if !status.is_success() {
        let text = resp
            .body_mut()
            .with_config()
            .limit(ERROR_BODY_LIMIT)
            .read_to_string()
            .unwrap_or_default();
        bail!(
            "Prometheus at {base} answered {status}: {}; check --prometheus",
            said(&text)
        );
    }
    let reader = std::io::BufReader::with_capacity(
        1 << 16,
        resp.body_mut().with_config().limit(limit).reader(),
    );
    let body: Response = match serde_json::from_reader(reader) {
        Ok(body) => body,
        Err(e) if e.is_io() => {
            let io = std::io::Error::from(e);
            let over = io
                .get_ref()
                .and_then(|i| i.downcast_ref::<ureq::Error>())
                .is_some_and(|u| matches!(u, ureq::Error::BodyExceedsLimit(_)));
            if over {
                bail!(
                    "Prometheus at {base} answered more than {} MiB to one query, the most meshscope reads (about ten times what 20,000 workloads calling three Services each take); check that --prometheus is the mesh's Prometheus",
                    limit >> 20
                );
            }
            return Err(anyhow!(io).context(format!("cannot read Prometheus' answer at {base}")));
        }
        Err(e) => {
            return Err(anyhow!(e).context(format!(
                "Prometheus at {base} did not answer with a query result"
            )))
        }
    };
    if body.status != "success" {
        bail!(
            "Prometheus at {base} rejected the query: {}",
            body.error.unwrap_or_default()
        );
    }
    Ok(body.data.map(|d| d.result).unwrap_or_default())
}

/// What an error answer says: Prometheus' own `error` (and `errorType`)
/// from its JSON, else the body's first line, else that it was empty.
fn said(body: &str) -> String {
    #[derive(Deserialize)]
    struct ApiError {
        #[serde(default, rename = "errorType")]
        error_type: Option<String>,
        error: Option<String>,
    }
    if let Ok(ApiError {
        error_type,
        error: Some(error),
    }) = serde_json::from_str::<ApiError>(body)
    {
        return match error_type {
            Some(t) if !t.is_empty() => format!("{t}: {error}"),
            _ => error,
        };
    }
    match body.lines().map(str::trim).find(|l| !l.is_empty()) {
        Some(line) => line.chars().take(300).collect(),
        None => "(no body)".to_string(),
    }
}

fn window(d: Duration) -> String {
    let s = d.as_secs().max(60);
    if s.is_multiple_of(86400) {
        format!("{}d", s / 86400)
    } else if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else {
        format!("{s}s")
    }
}

/// Reads edges for `snap`'s workloads. Source-reported edges win; edges only
/// the destination proxy reported (a client without a sidecar's metrics)
/// are added.
pub fn observe(snap: &MeshSnapshot, base: &str, since: Duration) -> Result<Observations> {
    let agent = agent(Duration::from_secs(60));
    let w = window(since);
    let mut obs = Observations::default();
    obs.sources.insert("prometheus".into());
    let mut seen: BTreeSet<(String, String, String)> = BTreeSet::new();
    for reporter in ["source", "destination"] {
        for s in query(&agent, base, &edge_query(reporter, &w))? {
            let (src_ns, src, dst) = (
                s.metric.source_workload_namespace.as_str(),
                s.metric.source_workload.as_str(),
                s.metric.destination_service.as_str(),
            );
            let key = (src_ns.to_string(), src.to_string(), dst.to_string());
            if reporter == "destination" && seen.contains(&key) {
                continue;
            }
            seen.insert(key);
            let count = s.value.1.parse::<f64>().unwrap_or(0.0).round().max(1.0) as u64;
            obs.stats.access_lines += 1;
            let Some(wid) = find(snap, src_ns, src) else {
                obs.stats.unattributed += 1;
                *obs.unattributed_samples
                    .entry(format!("{src_ns}/{src}"))
                    .or_default() += 1;
                continue;
            };
            match s.metric.destination_service_name.as_str() {
                "PassthroughCluster" | "BlackHoleCluster" => obs.add_passthrough(
                    snap,
                    Unregistered {
                        workload: wid,
                        address: dst.to_string(),
                        authority: None,
                        requests: count,
                        blocked: s.metric.destination_service_name.as_str() == "BlackHoleCluster",
                    },
                    find(
                        snap,
                        s.metric.destination_workload_namespace.as_str(),
                        s.metric.destination_workload.as_str(),
                    ),
                    "prometheus",
                ),
                _ if dst.is_empty() || dst == "unknown" => {}
                _ => {
                    obs.add_edge(wid, dst, 0, count, "prometheus");
                }
            }
        }
    }
    for s in query(&agent, base, &inbound_query(&w))? {
        if let Some(wid) = find(
            snap,
            s.metric.destination_workload_namespace.as_str(),
            s.metric.destination_workload.as_str(),
        ) {
            let count = s.value.1.parse::<f64>().unwrap_or(0.0).round().max(1.0) as u64;
            obs.add_inbound(wid, count, "prometheus");
        }
    }
    Ok(obs)
}

/// The PromQL counting the series of calls that left through
/// `PassthroughCluster` or were dropped by `BlackHoleCluster`: a new
/// dependency outside its caller's scope shows first as one more of them.
pub const OUTSIDE_SERIES_QUERY: &str = "count({__name__=~\"istio_requests_total|istio_tcp_connections_opened_total\",reporter=\"source\",destination_service_name=~\"PassthroughCluster|BlackHoleCluster\"}) or vector(0)";

/// How many series [`OUTSIDE_SERIES_QUERY`] counts now: the cheap probe
/// `apply --watch` makes between passes.
pub fn outside_series(base: &str) -> Result<u64> {
    let agent = agent(Duration::from_secs(5));
    let samples = query(&agent, base, OUTSIDE_SERIES_QUERY)?;
    let n = samples
        .first()
        .and_then(|s| s.value.1.parse::<f64>().ok())
        .unwrap_or(0.0);
    Ok(n as u64)
}

/// The PromQL giving, per calling workload, the first second within
/// `window` at which a series of its calls through `PassthroughCluster`
/// or `BlackHoleCluster` existed that did not exist a window earlier: when
/// Prometheus first saw a new dependency outside the scope.
pub fn first_outside_query(window: &str) -> String {
    let x = "{__name__=~\"istio_requests_total|istio_tcp_connections_opened_total\",reporter=\"source\",destination_service_name=~\"PassthroughCluster|BlackHoleCluster\"}";
    format!("min by (source_workload_namespace, source_workload) (min_over_time(timestamp({x} unless {x} offset {window})[{window}:1s]))")
}

/// [`first_outside_query`] over the time since `since`, as `ns/workload`
/// -> when. For `apply --watch`'s scope-latency metric.
pub fn first_outside(base: &str, since: Duration) -> Result<BTreeMap<String, Timestamp>> {
    let agent = agent(Duration::from_secs(30));
    let mut out = BTreeMap::new();
    let window = format!("{}s", since.as_secs().max(1));
    for s in query(&agent, base, &first_outside_query(&window))? {
        let key = format!(
            "{}/{}",
            s.metric.source_workload_namespace.as_str(),
            s.metric.source_workload.as_str()
        );
        let Ok(secs) = s.value.1.parse::<f64>() else {
            continue;
        };
        if let Ok(t) = Timestamp::from_millisecond((secs * 1000.0) as i64) {
            out.insert(key, t);
        }
    }
    Ok(out)
}

/// Istio's `source_workload` is the workload's name (a Deployment's name,
/// or the pod's for a bare pod).
fn find(snap: &MeshSnapshot, ns: &str, name: &str) -> Option<usize> {
    snap.workloads_in(ns)
        .iter()
        .copied()
        .find(|w| snap.workloads[*w].name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_use_the_window_and_reporter() {
        let q = edge_query("source", "7d");
        assert!(q.contains("increase(istio_requests_total{reporter=\"source\"}[7d])"));
        assert!(q.contains("last_over_time(istio_requests_total{reporter=\"source\"}[7d]) unless istio_requests_total{reporter=\"source\"} offset 7d"));
        assert!(q.contains("increase(istio_tcp_connections_opened_total{reporter=\"source\"}[7d])"));
        let q = first_outside_query("90s");
        assert!(
            q.starts_with(
                "min by (source_workload_namespace, source_workload) (min_over_time(timestamp("
            ),
            "{q}"
        );
        assert!(q.contains(" offset 90s)[90s:1s]))"), "{q}");
        assert_eq!(window(Duration::from_secs(7 * 86400)), "7d");
        assert_eq!(window(Duration::from_secs(7200)), "2h");
    }

    /// Serves one HTTP answer on loopback; the base URL.
    fn answer_once(status: &'static str, body: String) -> (String, std::thread::JoinHandle<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut conn, _) = listener.accept().unwrap();
            let mut req = [0u8; 4096];
            let _ = conn.read(&mut req).unwrap();
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            conn.write_all(head.as_bytes()).unwrap();
            conn.write_all(body.as_bytes()).unwrap();
        });
        (base, server)
    }

    #[test]
    fn an_error_answer_says_what_prometheus_said() {
        let body = r#"{"status":"error","errorType":"execution","error":"query timed out in expression evaluation"}"#;
        let (base, server) = answer_once("503 Service Unavailable", body.to_string());
        let Err(err) = query(&agent(Duration::from_secs(30)), &base, "up") else {
            panic!("an error answer is an error");
        };
        server.join().unwrap();
        assert_eq!(
            err.to_string(),
            format!("Prometheus at {base} answered 503 Service Unavailable: execution: query timed out in expression evaluation; check --prometheus")
        );
        let (base, server) = answer_once(
            "500 Internal Server Error",
            "upstream connect error\n".into(),
        );
        let Err(err) = query(&agent(Duration::from_secs(30)), &base, "up") else {
            panic!("an error answer is an error");
        };
        server.join().unwrap();
        assert!(
            err.to_string().ends_with(
                "answered 500 Internal Server Error: upstream connect error; check --prometheus"
            ),
            "{err}"
        );
        assert_eq!(said(""), "(no body)");
    }

    #[test]
    fn an_answer_over_the_limit_is_refused_with_the_limit_named() {
        let sample = r#"{"metric":{"source_workload":"w0","destination_service":"s0.n.svc.cluster.local"},"value":[1,"5"]}"#;
        let body = format!(
            r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#,
            vec![sample; 3 * 1024 * 1024 / sample.len()].join(",")
        );
        let (base, server) = answer_once("200 OK", body);
        let Err(err) = query_within(&agent(Duration::from_secs(30)), &base, "up", 2 << 20) else {
            panic!("a 3 MiB answer over a 2 MiB limit is an error");
        };
        server.join().unwrap();
        assert!(
            err.to_string().starts_with(&format!(
                "Prometheus at {base} answered more than 2 MiB to one query, the most meshscope reads"
            )),
            "{err:#}"
        );
    }

    #[test]
    fn a_result_larger_than_ten_megabytes_is_read() {
        let sample = r#"{"metric":{"source_workload":"w0","destination_service":"s0.n.svc.cluster.local"},"value":[1,"5"]}"#;
        let n = 12 * 1024 * 1024 / sample.len() + 1;
        let body = format!(
            r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#,
            vec![sample; n].join(",")
        );
        let (base, server) = answer_once("200 OK", body);
        let got = query(&agent(Duration::from_secs(30)), &base, "up").unwrap();
        server.join().unwrap();
        assert_eq!(got.len(), n);
    }
}
