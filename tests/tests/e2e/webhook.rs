//! meshscope-webhook against the real kube-apiserver from tests/cluster:
//! the built binary serves HTTPS on loopback with a certificate from
//! `kubectl meshscope webhook`'s own generator, runs as the install's
//! ServiceAccount (impersonated, so the shipped RBAC is what it gets), and is
//! registered with `clientConfig.url` and `caBundle` for namespaces carrying
//! this run's label only. Everything goes through `kubectl apply`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kubectl_meshscope::install::{render, Pki};
use meshscope_e2e::cluster::{bin_dir, Cluster};
use meshscope_e2e::setup::{
    install_webhook_rbac, webhook_files, webhook_manifests_args, WebhookFiles,
};
use meshscope_test_support::net::free_port;
use serde::Deserialize as _;
use serde_json::Value;
use serde_yaml::Value as Yaml;

/// The label that sends a namespace to one test's webhook.
const SCOPE_LABEL: &str = "meshscope-e2e/webhook";
const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a Sidecar may take to reach the webhook's cache.
const PROPAGATION: Duration = Duration::from_secs(20);

fn webhook_binary() -> PathBuf {
    let p = bin_dir().join("meshscope-webhook");
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (cargo build --workspace)",
        p.display()
    );
    p
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

// === one webhook process ===

