//! Envoy access-log lines as Istio writes them (`docs/istio-semantics.md` §7).
//!
//! One function, [`parse_line`], turns a line into the handful of fields
//! scoping needs, borrowing from the line wherever it can. It accepts:
//! - the default TEXT format (≥1.9, including `%UPSTREAM_CLUSTER_RAW%`), the
//!   1.3–1.7 layout with the mixer-status field, and the pre-1.1 layout: in
//!   all of them the upstream host is the last quoted field, the authority
//!   the one before it, and cluster, upstream local, downstream local and
//!   downstream remote follow unquoted;
//! - the JSON format, in any key order, with the 1.23–1.24 trailing `;` on
//!   `upstream_cluster`;
//! - a `kubectl logs --prefix` marker, and log-shipper records (Fluent Bit
//!   and Fluentd `kubernetes.pod_name`, Loki/promtail `pod`/`namespace`),
//!   including records that wrap the raw line in `log` or `message`.

use std::borrow::Cow;

use serde::Deserialize;

/// Where the line says it came from, before any IP lookup.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin<'a> {
    pub pod: Option<Cow<'a, str>>,
    pub namespace: Option<Cow<'a, str>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessRecord<'a> {
    pub origin: Origin<'a>,
    pub start_time: Option<Cow<'a, str>>,
    pub authority: Option<Cow<'a, str>>,
    pub upstream_host: Option<Cow<'a, str>>,
    pub upstream_cluster: Cow<'a, str>,
    pub downstream_local: Option<Cow<'a, str>>,
    pub downstream_remote: Option<Cow<'a, str>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // one per line on a hot path: no box
pub enum Line<'a> {
    Access(AccessRecord<'a>),
    /// istio-proxy's own output (`info`, `warning`, Envoy's `[..][..][warning]`),
    /// blank lines.
    NotAccessLog,
    Malformed(&'static str),
}

/// `-` and empty mean "no value" in both formats.
fn value(s: Cow<'_, str>) -> Option<Cow<'_, str>> {
    if s.is_empty() || s == "-" {
        None
    } else {
        Some(s)
    }
}

pub fn parse_line(line: &str) -> Line<'_> {
    let line = line.trim_end_matches(['\r', '\n']);
    let (prefix_pod, raw) = split_kubectl_prefix(line);
    let rest = raw.trim_start();
    let mut parsed = if rest.starts_with('{') {
        parse_json(rest)
    } else if rest.starts_with('[') {
        parse_text(rest)
    } else if is_proxy_output(raw) {
        Line::NotAccessLog
    } else {
        Line::Malformed(NEITHER)
    };
    if let (Some(pod), Line::Access(rec)) = (prefix_pod, &mut parsed) {
        if rec.origin.pod.is_none() {
            rec.origin.pod = Some(Cow::Borrowed(pod));
        }
    }
    parsed
}

/// Why a line that is neither kind of log line is malformed.
const NEITHER: &str = "neither an access-log line nor istio-proxy output";

const LEVELS: &[&str] = &[
    "trace", "debug", "info", "warn", "warning", "error", "critical", "fatal",
];

/// istio-proxy's own output, besides access logs: pilot-agent's and
/// Envoy's lines as Istio formats them (`2024-05-01T12:00:00.123456Z\tinfo\t...`,
/// `...Z\twarning\tenvoy config ...`), the multi-line YAML some of them
/// carry (`Effective config:` and the mesh config: indented lines, list
/// items and lowerCamelCase keys), and blank lines. Per line, so that
/// every chunk of a log is judged alike.
pub fn is_proxy_output(line: &str) -> bool {
    let line = line.trim_end();
    if line.is_empty() || line.starts_with([' ', '\t']) || line.starts_with("- ") {
        return true;
    }
    // `2024-05-01T12:00:00.123456Z<ws><level>`
    let b = line.as_bytes();
    let date = b.len() > 11
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T';
    if date {
        let mut words = line.split_ascii_whitespace();
        let _ts = words.next();
        return words.next().is_some_and(|l| LEVELS.contains(&l));
    }
    // A YAML key: `lowerCamel:` alone or followed by a value.
    if let Some((key, rest)) = line.split_once(':') {
        let mut chars = key.chars();
        return chars.next().is_some_and(|c| c.is_ascii_lowercase())
            && chars.all(|c| c.is_ascii_alphanumeric())
            && (rest.is_empty() || rest.starts_with(' '));
    }
    false
}

/// Envoy's own format (`[ts][thread][level]...`), as when Istio's log
/// format is overridden.
fn is_envoy_output(line: &str) -> bool {
    let mut parts = line.splitn(4, ']');
    let (Some(_ts), Some(tid), Some(level)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    tid.starts_with('[') && level.strip_prefix('[').is_some_and(|l| LEVELS.contains(&l))
}

/// `[pod/<name>/<container>] ` as written by `kubectl logs --prefix`.
fn split_kubectl_prefix(line: &str) -> (Option<&str>, &str) {
    if let Some(rest) = line.strip_prefix("[pod/") {
        if let Some(end) = rest.find("] ") {
            let inner = &rest[..end];
            if let Some((pod, _container)) = inner.split_once('/') {
                return (Some(pod), &rest[end + 2..]);
            }
        }
    }
    (None, line)
}

fn parse_text(line: &str) -> Line<'_> {
    // `[START_TIME] "..."`; Envoy's own log lines look like `[ts][tid][level]`.
    let Some(close) = line.find(']') else {
        return Line::Malformed(NEITHER);
    };
    if !line[close + 1..].starts_with(" \"") {
        return if is_envoy_output(line) {
            Line::NotAccessLog
        } else {
            Line::Malformed(NEITHER)
        };
    }
    let start_time = &line[1..close];
    let Some(last_quote) = line.rfind('"') else {
        return Line::Malformed("no quoted fields");
    };
    let tail = &line[last_quote + 1..];
    let mut tokens = tail.split_ascii_whitespace();
    let (Some(cluster), Some(_up_local), Some(down_local), Some(down_remote)) =
        (tokens.next(), tokens.next(), tokens.next(), tokens.next())
    else {
        return Line::Malformed("fewer than four fields after the upstream host");
    };
    // The upstream host is the last quoted field, the authority the one before.
    let head = &line[..last_quote];
    let Some(open) = head.rfind('"') else {
        return Line::Malformed("unbalanced quotes");
    };
    let upstream_host = &head[open + 1..];
    let before = head[..open].trim_end();
    let authority = before
        .strip_suffix('"')
        .and_then(|b| b.rfind('"').map(|o| &b[o + 1..]));
    let Some(authority) = authority else {
        return Line::Malformed("no authority field before the upstream host");
    };
    if open <= close {
        return Line::Malformed("no upstream host field");
    }
    Line::Access(AccessRecord {
        origin: Origin::default(),
        start_time: value(Cow::Borrowed(start_time)),
        authority: value(Cow::Borrowed(authority)),
        upstream_host: value(Cow::Borrowed(upstream_host)),
        upstream_cluster: Cow::Borrowed(cluster.trim_end_matches(';')),
        downstream_local: value(Cow::Borrowed(down_local)),
        downstream_remote: value(Cow::Borrowed(down_remote)),
    })
}

#[derive(Deserialize)]
struct JsonLine<'a> {
    #[serde(borrow, default)]
    upstream_cluster: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    authority: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    upstream_host: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    downstream_local_address: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    downstream_remote_address: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    start_time: Option<Cow<'a, str>>,
    // Shipper envelopes.
    #[serde(borrow, default)]
    log: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    kubernetes: Option<KubeMeta<'a>>,
    #[serde(borrow, default)]
    pod: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    // istio-proxy's own JSON log lines.
    #[serde(default)]
    level: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    msg: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    scope: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize, Default)]
