//! The soak: the world and its sidecars, the replicas, the traffic and
//! its churn, the faults, and the polls of the Sidecars, second by
//! second.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use meshscope_e2e::bench::Rng;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::faults::Mode;
use meshscope_e2e::fidelity::{Builder, Scenario, DEFAULT_MESH};
use meshscope_e2e::istiod::Istiod;
use meshscope_e2e::watcher::Watcher;
use meshscope_e2e::world::{labels, SvcPort};
use meshscope_e2e::xds::{Sim, SimOptions};
use meshscope_e2e::{outbound_text_line, stamped_now};
use serde_json::Value;

use crate::book::Book;
use crate::fault::{Fault, Proxies};
use crate::settings::{host, secs, CALL_EVERY, CLIENTS, DESTS, SETTLE};

/// One replica: its process (when running), what it last said about the
/// Lease, and when to start it again after the soak stopped it.
pub struct Replica {
    pub id: String,
    pub run: Option<Watcher>,
    pub leading: bool,
    pub restart_at: Option<Instant>,
    /// Exits the soak did not cause: (code, last stderr lines).
    pub exits: Vec<(String, String)>,
    pub stopped_by_soak: bool,
}

pub struct Soak {
    pub c: &'static Cluster,
    pub ns: String,
    pub sc: Scenario,
    pub sim: Sim,
    pub log: PathBuf,
    pub kubeconfig: PathBuf,
    pub args: Vec<String>,
    pub book: Book,
    pub replicas: Vec<Replica>,
    pub rng: Rng,
    pub faults: BTreeMap<&'static str, usize>,
    pub n: u64,
    /// When the faults began.
    pub started: Instant,
}

pub fn setup_world(c: &'static Cluster) -> Result<(String, Scenario, Istiod, Sim)> {
    let ns = format!("wfs{}", std::process::id() % 1000);
    let mut w = Builder::new(970);
    w.namespace(&ns);
    for d in 0..DESTS {
        w.service(
            &ns,
            &format!("dst-{d}"),
            vec![SvcPort::new("http", 80)],
            false,
        );
        w.pod(
            &ns,
            &format!("dst-{d}-0"),
            labels(&[("app", &format!("dst-{d}"))]),
        );
    }
    for i in 0..CLIENTS {
        w.pod(
            &ns,
            &format!("client-{i}"),
            labels(&[("app", &format!("client-{i}"))]),
        );
    }
    let sc = w.finish("watch-faults".into(), DEFAULT_MESH.into());
    sc.world.apply(c)?;
    let istiod = Istiod::start(c)?;
    let services: Vec<(String, String)> = (0..DESTS).map(|d| (ns.clone(), host(&ns, d))).collect();
    istiod.wait_for(&services, &[], Duration::from_secs(60))?;
    let specs = sc
        .world
        .pods
        .iter()
        .filter(|p| p.name.starts_with("client-"))
        .map(|p| p.proxy_spec())
        .collect();
    let opts = SimOptions {
        concurrency: CLIENTS,
        ..SimOptions::default()
    };
    let sim = Sim::connect_with(&istiod.grpc_url(), specs, opts)?;
    sim.wait_stable(Duration::from_millis(1500), Duration::from_secs(90))?;
    Ok((ns, sc, istiod, sim))
}

pub fn upstream_of(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string()
}

impl Soak {
    pub fn ip(&self, pod: &str) -> String {
        let p = self.sc.world.pods.iter().find(|p| p.name == pod);
        p.map(|p| p.ip.clone()).unwrap_or_default()
    }

