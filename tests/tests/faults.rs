//! `kubectl meshscope apply` and the live reads under faults, against the
//! real kube-apiserver and etcd of the test control plane:
//!
//! - apply interrupted by SIGINT, or killed by SIGKILL, mid-run: every
//!   Sidecar in the cluster is whole, the user's own Sidecar is untouched,
//!   and a second apply converges, saying what it changed;
//! - one object rejected by a validating admission webhook and a conflict
//!   on another: reported per object, the rest applied;
//! - a paginated list whose continue token the API server compacts away
//!   (a real 410 Gone): listed again from the start, once, and said so.
//!
//! The admission webhook here is a small TLS server of the test's own that
//! the real API server calls (slowing writes down so that a run can be
//! interrupted mid-way, and rejecting one name). The 410 comes from the
//! API server itself: the test compacts etcd the way the API server's own
//! compactor does, while a plain-HTTP pass-through proxy holds the
//! plugin's second page until the API server reports the old state gone.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use kubectl_meshscope::install::generate_pki;
use kubectl_meshscope::Outcome;
use meshscope_e2e::cluster::{plugin_binary, Cluster};
use meshscope_e2e::run::meshscope_at as meshscope;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;

const MANAGED: &str = "app.kubernetes.io/managed-by=kubectl-meshscope";

/// A validating admission webhook for Sidecars in one namespace, served by
/// this test process: each review waits `delay`, and names in `reject` are
/// denied.
struct Hook {
    config: String,
    seen: Arc<AtomicUsize>,
    reject: Arc<Mutex<BTreeSet<String>>>,
    delay_ms: Arc<AtomicUsize>,
}

impl Hook {
    fn start(c: &Cluster, ns: &str, delay: Duration) -> Hook {
        let pki = generate_pki(&["127.0.0.1".to_string()], 1).unwrap();
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(pki.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_slice(pki.key_pem.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let seen = Arc::new(AtomicUsize::new(0));
        let reject = Arc::new(Mutex::new(BTreeSet::new()));
        let delay_ms = Arc::new(AtomicUsize::new(delay.as_millis() as usize));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (s, r, d) = (seen.clone(), reject.clone(), delay_ms.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let app = axum::Router::new().route(
                    "/validate",
                    axum::routing::post(move |body: Bytes| {
                        let (s, r, d) = (s.clone(), r.clone(), d.clone());
                        async move { review(&body, &s, &r, &d).await }
                    }),
                );
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let (acceptor, app) = (acceptor.clone(), app.clone());
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let _ = auto::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                            .await;
                    });
                }
            });
        });
        let config = format!("meshscope-faults-{ns}");
        let ca = base64(pki.ca_pem.as_bytes());
        c.apply(&format!(
            r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: {config}
webhooks:
- name: sidecars.faults.meshscope.test
  clientConfig:
    url: https://127.0.0.1:{port}/validate
    caBundle: {ca}
  rules:
  - apiGroups: [networking.istio.io]
    apiVersions: ["*"]
    operations: [CREATE, UPDATE]
    resources: [sidecars]
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {ns}
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: Fail
  timeoutSeconds: 10
"#
        ));
        // The API server picks a new configuration up within a moment:
        // wait until a server-side dry run reaches the hook.
        let probe = format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: hook-probe\n  namespace: {ns}\nspec:\n  egress:\n  - hosts: [\"./*\"]\n"
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.load(Ordering::SeqCst) == 0 {
            assert!(
                Instant::now() < deadline,
                "the API server never called the test webhook"
            );
            c.kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&probe));
            std::thread::sleep(Duration::from_millis(200));
        }
        seen.store(0, Ordering::SeqCst);
        Hook {
            config,
            seen,
            reject,
            delay_ms,
        }
    }

    fn seen(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }

    fn set_delay(&self, d: Duration) {
        self.delay_ms
            .store(d.as_millis() as usize, Ordering::SeqCst);
    }

    fn remove(&self, c: &Cluster) {
        c.kubectl(
            &[
                "delete",
                "validatingwebhookconfiguration",
                &self.config,
                "--ignore-not-found",
            ],
            None,
        );
    }
}

