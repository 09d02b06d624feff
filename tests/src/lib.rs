//! Test support for meshscope: the reference-scenario generator.
//!
//! The reference scenario is the mesh from the problem statement: namespace
//! `default` with injection, `httpbins` Deployments `httpbin-i` with two
//! pods each (Service port 8000 → 80, labels `app` and `version: v1`), and
//! `sleeps` Deployments `sleep-i` with one pod each, where `sleep-i` calls
//! `httpbin-{10i..10i+9}`. It writes manifests with pod IPs, and the same
//! traffic as access logs in every supported form.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::net::Ipv4Addr;

pub mod bench;
pub mod cluster;
pub mod dist;
pub mod faults;
pub mod fidelity;
pub mod helm;
pub mod help;
pub mod images;
pub mod injector;
pub mod istiod;
pub mod kubelet;
pub mod livescale;
pub mod load;
pub mod meshgen;
pub mod rbac;
pub mod release;
pub mod run;
pub mod setup;
pub mod tools;
pub mod traffic;
pub mod upstream_cases;
pub mod watch_rbac;
pub mod watcher;
pub mod webhook_process;
pub mod world;
pub mod xds;
pub mod xdsbench;

/// How this crate's tools end: 0, or the error on stderr as `error: …`,
/// as `kubectl meshscope` says it, and exit code 2 (a benchmark that
/// misses a target exits 1 on its own).
pub fn tool_exit(r: anyhow::Result<()>) -> std::process::ExitCode {
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// The forms an access log can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogForm {
    /// Istio's default TEXT format (≥1.9 layout).
    Text,
    /// Istio's JSON format (key order shuffled per line, 1.23–1.24 `;`).
    Json,
    /// TEXT lines as `kubectl logs --prefix` prints them.
    Prefixed,
    /// JSON records from Fluent Bit with the raw line in `log`.
    FluentBit,
}

impl LogForm {
    pub const ALL: [LogForm; 4] = [
        LogForm::Text,
        LogForm::Json,
        LogForm::Prefixed,
        LogForm::FluentBit,
    ];
    pub fn file_name(self) -> &'static str {
        match self {
            LogForm::Text => "text.log",
            LogForm::Json => "json.log",
            LogForm::Prefixed => "prefixed.log",
            LogForm::FluentBit => "fluentbit.log",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub namespace: String,
    pub httpbins: usize,
    pub httpbin_replicas: usize,
    pub sleeps: usize,
    /// How many httpbins each sleep calls (`sleep-i` calls `httpbin-{f*i..f*i+f-1}`).
    pub fanout: usize,
    pub requests_per_edge: usize,
    /// Sprinkle istio-proxy's own log lines between access-log lines.
    pub proxy_noise: bool,
}

impl Default for Scenario {
    fn default() -> Self {
        Self::reference()
    }
}

pub struct Call {
    pub sleep: usize,
    pub httpbin: usize,
}

impl Scenario {
    /// 200 httpbins × 2 pods, 20 sleeps × 1 pod, each calling 10 httpbins.
    pub fn reference() -> Self {
        Self {
            namespace: "default".into(),
            httpbins: 200,
            httpbin_replicas: 2,
            sleeps: 20,
            fanout: 10,
            requests_per_edge: 3,
            proxy_noise: true,
        }
    }

    pub fn calls(&self) -> impl Iterator<Item = Call> + '_ {
        (0..self.sleeps).flat_map(move |i| {
            (self.fanout * i..self.fanout * i + self.fanout)
                .filter(move |j| *j < self.httpbins)
                .map(move |j| Call {
                    sleep: i,
                    httpbin: j,
                })
        })
    }

    pub fn hosts_of_sleep(&self, i: usize) -> Vec<String> {
        let mut v: Vec<String> = self
            .calls()
            .filter(|c| c.sleep == i)
            .map(|c| format!("{}/{}", self.namespace, self.httpbin_host(c.httpbin)))
            .collect();
        v.sort();
        v
    }

    pub fn httpbin_host(&self, j: usize) -> String {
        format!("httpbin-{j}.{}.svc.cluster.local", self.namespace)
    }