struct KubeMeta<'a> {
    #[serde(borrow, default)]
    pod_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace_name: Option<Cow<'a, str>>,
}

fn parse_json(line: &str) -> Line<'_> {
    let j: JsonLine<'_> = match serde_json::from_str(line) {
        Ok(j) => j,
        Err(_) => return Line::Malformed("invalid JSON"),
    };
    let kube = j.kubernetes.unwrap_or_default();
    let origin = Origin {
        pod: kube.pod_name.or(j.pod),
        namespace: kube.namespace_name.or(j.namespace),
    };
    if let Some(cluster) = j.upstream_cluster {
        let cluster = match cluster {
            Cow::Borrowed(c) => Cow::Borrowed(c.trim_end_matches(';')),
            Cow::Owned(c) => Cow::Owned(c.trim_end_matches(';').to_string()),
        };
        return Line::Access(AccessRecord {
            origin,
            start_time: j.start_time.and_then(value),
            authority: j.authority.and_then(value),
            upstream_host: j.upstream_host.and_then(value),
            upstream_cluster: cluster,
            downstream_local: j.downstream_local_address.and_then(value),
            downstream_remote: j.downstream_remote_address.and_then(value),
        });
    }
    // A shipper record wrapping the raw line.
    if let Some(inner) = j.log.or(j.message) {
        return match parse_line(&inner) {
            Line::Access(rec) => {
                let mut rec = into_owned(rec);
                if origin.pod.is_some() {
                    rec.origin.pod = origin.pod.map(|c| Cow::Owned(c.into_owned()));
                }
                if origin.namespace.is_some() {
                    rec.origin.namespace = origin.namespace.map(|c| Cow::Owned(c.into_owned()));
                }
                Line::Access(rec)
            }
            other => other.into_static(),
        };
    }
    // Istio's JSON log lines (`--log_as_json`) all carry a scope.
    if j.level.is_some() && j.msg.is_some() && j.scope.is_some() {
        return Line::NotAccessLog;
    }
    Line::Malformed("JSON object without upstream_cluster")
}

