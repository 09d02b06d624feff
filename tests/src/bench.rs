//! Inputs for the benchmarks (tests/bench/run): large meshes and large
//! access logs, deterministic for a given seed.

use std::io::{self, Write};

/// A small, fast, deterministic PRNG (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// In `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf-distributed indices in `0..n` (exponent `s`), by inverse CDF.
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for k in 1..=n {
            acc += 1.0 / (k as f64).powf(s);
            cdf.push(acc);
        }
        for c in cdf.iter_mut() {
            *c /= acc;
        }
        Zipf { cdf }
    }
    pub fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf.partition_point(|c| *c < u).min(self.cdf.len() - 1)
    }
}

fn ip(block: u32, n: u32) -> String {
    format!("10.{}.{}.{}", block + n / 65536, (n / 256) % 256, n % 256)
}

/// A mesh for benchmarks, written as one JSON `List`.
#[derive(Clone, Debug)]
pub struct Mesh {
    pub namespaces: usize,
    pub workloads: usize,
    pub pods_per_workload: usize,
    pub services: usize,
    pub sidecars: usize,
    pub service_entries: usize,
}

impl Mesh {
    /// The audit-at-scale mesh at scale 1: 30k pods, 5k services, 2k
    /// Sidecars, 1k ServiceEntries, 200 namespaces.
    pub fn audit(scale: f64) -> Self {
        let s = |n: f64| ((n * scale).round() as usize).max(1);
        Mesh {
            namespaces: s(200.0),
            workloads: s(10_000.0),
            pods_per_workload: 3,
            services: s(5_000.0),
            sidecars: s(2_000.0),
            service_entries: s(1_000.0),
        }
    }

    /// The log-ingest mesh: 5k workloads (one pod each), 20k services.
    pub fn logs() -> Self {
        Mesh {
            namespaces: 100,
            workloads: 5_000,
            pods_per_workload: 1,
            services: 20_000,
            sidecars: 0,
            service_entries: 0,
        }
    }

