//! `meshscope-webhook-soak`: the release webhook under an open-loop load of
//! AdmissionReviews over TLS on loopback while its certificate rotates, its
//! API server is killed and restarted, a namespace's policy flips, and
//! finally SIGTERM arrives. Bench code, not product code; run it through
//! `tests/bench/run webhook-soak`.
//!
//! It starts its own control plane (`tests/cluster/up` with
//! MESHSCOPE_CLUSTER_DIR, default /tmp/meshscope-soak) and stops it at the
//! end. Every answer is checked against the decision expected for that
//! request at that moment. Prints a markdown table per phase and, last, one
//! JSON line; exits 1 when a target is missed (0 lost or reset requests,
//! 0 wrong decisions, RSS within 10%, policy flips followed within 1 s, every
//! new connection after a rotation served the new certificate).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kubectl_meshscope::install::{generate_pki, render, Settings};
use meshscope_e2e::cluster::{repo_root, Cluster};
use meshscope_shared::admission::Policy;
use meshscope_test_support::net::{admin_get, free_port, rss_kib};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::TlsConnector;

/// How long a read of the admin port may stall.
const ADMIN_READ: Duration = Duration::from_secs(2);

const SERVICE_ACCOUNT: &str = "system:serviceaccount:meshscope-system:meshscope-webhook";
const NS_ENFORCE: &str = "soak-enforce";
const NS_WARN: &str = "soak-warn";
const NS_FLIP: &str = "soak-flip";

#[derive(Parser, Debug)]
#[command(about = "Soak test of the release meshscope-webhook")]
struct Args {
    /// Requests per second (open loop)
    #[arg(long, default_value_t = 2000)]
    rate: u64,
    /// Seconds of load before SIGTERM
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// HTTP/2 connections (requests alternate between HTTP/2 and HTTP/1.1)
    #[arg(long, default_value_t = 4)]
    h2_connections: usize,
    /// HTTP/1.1 connections
    #[arg(long, default_value_t = 16)]
    h1_connections: usize,
    /// The webhook binary (release)
    #[arg(long)]
    webhook: PathBuf,
    /// Work directory (certificates, logs)
    #[arg(long, default_value = "/tmp/meshscope-soak-work")]
    work: PathBuf,
    /// Control plane state directory (its own, not the shared test cluster)
    #[arg(long, default_value = "/tmp/meshscope-soak")]
    cluster_dir: PathBuf,
    /// Leave the control plane running at the end
    #[arg(long)]
    keep_cluster: bool,
}

// === what each request should get ===

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    DeployEnforce,
    DeployWarn,
    DeployScoped,
    DeployExempt,
    DeployFlip,
    SeEnforce,
    SeExported,
    SeWarn,
    Sidecar,
    Delete,
    Malformed,
}