struct Webhook {
    /// The control plane it is registered with.
    cluster: &'static Cluster,
    child: Option<Child>,
    port: u16,
    admin_port: u16,
    /// Value of SCOPE_LABEL on this webhook's namespaces.
    scope: String,
    config_name: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Webhook {
    /// Starts the binary, registers it, and waits until it rejects an
    /// unscoped Deployment in an enforce namespace.
    fn start(c: &'static Cluster, tag: &str, env: &[(&str, &str)]) -> Webhook {
        let WebhookFiles {
            dir,
            pki,
            kubeconfig,
        } = webhook_files(c);
        let log = dir.path().join("webhook.log");
        let spawn = |port: u16, admin_port: u16| {
            Command::new(webhook_binary())
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("KUBECONFIG", &kubeconfig)
                .env("MESHSCOPE_LISTEN", format!("127.0.0.1:{port}"))
                .env("MESHSCOPE_ADMIN_LISTEN", format!("127.0.0.1:{admin_port}"))
                .env("MESHSCOPE_TLS_CERT", dir.path().join("tls.crt"))
                .env("MESHSCOPE_TLS_KEY", dir.path().join("tls.key"))
                .env("MESHSCOPE_LOG_LEVEL", "info,meshscope_webhook=debug")
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("meshscope-webhook starts")
        };
        // A port found free can be taken before the webhook binds it: retry.
        let mut attempt = 0;
        let (child, port, admin_port) = loop {
            let (port, admin_port) = (free_port(), free_port());
            let mut child = spawn(port, admin_port);
            match wait_listening(&mut child, &log) {
                Ok(()) => break (child, port, admin_port),
                Err(why) if why.contains("cannot listen") && attempt < 3 => attempt += 1,
                Err(why) => panic!("meshscope-webhook did not start: {why}"),
            }
        };
        let scope = Cluster::unique_ns(tag);
        let mut wh = Webhook {
            cluster: c,
            child: Some(child),
            port,
            admin_port,
            config_name: format!("meshscope-e2e-{scope}"),
            scope,
            log,
            _dir: dir,
        };
        wh.register(c, &pki);
        wh.wait_ready(c);
        wh
    }

    /// The install's webhook configurations, pointed at this process by URL
    /// and narrowed to this webhook's namespaces.
    fn register(&self, c: &Cluster, pki: &Pki) {
        let docs = render(&webhook_manifests_args(), pki).unwrap();
        for mut doc in docs.into_iter().filter(|d| {
            d["kind"]
                .as_str()
                .is_some_and(|k| k.ends_with("WebhookConfiguration"))
        }) {
            doc["metadata"]["name"] = self.config_name.clone().into();
            let hooks = doc["webhooks"].as_sequence_mut().unwrap();
            // The root-namespace entry would also see other tests' Sidecars.
            hooks.retain(|h| h["namespaceSelector"]["matchExpressions"][0]["operator"] == "NotIn");
            for hook in hooks.iter_mut() {
                let path = hook["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let ca = hook["clientConfig"]["caBundle"].clone();
                let mut cc = serde_yaml::Mapping::new();
                cc.insert(
                    "url".into(),
                    format!("https://127.0.0.1:{}{path}", self.port).into(),
                );
                cc.insert("caBundle".into(), ca);
                hook["clientConfig"] = Yaml::Mapping(cc);
                let mut labels = serde_yaml::Mapping::new();
                labels.insert(SCOPE_LABEL.into(), self.scope.clone().into());
                hook["namespaceSelector"]
                    .as_mapping_mut()
                    .unwrap()
                    .insert("matchLabels".into(), Yaml::Mapping(labels));
            }
            c.apply(&serde_yaml::to_string(&doc).unwrap());
        }
    }

    /// A namespace for this webhook, injected, with a policy.
    fn namespace(&self, c: &Cluster, policy: &str) -> String {
        c.namespace(
            "wh",
            &[
                ("istio-injection", "enabled"),
                ("meshscope.io/policy", policy),
                (SCOPE_LABEL, &self.scope),
            ],
        )
    }

    fn wait_ready(&mut self, c: &Cluster) {
        let ns = self.namespace(c, "enforce");
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let o = c.kubectl(
                &["create", "--dry-run=server", "-f", "-"],
                Some(&deployment(&ns, "probe", None)),
            );
            let (_, err) = text(&o);
            if err.contains("denied the request: MS0001") {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("meshscope-webhook exited ({status}):\n{}", self.log_text());
            }
            if Instant::now() > deadline {
                panic!(
                    "meshscope-webhook did not start rejecting within {READY_TIMEOUT:?} (last: {err})\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET /metrics from the admin port.
    fn metrics(&self) -> String {
        self.admin("/metrics")
    }

    /// GET `path` from the admin port: the whole HTTP response.
    fn admin(&self, path: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.admin_port)).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    /// SIGTERM; returns how the process exited and how long it took.
    fn terminate(&mut self) -> (std::process::ExitStatus, Duration) {
        let mut child = self.child.take().expect("running");
        let started = Instant::now();
        let st = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return (status, started.elapsed());
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!(
                    "meshscope-webhook did not exit on SIGTERM:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- meshscope-webhook log ---\n{}", self.log_text());
        }
        let c = self.cluster;
        for kind in [
            "validatingwebhookconfiguration",
            "mutatingwebhookconfiguration",
        ] {
            let _ = c.kubectl(
                &["delete", kind, &self.config_name, "--ignore-not-found"],
                None,
            );
        }
    }
}

/// Waits until the webhook logs that it listens, or fails with its log.
fn wait_listening(child: &mut Child, log: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("meshscope-webhook starting") {
            return Ok(());
        }
        if let Some(status) = child.try_wait().unwrap() {
            return Err(format!("exited ({status}):\n{text}"));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(format!("not listening after 30s:\n{text}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// === objects ===

fn deployment(ns: &str, name: &str, exempt: Option<&str>) -> String {
    let annotations = exempt
        .map(|r| format!("\n  annotations:\n    meshscope.io/exempt: \"{r}\""))
        .unwrap_or_default();
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {ns}{annotations}
spec:
  replicas: 1
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
      containers:
      - name: app
        image: registry.example.com/{name}:1
"
    )
}

fn service_entry(ns: &str, name: &str, export_to: Option<&str>) -> String {
    let export = export_to
        .map(|e| format!("\n  exportTo: [\"{e}\"]"))
        .unwrap_or_default();
    format!(
        "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: {name}
  namespace: {ns}
spec:
  hosts: [\"{name}.example.com\"]
  location: MESH_EXTERNAL
  ports:
  - number: 443
    name: tls
    protocol: TLS
  resolution: DNS{export}
"
    )
}

fn apply(c: &Cluster, yaml: &str, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec!["apply", "-f", "-"];
    args.extend_from_slice(extra);
    let o = c.kubectl(&args, Some(yaml));
    let (out, err) = text(&o);
    (o.status.success(), out, err)
}

fn exists(c: &Cluster, kind: &str, ns: &str, name: &str) -> bool {
    c.kubectl(&["get", kind, name, "-n", ns], None)
        .status
        .success()
}

fn unscoped_denial(ns: &str, name: &str) -> String {
    format!(
        "denied the request: MS0001: Deployment {ns}/{name} has no Sidecar scope; run: kubectl meshscope apply -n {ns} --workload deployment/{name} --from-pod-logs (not running yet: kubectl meshscope apply -n {ns} --workload deployment/{name} --from-manifest-hints --allow-idle)"
    )
}

/// The denial of a Deployment's creation: it is not in the cluster yet,
/// so the fix plans from its manifest.
fn creation_denial(ns: &str, name: &str) -> String {
    format!(
        "denied the request: MS0001: Deployment {ns}/{name} has no Sidecar scope; create its Sidecar first from the manifest you are applying, then apply that again: kubectl meshscope apply -n {ns} --workload deployment/{name} --from-manifest-hints --allow-idle -f FILE (FILE: the manifest that holds this Deployment)"
    )
}

/// Creates Service `reviews` in `ns` and returns Deployment `worker`,
/// whose environment names `reviews:9080` (a host manifest hints find).
fn worker_calling_reviews(c: &Cluster, ns: &str) -> String {
    let svc = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: reviews\n  namespace: {ns}\nspec:\n  selector: {{app: reviews}}\n  ports:\n  - {{name: http, port: 9080}}\n"
    );
    let (ok, _, err) = apply(c, &svc, &[]);
    assert!(ok, "{err}");
    deployment(ns, "worker", None).replace(
        "        image: registry.example.com/worker:1\n",
        "        image: registry.example.com/worker:1\n        env:\n        - {name: REVIEWS_ADDR, value: \"reviews:9080\"}\n",
    )
}

/// Applies `yaml` until the webhook admits it without a warning, within
/// [`PROPAGATION`] of `fix` having run.
fn admitted_after(c: &Cluster, yaml: &str, fix: &str) {
    let deadline = Instant::now() + PROPAGATION;
    loop {
        let (ok, _, err) = apply(c, yaml, &[]);
        if ok {
            assert!(!err.contains("Warning"), "{err}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still denied {PROPAGATION:?} after `{fix}`: {err}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `kubectl meshscope recommend` for one workload, offline from the
/// objects as written.
fn recommend(ns: &str, name: &str, manifests: &str, dir: &Path) -> String {
    let file = dir.join("manifests.yaml");
    std::fs::write(&file, manifests).unwrap();
    let file = file.to_str().unwrap();
    let o = meshscope_e2e::run::binary([
        "recommend",
        "--manifests",
        file,
        "-n",
        ns,
        "--workload",
        name,
        "--allow-idle",
    ])
    .output();
    let (out, err) = text(&o);
    assert!(o.status.success(), "recommend failed: {err}");
    assert!(out.contains("kind: Sidecar"), "{out}");
    out
}

// === tests ===

#[test]
fn enforce_rejects_an_unscoped_deployment_until_a_recommended_sidecar_exists() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let wh = Webhook::start(c, "enf", &[]);
    let ns = wh.namespace(c, "enforce");
    let dep = deployment(&ns, "worker", None);

    let (ok, _, err) = apply(c, &dep, &[]);
    assert!(!ok, "an unscoped Deployment was admitted");
    assert!(err.contains(&creation_denial(&ns, "worker")), "{err}");
    assert!(!exists(c, "deployment", &ns, "worker"));

    // The fix the message names: recommend, apply, retry.
    let dir = tempfile::tempdir().unwrap();
    let ns_yaml = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    istio-injection: enabled\n---\n"
    );
    let sidecar = recommend(&ns, "worker", &format!("{ns_yaml}{dep}"), dir.path());
    let (ok, _, err) = apply(c, &sidecar, &[]);
    assert!(ok, "{err}");
    assert!(
        !err.contains("Warning"),
        "a recommended Sidecar is clean: {err}"
    );

    let deadline = Instant::now() + PROPAGATION;
    loop {
        let (ok, _, err) = apply(c, &dep, &[]);
        if ok {
            assert!(!err.contains("Warning"), "{err}");
            break;
        }
        assert!(err.contains("MS0001"), "{err}");
        assert!(
            Instant::now() < deadline,
            "still denied {PROPAGATION:?} after the Sidecar was created: {err}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(exists(c, "deployment", &ns, "worker"));

    // Its pods and ReplicaSet are left to the Deployment, and an update of
    // the scoped Deployment passes too.
    let scaled = dep.replace("replicas: 1", "replicas: 2");
    let (ok, _, err) = apply(c, &scaled, &[]);
    assert!(ok && !err.contains("Warning"), "{err}");

    let metrics = wh.metrics();
    assert!(
        metrics.contains("kind=\"Deployment\",operation=\"CREATE\",decision=\"deny\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("meshscope_webhook_cache_synced 1"),
        "{metrics}"
    );
}

/// The fix an enforce denial offers a Deployment that is not running yet
/// (admitted under warn, denied once the namespace enforces), run as
/// printed: afterwards the webhook admits the Deployment's update.
#[test]
fn the_fix_a_denial_prints_for_a_workload_not_running_yet_gets_it_admitted() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let wh = Webhook::start(c, "fix", &[]);
    let ns = wh.namespace(c, "warn");
    let dep = worker_calling_reviews(c, &ns);
    let (ok, _, err) = apply(c, &dep, &[]);
    assert!(ok && err.contains("Warning: MS0001"), "{err}");

    c.kubectl_ok(
        &[
            "label",
            "namespace",
            &ns,
            "meshscope.io/policy=enforce",
            "--overwrite",
        ],
        None,
    );
    let scaled = dep.replace("replicas: 1", "replicas: 2");
    let deadline = Instant::now() + PROPAGATION;
    let denial = loop {
        let (ok, _, err) = apply(c, &scaled, &[]);
        if !ok {
            break err;
        }
        assert!(
            Instant::now() < deadline,
            "still admitted {PROPAGATION:?} after the namespace enforces: {err}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(denial.contains(&unscoped_denial(&ns, "worker")), "{denial}");
    let fix = crate::hints::not_running_fix(&denial);
    let (ok, err) = crate::hints::run_printed(c, &fix);
    assert!(ok, "{fix}: {err}");
    admitted_after(c, &scaled, &fix);
}

/// The fix the denial of a Deployment's creation prints, run as printed
/// with FILE the manifest that was denied: the Sidecar is made from the
/// hosts the manifest names, and the same manifest is then admitted.
#[test]
fn the_fix_a_creation_denial_prints_gets_the_deployment_created() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let wh = Webhook::start(c, "create", &[]);
    let ns = wh.namespace(c, "enforce");
    let dep = worker_calling_reviews(c, &ns);
    let (ok, _, denial) = apply(c, &dep, &[]);
    assert!(!ok, "an unscoped Deployment was admitted");
    assert!(denial.contains(&creation_denial(&ns, "worker")), "{denial}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("worker.yaml");
    std::fs::write(&file, &dep).unwrap();
    let (_, printed) = denial.split_once("then apply that again: ").unwrap();
    let (printed, _) = printed.split_once(" (FILE:").unwrap();
    let fix = printed.replace("-f FILE", &format!("-f {}", file.display()));
    let (ok, err) = crate::hints::run_printed(c, &fix);
    assert!(ok, "{fix}: {err}");
    assert!(
        err.contains(&format!("new Deployment {ns}/worker")),
        "{err}"
    );
    let sidecars = c.kubectl_ok(&["get", "sidecars", "-n", &ns, "-o", "yaml"], None);
    assert!(
        sidecars.contains(&format!("{ns}/reviews.{ns}.svc.cluster.local")),
        "the Sidecar imports the host the manifest names: {sidecars}"
    );

    admitted_after(c, &dep, &fix);
    assert!(exists(c, "deployment", &ns, "worker"));
}

#[test]
fn warn_admits_an_unscoped_deployment_with_a_warning_kubectl_shows() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let wh = Webhook::start(c, "warn", &[]);
    let ns = wh.namespace(c, "warn");
    let (ok, _, err) = apply(c, &deployment(&ns, "worker", None), &[]);
    assert!(ok, "{err}");
    assert!(
        err.contains(&format!(
            "Warning: MS0001: Deployment {ns}/worker has no Sidecar scope; see kubectl meshscope codes MS0001"
        )),
        "{err}"
    );
    assert!(exists(c, "deployment", &ns, "worker"));

    // Sidecar hygiene is reported the same way, and never blocks.
    let no_egress = format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: tuning\n  namespace: {ns}\nspec:\n  workloadSelector:\n    labels:\n      app: api\n  ingress:\n  - port:\n      number: 8080\n      protocol: HTTP\n      name: http\n    defaultEndpoint: 127.0.0.1:8080\n"
    );
    let (ok, _, err) = apply(c, &no_egress, &[]);
    assert!(ok, "{err}");
    assert!(
        err.contains(&format!(
            "Warning: MS0006: Sidecar {ns}/tuning has no egress"
        )),
        "{err}"
    );

    // An exemption with a reason admits silently in an enforce namespace,
    // and is counted.
    let strict = wh.namespace(c, "enforce");
    let (ok, _, err) = apply(
        c,
        &deployment(
            &strict,
            "legacy",
            Some("talks to 40 services; scoped in Q3"),
        ),
        &[],
    );
    assert!(ok, "{err}");
    assert!(!err.contains("Warning"), "{err}");
    let metrics = wh.metrics();
    assert!(
        metrics.contains(&format!(
            "meshscope_webhook_exemptions_total{{kind=\"Deployment\",namespace=\"{strict}\"}} 1"
        )),
        "{metrics}"
    );
}

#[test]
fn server_side_dry_run_gets_the_same_decisions_and_persists_nothing() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let wh = Webhook::start(c, "dry", &[]);
    let strict = wh.namespace(c, "enforce");
    let lenient = wh.namespace(c, "warn");

    let (ok, _, err) = apply(
        c,
        &deployment(&strict, "worker", None),
        &["--dry-run=server"],
    );
    assert!(!ok);
    assert!(err.contains(&creation_denial(&strict, "worker")), "{err}");

    let (ok, out, err) = apply(
        c,
        &deployment(&lenient, "worker", None),
        &["--dry-run=server"],
    );
    assert!(ok, "{err}");
    assert!(out.contains("(server dry run)"), "{out}");
    assert!(err.contains("Warning: MS0001: Deployment"), "{err}");
    assert!(!exists(c, "deployment", &lenient, "worker"));

    let (ok, _, err) = apply(
        c,
        &service_entry(&strict, "payments", None),
        &["--dry-run=server"],
    );
    assert!(!ok);
    assert!(err.contains("denied the request: MS0002"), "{err}");
    assert!(!exists(c, "serviceentry", &strict, "payments"));
}

#[test]
fn a_dns_service_entry_without_export_to_is_rejected_in_enforce_mode() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let wh = Webhook::start(
        c,
        "se",
        &[("MESHSCOPE_MUTATE_SERVICEENTRY_EXPORTTO", "false")],
    );
    let ns = wh.namespace(c, "enforce");
    let (ok, _, err) = apply(c, &service_entry(&ns, "payments", None), &[]);
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "denied the request: MS0002: ServiceEntry {ns}/payments has resolution DNS and no exportTo"
        )),
        "{err}"
    );
    assert!(!exists(c, "serviceentry", &ns, "payments"));
    let (ok, _, err) = apply(c, &service_entry(&ns, "payments", Some(".")), &[]);
    assert!(ok && !err.contains("Warning"), "{err}");
}

#[test]
fn mutate_mode_sets_export_to_here_instead() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let wh = Webhook::start(
        c,
        "mut",
        &[("MESHSCOPE_MUTATE_SERVICEENTRY_EXPORTTO", "true")],
    );
    let ns = wh.namespace(c, "enforce");
    let (ok, _, err) = apply(c, &service_entry(&ns, "payments", None), &[]);
    assert!(ok, "{err}");
    assert!(
        err.contains(&format!(
            "Warning: MS0002: meshscope set exportTo: [\".\"] on ServiceEntry {ns}/payments"
        )),
        "{err}"
    );
    let stored = c.kubectl_ok(
        &[
            "get",
            "serviceentry",
            "payments",
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.exportTo}",
        ],
        None,
    );
    assert_eq!(stored, "[\".\"]");

    // A dry run shows the patched object and stores nothing.
    let (ok, out, err) = apply(
        c,
        &service_entry(&ns, "billing", None),
        &["--dry-run=server", "-o", "jsonpath={.spec.exportTo}"],
    );
    assert!(ok, "{err}");
    assert_eq!(out, "[\".\"]");
    assert!(!exists(c, "serviceentry", &ns, "billing"));
    let metrics = wh.metrics();
    assert!(
        metrics.contains(
            "endpoint=\"mutate\",kind=\"ServiceEntry\",operation=\"CREATE\",decision=\"patch\"} 2"
        ),
        "{metrics}"
    );
}

#[test]
fn applies_still_succeed_when_the_webhook_is_stopped() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let mut wh = Webhook::start(c, "down", &[]);
    let ns = wh.namespace(c, "enforce");
    let (ok, _, _) = apply(c, &deployment(&ns, "worker", None), &[]);
    assert!(!ok, "denied while the webhook runs");

    let (status, took) = wh.terminate();
    assert!(
        status.success(),
        "exit on SIGTERM: {status}\n{}",
        wh.log_text()
    );
    assert!(took < Duration::from_secs(25), "drain took {took:?}");
    assert!(wh.log_text().contains("drained"), "{}", wh.log_text());

    // failurePolicy: Ignore — the cluster keeps deploying.
    let started = Instant::now();
    let (ok, _, err) = apply(c, &deployment(&ns, "worker", None), &[]);
    assert!(ok, "{err}");
    assert!(exists(c, "deployment", &ns, "worker"));
    let (ok, _, err) = apply(c, &service_entry(&ns, "payments", None), &[]);
    assert!(ok, "{err}");
    eprintln!(
        "two applies with the webhook down took {:?}",
        started.elapsed()
    );
}

#[test]
fn the_generated_install_is_accepted_by_the_api_server() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    install_webhook_rbac(c);
    let o = meshscope_e2e::run::binary(["webhook", "manifests"]).output();
    let (yaml, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let o = c.kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&yaml));
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    for object in [
        "secret/meshscope-webhook-tls",
        "deployment.apps/meshscope-webhook",
        "service/meshscope-webhook",
        "poddisruptionbudget.policy/meshscope-webhook",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/meshscope-webhook",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/meshscope-webhook",
    ] {
        assert!(out.contains(object), "{object} missing from:\n{out}");
    }
    assert_eq!(out.lines().count(), 10, "{out}");
}