fn own(c: Option<Cow<'_, str>>) -> Option<Cow<'static, str>> {
    c.map(|c| Cow::Owned(c.into_owned()))
}

fn into_owned(r: AccessRecord<'_>) -> AccessRecord<'static> {
    AccessRecord {
        origin: Origin {
            pod: own(r.origin.pod),
            namespace: own(r.origin.namespace),
        },
        start_time: own(r.start_time),
        authority: own(r.authority),
        upstream_host: own(r.upstream_host),
        upstream_cluster: Cow::Owned(r.upstream_cluster.into_owned()),
        downstream_local: own(r.downstream_local),
        downstream_remote: own(r.downstream_remote),
    }
}

impl Line<'_> {
    fn into_static(self) -> Line<'static> {
        match self {
            Line::Access(r) => Line::Access(into_owned(r)),
            Line::NotAccessLog => Line::NotAccessLog,
            Line::Malformed(m) => Line::Malformed(m),
        }
    }
}

/// What an upstream cluster name says about the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cluster<'a> {
    /// `outbound|<port>|<subset>|<fqdn>`: a dependency on `<fqdn>:<port>`.
    Outbound { port: u32, host: &'a str },
    /// `inbound|...`: server side; the workload was alive.
    Inbound,
    /// Traffic to a destination outside the proxy's registry view (ALLOW_ANY).
    Passthrough,
    /// Blocked (REGISTRY_ONLY) or unroutable.
    BlackHole,
    /// `InboundPassthroughCluster` (and the ≤1.22 Ipv4/Ipv6 pair).
    InboundPassthrough,
    /// `-` or anything else.
    Other,
}