async fn review(
    body: &[u8],
    seen: &AtomicUsize,
    reject: &Mutex<BTreeSet<String>>,
    delay_ms: &AtomicUsize,
) -> Response<String> {
    seen.fetch_add(1, Ordering::SeqCst);
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .body(String::new())
            .unwrap();
    };
    tokio::time::sleep(Duration::from_millis(delay_ms.load(Ordering::SeqCst) as u64)).await;
    let name = v["request"]["name"].as_str().unwrap_or_default();
    let allowed = !reject.lock().unwrap().contains(name);
    let mut response = serde_json::json!({"uid": v["request"]["uid"], "allowed": allowed});
    if !allowed {
        response["status"] = serde_json::json!({"code": 403, "message": format!("{name} is frozen by the change board")});
    }
    let out = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(out.to_string())
        .unwrap()
}

fn base64(b: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for chunk in b.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// `count` Deployments `w00`, `w01`, ... in an injected namespace, and a
/// Sidecar of the user's named as meshscope would name w01's.
fn workloads(c: &Cluster, prefix: &str, count: usize) -> String {
    let ns = c.namespace(prefix, &[("istio-injection", "enabled")]);
    let mut yaml = String::new();
    for i in 0..count {
        yaml.push_str(&format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: w{i:02}\n  namespace: {ns}\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {{app: w{i:02}}}\n  template:\n    metadata:\n      labels: {{app: w{i:02}}}\n    spec:\n      containers: [{{name: c, image: example/w:1}}]\n---\n"
        ));
    }
    yaml.push_str(&format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: w01-deployment-meshscope\n  namespace: {ns}\nspec:\n  workloadSelector:\n    labels: {{team: payments}}\n  egress:\n  - hosts: [\"./*\"]\n"
    ));
    c.apply(&yaml);
    ns
}

/// The managed Sidecars of `ns` by name: spec, labels and annotations.
fn managed(c: &Cluster, ns: &str) -> BTreeMap<String, Value> {
    let out = c.kubectl_ok(
        &[
            "get",
            "sidecars.networking.istio.io",
            "-n",
            ns,
            "-l",
            MANAGED,
            "-o",
            "json",
        ],
        None,
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                whole(o),
            )
        })
        .collect()
}

/// What makes a generated Sidecar what apply meant to write.
fn whole(o: &Value) -> Value {
    let keep = |m: &Value, prefixes: &[&str]| -> Value {
        m.as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| prefixes.iter().any(|p| k.starts_with(p)))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<serde_json::Map<_, _>>()
                    .into()
            })
            .unwrap_or_default()
    };
    serde_json::json!({
        "spec": o["spec"],
        "labels": keep(&o["metadata"]["labels"], &["app.kubernetes.io/managed-by", "meshscope.io/"]),
        "annotations": keep(&o["metadata"]["annotations"], &["meshscope.io/"]),
    })
}

/// What `recommend` says apply will write, by name.
fn recommended(c: &Cluster, ns: &str) -> BTreeMap<String, Value> {
    let r = meshscope(
        &c.kubeconfig,
        &["recommend", "-n", ns, "--allow-idle", "-o", "json"],
    );
    assert_eq!(r.outcome.as_ref().ok(), Some(&Outcome::Ok), "{}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let items = v["items"].as_array().cloned().unwrap_or_else(|| vec![v]);
    items
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                whole(o),
            )
        })
        .collect()
}