#[test]
fn a_deployment_scoped_by_another_workloads_generated_sidecar_is_admitted_with_ms0012() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let wh = Webhook::start(c, "ms12", &[]);
    let ns = wh.namespace(c, "enforce");
    // reviews-v2's Sidecar as an older meshscope wrote it: `version: v2`
    // alone.
    let sidecar = format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: reviews-v2-deployment-meshscope\n  namespace: {ns}\n  labels:\n    app.kubernetes.io/managed-by: kubectl-meshscope\n    meshscope.io/workload-kind: Deployment\n    meshscope.io/workload-name: reviews-v2\nspec:\n  workloadSelector:\n    labels:\n      version: v2\n  egress:\n  - hosts: [\"~/*\"]\n"
    );
    let (ok, _, err) = apply(c, &sidecar, &[]);
    assert!(ok && !err.contains("Warning"), "{err}");
    let with_version = |name: &str, app: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: {app}, version: v2}}\n  template:\n    metadata:\n      labels: {{app: {app}, version: v2}}\n    spec:\n      containers:\n      - name: app\n        image: registry.example.com/{name}:1\n"
        )
    };
    // ratings-v2 carries version: v2 too. Until the Sidecar reaches the
    // webhook's cache the Deployment is unscoped (denied); then it is
    // admitted, scoped, with the warning, even under enforce.
    let ratings = with_version("ratings-v2", "ratings");
    let deadline = Instant::now() + PROPAGATION;
    let err = loop {
        let (ok, _, err) = apply(c, &ratings, &[]);
        if ok {
            break err;
        }
        assert!(err.contains("MS0001"), "{err}");
        assert!(
            Instant::now() < deadline,
            "still denied {PROPAGATION:?} after the Sidecar was created: {err}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        err.contains(&format!(
            "Warning: MS0012: Deployment {ns}/ratings-v2 is scoped by the Sidecar generated for Deployment reviews-v2"
        )),
        "{err}"
    );
    assert!(exists(c, "deployment", &ns, "ratings-v2"));
    // The workload the Sidecar was generated for gets no warning.
    let (ok, _, err) = apply(c, &with_version("reviews-v2", "reviews"), &[]);
    assert!(ok && !err.contains("Warning"), "{err}");
}