    /// One access-log line per active edge due a call, stamped now.
    pub fn calls(&mut self) -> Result<()> {
        let now = Instant::now();
        let mut text = String::new();
        let due: Vec<(usize, usize)> = self
            .book
            .edges
            .iter()
            .filter(|(_, e)| e.active && e.last_call.is_none_or(|t| now - t >= CALL_EVERY))
            .map(|(k, _)| *k)
            .collect();
        for (c, d) in due {
            let line = outbound_text_line(
                self.n,
                &self.ip(&format!("client-{c}")),
                &host(&self.ns, d),
                80,
                &format!("10.255.0.{}:80", d + 1),
            );
            self.n += 1;
            text.push_str(&stamped_now(&line));
            self.book.called(c, d, now);
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        f.write_all(text.as_bytes())?;
        Ok(())
    }

    /// A client starts calling a destination it does not call, or an edge
    /// stops being called (a client keeps at least one).
    pub fn churn(&mut self, start: bool) {
        let c = self.rng.below(CLIENTS);
        let mine: Vec<usize> = (0..DESTS)
            .filter(|d| self.book.edges.get(&(c, *d)).is_some_and(|e| e.active))
            .collect();
        if start {
            let free: Vec<usize> = (0..DESTS).filter(|d| !mine.contains(d)).collect();
            if let Some(&d) = free.get(self.rng.below(free.len())) {
                self.book.edges.entry((c, d)).or_default().active = true;
            }
        } else if mine.len() > 1 {
            let d = mine[self.rng.below(mine.len())];
            if let Some(e) = self.book.edges.get_mut(&(c, d)) {
                e.active = false;
            }
        }
    }

    /// Each client's Sidecar hosts (destination indices), read directly
    /// from the API server (not through the fault proxy).
    pub fn sidecar_hosts(&mut self) -> Result<BTreeMap<usize, BTreeSet<usize>>> {
        let out = self.c.kubectl(
            &[
                "get",
                "sidecars",
                "-n",
                &self.ns,
                "-l",
                "app.kubernetes.io/managed-by=kubectl-meshscope",
                "-o",
                "json",
            ],
            None,
        );
        if !out.status.success() {
            bail!(
                "kubectl get sidecars: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let v: Value = serde_json::from_slice(&out.stdout)?;
        let mut by_client = BTreeMap::new();
        for sc in v["items"].as_array().into_iter().flatten() {
            let name = sc["metadata"]["labels"]["meshscope.io/workload-name"]
                .as_str()
                .unwrap_or("");
            let Some(c) = name.strip_prefix("client-").and_then(|i| i.parse().ok()) else {
                continue;
            };
            let sidecar = sc["metadata"]["name"].as_str().unwrap_or("").to_string();
            self.book.sidecar_client.insert(sidecar, c);
            let hosts: BTreeSet<usize> = sc["spec"]["egress"][0]["hosts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|h| h.as_str())
                .filter_map(|h| {
                    (0..DESTS).find(|d| h.ends_with(&format!("/{}", host(&self.ns, *d))))
                })
                .collect();
            by_client.insert(c, hosts);
        }
        Ok(by_client)
    }

    /// Polls the Sidecars into the book.
    pub fn poll(&mut self) -> Result<()> {
        let held = self.sidecar_hosts()?;
        for w in self.book.polled(&held, Instant::now()) {
            eprintln!(
                "[soak] {:>5}s wrong narrowing: {w}",
                self.started.elapsed().as_secs()
            );
        }
        Ok(())
    }

    pub fn start_replica(&mut self, i: usize) {
        let args: Vec<String> = self
            .args
            .iter()
            .cloned()
            .chain(["--identity".to_string(), self.replicas[i].id.clone()])
            .collect();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = &mut self.replicas[i];
        r.run = Some(Watcher::start(&self.kubeconfig, &refs));
        r.leading = false;
        r.restart_at = None;
        r.stopped_by_soak = false;
    }

    /// Reads every replica's events: Lease changes, writes (checked for a
    /// double write or a follower's write), and exits.
    pub fn drain(&mut self) {
        for i in 0..self.replicas.len() {
            let mut events = Vec::new();
            let mut exited = None;
            if let Some(w) = self.replicas[i].run.as_mut() {
                while let Some(e) = w.next(Duration::ZERO) {
                    events.push(e);
                }
                exited = w.exited().map(|st| (st, w.stderr()));
            }
            for e in events {
                self.event(i, &e);
            }
            if let Some((st, stderr)) = exited {
                let r = &mut self.replicas[i];
                r.run = None;
                r.leading = false;
                if !r.stopped_by_soak {
                    let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
                    eprintln!(
                        "[soak] {} exited by itself ({st}): {}",
                        r.id,
                        tail.join(" | ")
                    );
                    r.exits.push((format!("{st}"), tail.join(" | ")));
                }
                if r.restart_at.is_none() {
                    r.restart_at = Some(Instant::now() + Duration::from_secs(5));
                }
            }
        }
    }

    pub fn event(&mut self, i: usize, e: &Value) {
        match e["event"].as_str().unwrap_or("") {
            "leading" => self.replicas[i].leading = true,
            "following" => self.replicas[i].leading = false,
            _ => {
                let r = &self.replicas[i];
                self.book.wrote(&r.id, r.leading, e);
            }
        }
    }

    pub fn leader(&self) -> Option<usize> {
        self.replicas
            .iter()
            .position(|r| r.leading && r.run.is_some())
    }

    pub fn rotate(&self, copy: bool) -> Result<()> {
        let old = self.log.with_extension("log.1");
        if copy {
            std::fs::copy(&self.log, &old)?;
            std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&self.log)?;
        } else {
            std::fs::rename(&self.log, &old)?;
            std::fs::File::create(&self.log)?;
        }
        Ok(())
    }

    /// Starts `f`; returns when it ends by itself (instant faults) or
    /// how long the proxies keep it.
    pub fn inject(&mut self, f: Fault, p: &Proxies) -> Result<Duration> {
        *self.faults.entry(f.name()).or_default() += 1;
        let hold = secs(&mut self.rng, 10, 40);
        match f {
            Fault::ApiDown => p.api.set(Mode::Down),
            Fault::ApiHang => p.api.set(Mode::Hang),
            Fault::IstiodDown => p.istiod.set(Mode::Down),
            Fault::IstiodHang => p.istiod.set(Mode::Hang),
            Fault::PromError => p.prom.set(Mode::Error),
            Fault::PromHang => p.prom.set(Mode::Hang),
            Fault::RotateRename => self.rotate(false)?,
            Fault::RotateCopyTruncate => self.rotate(true)?,
            Fault::KillLeader | Fault::TermLeader => {
                if let Some(i) = self.leader() {
                    let back = secs(&mut self.rng, 5, 15);
                    let r = &mut self.replicas[i];
                    r.stopped_by_soak = true;
                    r.restart_at = Some(Instant::now() + back);
                    if let Some(w) = r.run.as_mut() {
                        if f == Fault::KillLeader {
                            let _ = w.child.kill();
                        } else {
                            w.sigterm();
                        }
                    }
                }
            }
        }
        Ok(match f {
            Fault::ApiDown
            | Fault::ApiHang
            | Fault::IstiodDown
            | Fault::IstiodHang
            | Fault::PromError
            | Fault::PromHang => hold,
            _ => Duration::ZERO,
        })
    }

    /// One second of the soak: traffic, churn, replicas, events, polls.
    pub fn tick(&mut self, t: u64, churn: bool) -> Result<()> {
        if churn && self.rng.below(15) == 0 {
            self.churn(true);
        }
        if churn && self.rng.below(15) == 0 {
            self.churn(false);
        }
        self.calls()?;
        for i in 0..self.replicas.len() {
            if self.replicas[i].run.is_none()
                && self.replicas[i]
                    .restart_at
                    .is_some_and(|at| Instant::now() >= at)
            {
                self.start_replica(i);
            }
        }
        self.drain();
        if t.is_multiple_of(2) {
            if let Err(e) = self.poll() {
                eprintln!("[soak] poll: {e:#}");
            }
        }
        Ok(())
    }

    /// After the run: the last poll, then the book's final counts.
    pub fn final_check(&mut self) -> Result<()> {
        self.poll()?;
        let (ns, sim) = (self.ns.clone(), &self.sim);
        self.book.settle(|c, d| {
            let cluster = format!("outbound|80||{}", host(&ns, d));
            sim.get(&format!("{ns}/client-{c}"))
                .is_some_and(|p| p.cluster_names().contains(&cluster))
        });
        Ok(())
    }
}

pub fn run(soak: &mut Soak, proxies: &Proxies, duration: Duration) -> Result<()> {
    let t0 = Instant::now();
    soak.started = t0;
    let mut next_fault = t0 + Duration::from_secs(30);
    let mut clear_at: Option<Instant> = None;
    let mut t = 0u64;
    while t0.elapsed() < duration {
        let now = Instant::now();
        if clear_at.is_some_and(|at| now >= at) {
            proxies.clear();
            clear_at = None;
            next_fault = now + secs(&mut soak.rng, 5, 20);
        } else if clear_at.is_none() && now >= next_fault {
            let f = Fault::ALL[soak.rng.below(Fault::ALL.len())];
            eprintln!("[soak] {:>5}s {}", t0.elapsed().as_secs(), f.name());
            let hold = soak.inject(f, proxies)?;
            if hold.is_zero() {
                next_fault = now + secs(&mut soak.rng, 5, 20);
            } else {
                clear_at = Some(now + hold);
            }
        }
        soak.tick(t, true)?;
        t += 1;
        std::thread::sleep(Duration::from_secs(1).saturating_sub(now.elapsed()));
    }
    proxies.clear();
    eprintln!(
        "[soak] faults over; {} s without faults or churn",
        SETTLE.as_secs()
    );
    let end = Instant::now() + SETTLE;
    while Instant::now() < end {
        let now = Instant::now();
        soak.tick(t, false)?;
        t += 1;
        std::thread::sleep(Duration::from_secs(1).saturating_sub(now.elapsed()));
    }
    soak.final_check()
}