/// Starts `kubectl meshscope apply -n NS --allow-idle` as a process, and
/// sends it `signal` once the webhook has seen `after` writes.
fn apply_signalled(
    c: &Cluster,
    ns: &str,
    hook: &Hook,
    after: usize,
    signal: &str,
) -> (i32, String, String) {
    let child = Command::new(plugin_binary())
        .args(["apply", "-n", ns, "--allow-idle", "--kubeconfig"])
        .arg(&c.kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while hook.seen() < after {
        assert!(Instant::now() < deadline, "apply never wrote");
        std::thread::sleep(Duration::from_millis(10));
    }
    let st = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = child.wait_with_output().unwrap();
    let code = match out.status.code() {
        Some(c) => c,
        None => {
            use std::os::unix::process::ExitStatusExt;
            128 + out.status.signal().unwrap_or(0)
        }
    };
    (
        code,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What a finished interrupted or killed run must have left: only whole
/// Sidecars, some but not all, and the user's untouched.
fn check_left_whole(c: &Cluster, ns: &str, want: &BTreeMap<String, Value>, user_rv: &str) -> usize {
    let got = managed(c, ns);
    for (name, v) in &got {
        assert_eq!(
            Some(v),
            want.get(name),
            "{name} is not what apply meant to write"
        );
    }
    assert!(
        !got.is_empty() && got.len() < want.len(),
        "{} of {} written: the run was not interrupted mid-way",
        got.len(),
        want.len()
    );
    assert_eq!(
        c.sidecar_resource_version(ns, "w01-deployment-meshscope"),
        user_rv,
        "the user's Sidecar was touched"
    );
    got.len()
}

/// A second apply converges: it creates the rest and says so; a third
/// changes nothing.
fn check_converges(
    c: &Cluster,
    ns: &str,
    want: &BTreeMap<String, Value>,
    written: usize,
    user_rv: &str,
) {
    let r = meshscope(&c.kubeconfig, &["apply", "-n", ns, "--allow-idle"]);
    assert_eq!(r.outcome.as_ref().ok(), Some(&Outcome::Ok), "{}", r.stderr);
    let created = r.stdout.lines().filter(|l| l.contains(" created ")).count();
    let unchanged = r
        .stdout
        .lines()
        .filter(|l| l.contains(" unchanged "))
        .count();
    assert_eq!(
        (created, unchanged),
        (want.len() - written, written),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr
            .contains(&format!("{} created", want.len() - written)),
        "{}",
        r.stderr
    );
    assert_eq!(&managed(c, ns), want);
    let r = meshscope(&c.kubeconfig, &["apply", "-n", ns, "--allow-idle"]);
    assert_eq!(r.outcome.as_ref().ok(), Some(&Outcome::Ok), "{}", r.stderr);
    assert!(
        !r.stdout.contains(" created ") && !r.stdout.contains(" configured "),
        "{}",
        r.stdout
    );
    assert_eq!(
        c.sidecar_resource_version(ns, "w01-deployment-meshscope"),
        user_rv
    );
}

#[test]
fn an_interrupted_apply_finishes_the_writes_in_flight_and_a_second_run_converges() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = workloads(c, "sigint", 48);
    let user_rv = c.sidecar_resource_version(&ns, "w01-deployment-meshscope");
    let want = recommended(c, &ns);
    assert_eq!(
        want.len(),
        47,
        "w01's name is the user's: {:?}",
        want.keys()
    );
    let hook = Hook::start(c, &ns, Duration::from_millis(400));
    let (code, stdout, stderr) = apply_signalled(c, &ns, &hook, 1, "INT");
    assert_eq!(code, 2, "{stderr}");
    let written = check_left_whole(c, &ns, &want, &user_rv);
    // It says what it wrote, per object and in all, and what it did not.
    assert_eq!(
        stdout.lines().filter(|l| l.contains(" created ")).count(),
        written,
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!(
            "error: interrupted: {} of 47 Sidecars not written; each write is one server-side apply, so what was written is whole. Run the same command again to finish",
            47 - written
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("skipped Deployment/{ns}/w01: ")),
        "the user's Sidecar is named: {stderr}"
    );
    hook.set_delay(Duration::ZERO);
    check_converges(c, &ns, &want, written, &user_rv);
    hook.remove(c);
}

#[test]
fn an_apply_killed_mid_run_leaves_only_whole_sidecars_and_a_second_run_converges() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = workloads(c, "sigkill", 48);
    let user_rv = c.sidecar_resource_version(&ns, "w01-deployment-meshscope");
    let want = recommended(c, &ns);
    let hook = Hook::start(c, &ns, Duration::from_millis(400));
    // Killed once the second wave of writes is under way.
    let (code, _, _) = apply_signalled(c, &ns, &hook, 20, "KILL");
    assert_eq!(code, 128 + 9);
    // Writes the API server had taken before the client went away finish
    // there; wait for them before looking.
    std::thread::sleep(Duration::from_secs(1));
    let written = check_left_whole(c, &ns, &want, &user_rv);
    hook.set_delay(Duration::ZERO);
    check_converges(c, &ns, &want, written, &user_rv);
    hook.remove(c);
}

#[test]
fn a_rejected_object_and_a_conflict_are_reported_per_object_and_the_rest_applied() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = workloads(c, "partial", 6);
    let r = meshscope(&c.kubeconfig, &["apply", "-n", &ns, "--allow-idle"]);
    assert_eq!(r.outcome.as_ref().ok(), Some(&Outcome::Ok), "{}", r.stderr);
    let want = recommended(c, &ns);
    // Another field manager takes w03's egress over; w02's is deleted, to be
    // created again, which the webhook refuses; w04's too, created again.
    c.kubectl_ok(
        &["apply", "--server-side", "--force-conflicts", "--field-manager=platform-team", "-f", "-"],
        Some(&format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: w03-deployment-meshscope\n  namespace: {ns}\nspec:\n  egress:\n  - hosts: [\"istio-system/*\", \"./*\"]\n"
        )),
    );
    for name in ["w02-deployment-meshscope", "w04-deployment-meshscope"] {
        c.kubectl_ok(
            &["delete", "sidecars.networking.istio.io", "-n", &ns, name],
            None,
        );
    }
    let hook = Hook::start(c, &ns, Duration::ZERO);
    hook.reject
        .lock()
        .unwrap()
        .insert("w02-deployment-meshscope".into());
    let r = meshscope(&c.kubeconfig, &["apply", "-n", &ns, "--allow-idle"]);
    assert_eq!(
        r.outcome.as_ref().ok(),
        Some(&Outcome::Findings),
        "{}",
        r.stderr
    );
    for line in [
        "sidecar.networking.istio.io/w00-deployment-meshscope unchanged",
        "sidecar.networking.istio.io/w02-deployment-meshscope failed",
        "sidecar.networking.istio.io/w03-deployment-meshscope skipped",
        "sidecar.networking.istio.io/w04-deployment-meshscope created",
        "sidecar.networking.istio.io/w05-deployment-meshscope unchanged",
    ] {
        assert!(r.stdout.contains(line), "{line}:\n{}", r.stdout);
    }
    assert!(
        r.stderr
            .contains(&format!("failed: {ns}/w02-deployment-meshscope: "))
            && r.stderr
                .contains("w02-deployment-meshscope is frozen by the change board"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(&format!(
            "skipped: {ns}/w03-deployment-meshscope: conflict: "
        )) && r.stderr.contains("platform-team")
            && r.stderr.contains("rerun with --force-conflicts"),
        "{}",
        r.stderr
    );
    let got = managed(c, &ns);
    assert_eq!(
        got.get("w04-deployment-meshscope"),
        want.get("w04-deployment-meshscope")
    );
    assert!(!got.contains_key("w02-deployment-meshscope"));
    hook.remove(c);
}

/// A plain-HTTP proxy to the API server (with the admin's credentials)
/// that, on the first later page of a pods list, compacts etcd past the
/// list's state and holds the request until the API server says that
/// state is gone.
struct CompactingProxy {
    kubeconfig: PathBuf,
    compacted: Arc<AtomicBool>,
    _dir: tempfile::TempDir,
}

impl CompactingProxy {
    fn start(c: &Cluster, ns: &str) -> CompactingProxy {
        let env =
            std::fs::read_to_string(c.kubeconfig.parent().unwrap().join("cluster.env")).unwrap();
        let etcd = env
            .lines()
            .find_map(|l| l.strip_prefix("MESHSCOPE_ETCD_URL="))
            .unwrap()
            .to_string();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let compacted = Arc::new(AtomicBool::new(false));
        let (admin, flag, ns) = (c.kubeconfig.clone(), compacted.clone(), ns.to_string());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let kc = kube::config::Kubeconfig::read_from(&admin).unwrap();
                let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                    .await
                    .unwrap();
                let client = kube::Client::try_from(config).unwrap();
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let pods = format!("/api/v1/namespaces/{ns}/pods");
                let app = axum::Router::new().fallback(move |req: Request<axum::body::Body>| {
                    let (client, flag, etcd, pods) =
                        (client.clone(), flag.clone(), etcd.clone(), pods.clone());
                    async move {
                        let later_page = req.uri().path() == pods
                            && req.uri().query().is_some_and(|q| q.contains("continue="));
                        if later_page && !flag.swap(true, Ordering::SeqCst) {
                            compact_until_gone(&client, &etcd, &pods).await;
                        }
                        forward(&client, req).await
                    }
                });
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let app = app.clone();
                    tokio::spawn(async move {
                        let _ = auto::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(tcp), TowerToHyperService::new(app))
                            .await;
                    });
                }
            });
        });
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("proxy.kubeconfig");
        let mut f = std::fs::File::create(&kubeconfig).unwrap();
        write!(
            f,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: proxy\n  context: {{cluster: proxy, user: proxy, namespace: default}}\ncurrent-context: proxy\n"
        )
        .unwrap();
        CompactingProxy {
            kubeconfig,
            compacted,
            _dir: dir,
        }
    }
}