/// `version` and `audit` (MS0022) say whether meshscope's webhook can
/// enforce anything: a
/// configuration whose Service has no ready endpoint is skipped by the API
/// server (failurePolicy Ignore), and the install enforces nothing (issue
/// #35 item 9).
#[test]
fn version_and_audit_say_when_the_installed_webhook_has_no_ready_endpoint() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("whver", &[]);
    let name = format!("meshscope-version-{ns}");
    c.apply(&format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: {name}\n  labels: {{app.kubernetes.io/part-of: meshscope}}\nwebhooks:\n- name: version.meshscope.io\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  failurePolicy: Ignore\n  clientConfig:\n    service: {{name: hook, namespace: {ns}, port: 443}}\n  namespaceSelector:\n    matchLabels: {{meshscope-test-never: \"true\"}}\n  rules:\n  - {{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [configmaps], scope: Namespaced}}\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: hook\n  namespace: {ns}\nspec:\n  ports: [{{name: https, port: 443}}]\n"
    ));
    let line = |c: &Cluster| -> String {
        let r = meshscope_e2e::run::meshscope_at(&c.kubeconfig, &["version"]);
        assert!(r.outcome.is_ok(), "{}", r.stderr);
        r.stdout
            .lines()
            .find(|l| l.contains(&name))
            .unwrap_or_else(|| panic!("no line for {name}: {}\n{}", r.stdout, r.stderr))
            .to_string()
    };
    assert_eq!(
        line(c),
        format!("Admission webhook: {name} (version.meshscope.io) calls {ns}/hook: no ready endpoint, so the API server skips it (failurePolicy Ignore) and nothing is enforced; check its pods")
    );
    // audit reports it too, as MS0022, whatever namespace it audits.
    let ms0022 = |c: &Cluster| -> Vec<Value> {
        let r = meshscope_e2e::run::meshscope_at(
            &c.kubeconfig,
            &["audit", "-n", &ns, "--code", "MS0022", "-o", "json"],
        );
        assert!(r.outcome.is_ok(), "{}", r.stderr);
        let v: Value = serde_json::from_str(&r.stdout).expect(&r.stdout);
        v["findings"]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"))
            .iter()
            .filter(|f| f["name"] == name.as_str())
            .cloned()
            .collect()
    };
    let found = ms0022(c);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0]["message"],
        format!("webhook version.meshscope.io calls Service {ns}/hook, which has no ready endpoint: the API server skips it (failurePolicy Ignore) and nothing is enforced. Check the pods it selects: kubectl describe service -n {ns} hook; kubectl get pods -n {ns}"),
    );
    c.apply(&format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: hook-1\n  namespace: {ns}\n  labels: {{kubernetes.io/service-name: hook}}\naddressType: IPv4\nports: [{{name: https, port: 443}}]\nendpoints:\n- addresses: [10.77.9.9]\n  conditions: {{ready: true}}\n"
    ));
    assert_eq!(
        line(c),
        format!(
            "Admission webhook: {name} (version.meshscope.io) calls {ns}/hook, 1 ready endpoint"
        )
    );
    assert!(ms0022(c).is_empty());
    c.kubectl_ok(&["delete", "validatingwebhookconfiguration", &name], None);
}

