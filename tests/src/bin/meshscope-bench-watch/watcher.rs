//! The `apply --watch` process under test: started, read (its JSON events
//! and its metrics), and stopped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::istiod::{process_usage, Istiod, ProcessUsage, ENGINE_VERSION};
use meshscope_e2e::livescale::NS;
use meshscope_test_support::net::{admin_get, free_port};
use serde_json::Value;

/// The `apply --watch` process, its JSON events (with when they came).
pub struct Watcher {
    pub child: Child,
    pub events: Arc<Mutex<Vec<(Instant, Value)>>>,
    pub metrics_port: u16,
    pub stderr_path: std::path::PathBuf,
}

impl Watcher {
    pub fn start(
        c: &Cluster,
        istiod: &Istiod,
        source: &[String],
        interval_s: u64,
        prune_after_s: u64,
        work: &Path,
    ) -> Result<Watcher> {
        let plugin = meshscope_e2e::bench::plugin_beside_exe()?;
        let metrics_port = free_port();
        let stderr_path = work.join(format!("watch-{metrics_port}.stderr"));
        let mut child = Command::new(&plugin)
            .args(["apply", "--watch", "-n", NS])
            .args(source)
            .args([
                "--interval",
                &format!("{interval_s}s"),
                "--prune-after",
                &format!("{prune_after_s}s"),
                "--istiod-url",
                &format!("http://{}", istiod.monitoring),
                "--istio-version",
                ENGINE_VERSION,
                "--metrics-addr",
                &format!("127.0.0.1:{metrics_port}"),
                "-o",
                "json",
            ])
            .arg("--kubeconfig")
            .arg(&c.kubeconfig)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path)?)
            .spawn()
            .with_context(|| format!("run {}", plugin.display()))?;
        let events: Arc<Mutex<Vec<(Instant, Value)>>> = Arc::default();
        let out = child.stdout.take().context("the watcher's stdout")?;
        let sink = events.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    sink.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((Instant::now(), v));
                }
            }
        });
        Ok(Watcher {
            child,
            events,
            metrics_port,
            stderr_path,
        })
    }

    pub fn metric(&self, name: &str) -> Option<f64> {
        let (status, body) = admin_get(self.metrics_port, "/metrics", Duration::from_secs(10));
        if status != 200 {
            return None;
        }
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
    }

    pub fn usage(&self) -> ProcessUsage {
        process_usage(self.child.id()).unwrap_or_default()
    }

    pub fn events_of(&self, kinds: &[&str]) -> Vec<(Instant, Value)> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, e)| kinds.contains(&e["event"].as_str().unwrap_or("")))
            .cloned()
            .collect()
    }

    pub fn stderr_tail(&self) -> String {
        let t = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let l: Vec<&str> = t.lines().collect();
        l[l.len().saturating_sub(15)..].join("\n")
    }

    /// Waits until the watcher has ended `n` passes.
    pub fn wait_passes(&mut self, n: f64, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait()? {
                bail!("the watcher exited ({st}):\n{}", self.stderr_tail());
            }
            if self.metric("meshscope_watch_passes_total").unwrap_or(0.0) >= n {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the watcher did not end {n} passes in {limit:?}:\n{}",
                    self.stderr_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// SIGTERM, then waits for the exit (killed after 60 s).
    pub fn stop(mut self) -> Result<bool> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(st) = self.child.try_wait()? {
                return Ok(st.success());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Ok(false)
    }
}
