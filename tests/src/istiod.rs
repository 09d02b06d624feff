//! A real istiod (pilot-discovery 1.31, built from Go modules by
//! `tests/istiod/build`) against the test control plane, for fidelity
//! tests and benchmarks. Each [`Istiod`] is its own process with its own
//! state directory, started by `tests/istiod/up` and stopped on drop by
//! `tests/istiod/down`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::cluster::{repo_root, Cluster};

/// The version istiod reports for itself (and that simulated sidecars send
/// as `ISTIO_VERSION`): `tests/istiod/build` stamps the module's minor as a
/// dev build.
pub const ISTIOD_VERSION: &str = "1.31-dev";
/// The `--istio-version` the scope engine is compared under.
pub const ENGINE_VERSION: &str = "1.31";

pub struct Istiod {
    /// Debug endpoints and `/ready`.
    pub http: String,
    /// Plaintext ADS.
    pub grpc: String,
    /// `/metrics`.
    pub monitoring: String,
    pub pid: u32,
    pub log: PathBuf,
    dir: tempfile::TempDir,
    /// One HTTP client for every debug and metrics request.
    agent: ureq::Agent,
}

/// istiod's own cost at one moment.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct ProcessUsage {
    pub rss_kb: u64,
    /// Peak RSS so far (VmHWM).
    pub hwm_kb: u64,
    /// user + system CPU seconds since start.
    pub cpu_s: f64,
}

impl Istiod {
    /// Starts an istiod watching `cluster`, and waits until it is ready.
    pub fn start(cluster: &Cluster) -> Result<Istiod> {
        Istiod::start_env(cluster, &[])
    }

    /// As [`Istiod::start`], with the Gateway API on: istiod reads the
    /// routes and Gateways the control plane holds.
    pub fn start_with_gateway_api(cluster: &Cluster) -> Result<Istiod> {
        Istiod::start_env(cluster, &[("MESHSCOPE_ISTIOD_GATEWAY_API", "true")])
    }

    /// As [`Istiod::start_with_gateway_api`], with
    /// `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG=true`: a gateway gets only the
    /// clusters its routes, providers and EnvoyFilters name.
    pub fn start_filtering_gateways(cluster: &Cluster) -> Result<Istiod> {
        Istiod::start_env(
            cluster,
            &[
                ("MESHSCOPE_ISTIOD_GATEWAY_API", "true"),
                (meshscope_shared::gateway_clusters::FILTER_FLAG, "true"),
            ],
        )
    }

    /// As [`Istiod::start_with_gateway_api`], with ambient on
    /// (`PILOT_ENABLE_AMBIENT=true`): istiod binds services to waypoints
    /// and builds waypoints' config.
    pub fn start_ambient(cluster: &Cluster) -> Result<Istiod> {
        Istiod::start_env(
            cluster,
            &[
                ("MESHSCOPE_ISTIOD_GATEWAY_API", "true"),
                ("PILOT_ENABLE_AMBIENT", "true"),
            ],
        )
    }