    pub fn ns(&self, i: usize) -> String {
        format!("ns-{}", i % self.namespaces)
    }
    pub fn workload_ns(&self, w: usize) -> String {
        self.ns(w)
    }
    pub fn pod_ip(&self, w: usize, r: usize) -> String {
        ip(64, (w * self.pods_per_workload + r) as u32 + 1)
    }
    pub fn service_host(&self, s: usize) -> String {
        format!("svc-{s}.{}.svc.cluster.local", self.ns(s))
    }
    pub fn service_ip(&self, s: usize) -> String {
        ip(128, s as u32 + 1)
    }
    fn service_port(&self, s: usize) -> u32 {
        if s % 5 == 4 {
            5432
        } else {
            8080
        }
    }

    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "{{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":[")?;
        let mut first = true;
        let mut item = |out: &mut dyn Write, s: String| -> io::Result<()> {
            if !first {
                out.write_all(b",\n")?;
            }
            first = false;
            out.write_all(s.as_bytes())
        };
        for n in 0..self.namespaces {
            item(out, format!("{{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{{\"name\":\"ns-{n}\",\"labels\":{{\"istio-injection\":\"enabled\"}}}}}}"))?;
        }
        for w in 0..self.workloads {
            let ns = self.workload_ns(w);
            let name = format!("wl-{w}");
            item(out, format!(
                "{{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{{\"name\":\"{name}\",\"namespace\":\"{ns}\"}},\"spec\":{{\"replicas\":{r},\"selector\":{{\"matchLabels\":{{\"app\":\"{name}\"}}}},\"template\":{{\"metadata\":{{\"labels\":{{\"app\":\"{name}\",\"version\":\"v1\"}}}},\"spec\":{{\"containers\":[{{\"name\":\"app\",\"image\":\"example/app:1\",\"ports\":[{{\"containerPort\":8080}}]}}]}}}}}}}}",
                r = self.pods_per_workload
            ))?;
            for r in 0..self.pods_per_workload {
                item(out, format!(
                    "{{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{{\"name\":\"{name}-5d8f7c9b4f-{r:05}\",\"namespace\":\"{ns}\",\"labels\":{{\"app\":\"{name}\",\"version\":\"v1\",\"pod-template-hash\":\"5d8f7c9b4f\"}},\"annotations\":{{\"sidecar.istio.io/status\":\"{{}}\"}},\"ownerReferences\":[{{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"{name}-5d8f7c9b4f\",\"uid\":\"u\",\"controller\":true}}]}},\"spec\":{{\"containers\":[{{\"name\":\"app\",\"image\":\"example/app:1\"}},{{\"name\":\"istio-proxy\",\"image\":\"proxyv2\"}}]}},\"status\":{{\"phase\":\"Running\",\"podIP\":\"{ip}\"}}}}",
                    ip = self.pod_ip(w, r)
                ))?;
            }
        }
        for s in 0..self.services {
            let ns = self.ns(s);
            // Services select the workload with the same index, when there is one.
            let port = self.service_port(s);
            let pname = if port == 5432 { "tcp-postgres" } else { "http" };
            item(out, format!(
                "{{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{{\"name\":\"svc-{s}\",\"namespace\":\"{ns}\"}},\"spec\":{{\"clusterIP\":\"{ip}\",\"selector\":{{\"app\":\"wl-{w}\"}},\"ports\":[{{\"name\":\"{pname}\",\"port\":{port},\"targetPort\":8080}}]}}}}",
                ip = self.service_ip(s),
                w = s % self.workloads.max(1)
            ))?;
        }
        for e in 0..self.service_entries {
            let ns = self.ns(e);
            let export = if e % 3 == 0 {
                ""
            } else {
                ",\"exportTo\":[\".\"]"
            };
            item(out, format!(
                "{{\"apiVersion\":\"networking.istio.io/v1\",\"kind\":\"ServiceEntry\",\"metadata\":{{\"name\":\"ext-{e}\",\"namespace\":\"{ns}\"}},\"spec\":{{\"hosts\":[\"api-{e}.example.com\"],\"ports\":[{{\"number\":443,\"name\":\"tls\",\"protocol\":\"TLS\"}}],\"resolution\":\"DNS\",\"location\":\"MESH_EXTERNAL\"{export}}}}}"
            ))?;
        }
        for k in 0..self.sidecars {
            // Selector Sidecars for the first workloads, a few namespace
            // defaults, a few broken ones.
            let w = k;
            let ns = self.workload_ns(w);
            let (sel, hosts) = match k % 10 {
                0 => (String::new(), "\"./*\",\"istio-system/*\"".to_string()),
                9 => (
                    format!(",\"workloadSelector\":{{\"labels\":{{\"app\":\"missing-{k}\"}}}}"),
                    "\"*/*\"".to_string(),
                ),
                _ => (
                    format!(",\"workloadSelector\":{{\"labels\":{{\"app\":\"wl-{w}\"}}}}"),
                    format!(
                        "\"{}/{}\",\"{}/{}\",\"./*.example.com\"",
                        self.ns(w + 1),
                        self.service_host(w + 1),
                        self.ns(w + 2),
                        self.service_host(w + 2)
                    ),
                ),
            };
            item(out, format!(
                "{{\"apiVersion\":\"networking.istio.io/v1\",\"kind\":\"Sidecar\",\"metadata\":{{\"name\":\"sc-{k}\",\"namespace\":\"{ns}\"}},\"spec\":{{\"egress\":[{{\"hosts\":[{hosts}]}}]{sel}}}}}"
            ))?;
        }
        writeln!(out, "\n]}}")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// Writes about `bytes` of access-log lines for `mesh`: 70% HTTP outbound,
/// 12% TCP outbound, 12% inbound, 6% passthrough (half to registered
/// ClusterIPs, half unregistered). Each workload calls a fixed set of
/// services whose popularity is Zipf-distributed.
pub fn write_logs(
    mesh: &Mesh,
    format: Format,
    bytes: u64,
    seed: u64,
    out: &mut dyn Write,
) -> io::Result<u64> {
    let mut rng = Rng::new(seed);
    let zipf = Zipf::new(mesh.services, 1.1);
    // Each workload calls a fixed set of 1-40 services, drawn by popularity
    // (Zipf): popular services have many callers, as in real meshes.
    let deps: Vec<Vec<usize>> = (0..mesh.workloads)
        .map(|w| {
            let n = 1 + (w * 7919) % 40;
            let mut d: Vec<usize> = (0..n).map(|_| zipf.sample(&mut rng)).collect();
            d.sort_unstable();
            d.dedup();
            d
        })
        .collect();
    let mut written = 0u64;
    let mut lines = 0u64;
    let mut line = String::with_capacity(600);
    while written < bytes {
        line.clear();
        let w = rng.below(mesh.workloads);
        let src = mesh.pod_ip(w, 0);
        let sport = 10000 + rng.below(50000);
        let roll = rng.below(100);
        let t = format!(
            "2026-11-2{}T{:02}:{:02}:{:02}.{:03}Z",
            1 + lines / 20_000_000 % 7,
            (lines / 3_600_000) % 24,
            (lines / 60_000) % 60,
            (lines / 1000) % 60,
            lines % 1000
        );
        let (req, code, authority, uhost, cluster, dlocal, dremote, route) = if roll < 82 {
            let s = deps[w][rng.below(deps[w].len())];
            let port = mesh.service_port(s);
            let dst = mesh.pod_ip(s % mesh.workloads, 0);
            let tcp = roll >= 70 || port == 5432;
            (
                if tcp {
                    "- - -".to_string()
                } else {
                    "GET /api/v1/items HTTP/1.1".to_string()
                },
                if tcp { "0" } else { "200" },
                if tcp {
                    "-".to_string()
                } else {
                    format!("svc-{s}.{}:{port}", mesh.ns(s))
                },
                format!("{dst}:8080"),
                format!("outbound|{port}||{}", mesh.service_host(s)),
                format!("{}:{port}", mesh.service_ip(s)),
                format!("{src}:{sport}"),
                if tcp { "-" } else { "default" },
            )
        } else if roll < 94 {
            let caller = mesh.pod_ip(rng.below(mesh.workloads), 0);
            (
                "GET /api/v1/items HTTP/1.1".to_string(),
                "200",
                format!("wl-{w}:8080"),
                "127.0.0.1:8080".to_string(),
                "inbound|8080||".to_string(),
                format!("{src}:8080"),
                format!("{caller}:{sport}"),
                "default",
            )
        } else {
            let registered = roll < 97;
            let dst = if registered {
                format!(
                    "{}:8080",
                    mesh.service_ip(deps[w][rng.below(deps[w].len())])
                )
            } else {
                // Each workload talks to a few external addresses of its own.
                format!(
                    "203.0.{}.{}:443",
                    (w + rng.below(3)) % 4,
                    (w * 13 + rng.below(3)) % 250 + 1
                )
            };
            (
                "- - -".to_string(),
                "0",
                "-".to_string(),
                dst.clone(),
                "PassthroughCluster".to_string(),
                dst,
                format!("{src}:{sport}"),
                "-",
            )
        };
        match format {
            Format::Text => {
                use std::fmt::Write as _;
                let _ = writeln!(
                    line,
                    "[{t}] \"{req}\" {code} - via_upstream - \"-\" 120 3547 12 11 \"-\" \"Go-http-client/1.1\" \"6c1f1a4e-7d3b-4b8e-9c2d-{:012x}\" \"{authority}\" \"{uhost}\" {cluster} {src}:{} {dlocal} {dremote} - {route}",
                    rng.next_u64() & 0xffff_ffff_ffff,
                    sport + 1
                );
            }
            Format::Json => {
                use std::fmt::Write as _;
                let auth = if authority == "-" {
                    "null".to_string()
                } else {
                    format!("\"{authority}\"")
                };
                let _ = writeln!(
                    line,
                    "{{\"start_time\":\"{t}\",\"method\":\"GET\",\"path\":\"/api/v1/items\",\"protocol\":\"HTTP/1.1\",\"response_code\":{code},\"response_flags\":\"-\",\"bytes_received\":120,\"bytes_sent\":3547,\"duration\":12,\"upstream_service_time\":\"11\",\"x_forwarded_for\":null,\"user_agent\":\"Go-http-client/1.1\",\"request_id\":\"6c1f1a4e-7d3b-4b8e-9c2d-{:012x}\",\"authority\":{auth},\"upstream_host\":\"{uhost}\",\"upstream_cluster\":\"{cluster}\",\"upstream_local_address\":\"{src}:{}\",\"downstream_local_address\":\"{dlocal}\",\"downstream_remote_address\":\"{dremote}\",\"requested_server_name\":null,\"route_name\":\"{route}\"}}",
                    rng.next_u64() & 0xffff_ffff_ffff,
                    sport + 1
                );
            }
        }
        out.write_all(line.as_bytes())?;
        written += line.len() as u64;
        lines += 1;
    }
    Ok(lines)
}

/// The `kubectl-meshscope` beside the running benchmark binary
/// (`target/<profile>/`): the release build `tests/bench/run` made.
pub fn plugin_beside_exe() -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    Ok(std::env::current_exe()?
        .parent()
        .context("the benchmark's directory")?
        .join("kubectl-meshscope"))
}

/// `kubectl meshscope ARGS --kubeconfig <c's>` with
/// [`plugin_beside_exe`]: (stdout, stderr); an error carrying stderr when
/// it fails.
pub fn run_plugin(c: &crate::cluster::Cluster, args: &[&str]) -> anyhow::Result<(String, String)> {
    use anyhow::Context;
    let plugin = plugin_beside_exe()?;
    let out = std::process::Command::new(&plugin)
        .args(args)
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .output()
        .with_context(|| format!("run {}", plugin.display()))?;
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    if !out.status.success() {
        anyhow::bail!("kubectl meshscope {}: {e}", args.join(" "));
    }
    Ok((o, e))
}

/// The short commit the benchmark runs on, `+changes` when the work tree
/// differs from it: the name of its committed raw run.
pub fn commit() -> String {
    let git = |args: &[&str]| std::process::Command::new("git").args(args).output().ok();
    let head = git(&["rev-parse", "--short", "HEAD"])
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let dirty = git(&["diff", "--quiet", "HEAD", "--", "."]).is_some_and(|o| !o.status.success());
    if dirty {
        format!("{head}+changes")
    } else {
        head
    }
}