/// One cycle of the mix: Deployments dominate, as in a cluster.
const MIX: [Kind; 20] = [
    Kind::DeployEnforce,
    Kind::DeployWarn,
    Kind::DeployScoped,
    Kind::DeployFlip,
    Kind::SeEnforce,
    Kind::DeployEnforce,
    Kind::DeployWarn,
    Kind::DeployScoped,
    Kind::DeployFlip,
    Kind::Delete,
    Kind::DeployEnforce,
    Kind::DeployExempt,
    Kind::SeExported,
    Kind::DeployFlip,
    Kind::SeWarn,
    Kind::DeployWarn,
    Kind::Sidecar,
    Kind::DeployFlip,
    Kind::DeployScoped,
    Kind::Malformed,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Deny(&'static str),
    Warn(&'static str),
    Clean,
    Allowed,
    BadRequest,
}

fn fixture(name: &str, ns: &str) -> Value {
    let path = repo_root().join("tests/fixtures/admission").join(name);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["request"]["namespace"] = json!(ns);
    for key in ["object", "oldObject"] {
        if v["request"][key].is_object() {
            v["request"][key]["metadata"]["namespace"] = json!(ns);
        }
    }
    v
}

/// Bodies with a `{uid}` placeholder each, by kind.
fn bodies() -> BTreeMap<Kind, String> {
    let mut scoped = fixture("deployment-create.json", NS_ENFORCE);
    scoped["request"]["name"] = json!("scoped");
    scoped["request"]["object"]["metadata"]["name"] = json!("scoped");
    scoped["request"]["object"]["spec"]["template"]["metadata"]["labels"]["app"] = json!("scoped");
    let all = [
        (
            Kind::DeployEnforce,
            fixture("deployment-create.json", NS_ENFORCE),
        ),
        (Kind::DeployWarn, fixture("deployment-create.json", NS_WARN)),
        (Kind::DeployScoped, scoped),
        (
            Kind::DeployExempt,
            fixture("deployment-create-exempt.json", NS_ENFORCE),
        ),
        (Kind::DeployFlip, fixture("deployment-create.json", NS_FLIP)),
        (
            Kind::SeEnforce,
            fixture("serviceentry-dns-create.json", NS_ENFORCE),
        ),
        (
            Kind::SeExported,
            fixture("serviceentry-dns-exported-create.json", NS_ENFORCE),
        ),
        (
            Kind::SeWarn,
            fixture("serviceentry-dns-create.json", NS_WARN),
        ),
        (Kind::Sidecar, fixture("sidecar-clean-update.json", NS_WARN)),
        (Kind::Delete, fixture("deployment-delete.json", NS_ENFORCE)),
    ];
    let mut out: BTreeMap<Kind, String> = all
        .into_iter()
        .map(|(k, mut v)| {
            v["request"]["uid"] = json!("{uid}");
            (k, v.to_string())
        })
        .collect();
    let truncated = std::fs::read_to_string(
        repo_root().join("tests/fixtures/admission/malformed-truncated.json"),
    )
    .unwrap();
    out.insert(Kind::Malformed, truncated);
    out
}

fn expect(kind: Kind, flip_enforce: bool) -> Expect {
    match kind {
        Kind::DeployEnforce => Expect::Deny("MS0001"),
        Kind::DeployWarn => Expect::Warn("MS0001"),
        Kind::DeployScoped | Kind::DeployExempt | Kind::SeExported | Kind::Delete => Expect::Clean,
        Kind::DeployFlip if flip_enforce => Expect::Deny("MS0001"),
        Kind::DeployFlip => Expect::Warn("MS0001"),
        Kind::SeEnforce => Expect::Deny("MS0002"),
        Kind::SeWarn => Expect::Warn("MS0002"),
        Kind::Sidecar => Expect::Allowed,
        Kind::Malformed => Expect::BadRequest,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Right,
    /// Right, and decided from caches the webhook said were stale.
    RightFromStale,
    /// Allowed without checks (the caches had not synced).
    Unchecked,
    Wrong,
}

/// Whether the answer matches `want`; `alt` is also right (around a flip).
fn judge(status: u16, body: &[u8], uid: &str, want: Expect, alt: Option<Expect>) -> Verdict {
    if want == Expect::BadRequest {
        return if status == 400 {
            Verdict::Right
        } else {
            Verdict::Wrong
        };
    }
    if status != 200 {
        return Verdict::Wrong;
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Verdict::Wrong;
    };
    let r = &v["response"];
    if r["uid"] != uid {
        return Verdict::Wrong;
    }
    let allowed = r["allowed"].as_bool().unwrap_or(false);
    let mut warnings: Vec<&str> = r["warnings"]
        .as_array()
        .map(|w| w.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // The stale-cache warning says how the decision was made, not what it
    // is: judged without it, counted apart.
    let before = warnings.len();
    warnings.retain(|w| !w.starts_with("meshscope-webhook decided from caches"));
    let from_stale = warnings.len() < before;
    let message = r["status"]["message"].as_str().unwrap_or_default();
    if allowed
        && warnings
            .iter()
            .any(|w| w.contains("allowed without checks"))
    {
        return Verdict::Unchecked;
    }
    let fits = |e: Expect| match e {
        Expect::Deny(code) => !allowed && message.starts_with(code),
        Expect::Warn(code) => allowed && warnings.iter().any(|w| w.starts_with(code)),
        Expect::Clean => allowed && warnings.is_empty(),
        Expect::Allowed => allowed,
        Expect::BadRequest => false,
    };
    if fits(want) || alt.is_some_and(fits) {
        if from_stale {
            Verdict::RightFromStale
        } else {
            Verdict::Right
        }
    } else {
        Verdict::Wrong
    }
}

// === timeline ===

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Steady,
    ApiOutage,
    PolicyFlip,
    Steady2,
    Sigterm,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Steady => "steady + cert rotation",
            Phase::ApiOutage => "API server killed, restarted",
            Phase::PolicyFlip => "policy flip warn/enforce/warn",
            Phase::Steady2 => "steady again",
            Phase::Sigterm => "SIGTERM under load",
        }
    }
}

/// Seconds into the load at which things happen (scaled to --duration).
struct Plan {
    kill: f64,
    restart: f64,
    flip_phase: f64,
    flips: [f64; 2],
    steady2: f64,
    end: f64,
}

impl Plan {
    fn new(duration: f64) -> Plan {
        let s = duration / 60.0;
        Plan {
            kill: 15.0 * s,
            restart: 25.0 * s,
            flip_phase: 35.0 * s,
            flips: [38.0 * s, 45.0 * s],
            steady2: 52.0 * s,
            end: duration,
        }
    }

    fn phase(&self, t: f64, sigterm: bool) -> Phase {
        if sigterm {
            Phase::Sigterm
        } else if t < self.kill {
            Phase::Steady
        } else if t < self.flip_phase {
            Phase::ApiOutage
        } else if t < self.steady2 {
            Phase::PolicyFlip
        } else {
            Phase::Steady2
        }
    }
}

/// What the policy of the flip namespace is, as the soak changed it.
#[derive(Default)]
struct FlipState {
    /// (started, done, now enforce) of each label change.
    changes: Vec<(Instant, Instant, bool)>,
}

impl FlipState {
    /// The expected flip policy for a request sent at `t`, and the other
    /// one if `t` is within a change or the second after it.
    fn at(&self, t: Instant) -> (bool, Option<bool>) {
        let mut enforce = false;
        for &(start, done, to) in &self.changes {
            if t < start {
                break;
            }
            if t < done + Duration::from_secs(1) {
                return (to, Some(enforce));
            }
            enforce = to;
        }
        (enforce, None)
    }
}

// === results ===

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Answered {
        status: u16,
        verdict: Verdict,
    },
    /// Never reached the server: no connection could be made, or the
    /// server refused the stream before processing it (HTTP/2 GOAWAY).
    Refused,
    /// Sent, and the connection failed before an answer.
    Reset,
}

struct Record {
    phase: Phase,
    kind: Kind,
    sent: Instant,
    latency: Duration,
    outcome: Outcome,
    after_sigterm: bool,
    /// For answered reviews: whether the request was denied.
    denied: Option<bool>,
}

#[derive(Default, Clone, serde::Serialize)]
struct PhaseStats {
    sent: u64,
    answered: u64,
    expected_denials: u64,
    bad_requests_400: u64,
    unexpected_non_2xx: u64,
    wrong: u64,
    unchecked: u64,
    from_stale: u64,
    refused: u64,
    resets: u64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

// === connections ===

struct Tls {
    config: Arc<ClientConfig>,
    addr: std::net::SocketAddr,
    /// DER of every certificate generation, by number.
    generations: Mutex<Vec<Vec<u8>>>,
    /// The generation whose files are in place now.
    current: AtomicUsize,
    connects: AtomicU64,
    connect_errors: AtomicU64,
    /// New connections that got an older certificate than was in place.
    stale_certs: AtomicU64,
    /// Generations seen by new connections.
    seen: Mutex<BTreeMap<usize, u64>>,
}

type Stream = tokio_rustls::client::TlsStream<TcpStream>;

impl Tls {
    async fn connect(&self, alpn: &'static [u8]) -> Result<Stream> {
        let gen_before = self.current.load(Ordering::SeqCst);
        let mut config = (*self.config).clone();
        config.alpn_protocols = vec![alpn.to_vec()];
        let connect = async {
            let tcp = TcpStream::connect(self.addr).await?;
            tcp.set_nodelay(true)?;
            let s = TlsConnector::from(Arc::new(config))
                .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
                .await?;
            Ok::<_, std::io::Error>(s)
        };
        let s = match tokio::time::timeout(Duration::from_secs(3), connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                self.connect_errors.fetch_add(1, Ordering::Relaxed);
                return Err(e.into());
            }
            Err(_) => {
                self.connect_errors.fetch_add(1, Ordering::Relaxed);
                bail!("connect timed out");
            }
        };
        self.connects.fetch_add(1, Ordering::Relaxed);
        let der = s
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.as_ref().to_vec())
            .unwrap_or_default();
        let gens = self.generations.lock().unwrap();
        let got = gens.iter().position(|g| *g == der).unwrap_or(usize::MAX);
        drop(gens);
        if got < gen_before {
            self.stale_certs.fetch_add(1, Ordering::Relaxed);
        }
        *self.seen.lock().unwrap().entry(got).or_default() += 1;
        Ok(s)
    }
}