    fn start_env(cluster: &Cluster, env: &[(&str, &str)]) -> Result<Istiod> {
        let dir = tempfile::Builder::new()
            .prefix("meshscope-istiod-")
            .tempdir()?;
        let up = repo_root().join("tests/istiod/up");
        let out = Command::new(&up)
            .envs(env.iter().copied())
            .env("MESHSCOPE_ISTIOD_DIR", dir.path().join("state"))
            .env("KUBECONFIG", &cluster.kubeconfig)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("cannot run {}", up.display()))?;
        if !out.status.success() {
            bail!("tests/istiod/up failed (see its output above)");
        }
        let vars: BTreeMap<String, String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let get = |k: &str| {
            vars.get(k)
                .cloned()
                .with_context(|| format!("tests/istiod/up printed no {k}"))
        };
        meshscope_test_support::ledger::record(meshscope_test_support::ledger::Component::Istiod);
        Ok(Istiod {
            http: get("MESHSCOPE_ISTIOD_HTTP")?,
            grpc: get("MESHSCOPE_ISTIOD_GRPC")?,
            monitoring: get("MESHSCOPE_ISTIOD_MONITORING")?,
            pid: get("MESHSCOPE_ISTIOD_PID")?.parse()?,
            log: PathBuf::from(get("MESHSCOPE_ISTIOD_LOG")?),
            dir,
            agent: ureq::Agent::new_with_config(
                ureq::config::Config::builder()
                    .timeout_global(Some(Duration::from_secs(30)))
                    .http_status_as_error(false)
                    .build(),
            ),
        })
    }

    /// `http://` + the ADS address, as a gRPC client takes it.
    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    fn get(&self, addr: &str, path: &str) -> Result<(u16, String)> {
        let url = format!("http://{addr}{path}");
        let mut resp = self
            .agent
            .get(&url)
            .call()
            .with_context(|| format!("GET {url}"))?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(512 * 1024 * 1024)
            .read_to_string()
            .with_context(|| format!("read {url}"))?;
        Ok((status, body))
    }

    /// A debug endpoint (`/debug/...`) on the HTTP address, as text; an
    /// error for anything but 200.
    pub fn debug(&self, path: &str) -> Result<String> {
        let (status, body) = self.get(&self.http, path)?;
        if status != 200 {
            bail!("istiod {path}: HTTP {status}: {}", body.trim());
        }
        Ok(body)
    }

    /// The SidecarScope istiod applied to a connected proxy
    /// (`/debug/sidecarz`).
    pub fn sidecarz(&self, pod: &str, namespace: &str) -> Result<serde_json::Value> {
        let body = self.debug(&format!("/debug/sidecarz?proxyID={pod}.{namespace}"))?;
        serde_json::from_str(&body).context("sidecarz is JSON")
    }

    /// Waits until istiod's registry holds every `(namespace, hostname)` of
    /// `services` and its config store every `(namespace, name)` of
    /// `configs`: proxies that connect later then get the whole scenario in
    /// their first push instead of a later one.
    pub fn wait_for(
        &self,
        services: &[(String, String)],
        configs: &[(String, String)],
        timeout: Duration,
    ) -> Result<()> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            // istiod's debug port may not answer yet (a fresh istiod, or
            // one busy starting: seeds 10004, 10008 and 10028 of a sweep at
            // ff7a235 were refused once): retried until the deadline.
            let (registry, store) =
                match (self.debug("/debug/registryz"), self.debug("/debug/configz")) {
                    (Ok(r), Ok(c)) => (r, c),
                    (Err(e), _) | (_, Err(e)) => {
                        if std::time::Instant::now() > deadline {
                            return Err(
                                e.context(format!("istiod's debug endpoint after {timeout:?}"))
                            );
                        }
                        std::thread::sleep(Duration::from_millis(200));
                        continue;
                    }
                };
            let registry: serde_json::Value =
                serde_json::from_str(&registry).context("registryz is JSON")?;
            let have_svc: std::collections::BTreeSet<(String, String)> = registry
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| {
                    Some((
                        s["Attributes"]["Namespace"].as_str()?.to_string(),
                        s["hostname"].as_str()?.to_string(),
                    ))
                })
                .collect();
            let store: serde_json::Value =
                serde_json::from_str(&store).context("configz is JSON")?;
            let have_cfg: std::collections::BTreeSet<(String, String)> = store
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    let m = if c["metadata"].is_object() {
                        &c["metadata"]
                    } else {
                        c
                    };
                    Some((
                        m["namespace"].as_str()?.to_string(),
                        m["name"].as_str()?.to_string(),
                    ))
                })
                .collect();
            let missing: Vec<&(String, String)> = services
                .iter()
                .filter(|k| !have_svc.contains(*k))
                .chain(configs.iter().filter(|k| !have_cfg.contains(*k)))
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                bail!("istiod has not seen {missing:?} after {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `/debug/syncz`: per connected proxy, what was sent and ACKed.
    pub fn syncz(&self) -> Result<serde_json::Value> {
        serde_json::from_str(&self.debug("/debug/syncz")?).context("syncz is JSON")
    }

    /// istiod's Prometheus metrics.
    pub fn metrics(&self) -> Result<String> {
        let (status, body) = self.get(&self.monitoring, "/metrics")?;
        if status != 200 {
            bail!("istiod /metrics: HTTP {status}");
        }
        Ok(body)
    }

    /// The sum of a counter over all its label sets (0 when absent).
    pub fn counter(&self, name: &str) -> Result<f64> {
        let text = self.metrics()?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// RSS and CPU of the istiod process, from /proc.
    pub fn usage(&self) -> Result<ProcessUsage> {
        process_usage(self.pid).context("istiod is not running")
    }

    /// The last lines of istiod's log, for failure messages; after a
    /// crash, its `panic:` line and the frame after it instead (the
    /// stack that follows would bury them).
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        if let Some(i) = lines.iter().position(|l| l.starts_with("panic:")) {
            return format!(
                "istiod crashed: {}",
                lines[i..(i + 6).min(lines.len())].join("\n")
            );
        }
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Whether the istiod process still runs.
    pub fn running(&self) -> bool {
        process_usage(self.pid).is_ok()
    }
}

/// RSS, peak RSS and CPU (user + system) of any process, from /proc.
pub fn process_usage(pid: u32) -> Result<ProcessUsage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("process {pid} is not running"))?;
    let kb = |field: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime), 0-based 11 and 12 after
    // the command name.
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    Ok(ProcessUsage {
        rss_kb: kb("VmRSS:"),
        hwm_kb: kb("VmHWM:"),
        cpu_s: ticks as f64 / clock_ticks() as f64,
    })
}

/// Clock ticks per second (`getconf CLK_TCK`), asked once.
fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100)
    })
}

impl Drop for Istiod {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("tests/istiod/down"))
            .env("MESHSCOPE_ISTIOD_DIR", self.dir.path().join("state"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