pub fn classify_cluster(name: &str) -> Cluster<'_> {
    let name = name.trim_end_matches(';');
    if let Some(rest) = name.strip_prefix("outbound|") {
        let mut parts = rest.splitn(3, '|');
        let port = parts.next().and_then(|p| p.parse().ok());
        let _subset = parts.next();
        let host = parts.next();
        return match (port, host) {
            (Some(port), Some(host)) if !host.is_empty() => Cluster::Outbound { port, host },
            _ => Cluster::Other,
        };
    }
    // An east-west gateway's SNI-DNAT cluster,
    // `outbound_.<port>_.<subset>_.<fqdn>` (`BuildDNSSrvSubsetKey`,
    // `pilot/pkg/model/service.go`, istio 1.31): a caller in another
    // network reached `<fqdn>:<port>` through the gateway.
    if let Some(rest) = name.strip_prefix("outbound_.") {
        let mut parts = rest.splitn(3, "_.");
        let port = parts.next().and_then(|p| p.parse().ok());
        let _subset = parts.next();
        return match (port, parts.next()) {
            (Some(port), Some(host)) if !host.is_empty() => Cluster::Outbound { port, host },
            _ => Cluster::Other,
        };
    }
    if name.starts_with("inbound|") {
        return Cluster::Inbound;
    }
    match name {
        "PassthroughCluster" => Cluster::Passthrough,
        "BlackHoleCluster" => Cluster::BlackHole,
        n if n.starts_with("InboundPassthroughCluster") => Cluster::InboundPassthrough,
        _ => Cluster::Other,
    }
}

/// Splits `ip:port` / `[v6]:port`; returns the IP text and the port.
pub fn split_host_port(addr: &str) -> Option<(&str, Option<u32>)> {
    if let Some(rest) = addr.strip_prefix('[') {
        let end = rest.find(']')?;
        let port = rest[end + 1..]
            .strip_prefix(':')
            .and_then(|p| p.parse().ok());
        return Some((&rest[..end], port));
    }
    match addr.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => Some((h, p.parse().ok())),
        _ => Some((addr, None)),
    }
}

/// Whether a raw access-log line, unparsed, names the outbound
/// catch-all clusters (`PassthroughCluster`, `BlackHoleCluster`): a cheap
/// first sign that its request left the proxy's scope, for timestamps only;
/// the parsed line decides the edge.
pub fn mentions_catch_all(line: &str) -> bool {
    line.contains("PassthroughCluster") || line.contains("BlackHoleCluster")
}

/// What a file that holds no access-log line looks like instead, judged
/// from its first lines (`head`): a PEM key or certificate, a kubeconfig,
/// Kubernetes YAML or other YAML, a JSON document. `None` when it looks
/// like none of them (a log of some other kind, say). Those files are
/// skipped unread and never quoted: they may hold credentials.
pub fn not_an_access_log(head: &str) -> Option<&'static str> {
    let lines: Vec<&str> = head
        .lines()
        .map(|l| l.trim_end())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    if let Some(begin) = lines
        .iter()
        .find(|l| l.trim_start().starts_with("-----BEGIN "))
    {
        return Some(if begin.contains("PRIVATE KEY") {
            "looks like a PEM private key"
        } else if begin.contains("CERTIFICATE") {
            "looks like a PEM certificate"
        } else {
            "looks like PEM data"
        });
    }
    let top = |key: &str| {
        lines.iter().any(|l| {
            l.strip_prefix(key)
                .is_some_and(|r| r.is_empty() || r.starts_with(' '))
        })
    };
    if top("kind: Config") || (top("clusters:") && (top("contexts:") || top("users:"))) {
        return Some("looks like a kubeconfig");
    }
    if top("apiVersion:") && top("kind:") {
        return Some("looks like YAML (Kubernetes objects)");
    }
    let first = lines.first()?;
    if *first == "---" || first.starts_with("%YAML") {
        return Some("looks like YAML");
    }
    if *first == "{" || *first == "[" {
        return Some("looks like a JSON document");
    }
    // Nothing but YAML's shapes (keys, indented lines, list items), and
    // none of the dated lines a proxy log holds.
    let yaml = lines.iter().all(|l| {
        l.starts_with([' ', '\t'])
            || l.starts_with("- ")
            || l.split_once(':').is_some_and(|(k, v)| {
                !k.is_empty() && !k.contains(' ') && (v.is_empty() || v.starts_with(' '))
            })
    });
    (yaml && lines.iter().any(|l| !l.starts_with([' ', '\t']))).then_some("looks like YAML")
}