    fn httpbin_pod(&self, j: usize, r: usize) -> String {
        format!("httpbin-{j}-{}-{}", hash(j, 0), suffix(r))
    }
    fn sleep_pod(&self, i: usize) -> String {
        format!("sleep-{i}-{}-{}", hash(i, 1), suffix(0))
    }
    pub fn httpbin_ip(&self, j: usize, r: usize) -> Ipv4Addr {
        ip(10, 1, (j * self.httpbin_replicas + r) as u32 + 10)
    }
    pub fn sleep_ip(&self, i: usize) -> Ipv4Addr {
        ip(10, 2, i as u32 + 10)
    }
    fn service_ip(&self, j: usize) -> Ipv4Addr {
        ip(10, 96, j as u32 + 10)
    }

    /// All manifests as one multi-document YAML stream.
    pub fn write_manifests(&self, out: &mut dyn Write) -> io::Result<()> {
        let ns = &self.namespace;
        writeln!(
            out,
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    istio-injection: enabled"
        )?;
        for j in 0..self.httpbins {
            let name = format!("httpbin-{j}");
            let labels = format!("app: {name}\n        version: v1");
            write_deployment(
                out,
                ns,
                &name,
                self.httpbin_replicas,
                &labels,
                80,
                &hash(j, 0),
            )?;
            writeln!(
                out,
                "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels:\n    app: {name}\nspec:\n  clusterIP: {}\n  selector:\n    app: {name}\n  ports:\n  - name: http\n    port: 8000\n    targetPort: 80",
                self.service_ip(j)
            )?;
            for r in 0..self.httpbin_replicas {
                write_pod(
                    out,
                    ns,
                    &self.httpbin_pod(j, r),
                    &format!("{name}-{}", hash(j, 0)),
                    &[
                        ("app", &name),
                        ("version", "v1"),
                        ("pod-template-hash", &hash(j, 0)),
                    ],
                    self.httpbin_ip(j, r),
                )?;
            }
        }
        for i in 0..self.sleeps {
            let name = format!("sleep-{i}");
            let labels = format!("app: {name}");
            write_deployment(out, ns, &name, 1, &labels, 0, &hash(i, 1))?;
            write_pod(
                out,
                ns,
                &self.sleep_pod(i),
                &format!("{name}-{}", hash(i, 1)),
                &[("app", &name), ("pod-template-hash", &hash(i, 1))],
                self.sleep_ip(i),
            )?;
        }
        Ok(())
    }

    pub fn manifests(&self) -> String {
        let mut v = Vec::new();
        self.write_manifests(&mut v)
            .expect("writing to a Vec cannot fail");
        String::from_utf8(v).expect("manifests are UTF-8")
    }