struct Job {
    kind: Kind,
    uid: String,
    body: Bytes,
    sent: Instant,
}

fn request(job: &Job) -> Request<Full<Bytes>> {
    Request::post("/validate")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(job.body.clone()))
        .unwrap()
}

/// Refused (never processed) or reset (sent, no answer), from a client error.
fn classify(e: &hyper::Error) -> Outcome {
    if e.is_canceled() {
        return Outcome::Refused;
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(h2e) = s.downcast_ref::<h2::Error>() {
            if h2e.reason() == Some(h2::Reason::REFUSED_STREAM) {
                return Outcome::Refused;
            }
        }
        src = s.source();
    }
    Outcome::Reset
}

async fn send_h1(
    tls: &Tls,
    conn: &mut Option<http1::SendRequest<Full<Bytes>>>,
    job: &Job,
) -> (Outcome, Vec<u8>) {
    if conn.as_ref().is_none_or(|c| c.is_closed()) {
        *conn = None;
        match tls.connect(b"http/1.1").await {
            Ok(s) => match http1::handshake(TokioIo::new(s)).await {
                Ok((send, c)) => {
                    tokio::spawn(c);
                    *conn = Some(send);
                }
                Err(_) => return (Outcome::Refused, vec![]),
            },
            Err(_) => return (Outcome::Refused, vec![]),
        }
    }
    let send = conn.as_mut().unwrap();
    if send.ready().await.is_err() {
        *conn = None;
        return (Outcome::Refused, vec![]);
    }
    match send.send_request(request(job)).await {
        Ok(res) => {
            let status = res.status().as_u16();
            let close = res
                .headers()
                .get("connection")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
            let body = res.into_body().collect().await;
            if close {
                *conn = None;
            }
            match body {
                Ok(b) => (
                    Outcome::Answered {
                        status,
                        verdict: Verdict::Right,
                    },
                    b.to_bytes().to_vec(),
                ),
                Err(_) => {
                    *conn = None;
                    (Outcome::Reset, vec![])
                }
            }
        }
        Err(e) => {
            *conn = None;
            (classify(&e), vec![])
        }
    }
}

struct H2Pool {
    slots: Vec<tokio::sync::Mutex<Option<http2::SendRequest<Full<Bytes>>>>>,
}

async fn send_h2(tls: &Tls, pool: &H2Pool, slot: usize, job: &Job) -> (Outcome, Vec<u8>) {
    let send = {
        let mut s = pool.slots[slot].lock().await;
        if s.as_ref().is_none_or(|c| c.is_closed()) {
            *s = None;
            let Ok(stream) = tls.connect(b"h2").await else {
                return (Outcome::Refused, vec![]);
            };
            match http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await {
                Ok((send, c)) => {
                    tokio::spawn(c);
                    *s = Some(send);
                }
                Err(_) => return (Outcome::Refused, vec![]),
            }
        }
        s.as_ref().unwrap().clone()
    };
    let mut send = send;
    if send.ready().await.is_err() {
        return (Outcome::Refused, vec![]);
    }
    match send.send_request(request(job)).await {
        Ok(res) => {
            let status = res.status().as_u16();
            match res.into_body().collect().await {
                Ok(b) => (
                    Outcome::Answered {
                        status,
                        verdict: Verdict::Right,
                    },
                    b.to_bytes().to_vec(),
                ),
                Err(_) => (Outcome::Reset, vec![]),
            }
        }
        Err(e) => (classify(&e), vec![]),
    }
}

// === certificates ===

struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
    ca_pem: String,
}

fn new_ca() -> Result<Pki> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name
        .push(DnType::CommonName, "meshscope-soak-ca");
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(p, KeyPair::generate()?)?;
    let ca_pem = ca.pem();
    Ok(Pki { ca, ca_pem })
}

/// Writes generation `n` (serial n+1) and swaps it in as a Secret volume
/// does: a new directory, then one rename of the `..data` symlink.
fn rotate(pki: &Pki, dir: &Path, n: usize) -> Result<Vec<u8>> {
    let mut p = CertificateParams::new(vec!["127.0.0.1".to_string()])?;
    p.distinguished_name.push(DnType::CommonName, "127.0.0.1");
    p.serial_number = Some(SerialNumber::from((n as u64 + 1).to_be_bytes().to_vec()));
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, &pki.ca)?;
    let gen = format!("..gen-{n}");
    std::fs::create_dir_all(dir.join(&gen))?;
    std::fs::write(dir.join(&gen).join("tls.crt"), cert.pem())?;
    std::fs::write(dir.join(&gen).join("tls.key"), key.serialize_pem())?;
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&gen, &tmp)?;
    std::fs::rename(&tmp, dir.join("..data"))?;
    for f in ["tls.crt", "tls.key"] {
        let link = dir.join(f);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{f}"), &link)?;
        }
    }
    Ok(cert.der().to_vec())
}

// === processes ===

fn proc_starttime(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit_once(") ")?.1;
    rest.split_whitespace().nth(19).map(String::from)
}