/// Whether a line may hold a credential (a private key, a token, a
/// kubeconfig's key data, a password), so that it is never echoed in a
/// message, even from a file that is a log.
pub fn may_hold_secret(line: &str) -> bool {
    const MARKS: &[&str] = &[
        "private key",
        "token:",
        "token\":",
        "token=",
        "client-key-data",
        "client-certificate-data",
        "certificate-authority-data",
        "password",
        "passwd",
        "secret:",
        "secret\":",
        "authorization:",
        "bearer ",
    ];
    let lower = line.to_ascii_lowercase();
    MARKS.iter().any(|m| lower.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real lines from Istio's docs (`docs/istio-semantics.md` §7).
    const CLIENT: &str = r#"[2020-11-25T21:26:18.409Z] "GET /status/418 HTTP/1.1" 418 - via_upstream - "-" 0 135 4 4 "-" "curl/7.73.0-DEV" "84961386-6d84-929d-98bd-c5aee93b5c88" "httpbin:8000" "10.44.1.27:80" outbound|8000||httpbin.foo.svc.cluster.local 10.44.1.23:37652 10.0.45.184:8000 10.44.1.23:46520 - default"#;
    const SERVER: &str = r#"[2020-11-25T21:26:18.409Z] "GET /status/418 HTTP/1.1" 418 - via_upstream - "-" 0 135 3 1 "-" "curl/7.73.0-DEV" "84961386-6d84-929d-98bd-c5aee93b5c88" "httpbin:8000" "127.0.0.1:80" inbound|8000|| 127.0.0.1:41854 10.44.1.27:80 10.44.1.23:37652 outbound_.8000_._.httpbin.foo.svc.cluster.local default"#;
    const PRE_1_1_TCP: &str = r#"[2019-01-24T12:48:54.977Z] "- - -" 0 - 601 17766 1289 - "-" "-" "-" "-" "172.217.161.36:443" outbound|443||www.google.com 172.30.109.82:59480 172.217.161.36:443 172.30.109.82:59478 www.google.com"#;
    const MIXER_ERA: &str = r#"[2019-09-03T20:57:49.103Z] "GET /politics HTTP/2" 301 - "-" "-" 0 0 90 89 "10.244.2.10" "curl/7.64.0" "ea379962-9b5c-4431-ab66-f01994f5a5a5" "edition.cnn.com" "151.101.65.67:80" outbound|80||edition.cnn.com - 10.244.1.5:80 10.244.2.10:50482 edition.cnn.com -"#;

    fn access(line: &str) -> AccessRecord<'_> {
        match parse_line(line) {
            Line::Access(r) => r,
            other => panic!("not an access line: {other:?}"),
        }
    }

    #[test]
    fn current_text_layout() {
        let r = access(CLIENT);
        assert_eq!(
            r.upstream_cluster,
            "outbound|8000||httpbin.foo.svc.cluster.local"
        );
        assert_eq!(r.authority.as_deref(), Some("httpbin:8000"));
        assert_eq!(r.upstream_host.as_deref(), Some("10.44.1.27:80"));
        assert_eq!(r.downstream_local.as_deref(), Some("10.0.45.184:8000"));
        assert_eq!(r.downstream_remote.as_deref(), Some("10.44.1.23:46520"));
        assert_eq!(r.start_time.as_deref(), Some("2020-11-25T21:26:18.409Z"));
        let s = access(SERVER);
        assert_eq!(classify_cluster(&s.upstream_cluster), Cluster::Inbound);
        assert_eq!(s.downstream_local.as_deref(), Some("10.44.1.27:80"));
    }

    #[test]
    fn older_text_layouts() {
        let r = access(PRE_1_1_TCP);
        assert_eq!(r.upstream_cluster, "outbound|443||www.google.com");
        assert_eq!(r.downstream_remote.as_deref(), Some("172.30.109.82:59478"));
        assert_eq!(r.authority, None);
        let r = access(MIXER_ERA);
        assert_eq!(r.upstream_cluster, "outbound|80||edition.cnn.com");
        assert_eq!(r.authority.as_deref(), Some("edition.cnn.com"));
        assert_eq!(r.downstream_remote.as_deref(), Some("10.244.2.10:50482"));
    }

    #[test]
    fn json_in_any_key_order_with_trailing_semicolon() {
        let line = r#"{"downstream_remote_address":"10.0.0.5:4000","upstream_cluster":"outbound|8000||httpbin.default.svc.cluster.local;","response_code":200,"authority":"httpbin:8000","upstream_host":null,"downstream_local_address":"10.96.0.10:8000"}"#;
        let r = access(line);
        assert_eq!(
            r.upstream_cluster,
            "outbound|8000||httpbin.default.svc.cluster.local"
        );
        assert_eq!(r.upstream_host, None);
        assert_eq!(r.downstream_remote.as_deref(), Some("10.0.0.5:4000"));
    }

    #[test]
    fn kubectl_prefix_and_shipper_fields_name_the_pod() {
        let line = format!("[pod/sleep-0-abc/istio-proxy] {CLIENT}");
        assert_eq!(access(&line).origin.pod.as_deref(), Some("sleep-0-abc"));
        let fb = format!(
            r#"{{"log":{},"kubernetes":{{"pod_name":"sleep-1","namespace_name":"shop","labels":{{"app":"x"}}}}}}"#,
            serde_json::to_string(CLIENT).unwrap()
        );
        let r = access(&fb);
        assert_eq!(r.origin.pod.as_deref(), Some("sleep-1"));
        assert_eq!(r.origin.namespace.as_deref(), Some("shop"));
        assert_eq!(
            r.upstream_cluster,
            "outbound|8000||httpbin.foo.svc.cluster.local"
        );
        let loki = r#"{"pod":"p","namespace":"n","upstream_cluster":"PassthroughCluster"}"#;
        assert_eq!(access(loki).origin.namespace.as_deref(), Some("n"));
    }

    #[test]
    fn proxy_output_is_not_an_access_line_and_garbage_is_malformed() {
        assert_eq!(
            parse_line("2024-01-01T00:00:00.000000Z\tinfo\txdsproxy\tconnected"),
            Line::NotAccessLog
        );
        assert_eq!(
            parse_line("[2024-01-01 00:00:00.000][15][warning][config] gRPC config stream closed"),
            Line::NotAccessLog
        );
        assert_eq!(parse_line(""), Line::NotAccessLog);
        assert_eq!(
            parse_line(
                r#"{"level":"info","time":"2024-01-01T00:00:00Z","scope":"xdsproxy","msg":"hi"}"#
            ),
            Line::NotAccessLog
        );
        // pilot-agent's multi-line YAML (`Effective config:`, the mesh
        // config) and Envoy lines in Istio's format.
        for line in [
            "2020-06-29T23:37:27.287895Z\tinfo\tEffective config: binaryPath: /usr/local/bin/envoy",
            "configPath: ./etc/istio/proxy",
            "proxyMetadata:",
            "  DNS_AGENT: \"\"",
            "- ./*",
            "2024-05-01T12:00:00.123456Z\twarning\tenvoy config external/envoy/source/x.cc:1\tgRPC config stream closed",
        ] {
            assert_eq!(parse_line(line), Line::NotAccessLog, "{line}");
        }
        // An application's own log (the usual mistake: kubectl logs without
        // -c istio-proxy), its JSON, and junk are malformed, not proxy output.
        for line in [
            "INFO:     127.0.0.1:5000 - \"GET /health HTTP/1.1\" 200 OK",
            "Started server on port 8080",
            "127.0.0.1 - - [01/Jan/2024:00:00:00 +0000] \"GET / HTTP/1.1\" 200 12",
            r#"{"level":"info","msg":"request served","path":"/"}"#,
            "[main] starting",
            "\u{1}\u{2}\u{fffd}\u{fffd}",
        ] {
            assert!(matches!(parse_line(line), Line::Malformed(_)), "{line}");
        }
        assert!(matches!(parse_line("{not json"), Line::Malformed(_)));
        assert!(matches!(
            parse_line(r#"[2024-01-01T00:00:00Z] "GET / HTTP/1.1" 200 "a" "b" outbound|80||x"#),
            Line::Malformed(_)
        ));
    }

    #[test]
    fn cluster_names() {
        assert_eq!(
            classify_cluster("outbound_.8000_.v1_.httpbin.foo.svc.cluster.local"),
            Cluster::Outbound {
                port: 8000,
                host: "httpbin.foo.svc.cluster.local"
            }
        );
        assert_eq!(
            classify_cluster("outbound|8000|v1|httpbin.foo.svc.cluster.local"),
            Cluster::Outbound {
                port: 8000,
                host: "httpbin.foo.svc.cluster.local"
            }
        );
        assert_eq!(classify_cluster("PassthroughCluster"), Cluster::Passthrough);
        assert_eq!(classify_cluster("BlackHoleCluster"), Cluster::BlackHole);
        assert_eq!(
            classify_cluster("InboundPassthroughClusterIpv4"),
            Cluster::InboundPassthrough
        );
        assert_eq!(
            classify_cluster("InboundPassthroughCluster"),
            Cluster::InboundPassthrough
        );
        assert_eq!(classify_cluster("-"), Cluster::Other);
    }

    #[test]
    fn host_port_splitting() {
        assert_eq!(split_host_port("10.0.0.1:80"), Some(("10.0.0.1", Some(80))));
        assert_eq!(
            split_host_port("[fd00::1]:443"),
            Some(("fd00::1", Some(443)))
        );
        assert_eq!(split_host_port("fd00::1"), Some(("fd00::1", None)));
    }

    #[test]
    fn files_that_are_not_logs_are_told_by_their_first_lines() {
        let kubeconfig = "apiVersion: v1\nclusters:\n- cluster:\n    server: https://10.0.0.1\n  name: prod\ncontexts:\n- context:\n    cluster: prod\nkind: Config\nusers:\n- name: admin\n  user:\n    client-key-data: LS0tLS1CRUdJTg==\n";
        let cases = [
            ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n", Some("looks like a PEM private key")),
            ("-----BEGIN CERTIFICATE-----\nMIIB\n", Some("looks like a PEM certificate")),
            (kubeconfig, Some("looks like a kubeconfig")),
            ("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n", Some("looks like YAML (Kubernetes objects)")),
            ("---\nfoo: 1\n", Some("looks like YAML")),
            ("# settings\naccessLogFile: /dev/stdout\nfoo-bar:\n  - x\n", Some("looks like YAML")),
            ("{\n  \"items\": []\n}\n", Some("looks like a JSON document")),
            // Logs, of the proxy or of an application, are not told apart here.
            ("2026-11-28T09:00:00.000000Z\tinfo\txdsproxy\tconnected\n", None),
            ("Started server on port 8080\nGET /health 200\n", None),
            (CLIENT, None),
            ("", None),
        ];
        for (head, want) in cases {
            assert_eq!(not_an_access_log(head), want, "{head:?}");
        }
    }

    #[test]
    fn lines_that_may_hold_credentials_are_told() {
        for line in [
            "-----BEGIN EC PRIVATE KEY-----",
            "    client-key-data: LS0tLS1CRUdJTg==",
            "    token: eyJhbGciOiJSUzI1NiJ9",
            r#"{"token": "abc"}"#,
            "Authorization: Bearer abc",
            "password=hunter2",
        ] {
            assert!(may_hold_secret(line), "{line}");
        }
        assert!(!may_hold_secret(CLIENT));
        assert!(!may_hold_secret("{broken json"));
    }
}