    /// For a live cluster: only what a user applies (Namespace, Deployments,
    /// Services); the controllers make the ReplicaSets and Pods.
    pub fn live_manifests(&self) -> String {
        let all = self.manifests();
        all.split("\n---\n")
            .filter(|d| d.contains("\nkind: Deployment\n") || d.contains("\nkind: Service\n"))
            .collect::<Vec<_>>()
            .join("\n---\n")
            .lines()
            // ClusterIPs are allocated by the API server, cluster-wide.
            .filter(|l| !l.trim_start().starts_with("clusterIP:"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// (app label, replica IPs) for every Deployment, in replica order.
    pub fn pod_ips(&self) -> Vec<(String, Vec<Ipv4Addr>)> {
        let mut out = Vec::new();
        for j in 0..self.httpbins {
            out.push((
                format!("httpbin-{j}"),
                (0..self.httpbin_replicas)
                    .map(|r| self.httpbin_ip(j, r))
                    .collect(),
            ));
        }
        for i in 0..self.sleeps {
            out.push((format!("sleep-{i}"), vec![self.sleep_ip(i)]));
        }
        out
    }

    /// The same traffic as Istio's standard metrics, in OpenMetrics text
    /// for `promtool tsdb create-blocks-from openmetrics`: each series has
    /// 13 samples 5 minutes apart, the last 2 minutes before `now` (seconds).
    pub fn openmetrics(&self, now: u64) -> String {
        let ns = &self.namespace;
        let mut out = String::new();
        {
            let metric = "istio_requests_total";
            let _ = writeln!(out, "# TYPE istio_requests counter");
            for c in self.calls() {
                for reporter in ["source", "destination"] {
                    let labels = format!(
                        "reporter=\"{reporter}\",source_workload=\"sleep-{i}\",source_workload_namespace=\"{ns}\",destination_service=\"{host}\",destination_service_name=\"httpbin-{j}\",destination_service_namespace=\"{ns}\",destination_workload=\"httpbin-{j}\",destination_workload_namespace=\"{ns}\",response_code=\"200\"",
                        i = c.sleep,
                        j = c.httpbin,
                        host = self.httpbin_host(c.httpbin)
                    );
                    for k in 0..13u64 {
                        let t = now - 120 - (12 - k) * 300;
                        let _ = writeln!(
                            out,
                            "{metric}{{{labels}}} {} {t}",
                            (k + 1) * self.requests_per_edge as u64
                        );
                    }
                }
            }
        }
        out.push_str("# EOF\n");
        out
    }

    /// The traffic as access-log lines in one form: for each call, the
    /// client's outbound line and the server's inbound line.
    pub fn write_logs(&self, form: LogForm, out: &mut dyn Write) -> io::Result<()> {
        let mut n = 0u64;
        let mut line = String::with_capacity(512);
        for c in self.calls() {
            for k in 0..self.requests_per_edge {
                let r = k % self.httpbin_replicas;
                let t = format!(
                    "2026-11-2{}T10:{:02}:{:02}.{:03}Z",
                    1 + (n % 7),
                    (n / 60) % 60,
                    n % 60,
                    n % 1000
                );
                let sport = 30000 + (n % 30000) as u32;
                let client = Fields {
                    start: &t,
                    authority: format!("httpbin-{}:8000", c.httpbin),
                    upstream_host: format!("{}:80", self.httpbin_ip(c.httpbin, r)),
                    cluster: format!("outbound|8000||{}", self.httpbin_host(c.httpbin)),
                    upstream_local: format!("{}:{}", self.sleep_ip(c.sleep), sport + 1),
                    downstream_local: format!("{}:8000", self.service_ip(c.httpbin)),
                    downstream_remote: format!("{}:{sport}", self.sleep_ip(c.sleep)),
                    sni: "-".into(),
                    route: "default".into(),
                };
                let server = Fields {
                    start: &t,
                    authority: format!("httpbin-{}:8000", c.httpbin),
                    upstream_host: "127.0.0.1:80".into(),
                    cluster: "inbound|80||".into(),
                    upstream_local: format!("127.0.0.6:{}", sport + 2),
                    downstream_local: format!("{}:80", self.httpbin_ip(c.httpbin, r)),
                    downstream_remote: format!("{}:{}", self.sleep_ip(c.sleep), sport + 1),
                    sni: format!("outbound_.8000_._.{}", self.httpbin_host(c.httpbin)),
                    route: "default".into(),
                };
                for (f, pod) in [
                    (&client, self.sleep_pod(c.sleep)),
                    (&server, self.httpbin_pod(c.httpbin, r)),
                ] {
                    line.clear();
                    f.render(form, n, &pod, &self.namespace, &mut line);
                    out.write_all(line.as_bytes())?;
                    n += 1;
                }
                if self.proxy_noise && n.is_multiple_of(50) {
                    let noise = "2026-11-21T10:00:00.000000Z\tinfo\txdsproxy\tconnected to upstream XDS server: istiod.istio-system.svc:15012\n";
                    match form {
                        LogForm::Prefixed => write!(out, "[pod/{}/istio-proxy] {noise}", self.sleep_pod(0))?,
                        LogForm::FluentBit => writeln!(
                            out,
                            "{{\"log\":{},\"kubernetes\":{{\"pod_name\":\"{}\",\"namespace_name\":\"{}\"}}}}",
                            json_str(noise.trim_end()),
                            self.sleep_pod(0),
                            self.namespace
                        )?,
                        _ => out.write_all(noise.as_bytes())?,
                    }
                }
            }
        }
        Ok(())
    }

    pub fn logs(&self, form: LogForm) -> String {
        let mut v = Vec::new();
        self.write_logs(form, &mut v)
            .expect("writing to a Vec cannot fail");
        String::from_utf8(v).expect("logs are UTF-8")
    }
}

/// One server-side access-log line in Istio's default TEXT format: the
/// proxy of the pod at `dst_ip` took a request for `host:port` from
/// `src_ip` and passed it to the app (`inbound|port||`).
pub fn inbound_text_line(n: u64, src_ip: &str, host: &str, port: u32, dst_ip: &str) -> String {
    let start = format!("2026-11-21T10:{:02}:{:02}.000Z", (n / 60) % 60, n % 60);
    let sport = 30000 + (n % 30000) as u32;
    let f = Fields {
        start: &start,
        authority: format!("{host}:{port}"),
        upstream_host: format!("127.0.0.1:{port}"),
        cluster: format!("inbound|{port}||"),
        upstream_local: format!("127.0.0.6:{}", sport + 2),
        downstream_local: format!("{dst_ip}:{port}"),
        downstream_remote: format!("{src_ip}:{}", sport + 1),
        sni: format!("outbound_.{port}_._.{host}"),
        route: "default".into(),
    };
    let mut out = String::new();
    f.text(&mut out);
    out
}

/// `line` (one of the access-log lines above) stamped with the time now,
/// as Envoy stamps a request when it logs it: for traffic a watcher reads
/// as it happens.
pub fn stamped_now(line: &str) -> String {
    let stamp = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.3fZ");
    match line.find(']') {
        Some(i) => format!("[{stamp}{}", &line[i..]),
        None => line.to_string(),
    }
}

/// One client-side access-log line in Istio's default TEXT format: the
/// proxy at `src_ip` sent a request to `host:port` through cluster
/// `outbound|port||host`, answered by `upstream`.
pub fn outbound_text_line(n: u64, src_ip: &str, host: &str, port: u32, upstream: &str) -> String {
    let cluster = format!("outbound|{port}||{host}");
    routed_text_line(
        n,
        src_ip,
        &format!("{host}:{port}"),
        &cluster,
        upstream,
        upstream,
    )
}

/// One client-side access-log line in Istio's default TEXT format where the
/// authority the app dialled and the cluster Envoy sent to differ (a
/// VirtualService routing a host elsewhere, such as to an egress gateway):
/// the proxy at `src_ip` asked for `authority`, the request left through
/// `cluster` to `upstream`, and the app had connected to `dialled`.
pub fn routed_text_line(
    n: u64,
    src_ip: &str,
    authority: &str,
    cluster: &str,
    upstream: &str,
    dialled: &str,
) -> String {
    let start = format!("2026-11-21T10:{:02}:{:02}.000Z", (n / 60) % 60, n % 60);
    let sport = 30000 + (n % 30000) as u32;
    let f = Fields {
        start: &start,
        authority: authority.to_string(),
        upstream_host: upstream.to_string(),
        cluster: cluster.to_string(),
        upstream_local: format!("{src_ip}:{}", sport + 1),
        downstream_local: dialled.to_string(),
        downstream_remote: format!("{src_ip}:{sport}"),
        sni: "-".into(),
        route: "default".into(),
    };
    let mut out = String::new();
    f.text(&mut out);
    out
}

struct Fields<'a> {
    start: &'a str,
    authority: String,
    upstream_host: String,
    cluster: String,
    upstream_local: String,
    downstream_local: String,
    downstream_remote: String,
    sni: String,
    route: String,
}

impl Fields<'_> {
    fn text(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "[{}] \"GET /get HTTP/1.1\" 200 - via_upstream - \"-\" 0 512 3 2 \"-\" \"curl/8.5.0\" \"5f2b7c1e-0d7a-4b9e-9d1c-2a8f0e6b3c4d\" \"{}\" \"{}\" {} {} {} {} {} {}",
            self.start,
            self.authority,
            self.upstream_host,
            self.cluster,
            self.upstream_local,
            self.downstream_local,
            self.downstream_remote,
            self.sni,
            self.route
        );
    }

