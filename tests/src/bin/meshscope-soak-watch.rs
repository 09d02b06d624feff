//! `meshscope-soak-watch`: two `kubectl meshscope apply --watch` replicas
//! sharing a Lease, for an hour of random faults under changing traffic
//! (run by `tests/bench/run watch-faults`).
//!
//! Real components: the test control plane (its own, in
//! `MESHSCOPE_CLUSTER_DIR`), a real istiod with simulated sidecars that
//! ACK its pushes, and a real Prometheus (scraping istiod). The replicas
//! reach all three through [`FaultProxy`]s, so that each can fail while
//! istiod keeps serving the sidecars: an API server, istiod or Prometheus
//! that is down (connections cut and refused) or hangs (accepted, never
//! answered), Prometheus answering 500. Besides: the access log rotated
//! by rename and by copytruncate, and the leading replica killed with
//! SIGKILL or stopped with SIGTERM (restarted 5–15 s later, as a
//! Deployment would). One fault at a time, 10–40 s each, 5–20 s apart.
//!
//! Traffic: 6 clients and 10 Services; each client calls its active
//! destinations every 3 s (one access-log line each, stamped with the
//! time it is written). Every ~15 s a client starts calling a new
//! destination, and every ~15 s an edge stops being called.
//!
//! Counted, each a target of 0 (exit 1 on a miss):
//! - **lost edges**: an edge that was called but whose host its client's
//!   Sidecar never held (polled every 2 s), or an edge still called at the
//!   end whose host its Sidecar or its sidecar's clusters do not hold after
//!   a minute without faults;
//! - **wrong narrowings**: a host that left a client's Sidecar while the
//!   client still called it, or less than `--prune-after` after its last
//!   call;
//! - **double writes**: a host widened twice in a row (by either replica)
//!   with no narrowing between, and any write reported by a replica whose
//!   last word on the Lease was that it follows;
//! - **missed narrowings**: a host still in its client's Sidecar at the end
//!   although its edge stopped before the fault-free minute and a half
//!   began. That is more than `--prune-after` (40 s), a Lease takeover
//!   (15 s) and a write confirmed within `--wait` (10 s) together, so a
//!   watcher that narrows has narrowed it by then.
//!
//! A run that widened or narrowed nothing fails too: its zeros would say
//! nothing. Reported, not targets: the replicas' exits other than the soak's own
//! kills, with their last stderr lines. Knobs: `MESHSCOPE_SOAK_DURATION`
//! (seconds, default 3600), `MESHSCOPE_SOAK_SEED`.
//! Prints a markdown table, then one JSON object as the last line.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use meshscope_e2e::bench::Rng;
use meshscope_e2e::cluster::{Cluster, Prometheus};
use meshscope_e2e::faults::{api_server, kubeconfig_through, FaultProxy, Mode};
use meshscope_e2e::fidelity::{Builder, Scenario, DEFAULT_MESH};
use meshscope_e2e::istiod::Istiod;
use meshscope_e2e::watcher::Watcher;
use meshscope_e2e::world::{labels, SvcPort};
use meshscope_e2e::xds::{Sim, SimOptions};
use meshscope_e2e::{outbound_text_line, stamped_now};
use serde_json::{json, Value};

const CLIENTS: usize = 6;
const DESTS: usize = 10;
const CALL_EVERY: Duration = Duration::from_secs(3);
const INTERVAL: &str = "2s";
const PRUNE_AFTER: Duration = Duration::from_secs(40);
const WAIT: &str = "10s";
/// How long the soak runs without faults before its final check.
const SETTLE: Duration = Duration::from_secs(90);
/// How long before a poll a call may have come too late for the pass
/// whose narrowing the poll saw: the pass read the log, waited up to
/// `--wait` (10 s) for its widenings, then narrowed, and the poll came up
/// to 2 s later; 2 s more for the read itself.
const UNSEEN: Duration = Duration::from_secs(10 + 2 + 2);
/// How long an edge's calls are remembered: enough to find the last one
/// before [`UNSEEN`] that is less than `--prune-after` old.
const REMEMBERED: Duration = Duration::from_secs(40 + 14 + 6);