/// Issue #35, item 19: with the Sidecar CRD deleted, the webhook does not
/// blame an unreachable API server and keep denying with a fix that can
/// no longer be applied: it allows the object unchecked with a warning
/// that names the resource not served, says so on /readyz, and enforces
/// again once the CRD is back. On a control plane of the test's own, so
/// that no other test loses the CRD.
#[test]
fn with_the_sidecar_crd_deleted_the_webhook_says_so_and_enforces_again_once_it_is_back() {
    meshscope_e2e::needs_cluster!();
    let private = meshscope_e2e::cluster::PrivateCluster::start("crd");
    let c = private.cluster;
    let wh = Webhook::start(c, "crd", &[]);
    let ns = wh.namespace(c, "enforce");
    let create = |name: &str| {
        let o = c.kubectl(
            &["create", "--dry-run=server", "-f", "-"],
            Some(&deployment(&ns, name, None)),
        );
        (o.status.success(), text(&o).1)
    };
    let (ok, err) = create("before");
    assert!(!ok && err.contains("denied the request: MS0001"), "{err}");

    c.kubectl_ok(&["delete", "crd", "sidecars.networking.istio.io"], None);
    let unchecked = "meshscope-webhook allowed this unchecked: the API server does not serve sidecars.networking.istio.io";
    let deadline = Instant::now() + PROPAGATION;
    loop {
        let (ok, err) = create("without-crd");
        if ok && err.contains(unchecked) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still ({ok}) after the CRD was deleted: {err}\n{}",
            wh.log_text()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let health = wh.admin("/readyz");
    assert!(
        health.contains("the API server does not serve sidecars.networking.istio.io")
            && !health.contains("unreachable"),
        "{health}"
    );

    let crds = meshscope_test_support::outside::istio_crds(module_path!()).expect("the CRDs");
    c.kubectl_ok(
        &["apply", "--server-side", "-f", crds.to_str().unwrap()],
        None,
    );
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let (ok, err) = create("with-crd-again");
        if !ok && err.contains("denied the request: MS0001") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not enforcing again after the CRD came back ({ok}): {err}\n{}",
            wh.log_text()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    drop(wh);
    drop(private);
}

/// The Deployments of `file`, one of istiod's golden outputs of its
/// Gateway deployment controller, moved to namespace `ns` and without
/// their ownerReferences (to a Gateway this cluster does not have, with
/// no uid), as `(name, YAML)`.
fn rendered_deployments(file: &Path, ns: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Yaml::deserialize(d).unwrap())
        .filter(|d| d["kind"] == "Deployment")
        .map(|mut d| {
            let meta = d["metadata"].as_mapping_mut().unwrap();
            meta.insert("namespace".into(), ns.into());
            meta.remove("ownerReferences");
            let name = meta["name"].as_str().unwrap().to_string();
            (name, serde_yaml::to_string(&d).unwrap())
        })
        .collect()
}