    fn json(&self, n: u64) -> String {
        // Key order varies from line to line; 1.23–1.24 appended `;`.
        let cluster = if n.is_multiple_of(3) {
            format!("{};", self.cluster)
        } else {
            self.cluster.clone()
        };
        let mut pairs: Vec<(&str, String)> = vec![
            ("start_time", json_str(self.start)),
            ("method", json_str("GET")),
            ("path", json_str("/get")),
            ("protocol", json_str("HTTP/1.1")),
            ("response_code", "200".into()),
            ("response_flags", json_str("-")),
            ("bytes_received", "0".into()),
            ("bytes_sent", "512".into()),
            ("duration", "3".into()),
            ("x_forwarded_for", "null".into()),
            ("authority", json_str(&self.authority)),
            ("upstream_host", json_str(&self.upstream_host)),
            ("upstream_cluster", json_str(&cluster)),
            ("upstream_local_address", json_str(&self.upstream_local)),
            ("downstream_local_address", json_str(&self.downstream_local)),
            (
                "downstream_remote_address",
                json_str(&self.downstream_remote),
            ),
            ("requested_server_name", "null".into()),
            ("route_name", json_str(&self.route)),
        ];
        let len = pairs.len();
        pairs.rotate_left((n as usize) % len);
        if n % 2 == 1 {
            pairs.reverse();
        }
        let body: Vec<String> = pairs.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", body.join(","))
    }