/// A random duration of `lo..=hi` whole seconds.
fn secs(rng: &mut Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_secs(lo + rng.below((hi - lo + 1) as usize) as u64)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    ApiDown,
    ApiHang,
    IstiodDown,
    IstiodHang,
    PromError,
    PromHang,
    RotateRename,
    RotateCopyTruncate,
    KillLeader,
    TermLeader,
}

impl Fault {
    const ALL: [Fault; 10] = [
        Fault::ApiDown,
        Fault::ApiHang,
        Fault::IstiodDown,
        Fault::IstiodHang,
        Fault::PromError,
        Fault::PromHang,
        Fault::RotateRename,
        Fault::RotateCopyTruncate,
        Fault::KillLeader,
        Fault::TermLeader,
    ];
    fn name(self) -> &'static str {
        match self {
            Fault::ApiDown => "API server down",
            Fault::ApiHang => "API server hangs",
            Fault::IstiodDown => "istiod down",
            Fault::IstiodHang => "istiod hangs",
            Fault::PromError => "Prometheus answers 500",
            Fault::PromHang => "Prometheus hangs",
            Fault::RotateRename => "log rotated by rename",
            Fault::RotateCopyTruncate => "log rotated by copytruncate",
            Fault::KillLeader => "leader SIGKILLed",
            Fault::TermLeader => "leader SIGTERMed",
        }
    }
}

/// One client → destination edge, as the soak drives and sees it.
#[derive(Default)]
struct Edge {
    active: bool,
    first_call: Option<Instant>,
    last_call: Option<Instant>,
    /// Its calls of the last [`REMEMBERED`], oldest first.
    calls: Vec<Instant>,
    /// Its host is in the client's Sidecar, as last polled.
    present: bool,
    ever_present: bool,
    /// How often a poll saw its host leave the Sidecar.
    left: usize,
    /// `left` when a replica last reported widening with it.
    widened_at_left: Option<usize>,
}

/// What the soak knows and counts, apart from the components: the edges,
/// the Sidecars as polled, the replicas' events; no I/O, so that each
/// count is tested on its own (the tests below).
#[derive(Default)]
struct Book {
    ns: String,
    edges: BTreeMap<(usize, usize), Edge>,
    /// A managed Sidecar's name → its client, as polled.
    sidecar_client: BTreeMap<String, usize>,
    lost: Vec<String>,
    wrong_narrowings: Vec<String>,
    /// Hosts narrowed as their edge was called again after over
    /// `--prune-after` of silence, too late for the narrowing pass to
    /// read: not a target (no watcher can know a call made after its
    /// read), reported.
    resumed: Vec<String>,
    /// Per client, its Sidecar's last writes as the replicas reported
    /// them, to say with a wrong narrowing.
    recent: BTreeMap<usize, Vec<String>>,
    double_writes: Vec<String>,
    missed_narrowings: Vec<String>,
    writes: usize,
    /// Hosts added to and removed from Sidecars, by the replicas' events.
    widened: usize,
    narrowed: usize,
}

impl Book {
    /// Client `c` called destination `d` at `at`.
    fn called(&mut self, c: usize, d: usize, at: Instant) {
        let e = self.edges.entry((c, d)).or_default();
        e.first_call.get_or_insert(at);
        e.last_call = Some(at);
        e.calls
            .retain(|t| at.saturating_duration_since(*t) < REMEMBERED);
        e.calls.push(at);
    }