/// The running kube-apiserver of the soak's control plane: kill -9 it and
/// return how to start it again (its exe, arguments).
fn kill_apiserver(state: &Path) -> Result<(PathBuf, Vec<String>)> {
    let pidfile = std::fs::read_to_string(state.join("kube-apiserver.pid"))?;
    let pid: u32 = pidfile.split_whitespace().next().context("pid")?.parse()?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))?;
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .skip(1)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let st = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()?;
    if !st.success() {
        bail!("kill -9 {pid} failed");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while proc_starttime(pid).is_some_and(|_| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    }) {
        if Instant::now() > deadline {
            bail!("kube-apiserver {pid} survived SIGKILL");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((exe, args))
}

/// Starts kube-apiserver again with the same arguments, as tests/cluster/up
/// does (its own process group, output to its log, the pid file updated so
/// that tests/cluster/down stops it).
fn restart_apiserver(state: &Path, exe: &Path, args: &[String]) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(state.join("kube-apiserver.log"))?;
    let child = Command::new(exe)
        .args(args)
        .current_dir(state)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()?;
    let pid = child.id();
    let st = proc_starttime(pid).context("kube-apiserver exited at once")?;
    std::fs::write(state.join("kube-apiserver.pid"), format!("{pid} {st}\n"))?;
    // Not waited for: tests/cluster/down stops it.
    std::mem::forget(child);
    Ok(())
}

fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Result<String> {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn cluster_up(dir: &Path) -> Result<PathBuf> {
    let out = Command::new(repo_root().join("tests/cluster/up"))
        .env("MESHSCOPE_CLUSTER_DIR", dir)
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        bail!("tests/cluster/up failed");
    }
    let s = String::from_utf8_lossy(&out.stdout);
    Ok(PathBuf::from(
        s.lines().last().context("up prints the kubeconfig")?.trim(),
    ))
}

fn cluster_down(dir: &Path) {
    let _ = Command::new(repo_root().join("tests/cluster/down"))
        .env("MESHSCOPE_CLUSTER_DIR", dir)
        .stdout(Stdio::null())
        .status();
}

fn setup_cluster(kubeconfig: &Path) -> Result<()> {
    let args = Settings {
        namespace: "meshscope-system".into(),
        image: "meshscope-webhook:soak".into(),
        default_policy: Policy::Warn,
        mutate_serviceentry_exportto: false,
        istio_namespace: "istio-system".into(),
        validity_days: 1,
    };
    let pki = generate_pki(&["127.0.0.1".into()], 1)?;
    let keep = [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
    ];
    for d in render(&args, &pki)?
        .iter()
        .filter(|d| keep.contains(&d["kind"].as_str().unwrap_or_default()))
    {
        kubectl(
            kubeconfig,
            &["apply", "-f", "-"],
            Some(&serde_yaml::to_string(d)?),
        )?;
    }
    let mut yaml = String::new();
    for (ns, policy) in [
        (NS_ENFORCE, "enforce"),
        (NS_WARN, "warn"),
        (NS_FLIP, "warn"),
    ] {
        yaml.push_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    istio-injection: enabled\n    meshscope.io/policy: {policy}\n---\n"
        ));
    }
    // A Sidecar scoping app=scoped, and a few more objects for the caches.
    yaml.push_str(&format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: scoped\n  namespace: {NS_ENFORCE}\nspec:\n  workloadSelector:\n    labels:\n      app: scoped\n  egress:\n  - hosts: [\"./*\", \"istio-system/*\"]\n---\n"
    ));
    for i in 0..5 {
        yaml.push_str(&format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: svc-{i}\n  namespace: {NS_ENFORCE}\nspec:\n  workloadSelector:\n    labels:\n      app: svc-{i}\n  egress:\n  - hosts: [\"./*\"]\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\n  namespace: {NS_ENFORCE}\nspec:\n  selector:\n    app: svc-{i}\n  ports:\n  - port: 80\n---\n"
        ));
    }
    kubectl(kubeconfig, &["apply", "-f", "-"], Some(&yaml))?;
    Ok(())
}

// === the soak ===

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

#[derive(Default, serde::Serialize)]
struct Observed {
    stale_seen_after_kill_s: Option<f64>,
    readyz_stale_body: Option<String>,
    metrics_stale_gauge_seen: bool,
    fresh_again_after_restart_s: Option<f64>,
    apiserver_ready_after_restart_s: Option<f64>,
    readyz_non_200_during_outage: u64,
}

fn main() -> std::process::ExitCode {
    meshscope_e2e::tool_exit(try_main())
}

fn try_main() -> Result<()> {
    let args = Args::parse();
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        bail!("a rustls provider was already installed");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let cluster_dir = args.cluster_dir.clone();
    let keep = args.keep_cluster;
    let result = rt.block_on(soak(args));
    if !keep {
        eprintln!(
            "[soak] stopping the soak control plane ({})",
            cluster_dir.display()
        );
        cluster_down(&cluster_dir);
    }
    match result {
        Ok(true) => Ok(()),
        Ok(false) => std::process::exit(1),
        Err(e) => Err(e),
    }
}