    fn render(&self, form: LogForm, n: u64, pod: &str, ns: &str, out: &mut String) {
        match form {
            LogForm::Text => self.text(out),
            LogForm::Json => {
                out.push_str(&self.json(n));
                out.push('\n');
            }
            LogForm::Prefixed => {
                let _ = write!(out, "[pod/{pod}/istio-proxy] ");
                self.text(out);
            }
            LogForm::FluentBit => {
                let mut raw = String::new();
                self.text(&mut raw);
                let _ = writeln!(
                    out,
                    "{{\"date\":1732184778.0,\"log\":{},\"stream\":\"stdout\",\"kubernetes\":{{\"pod_name\":\"{pod}\",\"namespace_name\":\"{ns}\",\"container_name\":\"istio-proxy\"}}}}",
                    json_str(raw.trim_end())
                );
            }
        }
    }
}

/// Sidecar name -> egress hosts, from a multi-document YAML stream (the
/// plugin's `recommend` output).
pub fn sidecar_hosts(yaml: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out = std::collections::BTreeMap::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).expect("valid YAML");
        if v.is_null() {
            continue;
        }
        let hosts = v["spec"]["egress"][0]["hosts"]
            .as_array()
            .expect("egress hosts")
            .iter()
            .map(|h| h.as_str().expect("host string").to_string())
            .collect();
        out.insert(
            v["metadata"]["name"].as_str().expect("name").to_string(),
            hosts,
        );
    }
    out
}

pub fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

fn ip(a: u8, b: u8, n: u32) -> Ipv4Addr {
    Ipv4Addr::new(
        a,
        b + (n / 65536) as u8,
        ((n / 256) % 256) as u8,
        (n % 256) as u8,
    )
}

/// A stable, pod-template-hash-like string.
fn hash(i: usize, salt: usize) -> String {
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (salt as u64 + 1);
    x ^= x >> 29;
    let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
    (0..10)
        .map(|k| alphabet[((x >> (k * 5)) % alphabet.len() as u64) as usize] as char)
        .collect()
}

fn suffix(r: usize) -> String {
    let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|k| alphabet[(r * 7 + k * 3) % alphabet.len()] as char)
        .collect()
}

fn write_deployment(
    out: &mut dyn Write,
    ns: &str,
    name: &str,
    replicas: usize,
    labels: &str,
    port: u16,
    rs_hash: &str,
) -> io::Result<()> {
    let ports = if port > 0 {
        format!("\n        ports:\n        - containerPort: {port}")
    } else {
        String::new()
    };
    writeln!(
        out,
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        {labels}\n    spec:\n      containers:\n      - name: app\n        image: example/{name}:1{ports}"
    )?;
    writeln!(
        out,
        "---\napiVersion: apps/v1\nkind: ReplicaSet\nmetadata:\n  name: {name}-{rs_hash}\n  namespace: {ns}\n  labels:\n    app: {name}\n    pod-template-hash: {rs_hash}\n  ownerReferences:\n  - apiVersion: apps/v1\n    kind: Deployment\n    name: {name}\n    uid: 00000000-0000-0000-0000-000000000000\n    controller: true\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels:\n      app: {name}\n      pod-template-hash: {rs_hash}\n  template:\n    metadata:\n      labels:\n        {labels}\n        pod-template-hash: {rs_hash}\n    spec:\n      containers:\n      - name: app\n        image: example/{name}:1"
    )
}

fn write_pod(
    out: &mut dyn Write,
    ns: &str,
    name: &str,
    rs: &str,
    labels: &[(&str, &str)],
    ip: Ipv4Addr,
) -> io::Result<()> {
    let labels: String = labels
        .iter()
        .map(|(k, v)| format!("\n    {k}: {v}"))
        .collect();
    writeln!(
        out,
        "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels:{labels}\n  annotations:\n    sidecar.istio.io/status: '{{\"containers\":[\"istio-proxy\"]}}'\n  ownerReferences:\n  - apiVersion: apps/v1\n    kind: ReplicaSet\n    name: {rs}\n    uid: 00000000-0000-0000-0000-000000000000\n    controller: true\nspec:\n  containers:\n  - name: app\n    image: example/app:1\n  - name: istio-proxy\n    image: docker.io/istio/proxyv2:1.30.0\nstatus:\n  phase: Running\n  podIP: {ip}\n  podIPs:\n  - ip: {ip}"
    )
}