    /// A poll of the Sidecars at `now`: `held` is each client's hosts.
    /// A host that left less than `--prune-after` after a call the
    /// narrowing pass could have read (one made over [`UNSEEN`] before the
    /// poll) is a wrong narrowing: an edge called every 3 s all along has
    /// such calls. Returns the wrong narrowings it found.
    fn polled(&mut self, held: &BTreeMap<usize, BTreeSet<usize>>, now: Instant) -> Vec<String> {
        let mut found = Vec::new();
        for ((c, d), e) in self.edges.iter_mut() {
            let present = held.get(c).is_some_and(|h| h.contains(d));
            if e.present && !present {
                e.left += 1;
                let ago = |t: &Instant| now.saturating_duration_since(*t);
                let readable = e.calls.iter().rev().map(ago).find(|a| *a >= UNSEEN);
                let early = readable.is_some_and(|a| a + Duration::from_secs(1) < PRUNE_AFTER);
                let last = e.calls.last().map(ago);
                let writes = self.recent.get(c).map(|w| w.join("; ")).unwrap_or_default();
                if early {
                    found.push(format!(
                        "client-{c} lost dst-{d} {readable:?} after the last call its narrowing pass could have read (last call {last:?} ago, still called: {}; the Sidecar's last writes: {writes})",
                        e.active
                    ));
                } else if last.is_some_and(|a| a < UNSEEN) {
                    self.resumed.push(format!(
                        "client-{c} lost dst-{d} as it called it again {last:?} before, after over --prune-after without calls"
                    ));
                }
            }
            e.present = present;
            e.ever_present |= present;
        }
        self.wrong_narrowings.extend(found.iter().cloned());
        found
    }

    /// A replica's write event (`leading`: what it last said of the
    /// Lease). A write while following, or a widening with a host whose
    /// previous widening no narrowing followed, is a double write.
    fn wrote(&mut self, replica: &str, leading: bool, e: &Value) {
        let kind = e["event"].as_str().unwrap_or("");
        if !matches!(kind, "created" | "widened" | "narrowed") {
            return;
        }
        self.writes += 1;
        if !leading {
            self.double_writes
                .push(format!("{replica} wrote while following: {e}"));
        }
        let sidecar = e["sidecar"].as_str().unwrap_or("");
        let Some(&c) = self.sidecar_client.get(sidecar) else {
            return;
        };
        let recent = self.recent.entry(c).or_default();
        recent.push(format!("{replica} {kind} {}", e["hosts"]));
        if recent.len() > 4 {
            recent.remove(0);
        }
        for h in e["hosts"].as_array().into_iter().flatten() {
            let h = h.as_str().unwrap_or("");
            let Some(d) = (0..DESTS).find(|d| h.ends_with(&format!("/{}", host(&self.ns, *d))))
            else {
                continue;
            };
            let edge = self.edges.entry((c, d)).or_default();
            if kind == "narrowed" {
                self.narrowed += 1;
                edge.widened_at_left = None;
                continue;
            }
            self.widened += 1;
            if edge.widened_at_left == Some(edge.left) {
                self.double_writes.push(format!(
                    "{replica}: {sidecar} widened with dst-{d} again, no narrowing between"
                ));
            }
            edge.widened_at_left = Some(edge.left);
        }
    }

    /// At the end: every edge called got its host at some point, every
    /// edge still called has it now (`has_cluster`: in the client's
    /// sidecar's clusters too), and no edge that stopped before the
    /// fault-free time keeps its host.
    fn settle(&mut self, has_cluster: impl Fn(usize, usize) -> bool) {
        for ((c, d), e) in &self.edges {
            if e.first_call.is_none() {
                continue;
            }
            if !e.active && e.present {
                self.missed_narrowings.push(format!(
                    "client-{c} → dst-{d}: not called since the faults ended, still in its Sidecar"
                ));
            }
            if !e.ever_present {
                self.lost
                    .push(format!("client-{c} → dst-{d}: never in its Sidecar"));
                continue;
            }
            if e.active {
                let has = has_cluster(*c, *d);
                if !e.present || !has {
                    self.lost.push(format!(
                        "client-{c} → dst-{d}: still called, in the Sidecar: {}, in the sidecar's clusters: {has}",
                        e.present
                    ));
                }
            }
        }
    }