async fn soak(args: Args) -> Result<bool> {
    let log = |m: &str| eprintln!("[soak] {m}");
    let _ = std::fs::remove_dir_all(&args.work);
    std::fs::create_dir_all(args.work.join("tls"))?;
    log(&format!(
        "starting the control plane in {}",
        args.cluster_dir.display()
    ));
    let kubeconfig = cluster_up(&args.cluster_dir)?;
    setup_cluster(&kubeconfig)?;
    let cluster = Cluster {
        kubeconfig: kubeconfig.clone(),
    };
    let wh_kubeconfig = args.work.join("webhook.kubeconfig");
    std::fs::rename(
        cluster.impersonating(SERVICE_ACCOUNT, &args.work)?,
        &wh_kubeconfig,
    )?;

    let pki = new_ca()?;
    let tls_dir = args.work.join("tls");
    let first = rotate(&pki, &tls_dir, 0)?;
    let mut roots = RootCertStore::empty();
    use rustls_pki_types::pem::PemObject;
    for c in CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
        roots.add(c?)?;
    }
    let client =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();

    let (port, admin_port) = (free_port(), free_port());
    let wh_log = args.work.join("webhook.log");
    let mut webhook: Child = Command::new(&args.webhook)
        .env_clear()
        .env("KUBECONFIG", &wh_kubeconfig)
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(format!("--admin-listen=127.0.0.1:{admin_port}"))
        .arg(format!("--tls-cert={}", tls_dir.join("tls.crt").display()))
        .arg(format!("--tls-key={}", tls_dir.join("tls.key").display()))
        .arg("--stale-after-seconds=3")
        .arg("--log-level=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&wh_log)?)
        .spawn()
        .context("start the webhook")?;
    let pid = webhook.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    while admin_get(admin_port, "/readyz", ADMIN_READ).0 != 200 {
        if Instant::now() > deadline || webhook.try_wait()?.is_some() {
            bail!(
                "the webhook did not get ready: {}",
                std::fs::read_to_string(&wh_log)?
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    log(&format!(
        "webhook ready (pid {pid}); {} req/s for {} s",
        args.rate, args.duration
    ));

    let tls = Arc::new(Tls {
        config: Arc::new(client),
        addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        generations: Mutex::new(vec![first]),
        current: AtomicUsize::new(0),
        connects: AtomicU64::new(0),
        connect_errors: AtomicU64::new(0),
        stale_certs: AtomicU64::new(0),
        seen: Mutex::new(BTreeMap::new()),
    });
    let bodies = Arc::new(bodies());
    let plan = Arc::new(Plan::new(args.duration as f64));
    let flip = Arc::new(Mutex::new(FlipState::default()));
    let sigterm_at: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let exited = Arc::new(AtomicBool::new(false));
    let observed = Arc::new(Mutex::new(Observed::default()));

    // Results.
    let (rec_tx, mut rec_rx) = mpsc::unbounded_channel::<Record>();
    let collector = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(r) = rec_rx.recv().await {
            all.push(r);
        }
        all
    });

    // HTTP/1.1 workers take jobs from one queue.
    let (h1_tx, h1_rx) = mpsc::unbounded_channel::<Job>();
    let h1_rx = Arc::new(tokio::sync::Mutex::new(h1_rx));
    let mut workers = Vec::new();
    let start = Instant::now();
    let context = Arc::new((plan.clone(), flip.clone(), sigterm_at.clone()));
    let finish = {
        let rec_tx = rec_tx.clone();
        let context = context.clone();
        move |job: &Job, outcome: Outcome, body: &[u8]| {
            let (plan, flip, sigterm_at) = &*context;
            let sig = *sigterm_at.lock().unwrap();
            let after_sigterm = sig.is_some_and(|s| job.sent >= s);
            let phase = plan.phase(job.sent.duration_since(start).as_secs_f64(), after_sigterm);
            let (enforce, other) = flip.lock().unwrap().at(job.sent);
            let want = expect(job.kind, enforce);
            let alt = other.map(|o| expect(job.kind, o));
            let outcome = match outcome {
                Outcome::Answered { status, .. } => Outcome::Answered {
                    status,
                    verdict: judge(status, body, &job.uid, want, alt),
                },
                o => o,
            };
            let denied = matches!(outcome, Outcome::Answered { status: 200, .. })
                .then(|| {
                    serde_json::from_slice::<Value>(body)
                        .ok()
                        .and_then(|v| v["response"]["allowed"].as_bool())
                        .map(|a| !a)
                })
                .flatten();
            let _ = rec_tx.send(Record {
                phase,
                kind: job.kind,
                sent: job.sent,
                latency: job.sent.elapsed(),
                outcome,
                after_sigterm,
                denied,
            });
        }
    };
    let finish = Arc::new(finish);
    for _ in 0..args.h1_connections {
        let rx = h1_rx.clone();
        let tls = tls.clone();
        let finish = finish.clone();
        workers.push(tokio::spawn(async move {
            let mut conn = None;
            loop {
                let job = { rx.lock().await.recv().await };
                let Some(job) = job else { break };
                let (o, body) = send_h1(&tls, &mut conn, &job).await;
                finish(&job, o, &body);
            }
        }));
    }
    let h2 = Arc::new(H2Pool {
        slots: (0..args.h2_connections)
            .map(|_| tokio::sync::Mutex::new(None))
            .collect(),
    });

    // Certificate rotation every 10 s, with a probe: each new connection
    // must present the generation in place when it connected.
    let rotator = {
        let tls = tls.clone();
        let dir = tls_dir.clone();
        let exited = exited.clone();
        tokio::spawn(async move {
            let mut n = 1;
            let mut next = start + Duration::from_secs(10);
            let mut probe = tokio::time::interval(Duration::from_millis(500));
            while !exited.load(Ordering::SeqCst) {
                tokio::select! {
                    _ = tokio::time::sleep_until(next.into()) => {
                        match rotate(&pki, &dir, n) {
                            Ok(der) => {
                                tls.generations.lock().unwrap().push(der);
                                tls.current.store(n, Ordering::SeqCst);
                                eprintln!("[soak] t={:.1}s certificate generation {n} (serial {}) in place", start.elapsed().as_secs_f64(), n + 1);
                            }
                            Err(e) => eprintln!("[soak] rotation failed: {e:#}"),
                        }
                        n += 1;
                        next += Duration::from_secs(10);
                    }
                    _ = probe.tick() => {
                        // A new connection; its certificate is checked in connect.
                        let _ = tls.connect(b"http/1.1").await;
                    }
                }
            }
        })
    };

    // The control-plane events.
    let events = {
        let plan = plan.clone();
        let flip = flip.clone();
        let observed = observed.clone();
        let state = args.cluster_dir.clone();
        let kubeconfig = kubeconfig.clone();
        tokio::spawn(async move {
            let at = |s: f64| start + Duration::from_secs_f64(s);
            tokio::time::sleep_until(at(plan.kill).into()).await;
            let killed = Instant::now();
            let (exe, argv) = tokio::task::spawn_blocking({
                let state = state.clone();
                move || kill_apiserver(&state)
            })
            .await
            .unwrap()
            .expect("kill kube-apiserver");
            eprintln!(
                "[soak] t={:.1}s kube-apiserver killed (SIGKILL)",
                start.elapsed().as_secs_f64()
            );
            // Watch /readyz and /metrics while it is down and after.
            let restart_at = at(plan.restart);
            let mut restarted: Option<Instant> = None;
            let mut api_ready = false;
            loop {
                let now = Instant::now();
                if restarted.is_none() && now >= restart_at {
                    let (s, e, a) = (state.clone(), exe.clone(), argv.clone());
                    tokio::task::spawn_blocking(move || restart_apiserver(&s, &e, &a))
                        .await
                        .unwrap()
                        .expect("restart kube-apiserver");
                    restarted = Some(Instant::now());
                    eprintln!(
                        "[soak] t={:.1}s kube-apiserver started again",
                        start.elapsed().as_secs_f64()
                    );
                }
                let (code, body) = tokio::task::spawn_blocking(move || {
                    admin_get(admin_port, "/readyz", ADMIN_READ)
                })
                .await
                .unwrap();
                let (_, metrics) = tokio::task::spawn_blocking(move || {
                    admin_get(admin_port, "/metrics", ADMIN_READ)
                })
                .await
                .unwrap();
                // Fresh only on a clear answer: 200 "ok" and the gauge at 0
                // (a failed probe says nothing).
                let fresh_reply = code == 200
                    && body.trim() == "ok"
                    && metrics
                        .lines()
                        .any(|l| l == "meshscope_webhook_cache_stale 0");
                let stale = body.contains("stale");
                // The sample line, not the HELP text (which starts with "1 while").
                let gauge = metrics
                    .lines()
                    .any(|l| l == "meshscope_webhook_cache_stale 1");
                let newly_ready = match restarted {
                    Some(_) if !api_ready => {
                        let kc = kubeconfig.clone();
                        tokio::task::spawn_blocking(move || {
                            kubectl(&kc, &["get", "--raw", "/readyz"], None).is_ok()
                        })
                        .await
                        .unwrap()
                    }
                    _ => false,
                };
                {
                    let mut o = observed.lock().unwrap();
                    if code != 200 {
                        o.readyz_non_200_during_outage += 1;
                    }
                    if stale && o.stale_seen_after_kill_s.is_none() {
                        o.stale_seen_after_kill_s = Some(killed.elapsed().as_secs_f64());
                        o.readyz_stale_body = Some(body.trim().to_string());
                        eprintln!(
                            "[soak] t={:.1}s /readyz: {} {}",
                            start.elapsed().as_secs_f64(),
                            code,
                            body.trim()
                        );
                    }
                    if gauge {
                        o.metrics_stale_gauge_seen = true;
                    }
                    if let Some(r) = restarted {
                        if newly_ready {
                            api_ready = true;
                            o.apiserver_ready_after_restart_s = Some(r.elapsed().as_secs_f64());
                        }
                        if fresh_reply && o.stale_seen_after_kill_s.is_some() {
                            o.fresh_again_after_restart_s = Some(r.elapsed().as_secs_f64());
                            eprintln!(
                                "[soak] t={:.1}s caches fresh again ({:.1} s after the restart)",
                                start.elapsed().as_secs_f64(),
                                r.elapsed().as_secs_f64()
                            );
                            break;
                        }
                    }
                }
                if now > at(plan.flip_phase) {
                    eprintln!("[soak] caches did not turn fresh before the flip phase");
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            for (i, &t) in plan.flips.iter().enumerate() {
                tokio::time::sleep_until(at(t).into()).await;
                let to = i.is_multiple_of(2);
                let policy = if to { "enforce" } else { "warn" };
                let started = Instant::now();
                let kc = kubeconfig.clone();
                tokio::task::spawn_blocking(move || {
                    kubectl(
                        &kc,
                        &[
                            "label",
                            "namespace",
                            NS_FLIP,
                            &format!("meshscope.io/policy={policy}"),
                            "--overwrite",
                        ],
                        None,
                    )
                })
                .await
                .unwrap()
                .expect("flip the policy label");
                let done = Instant::now();
                flip.lock().unwrap().changes.push((started, done, to));
                eprintln!(
                    "[soak] t={:.1}s {NS_FLIP} policy -> {policy} (kubectl took {} ms)",
                    start.elapsed().as_secs_f64(),
                    (done - started).as_millis()
                );
            }
        })
    };

    // The open-loop generator.
    let period = Duration::from_secs_f64(1.0 / args.rate as f64);
    let mut tick = tokio::time::interval_at(start.into(), period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut i: u64 = 0;
    let mut rss_before = 0;
    let mut rss_after = 0;
    let mut sigterm_sent = false;
    let mut late_ticks: u64 = 0;
    let end = start + Duration::from_secs_f64(plan.end);
    let sigterm_time = end + Duration::from_millis(500);
    let waiter = {
        let exited = exited.clone();
        tokio::task::spawn_blocking(move || {
            let st = webhook.wait();
            exited.store(true, Ordering::SeqCst);
            (st, Instant::now())
        })
    };
    loop {
        let scheduled: Instant = tick.tick().await.into();
        if Instant::now() - scheduled > Duration::from_millis(5) {
            late_ticks += 1;
        }
        let t = scheduled.duration_since(start);
        if rss_before == 0 && t >= Duration::from_secs(2) {
            rss_before = rss_kib(pid).unwrap_or(0);
        }
        if !sigterm_sent && scheduled >= end && rss_after == 0 {
            rss_after = rss_kib(pid).unwrap_or(0);
        }
        if !sigterm_sent && scheduled >= sigterm_time {
            *sigterm_at.lock().unwrap() = Some(Instant::now());
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            sigterm_sent = true;
            log(&format!("t={:.1}s SIGTERM sent", t.as_secs_f64()));
        }
        if exited.load(Ordering::SeqCst) {
            break;
        }
        if sigterm_sent && Instant::now() > sigterm_time + Duration::from_secs(25) {
            break;
        }
        let kind = MIX[(i % MIX.len() as u64) as usize];
        let uid = format!("soak-{i:09}");
        let body = Bytes::from(bodies[&kind].replace("{uid}", &uid));
        let job = Job {
            kind,
            uid,
            body,
            sent: scheduled,
        };
        if i.is_multiple_of(2) {
            let _ = h1_tx.send(job);
        } else {
            let (tls, h2, finish) = (tls.clone(), h2.clone(), finish.clone());
            let slot = ((i / 2) as usize) % h2.slots.len();
            tokio::spawn(async move {
                let (o, body) = send_h2(&tls, &h2, slot, &job).await;
                finish(&job, o, &body);
            });
        }
        i += 1;
    }
    let (status, exited_at) = waiter.await?;
    let status = status?;
    let sig = sigterm_at.lock().unwrap().unwrap_or(exited_at);
    log(&format!(
        "webhook exited {status} {:.2} s after SIGTERM",
        (exited_at - sig).as_secs_f64()
    ));
    drop(h1_tx);
    // Let the last answers and failures come in.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for w in workers {
        w.abort();
    }
    rotator.abort();
    events.abort();
    drop(finish);
    drop(rec_tx);
    let records = tokio::time::timeout(Duration::from_secs(10), collector).await??;

    // === figures ===
    let mut by_phase: BTreeMap<Phase, (PhaseStats, Vec<Duration>)> = BTreeMap::new();
    let mut unchecked_outside_outage = 0u64;
    let outage_end = start + Duration::from_secs_f64(plan.flip_phase);
    let kill_at = start + Duration::from_secs_f64(plan.kill);
    let mut wrong_by_kind: BTreeMap<String, u64> = BTreeMap::new();
    let mut lost_before_sigterm = 0u64;
    let mut refused_before_sigterm = 0u64;
    for r in &records {
        let (s, lat) = by_phase.entry(r.phase).or_default();
        s.sent += 1;
        match r.outcome {
            Outcome::Answered { status, verdict } => {
                s.answered += 1;
                lat.push(r.latency);
                match verdict {
                    Verdict::Right => {}
                    Verdict::RightFromStale => s.from_stale += 1,
                    // The soak starts once the caches have synced: stale
                    // caches still decide, so nothing may pass unchecked.
                    Verdict::Unchecked => {
                        s.unchecked += 1;
                        s.wrong += 1;
                        if r.sent < kill_at || r.sent > outage_end {
                            unchecked_outside_outage += 1;
                        }
                    }
                    Verdict::Wrong => {
                        s.wrong += 1;
                        *wrong_by_kind.entry(format!("{:?}", r.kind)).or_default() += 1;
                    }
                }
                if status == 400 {
                    s.bad_requests_400 += 1;
                } else if !(200..300).contains(&status) {
                    s.unexpected_non_2xx += 1;
                } else if matches!(verdict, Verdict::Right | Verdict::RightFromStale)
                    && matches!(
                        expect(r.kind, flip.lock().unwrap().at(r.sent).0),
                        Expect::Deny(_)
                    )
                {
                    s.expected_denials += 1;
                }
            }
            Outcome::Refused => {
                s.refused += 1;
                if !r.after_sigterm {
                    refused_before_sigterm += 1;
                }
            }
            Outcome::Reset => {
                s.resets += 1;
                if !r.after_sigterm {
                    lost_before_sigterm += 1;
                }
            }
        }
    }
    let mut total = PhaseStats::default();
    let mut all_lat = Vec::new();
    for (s, lat) in by_phase.values_mut() {
        lat.sort();
        s.p50_ms = percentile(lat, 0.50);
        s.p99_ms = percentile(lat, 0.99);
        s.max_ms = lat.last().map(|d| d.as_secs_f64() * 1000.0).unwrap_or(0.0);
        total.sent += s.sent;
        total.answered += s.answered;
        total.expected_denials += s.expected_denials;
        total.bad_requests_400 += s.bad_requests_400;
        total.unexpected_non_2xx += s.unexpected_non_2xx;
        total.wrong += s.wrong;
        total.unchecked += s.unchecked;
        total.from_stale += s.from_stale;
        total.refused += s.refused;
        total.resets += s.resets;
        all_lat.extend_from_slice(lat);
    }
    all_lat.sort();
    total.p50_ms = percentile(&all_lat, 0.5);
    total.p99_ms = percentile(&all_lat, 0.99);
    total.max_ms = all_lat
        .last()
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0);

    // Flip latency: the last answer still in the old policy, after the
    // label change returned.
    let changes = flip.lock().unwrap().changes.clone();
    let mut flip_latency_ms = Vec::new();
    for (k, &(_, done, to)) in changes.iter().enumerate() {
        let until = changes.get(k + 1).map(|c| c.0).unwrap_or(exited_at);
        let mut last_old: Option<Instant> = None;
        for r in records
            .iter()
            .filter(|r| r.kind == Kind::DeployFlip && r.sent >= changes[k].0 && r.sent < until)
        {
            // The old policy: denied when leaving enforce, allowed when
            // leaving warn.
            if r.denied == Some(!to) {
                last_old = Some(last_old.map_or(r.sent, |l: Instant| l.max(r.sent)));
            }
        }
        let ms = last_old.map_or(0.0, |l| {
            l.saturating_duration_since(done).as_secs_f64() * 1000.0
        });
        flip_latency_ms.push(ms);
    }

    let seen = tls.seen.lock().unwrap().clone();
    let stale_certs = tls.stale_certs.load(Ordering::Relaxed);
    let generations = tls.generations.lock().unwrap().len();
    let rss_growth = if rss_before > 0 {
        (rss_after as f64 - rss_before as f64) / rss_before as f64 * 100.0
    } else {
        0.0
    };
    let achieved_rate = records.iter().filter(|r| r.sent < end).count() as f64 / plan.end;
    let o = observed.lock().unwrap();
    let targets = targets(&Judged {
        lost_before_sigterm,
        refused_before_sigterm,
        resets_after_sigterm: by_phase.get(&Phase::Sigterm).map_or(0, |s| s.0.resets),
        wrong: total.wrong,
        unexpected_non_2xx: total.unexpected_non_2xx,
        rss_growth_pct: rss_growth,
        flip_latency_ms: &flip_latency_ms,
        stale_certs,
        generations_seen: seen.len(),
        generations,
        stale_seen: o.stale_seen_after_kill_s.is_some(),
        stale_gauge_seen: o.metrics_stale_gauge_seen,
        fresh_again: o.fresh_again_after_restart_s.is_some(),
        exit_ok: status.success(),
    });

    println!(
        "Webhook soak: {} req/s asked for {} s ({} sent before SIGTERM, {:.0} req/s achieved; {late_ticks} ticks late by > 5 ms), {} HTTP/1.1 + {} HTTP/2 connections, on {} cores",
        args.rate,
        args.duration,
        records.iter().filter(|r| !r.after_sigterm).count(),
        achieved_rate,
        args.h1_connections,
        args.h2_connections,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );
    println!();
    println!("| phase | sent | answered | expected denials | 400s | unexpected non-2xx | wrong | unchecked | from stale caches | refused | resets | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let row = |name: &str, s: &PhaseStats| {
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.1} |",
            s.sent,
            s.answered,
            s.expected_denials,
            s.bad_requests_400,
            s.unexpected_non_2xx,
            s.wrong,
            s.unchecked,
            s.from_stale,
            s.refused,
            s.resets,
            s.p50_ms,
            s.p99_ms,
            s.max_ms
        )
    };
    for (p, (s, _)) in &by_phase {
        row(p.name(), s);
    }
    row("**all**", &total);
    println!();
    println!(
        "RSS {} KiB before, {} KiB after ({rss_growth:+.1}%); {} TLS connections made ({} failed), certificate generations seen {:?}, {} stale; flips followed after {:?} ms; stale after kill {:?} s, fresh {:?} s after restart",
        rss_before,
        rss_after,
        tls.connects.load(Ordering::Relaxed),
        tls.connect_errors.load(Ordering::Relaxed),
        seen,
        stale_certs,
        flip_latency_ms,
        o.stale_seen_after_kill_s,
        o.fresh_again_after_restart_s
    );
    for (name, ok) in &targets {
        println!("- {} {name}", if *ok { "met:" } else { "MISSED:" });
    }
    let phases: BTreeMap<&str, &PhaseStats> =
        by_phase.iter().map(|(p, (s, _))| (p.name(), s)).collect();
    let line = json!({
        "rate_asked": args.rate,
        "rate_achieved": (achieved_rate * 10.0).round() / 10.0,
        "duration_s": args.duration,
        "late_ticks": late_ticks,
        "phases": phases,
        "total": total,
        "lost_before_sigterm": lost_before_sigterm,
        "refused_before_sigterm": refused_before_sigterm,
        "unchecked_outside_outage": unchecked_outside_outage,
        "wrong_by_kind": wrong_by_kind,
        "rss_before_kib": rss_before,
        "rss_after_kib": rss_after,
        "rss_growth_pct": (rss_growth * 10.0).round() / 10.0,
        "tls_connections": tls.connects.load(Ordering::Relaxed),
        "tls_connect_errors": tls.connect_errors.load(Ordering::Relaxed),
        "cert_generations": generations,
        "cert_generations_seen": seen.len(),
        "stale_certs": stale_certs,
        "flip_follow_ms": flip_latency_ms,
        "outage": &*o,
        "exit": status.code(),
        "drain_s": (exited_at - sig).as_secs_f64(),
        "targets_met": targets.iter().all(|(_, ok)| *ok),
    });
    println!("{line}");
    Ok(targets.iter().all(|(_, ok)| *ok))
}