/// A gateway as the `gateway` Helm chart's default values write it
/// (`manifests/charts/gateway/templates/deployment.yaml`, istio 1.31):
/// a bare `istio-proxy` the injector fills from its `gateway` template.
fn chart_gateway(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {ns}
spec:
  selector:
    matchLabels: {{app: {name}, istio: ingress}}
  template:
    metadata:
      annotations:
        inject.istio.io/templates: gateway
        sidecar.istio.io/inject: \"true\"
      labels:
        app: {name}
        istio: ingress
        istio.io/dataplane-mode: none
        sidecar.istio.io/inject: \"true\"
    spec:
      containers:
      - name: istio-proxy
        image: auto
"
    )
}

/// issue #33 item 4: gateway and waypoint pods run `istio-proxy` but are
/// not sidecars. The Deployments istiod renders for a Gateway of class
/// `istio` (`proxy router`) and `istio-waypoint` (`proxy waypoint`), from
/// istiod's own golden files, and a gateway as the Helm chart writes it,
/// are admitted in an enforce namespace without a warning, where a plain
/// unscoped Deployment is denied; `audit` reports no MS0001 for them, and
/// `explain` says which proxy each runs.
#[test]
fn enforce_admits_the_gateways_and_waypoints_istiod_deploys() {
    meshscope_e2e::needs_cluster!();
    let golden = "pilot/pkg/config/kube/gatewaycommon/testdata/deployment";
    let Some(dir) = meshscope_test_support::outside::istio_module(module_path!(), golden) else {
        return;
    };
    let c = Cluster::shared();
    let wh = Webhook::start(c, "gwy", &[]);
    let ns = wh.namespace(c, "enforce");
    let mut gateways = rendered_deployments(&dir.join("simple.yaml"), &ns);
    gateways.extend(rendered_deployments(&dir.join("waypoint.yaml"), &ns));
    gateways.push(("ingress".into(), chart_gateway(&ns, "ingress")));
    assert_eq!(gateways.len(), 3, "{gateways:?}");
    for (name, yaml) in &gateways {
        let (ok, _, err) = apply(c, yaml, &[]);
        assert!(ok, "{name}: {err}");
        assert!(!err.contains("Warning"), "{name}: {err}");
    }
    let (ok, _, err) = apply(c, &deployment(&ns, "worker", None), &[]);
    assert!(
        !ok && err.contains(&creation_denial(&ns, "worker")),
        "{err}"
    );

    let audit =
        meshscope_e2e::run::meshscope_at(&c.kubeconfig, &["audit", "-n", &ns, "-o", "json"]);
    let found = meshscope_test_support::audit_json::codes_and_names(&audit.stdout);
    assert!(
        !found.iter().any(|(code, _)| code == "MS0001"),
        "{found:?}\n{}",
        audit.stderr
    );
    for (name, kind) in [
        (gateways[0].0.as_str(), "router"),
        (gateways[1].0.as_str(), "waypoint"),
        ("ingress", "router"),
    ] {
        let e = meshscope_e2e::run::meshscope_at(
            &c.kubeconfig,
            &["explain", &format!("deployment/{name}"), "-n", &ns],
        );
        let want = format!("Injection:        {kind} proxy, not a sidecar");
        assert!(
            e.stdout.contains(&want),
            "{name}: {}\n{}",
            e.stdout,
            e.stderr
        );
        assert!(e.stdout.contains("istiod ignores Sidecars"), "{}", e.stdout);
    }
}