async fn forward(
    client: &kube::Client,
    req: Request<axum::body::Body>,
) -> Response<axum::body::Body> {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let mut out = Request::builder().method(parts.method).uri(
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/"),
    );
    for (k, v) in &parts.headers {
        if k != "host" && k != "accept-encoding" {
            out = out.header(k, v);
        }
    }
    let out = out.body(kube::client::Body::from(body.to_vec())).unwrap();
    match client.send(out).await {
        Ok(res) => {
            let (mut parts, body) = res.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            // The client has decoded the body already.
            parts.headers.remove("content-encoding");
            parts.headers.remove("content-length");
            parts.headers.remove("transfer-encoding");
            Response::from_parts(parts, axum::body::Body::from(bytes))
        }
        Err(e) => Response::builder()
            .status(StatusCode::BAD_GATEWAY)
            .body(axum::body::Body::from(e.to_string()))
            .unwrap(),
    }
}

/// Compacts etcd the way the API server's compactor does (records the
/// revision under `compact_rev_key`, then compacts), after one more write
/// so that every continue token issued so far is older than the
/// compaction; then waits until a token for `pods` taken before is
/// refused with 410 (the API server's watch cache notices within ~15 s).
async fn compact_until_gone(client: &kube::Client, etcd: &str, pods: &str) {
    let get = |uri: String| {
        let client = client.clone();
        async move {
            let req = Request::builder()
                .uri(uri)
                .body(kube::client::Body::empty())
                .unwrap();
            let res = client.send(req).await.unwrap();
            let status = res.status();
            let body = res.into_body().collect_bytes().await.unwrap();
            (
                status,
                serde_json::from_slice::<Value>(&body).unwrap_or_default(),
            )
        }
    };
    let (_, first) = get(format!("{pods}?limit=1")).await;
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    let etcd = etcd.to_string();
    tokio::task::spawn_blocking(move || {
        let post = |path: &str, body: String| -> Value {
            let out = Command::new("curl")
                .args(["-fsS", "-X", "POST", &format!("{etcd}{path}"), "-d", &body])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice(&out.stdout).unwrap()
        };
        let key = base64(b"compact_rev_key");
        post(
            "/v3/kv/put",
            format!(
                r#"{{"key":"{}","value":"{}"}}"#,
                base64(b"bump"),
                base64(b"1")
            ),
        );
        let rev = post("/v3/kv/range", format!(r#"{{"key":"{key}"}}"#))["header"]["revision"]
            .as_str()
            .unwrap()
            .to_string();
        post(
            "/v3/kv/put",
            format!(r#"{{"key":"{key}","value":"{}"}}"#, base64(rev.as_bytes())),
        );
        post(
            "/v3/kv/compaction",
            format!(r#"{{"revision":{rev},"physical":true}}"#),
        );
    })
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, _) = get(format!("{pods}?limit=1&continue={token}")).await;
        if status == StatusCode::GONE {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the API server never expired the old state"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[test]
fn a_list_whose_continue_token_expires_mid_way_is_listed_again_once_and_said() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("gone", &[("istio-injection", "enabled")]);
    let mut yaml = String::new();
    for i in 0..9 {
        yaml.push_str(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p{i}\n  namespace: {ns}\n  labels: {{app: p{i}}}\nspec:\n  containers: [{{name: c, image: example/p:1}}]\n---\n"
        ));
    }
    c.apply(&yaml);
    let proxy = CompactingProxy::start(c, &ns);
    let r = meshscope(
        &proxy.kubeconfig,
        &["audit", "-n", &ns, "--chunk-size", "2", "-o", "json"],
    );
    assert!(
        proxy.compacted.load(Ordering::SeqCst),
        "the list never reached a second page: {}",
        r.stderr
    );
    assert_eq!(r.outcome.as_ref().ok(), Some(&Outcome::Ok), "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "note: the list of pods in namespace {ns:?} expired after 2 items (410 Gone: the API server compacted the state the pages were read from); listed again from the start"
        )),
        "{}",
        r.stderr
    );
    // Every pod is there: nothing of the first attempt was lost or doubled.
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let unscoped: BTreeSet<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "MS0001")
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    let all: BTreeSet<String> = (0..9).map(|i| format!("p{i}")).collect();
    assert_eq!(unscoped, all.iter().map(String::as_str).collect());
}