    /// The counts that must be 0: (what, what was found).
    fn rows(&self) -> [(&'static str, &[String]); 4] {
        [
            ("lost edges", &self.lost),
            ("wrong narrowings", &self.wrong_narrowings),
            ("double writes", &self.double_writes),
            ("missed narrowings", &self.missed_narrowings),
        ]
    }

    /// What a run must have exercised for its zeros to mean anything: a
    /// widening and a narrowing at least.
    fn unexercised(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.widened == 0 {
            out.push("no host was widened");
        }
        if self.narrowed == 0 {
            out.push("no host was narrowed");
        }
        out
    }
}

struct Proxies {
    api: FaultProxy,
    istiod: FaultProxy,
    prom: FaultProxy,
}

impl Proxies {
    fn clear(&self) {
        for p in [&self.api, &self.istiod, &self.prom] {
            p.set(Mode::Pass);
        }
    }
}

/// One replica: its process (when running), what it last said about the
/// Lease, and when to start it again after the soak stopped it.
struct Replica {
    id: String,
    run: Option<Watcher>,
    leading: bool,
    restart_at: Option<Instant>,
    /// Exits the soak did not cause: (code, last stderr lines).
    exits: Vec<(String, String)>,
    stopped_by_soak: bool,
}

struct Soak {
    c: &'static Cluster,
    ns: String,
    sc: Scenario,
    sim: Sim,
    log: PathBuf,
    kubeconfig: PathBuf,
    args: Vec<String>,
    book: Book,
    replicas: Vec<Replica>,
    rng: Rng,
    faults: BTreeMap<&'static str, usize>,
    n: u64,
    /// When the faults began.
    started: Instant,
}

fn host(ns: &str, d: usize) -> String {
    format!("dst-{d}.{ns}.svc.cluster.local")
}

fn setup_world(c: &'static Cluster) -> Result<(String, Scenario, Istiod, Sim)> {
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

fn upstream_of(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string()
}

impl Soak {
    fn ip(&self, pod: &str) -> String {
        let p = self.sc.world.pods.iter().find(|p| p.name == pod);
        p.map(|p| p.ip.clone()).unwrap_or_default()
    }

    /// One access-log line per active edge due a call, stamped now.
    fn calls(&mut self) -> Result<()> {
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
    fn churn(&mut self, start: bool) {
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
    fn sidecar_hosts(&mut self) -> Result<BTreeMap<usize, BTreeSet<usize>>> {
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
    fn poll(&mut self) -> Result<()> {
        let held = self.sidecar_hosts()?;
        for w in self.book.polled(&held, Instant::now()) {
            eprintln!(
                "[soak] {:>5}s wrong narrowing: {w}",
                self.started.elapsed().as_secs()
            );
        }
        Ok(())
    }

    fn start_replica(&mut self, i: usize) {
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
    fn drain(&mut self) {
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

    fn event(&mut self, i: usize, e: &Value) {
        match e["event"].as_str().unwrap_or("") {
            "leading" => self.replicas[i].leading = true,
            "following" => self.replicas[i].leading = false,
            _ => {
                let r = &self.replicas[i];
                self.book.wrote(&r.id, r.leading, e);
            }
        }
    }

    fn leader(&self) -> Option<usize> {
        self.replicas
            .iter()
            .position(|r| r.leading && r.run.is_some())
    }

    fn rotate(&self, copy: bool) -> Result<()> {
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
    fn inject(&mut self, f: Fault, p: &Proxies) -> Result<Duration> {
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
    fn tick(&mut self, t: u64, churn: bool) -> Result<()> {
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
    fn final_check(&mut self) -> Result<()> {
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

fn main() -> std::process::ExitCode {
    meshscope_e2e::tool_exit(try_main())
}

fn try_main() -> Result<()> {
    let duration = Duration::from_secs(
        std::env::var("MESHSCOPE_SOAK_DURATION")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3600),
    );
    let seed = std::env::var("MESHSCOPE_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| u64::from(std::process::id()) * 7919)
        | 1;
    eprintln!(
        "[soak] MESHSCOPE_SOAK_SEED={seed} MESHSCOPE_SOAK_DURATION={}",
        duration.as_secs()
    );
    let c = Cluster::shared();
    let (ns, sc, istiod, sim) = setup_world(c)?;
    let prom = Prometheus::scraping(&istiod.monitoring, "5s")?;
    let api_addr = api_server(&c.kubeconfig)?;
    let proxies = Proxies {
        api: FaultProxy::start(&api_addr)?,
        istiod: FaultProxy::start(&istiod.monitoring)?,
        prom: FaultProxy::start(&upstream_of(&prom.url))?,
    };
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("proxied.kubeconfig");
    kubeconfig_through(&c.kubeconfig, &proxies.api, &kubeconfig)?;
    let log = dir.path().join("access.log");
    let args: Vec<String> = [
        "-n",
        &ns,
        "--access-log",
        log.to_str().unwrap(),
        "--prometheus",
        &format!("http://{}", proxies.prom.addr),
        "--istiod-url",
        &format!("http://{}", proxies.istiod.addr),
        "--interval",
        INTERVAL,
        "--prune-after",
        &format!("{}s", PRUNE_AFTER.as_secs()),
        &format!("--wait={WAIT}"),
        "--lease",
        &format!("{ns}/meshscope-watch"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut soak = Soak {
        c,
        ns: ns.clone(),
        sc,
        sim,
        log,
        kubeconfig,
        args,
        book: Book {
            ns: ns.clone(),
            ..Book::default()
        },
        replicas: ["r0", "r1"]
            .iter()
            .map(|id| Replica {
                id: id.to_string(),
                run: None,
                leading: false,
                restart_at: None,
                exits: Vec::new(),
                stopped_by_soak: false,
            })
            .collect(),
        rng: Rng::new(seed),
        faults: BTreeMap::new(),
        n: 0,
        started: Instant::now(),
    };
    for c in 0..CLIENTS {
        for d in [c % DESTS, (c + 3) % DESTS] {
            soak.book.edges.entry((c, d)).or_default().active = true;
        }
    }
    soak.calls()?;
    soak.start_replica(0);
    soak.start_replica(1);
    let result = run(&mut soak, &proxies, duration);
    for r in soak.replicas.iter_mut() {
        if let Some(w) = r.run.as_mut() {
            w.stop();
        }
    }
    if let Err(e) = soak.sc.world.delete(c) {
        eprintln!("[soak] cleanup: {e:#}");
    }
    drop(istiod);
    result?;
    report(&soak, duration, seed)
}

fn run(soak: &mut Soak, proxies: &Proxies, duration: Duration) -> Result<()> {
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

fn report(soak: &Soak, duration: Duration, seed: u64) -> Result<()> {
    let book = &soak.book;
    let called = book
        .edges
        .values()
        .filter(|e| e.first_call.is_some())
        .count();
    let exits: Vec<Value> = soak
        .replicas
        .iter()
        .flat_map(|r| {
            r.exits
                .iter()
                .map(move |(st, tail)| json!({"replica": r.id, "status": st, "stderr": tail}))
        })
        .collect();
    println!(
        "| soak: {} min, seed {seed} | count | target | met |",
        duration.as_secs() / 60
    );
    println!("|---|---|---|---|");
    for (what, found) in book.rows() {
        let met = if found.is_empty() { "yes" } else { "no" };
        println!("| {what} | {} | 0 | {met} |", found.len());
    }
    println!();
    println!("| faults injected | count |\n|---|---|");
    for (f, n) in &soak.faults {
        println!("| {f} | {n} |");
    }
    let unexercised = book.unexercised();
    for why in &unexercised {
        println!("| {why} | | | no |");
    }
    println!();
    println!(
        "Edges called: {called}; Sidecar writes reported: {} (hosts widened {}, narrowed {}); replica exits the soak did not cause: {}; hosts narrowed as their calls resumed, after the narrowing pass read (not a target: no watcher can know of them): {}.",
        book.writes,
        book.widened,
        book.narrowed,
        exits.len(),
        book.resumed.len()
    );
    for (_, found) in book.rows() {
        for line in found {
            eprintln!("[soak] {line}");
        }
    }
    for line in &book.resumed {
        eprintln!("[soak] not counted: {line}");
    }
    let out = json!({
        "duration_s": duration.as_secs(),
        "seed": seed,
        "edges_called": called,
        "writes": book.writes,
        "hosts_widened": book.widened,
        "hosts_narrowed": book.narrowed,
        "lost_edges": book.lost,
        "wrong_narrowings": book.wrong_narrowings,
        "double_writes": book.double_writes,
        "missed_narrowings": book.missed_narrowings,
        "narrowed_as_calls_resumed": book.resumed,
        "faults": soak.faults,
        "unexpected_exits": exits,
    });
    println!("{out}");
    if book.rows().iter().any(|(_, found)| !found.is_empty()) || !unexercised.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book() -> Book {
        let mut b = Book {
            ns: "wfs".into(),
            ..Book::default()
        };
        b.sidecar_client.insert("client-0-pod-meshscope".into(), 0);
        b
    }

    fn held(hosts: &[usize]) -> BTreeMap<usize, BTreeSet<usize>> {
        BTreeMap::from([(0, hosts.iter().copied().collect())])
    }

    fn write(kind: &str, d: usize) -> Value {
        json!({"event": kind, "sidecar": "client-0-pod-meshscope", "hosts": [format!("wfs/{}", host("wfs", d))]})
    }

    /// An edge of client 0 to destination 1, called every 3 s over
    /// `span` up to `end`, then polled held at its first call and gone at
    /// `end + poll`: what the book makes of the narrowing.
    fn narrowed(active: bool, span: Duration, end: Duration, poll: Duration) -> Book {
        let t0 = Instant::now();
        let mut b = book();
        let mut t = end.saturating_sub(span);
        while t <= end {
            b.called(0, 1, t0 + t);
            t += CALL_EVERY;
        }
        b.edges.get_mut(&(0, 1)).unwrap().active = active;
        b.polled(&held(&[1]), t0 + end.saturating_sub(span));
        b.polled(&held(&[]), t0 + end + poll);
        b
    }

    #[test]
    fn a_host_narrowed_while_called_or_too_soon_is_a_wrong_narrowing() {
        let s = Duration::from_secs;
        // Called all along: calls the narrowing pass read were seconds old.
        let b = narrowed(true, s(120), s(120), s(1));
        assert_eq!(b.wrong_narrowings.len(), 1, "still called");
        assert!(b.wrong_narrowings[0].contains("still called: true"));
        // Stopped 20 s before: too soon.
        let b = narrowed(false, s(60), s(60), PRUNE_AFTER / 2);
        assert_eq!(b.wrong_narrowings.len(), 1, "too soon");
        // Stopped over --prune-after before: right.
        let b = narrowed(false, s(60), s(60), PRUNE_AFTER + s(1));
        assert!(b.wrong_narrowings.is_empty(), "{:?}", b.wrong_narrowings);
        assert!(b.resumed.is_empty());
    }

    #[test]
    fn a_host_narrowed_as_its_calls_resume_after_a_long_silence_is_reported_not_counted() {
        let t0 = Instant::now();
        let mut b = book();
        b.called(0, 1, t0);
        b.polled(&held(&[1]), t0);
        // Silent for 50 s, called again, and gone at the next poll: the
        // narrowing pass read before the call.
        let again = t0 + Duration::from_secs(50);
        b.called(0, 1, again);
        b.edges.get_mut(&(0, 1)).unwrap().active = true;
        b.polled(&held(&[]), again + Duration::from_secs(1));
        assert!(b.wrong_narrowings.is_empty(), "{:?}", b.wrong_narrowings);
        assert_eq!(b.resumed.len(), 1);
        // Silent for only 20 s before: the pass could read the old call.
        let mut b = book();
        b.called(0, 1, t0);
        b.polled(&held(&[1]), t0);
        let again = t0 + Duration::from_secs(20);
        b.called(0, 1, again);
        b.polled(&held(&[]), again + Duration::from_secs(1));
        assert_eq!(b.wrong_narrowings.len(), 1);
    }

    #[test]
    fn a_second_widening_without_a_narrowing_or_a_followers_write_is_a_double_write() {
        let mut b = book();
        b.wrote("r0", true, &write("widened", 2));
        b.wrote("r1", true, &write("widened", 2));
        assert_eq!(b.double_writes.len(), 1, "{:?}", b.double_writes);

        let mut b = book();
        b.wrote("r0", true, &write("widened", 2));
        b.wrote("r0", true, &write("narrowed", 2));
        b.wrote("r1", true, &write("widened", 2));
        assert!(b.double_writes.is_empty(), "{:?}", b.double_writes);

        // A narrowing whose event was lost (its replica killed before it
        // said so) shows in the polls: the widening after it is new.
        let mut b = book();
        b.wrote("r0", true, &write("widened", 2));
        let t = Instant::now();
        b.polled(&held(&[2]), t);
        b.polled(&held(&[]), t);
        b.wrote("r1", true, &write("widened", 2));
        assert!(b.double_writes.is_empty(), "{:?}", b.double_writes);

        let mut b = book();
        b.wrote("r1", false, &write("widened", 3));
        assert_eq!(b.double_writes.len(), 1, "a follower wrote");
        assert_eq!(b.writes, 1);
    }

    #[test]
    fn a_run_without_a_widening_or_a_narrowing_exercised_nothing() {
        let mut b = book();
        assert_eq!(b.unexercised().len(), 2);
        b.wrote("r0", true, &write("widened", 1));
        assert_eq!(b.unexercised(), ["no host was narrowed"]);
        b.wrote("r0", true, &write("narrowed", 1));
        assert!(b.unexercised().is_empty());
    }

    #[test]
    fn a_called_edge_never_held_or_missing_at_the_end_is_lost() {
        let t0 = Instant::now();
        let mut b = book();
        for d in [1, 2, 3] {
            b.called(0, d, t0);
            b.edges.get_mut(&(0, d)).unwrap().active = true;
        }
        b.edges.entry((0, 4)).or_default().active = false;
        b.polled(&held(&[1, 2]), t0);
        b.settle(|_, d| d == 1);
        assert_eq!(b.lost.len(), 2, "{:?}", b.lost);
        assert!(b.lost[0].contains("dst-2") && b.lost[0].contains("clusters: false"));
        assert!(b.lost[1].contains("dst-3") && b.lost[1].contains("never"));
        assert!(b.missed_narrowings.is_empty(), "{:?}", b.missed_narrowings);
    }

    #[test]
    fn a_host_kept_after_its_edge_stopped_before_the_quiet_end_is_a_missed_narrowing() {
        let t0 = Instant::now();
        let mut b = book();
        for (d, active) in [(1, true), (2, false), (3, false)] {
            b.called(0, d, t0);
            b.edges.get_mut(&(0, d)).unwrap().active = active;
        }
        b.polled(&held(&[1, 2, 3]), t0);
        b.polled(&held(&[1, 2]), t0 + PRUNE_AFTER * 2);
        b.settle(|_, _| true);
        assert_eq!(b.missed_narrowings.len(), 1, "{:?}", b.missed_narrowings);
        assert!(b.missed_narrowings[0].contains("dst-2"));
        assert!(b.lost.is_empty() && b.wrong_narrowings.is_empty());
    }
}