/// What the soak's targets are judged on.
struct Judged<'a> {
    lost_before_sigterm: u64,
    refused_before_sigterm: u64,
    resets_after_sigterm: u64,
    wrong: u64,
    unexpected_non_2xx: u64,
    rss_growth_pct: f64,
    flip_latency_ms: &'a [f64],
    stale_certs: u64,
    generations_seen: usize,
    generations: usize,
    stale_seen: bool,
    stale_gauge_seen: bool,
    fresh_again: bool,
    exit_ok: bool,
}

/// Each target and whether it was met.
fn targets(j: &Judged<'_>) -> [(&'static str, bool); 9] {
    let flips_ok = !j.flip_latency_ms.is_empty() && j.flip_latency_ms.iter().all(|ms| *ms < 1000.0);
    [
        (
            "0 lost or reset requests before SIGTERM",
            j.lost_before_sigterm == 0 && j.refused_before_sigterm == 0,
        ),
        (
            "0 reset requests after SIGTERM",
            j.resets_after_sigterm == 0,
        ),
        ("0 wrong decisions", j.wrong == 0),
        ("0 unexpected non-2xx", j.unexpected_non_2xx == 0),
        ("RSS within 10%", j.rss_growth_pct.abs() <= 10.0),
        ("policy flips followed within 1 s", flips_ok),
        (
            "new connections see the new certificate",
            j.stale_certs == 0 && j.generations_seen >= j.generations.min(2),
        ),
        (
            "stale caches reported and cleared",
            j.stale_seen && j.stale_gauge_seen && j.fresh_again,
        ),
        ("clean exit after SIGTERM", j.exit_ok),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good(flips: &[f64]) -> Judged<'_> {
        Judged {
            lost_before_sigterm: 0,
            refused_before_sigterm: 0,
            resets_after_sigterm: 0,
            wrong: 0,
            unexpected_non_2xx: 0,
            rss_growth_pct: 4.1,
            flip_latency_ms: flips,
            stale_certs: 0,
            generations_seen: 7,
            generations: 7,
            stale_seen: true,
            stale_gauge_seen: true,
            fresh_again: true,
            exit_ok: true,
        }
    }

    /// A change that spoils one target of a good run.
    type Spoil = fn(&mut Judged<'_>);

    /// The targets `j` misses, by name.
    fn missed(j: &Judged<'_>) -> Vec<&'static str> {
        targets(j)
            .iter()
            .filter(|(_, ok)| !ok)
            .map(|(n, _)| *n)
            .collect()
    }

    #[test]
    fn a_good_run_meets_every_target_and_each_miss_is_named() {
        let flips = [13.4, 15.5];
        assert!(missed(&good(&flips)).is_empty());
        let cases: [(&str, Spoil); 10] = [
            ("0 lost or reset requests before SIGTERM", |j| {
                j.lost_before_sigterm = 1
            }),
            ("0 lost or reset requests before SIGTERM", |j| {
                j.refused_before_sigterm = 1
            }),
            ("0 reset requests after SIGTERM", |j| {
                j.resets_after_sigterm = 2
            }),
            ("0 wrong decisions", |j| j.wrong = 1),
            ("0 unexpected non-2xx", |j| j.unexpected_non_2xx = 3),
            ("RSS within 10%", |j| j.rss_growth_pct = -12.0),
            ("new connections see the new certificate", |j| {
                j.stale_certs = 1
            }),
            ("new connections see the new certificate", |j| {
                j.generations_seen = 1
            }),
            ("stale caches reported and cleared", |j| {
                j.fresh_again = false
            }),
            ("clean exit after SIGTERM", |j| j.exit_ok = false),
        ];
        for (name, spoil) in cases {
            let mut j = good(&flips);
            spoil(&mut j);
            assert_eq!(missed(&j), [name]);
        }
        // No flip measured, or one followed late, misses the flip target.
        assert_eq!(missed(&good(&[])), ["policy flips followed within 1 s"]);
        assert_eq!(
            missed(&good(&[13.0, 1500.0])),
            ["policy flips followed within 1 s"]
        );
    }
}
