//! `kubectl meshscope verify` and `apply --wait` against a real istiod
//! (pilot-discovery 1.31 from tests/istiod/build) on the real test control
//! plane, with simulated sidecars connected over ADS. istiod is reached at
//! its monitoring address (`--istiod-url`), where a cluster's istiod serves
//! the debug endpoints on port 15014; the port-forward path is
//! `verify_reaches_istiod_through_a_port_forward`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use kubectl_meshscope::Outcome;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::fidelity::{Builder, Scenario, DEFAULT_MESH};
use meshscope_e2e::istiod::{Istiod, ENGINE_VERSION};
use meshscope_e2e::outbound_text_line;
use meshscope_e2e::run;
use meshscope_e2e::world::{labels, SvcPort};
use meshscope_e2e::xds::Sim;
use serde_json::Value;

/// The tests run one after another: a proxy without a Sidecar sees every
/// namespace's services, so another test's world appearing or going away
/// mid-check would change what istiod sends it.
#[path = "verify/watch.rs"]
mod watch;

#[path = "verify/watch_faults.rs"]
mod watch_faults;

#[path = "verify/dangling.rs"]
mod dangling;

#[path = "verify/impact.rs"]
mod impact;

#[path = "verify/exports.rs"]
mod exports;

#[path = "verify/gateway_api.rs"]
mod gateway_api;

#[path = "verify/ingress.rs"]
mod ingress;

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct Run {
    outcome: Result<Outcome, String>,
    stdout: String,
    stderr: String,
}

fn meshscope(kubeconfig: &Path, args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.extend(["--istio-version", ENGINE_VERSION]);
    let r = run::meshscope_at(kubeconfig, &all);
    Run {
        outcome: r.outcome.map_err(|e| format!("{e:#}")),
        stdout: r.stdout,
        stderr: r.stderr,
    }
}

/// `verify -o json`'s proxies by `ns/pod`.
fn proxies(json: &str) -> BTreeMap<String, Value> {
    let v: Value = serde_json::from_str(json).expect("verify -o json is JSON");
    v["proxies"]
        .as_array()
        .expect("proxies")
        .iter()
        .map(|p| {
            (
                format!(
                    "{}/{}",
                    p["namespace"].as_str().unwrap(),
                    p["pod"].as_str().unwrap()
                ),
                p.clone(),
            )
        })
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

fn tag() -> u64 {
    u64::from(std::process::id()) % 1000
}

struct Setup {
    c: &'static Cluster,
    ns: String,
    sc: Scenario,
    istiod: Istiod,
    sim: Sim,
    url: String,
    log: tempfile::NamedTempFile,
}

impl Setup {
    /// The IP of the scenario's pod `pod`.
    fn ip(&self, pod: &str) -> String {
        self.sc
            .world
            .pods
            .iter()
            .find(|p| p.name == pod)
            .map(|p| p.ip.clone())
            .unwrap_or_else(|| panic!("no pod {pod}"))
    }
    /// The ClusterIP the API server gave Service `name`.
    fn cluster_ip(&self, name: &str) -> String {
        self.c
            .kubectl_ok(
                &[
                    "get",
                    "svc",
                    name,
                    "-n",
                    &self.ns,
                    "-o",
                    "jsonpath={.spec.clusterIP}",
                ],
                None,
            )
            .trim()
            .to_string()
    }
    fn host(&self, name: &str) -> String {
        format!("{name}.{}.svc.cluster.local", self.ns)
    }
    fn cluster(&self, name: &str, port: u32) -> String {
        format!("outbound|{port}||{}", self.host(name))
    }
    fn outbound(&self, pod: &str) -> Vec<String> {
        self.sim
            .get(&format!("{}/{pod}", self.ns))
            .expect("a simulated sidecar")
            .cluster_names()
            .into_iter()
            .filter(|n| n.starts_with("outbound|"))
            .collect()
    }
    fn verify(&self, extra: &[&str]) -> Run {
        let mut args = vec!["verify", "-n", &self.ns, "--istiod-url", &self.url];
        args.extend_from_slice(extra);
        meshscope(&self.c.kubeconfig, &args)
    }
    fn sidecar_of(&self, pod: &str) -> String {
        self.c
            .kubectl_ok(
                &[
                    "get",
                    "sidecars",
                    "-n",
                    &self.ns,
                    "-l",
                    &format!("meshscope.io/workload-name={pod}"),
                    "-o",
                    "jsonpath={.items[*].metadata.name}",
                ],
                None,
            )
            .trim()
            .to_string()
    }
    /// Edits a Sidecar as a user would, and waits for istiod's push.
    fn edit_hosts(&self, name: &str, hosts: &[String]) {
        let t0 = Instant::now();
        self.patch_hosts(name, hosts);
        self.sim
            .wait_push_after(t0, Duration::from_millis(1000), Duration::from_secs(60))
            .expect("istiod pushes the edit");
    }
    fn patch_hosts(&self, name: &str, hosts: &[String]) {
        self.c.patch_sidecar_hosts(&self.ns, name, hosts);
    }
    /// `apply --wait=WAIT` of client-0's observed hosts only: drops the
    /// hosts an edit outside meshscope added, and takes the egress back.
    fn narrow_client(&self, wait: &str) -> Run {
        let log = self.log.path().to_str().unwrap();
        let wait = format!("--wait={wait}");
        meshscope(
            &self.c.kubeconfig,
            &[
                "apply",
                "-n",
                &self.ns,
                "--access-log",
                log,
                "--workload",
                "pod/client-0",
                "--prune-hosts",
                "--force-conflicts",
                &wait,
                "--istiod-url",
                &self.url,
            ],
        )
    }
    /// `verify pod/POD -o json` until its status is `want` (30 s at most).
    fn verify_until(&self, pod: &str, want: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = self.verify(&[&format!("pod/{pod}"), "-o", "json"]);
            let p = proxies(&r.stdout).remove(&format!("{}/{pod}", self.ns));
            match p {
                Some(p) if p["status"] == want => return p,
                p if Instant::now() > deadline => {
                    panic!("{pod} never became {want}: {p:?}\n{}", r.stderr)
                }
                _ => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }
}

fn setup(prefix: &str, slot: u64) -> Setup {
    let c = Cluster::shared();
    let ns = format!("{prefix}{}", tag());
    let mut w = Builder::new(slot + tag() % 50);
    w.namespace(&ns);
    w.service(&ns, "web", vec![SvcPort::new("http", 80)], false);
    w.service(&ns, "db", vec![SvcPort::new("tcp-db", 5432)], false);
    w.service(&ns, "extra", vec![SvcPort::new("http", 80)], false);
    for (pod, app) in [
        ("client-0", "client"),
        ("web-0", "web"),
        ("db-0", "db"),
        ("extra-0", "extra"),
        ("lonely-0", "lonely"),
        ("ghost-0", "ghost"),
    ] {
        w.pod(&ns, pod, labels(&[("app", app)]));
    }
    let sc = w.finish("verify".into(), DEFAULT_MESH.into());
    let ip = |pod: &str| {
        sc.world
            .pods
            .iter()
            .find(|p| p.name == pod)
            .map(|p| p.ip.clone())
            .unwrap()
    };
    let host = |name: &str| format!("{name}.{ns}.svc.cluster.local");
    let mut log = String::new();
    let mut n = 0;
    for (pod, h, port) in [
        ("client-0", host("web"), 80),
        ("client-0", host("db"), 5432),
        ("web-0", host("db"), 5432),
    ] {
        for _ in 0..3 {
            log.push_str(&outbound_text_line(n, &ip(pod), &h, port, "10.255.0.1:80"));
            n += 1;
        }
    }
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, log.as_bytes()).unwrap();

    sc.world.apply(c).expect("world applied");
    let istiod = Istiod::start(c).expect("istiod starts");
    let services: Vec<(String, String)> = ["web", "db", "extra"]
        .iter()
        .map(|s| (ns.clone(), host(s)))
        .collect();
    istiod
        .wait_for(&services, &[], Duration::from_secs(60))
        .expect("istiod sees the services");
    // ghost-0 has no sidecar connected.
    let specs = sc
        .world
        .pods
        .iter()
        .filter(|p| p.name != "ghost-0")
        .map(|p| p.proxy_spec())
        .collect();
    let sim = Sim::connect_many_settled(&istiod.grpc_url(), specs, 8);
    let url = format!("http://{}", istiod.monitoring);
    Setup {
        c,
        ns,
        sc,
        istiod,
        sim,
        url,
        log: file,
    }
}

/// Runs `f` on a fresh [`setup`], one test at a time, then removes the
/// world (printing istiod's last lines when `f` failed).
fn with_setup(prefix: &str, slot: u64, f: impl FnOnce(&Setup)) {
    let _serial = serial();
    let s = setup(prefix, slot);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&s)));
    s.sim.close();
    if let Err(e) = s.sc.world.delete(s.c) {
        eprintln!("cleanup: {e:#}");
    }
    if let Err(p) = result {
        eprintln!("istiod log:\n{}", s.istiod.log_tail(30));
        std::panic::resume_unwind(p);
    }
}

#[test]
fn verify_and_apply_wait_against_a_real_istiod() {
    meshscope_e2e::needs_cluster!();
    with_setup("vfy", 800, |s| {
        let log = s.log.path().to_str().unwrap().to_string();
        scenario(s, &log)
    });
}

fn scenario(s: &Setup, log: &str) {
    let ns = &s.ns;
    let (web, db, extra) = (
        s.cluster("web", 80),
        s.cluster("db", 5432),
        s.cluster("extra", 80),
    );
    let before = s.outbound("client-0");
    assert!(
        before.contains(&extra),
        "unscoped proxies see every service: {before:?}"
    );

    // A pod created while its namespace was not labelled (the stand-in
    // injector left it alone), then labelled: no proxy, so not checked,
    // and never "not connected".
    let label = |l: &str| {
        s.c.kubectl_ok(&["label", "namespace", ns, l, "--overwrite"], None)
    };
    label("istio-injection-");
    let containers = || {
        let path = "jsonpath={.spec.containers[*].name}";
        let args = ["get", "pod", "unproxied-0", "-n", ns, "-o", path];
        s.c.kubectl_ok(&args, None)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    // The API server may see the label removed a moment late.
    loop {
        s.c.apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: unproxied-0\n  namespace: {ns}\n  labels: {{app: unproxied}}\nspec:\n  containers: [{{name: app, image: example/app:1}}]\n"
        ));
        if containers().trim() == "app" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "unproxied-0 keeps being injected"
        );
        s.c.force_delete_pod(ns, "unproxied-0");
        std::thread::sleep(Duration::from_millis(300));
    }
    label("istio-injection=enabled");
    let r = s.verify(&["pod/unproxied-0"]);
    let e = r.outcome.unwrap_err();
    assert!(
        e.starts_with(&format!("pod {ns}/unproxied-0 has no Envoy sidecar (namespace {ns} has label istio-injection=enabled, but the pod runs no istio-proxy container")),
        "{e}"
    );

    // Before any Sidecar: every connected proxy is OK; ghost-0 is not connected.
    let r = s.verify(&["-o", "json"]);
    assert_eq!(r.outcome, Ok(Outcome::Findings), "{}", r.stderr);
    let p = proxies(&r.stdout);
    assert_eq!(p.len(), 6, "{}", r.stdout);
    assert!(
        !p.contains_key(&format!("{ns}/unproxied-0")),
        "{}",
        r.stdout
    );
    s.c.force_delete_pod(ns, "unproxied-0");
    for pod in ["client-0", "web-0", "db-0", "extra-0", "lonely-0"] {
        assert_eq!(
            p[&format!("{ns}/{pod}")]["status"],
            "OK",
            "{pod}: {}",
            r.stdout
        );
    }
    assert_eq!(p[&format!("{ns}/ghost-0")]["status"], "NOT_CONNECTED");
    assert_eq!(p[&format!("{ns}/ghost-0")]["connected"], false);
    // -o name prints what verify's help says it does, a line a proxy.
    let r = s.verify(&["-o", "name"]);
    let forms = meshscope_e2e::help::name_forms("verify");
    assert_eq!(r.stdout.lines().count(), 6, "{}", r.stdout);
    for line in r.stdout.lines() {
        assert!(
            meshscope_e2e::help::is_of_form(line, &forms),
            "verify -o name printed {line:?}; its help says {forms:?}"
        );
    }
    // Counts istiod generates, next to the prediction.
    let c0 = &p[&format!("{ns}/client-0")];
    assert_eq!(
        c0["istiod_counts"]["clusters"], c0["predicted"]["clusters"],
        "{c0}"
    );

    // apply --wait: returns once istiod pushed and the sidecars ACKed.
    let t0 = Instant::now();
    let r = meshscope(
        &s.c.kubeconfig,
        &[
            "apply",
            "-n",
            ns,
            "--access-log",
            log,
            "--wait",
            "--istiod-url",
            &s.url,
        ],
    );
    let took = t0.elapsed();
    // ghost-0 is not connected, so the closing verify reports it only if
    // it was waited for; it has no traffic and no Sidecar.
    assert_eq!(r.outcome, Ok(Outcome::Ok), "{}\n{}", r.stdout, r.stderr);
    let after = s.outbound("client-0");
    assert_eq!(
        after,
        vec![db.clone(), web.clone()],
        "client-0 right after apply --wait"
    );
    let client = s.sim.get(&format!("{ns}/client-0")).unwrap();
    let pushes = client.pushes_since(t0);
    assert!(!pushes.is_empty(), "apply --wait returned before any push");
    assert!(
        pushes
            .iter()
            .all(|p| p.acked_at.is_some_and(|a| a - t0 <= took)),
        "apply --wait returned before client-0 ACKed"
    );
    let waited = r
        .stderr
        .lines()
        .find(|l| l.starts_with("waited "))
        .unwrap_or_else(|| panic!("apply --wait says how long it waited: {}", r.stderr));
    eprintln!(
        "apply --wait: {waited} (the command took {:.2} s)",
        took.as_secs_f64()
    );
    assert!(
        r.stdout.contains("client-0") && r.stdout.contains("OK"),
        "{}",
        r.stdout
    );

    // Scoped and unscoped proxies alike are OK now, in the table too.
    let r = s.verify(&["pod/client-0"]);
    assert_eq!(r.outcome, Ok(Outcome::Ok), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.starts_with("NAMESPACE"), "{}", r.stdout);
    let r = s.verify(&["pod/lonely-0", "-o", "json"]);
    assert_eq!(r.outcome, Ok(Outcome::Ok), "{}", r.stdout);
    assert_eq!(
        proxies(&r.stdout)[&format!("{ns}/lonely-0")]["applied_sidecar"],
        Value::Null
    );

    // Someone adds a host to the managed Sidecar outside meshscope, while
    // client-0's Envoy does not answer pushes: STALE until it ACKs.
    let name = s.sidecar_of("client-0");
    let dot = |h: &str| format!("./{}", s.host(h));
    let client = s.sim.get(&format!("{ns}/client-0")).unwrap();
    client.hold_acks();
    s.patch_hosts(&name, &[dot("web"), dot("db"), dot("extra")]);
    let stale = s.verify_until("client-0", "STALE");
    assert!(
        strings(&stale["pending"]).contains(&"cds".to_string()),
        "{stale}"
    );
    let r = s.verify(&["pod/client-0"]);
    assert!(r.stdout.contains("  not yet ACKed: cds"), "{}", r.stdout);
    client.release_acks();
    s.verify_until("client-0", "DIFFERS");
    let r = s.verify(&["pod/client-0", "-o", "json"]);
    assert_eq!(r.outcome, Ok(Outcome::Findings), "{}", r.stderr);
    let c0 = &proxies(&r.stdout)[&format!("{ns}/client-0")];
    assert_eq!(c0["status"], "DIFFERS", "{c0}");
    assert_eq!(
        strings(&c0["drift"]["only_istiod"]),
        vec![extra.clone()],
        "{c0}"
    );
    let r = s.verify(&["pod/client-0"]);
    assert!(
        r.stdout.contains(&format!(
            "+ {extra} (istiod sends it; meshscope did not write it)"
        )) && r.stdout.contains("was edited outside meshscope"),
        "{}",
        r.stdout
    );

    // The host of an observed edge is removed: MISSING, with the edge.
    s.edit_hosts(&name, &[dot("db"), dot("extra")]);
    let r = s.verify(&["pod/client-0", "--access-log", log, "-o", "json"]);
    assert_eq!(r.outcome, Ok(Outcome::Findings), "{}", r.stderr);
    let c0 = &proxies(&r.stdout)[&format!("{ns}/client-0")];
    assert_eq!(c0["status"], "MISSING", "{c0}");
    assert_eq!(c0["missing_edges"][0]["cluster"], web.as_str(), "{c0}");
    assert_eq!(c0["missing_edges"][0]["requests"], 3, "{c0}");
    let r = s.verify(&["pod/client-0", "--access-log", log]);
    assert!(r.stdout.contains("MISSING 1"), "{}", r.stdout);
    eprintln!(
        "verify after two edits outside meshscope:\n{}{}",
        r.stdout, r.stderr
    );

    // Without istiod, apply --wait writes nothing and says why.
    let r = meshscope(
        &s.c.kubeconfig,
        &[
            "apply",
            "-n",
            ns,
            "--workload",
            "pod/lonely-0",
            "--allow-idle",
            "--wait",
            "--istiod-url",
            "http://127.0.0.1:9",
        ],
    );
    let e = r.outcome.unwrap_err();
    assert!(
        e.starts_with(
            "cannot --wait, so nothing was applied: cannot reach istiod http://127.0.0.1:9"
        ) && e
            .contains("--istiod-url names istiod's debug port, 15014: is it reachable from here?"),
        "{e}"
    );
    assert_eq!(s.sidecar_of("lonely-0"), "", "nothing was applied");

    // A proxy that does not ACK: apply --wait gives up after its timeout,
    // names the proxy, exits 1, and does not narrow.
    let t1 = Instant::now();
    client.hold_acks();
    let r = s.narrow_client("3s");
    assert_eq!(
        r.outcome,
        Ok(Outcome::Findings),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    assert!(
        r.stderr.contains(&format!(
            "timed out after 3s waiting for: {ns}/client-0 (not yet ACKed: "
        )) && r
            .stderr
            .contains(&format!("not narrowed: {ns}/{name} keeps its old hosts")),
        "{}",
        r.stderr
    );
    client.release_acks();

    // apply --wait --prune-hosts puts web back and drops extra: hosts are
    // added (and ACKed) before any is removed. The kubectl edit owns the
    // egress now, so taking it back needs --force-conflicts.
    let r = s.narrow_client("60s");
    assert_eq!(r.outcome, Ok(Outcome::Ok), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("(2 steps: hosts added first, then removed)"),
        "{}",
        r.stderr
    );
    assert_eq!(s.outbound("client-0"), vec![db.clone(), web.clone()]);
    // The first step's push (made while the proxy did not ACK) held the
    // old hosts and the new ones at once; the second dropped extra.
    let cds: Vec<usize> = s
        .sim
        .get(&format!("{ns}/client-0"))
        .unwrap()
        .pushes_since(t1)
        .iter()
        .filter(|p| p.ty == "cds")
        .map(|p| p.resources)
        .collect();
    assert!(
        cds.len() >= 2,
        "two CDS pushes, widened then narrowed: {cds:?}"
    );
    assert!(
        cds.windows(2).any(|w| w[0] > w[1]),
        "the widened CDS is larger: {cds:?}"
    );
    let r = s.verify(&["pod/client-0", "--access-log", log]);
    assert_eq!(r.outcome, Ok(Outcome::Ok), "{}\n{}", r.stdout, r.stderr);
}

/// Without `--istiod-url`, verify finds istiod's pod in istio-system and
/// port-forwards to its debug port through the API server, as istioctl
/// does. The pod is bound to a stand-in kubelet (no container runtime can
/// run here) that forwards port 15014 to the real istiod's monitoring
/// address; the API server, its authorization and the WebSocket
/// port-forward are real. RBAC is checked in one pass first.
#[test]
fn verify_reaches_istiod_through_a_port_forward() {
    meshscope_e2e::needs_cluster!();
    let _serial = serial();
    use meshscope_e2e::cluster::repo_root;
    use meshscope_e2e::kubelet::{Forwards, Logs, StandInKubelet};

    let s = setup("vpf", 850);
    let c = s.c;
    let pod = format!("istiod-{}", s.ns);
    let mut forwards = Forwards::new();
    forwards.insert(
        format!("istio-system/{pod}:15014"),
        s.istiod.monitoring.parse().unwrap(),
    );
    let kubelet = StandInKubelet::start_with(Logs::new(), forwards).unwrap();
    let node = c.stand_in_node("vpf-node", kubelet.port).unwrap();
    c.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\n  namespace: istio-system\n  labels: {{app: istiod, istio.io/rev: default}}\n  annotations: {{prometheus.io/port: \"15014\"}}\nspec:\n  containers: [{{name: discovery, image: istio/pilot:1.31.0}}]\n"
    ));
    c.bind_pod("istio-system", &pod, &node).unwrap();
    c.set_pod_ip("istio-system", &pod, "10.254.0.2").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let user = format!("meshscope-verify-{}", s.ns);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // As admin: through the port-forward, every connected proxy is OK.
        let r = meshscope(&c.kubeconfig, &["verify", "-n", &s.ns, "-o", "json"]);
        assert_eq!(r.outcome, Ok(Outcome::Findings), "{}", r.stderr);
        let p = proxies(&r.stdout);
        assert_eq!(
            p[&format!("{}/client-0", s.ns)]["status"],
            "OK",
            "{}",
            r.stdout
        );
        assert_eq!(p[&format!("{}/client-0", s.ns)]["istiod"], pod.as_str());
        assert_eq!(p[&format!("{}/ghost-0", s.ns)]["status"], "NOT_CONNECTED");
        assert!(
            kubelet
                .requests()
                .iter()
                .any(|r| r == &format!("/portForward/istio-system/{pod}?port=15014")),
            "{:?}",
            kubelet.requests()
        );
        // --revision selects istiod pods by istio.io/rev.
        let r = meshscope(
            &c.kubeconfig,
            &["verify", "-n", &s.ns, "--revision", "canary"],
        );
        let e = r.outcome.unwrap_err();
        assert!(
            e.contains(
                "no running istiod pods (app=istiod,istio.io/rev=canary) in namespace istio-system"
            ),
            "{e}"
        );

        // A reader may not port-forward: one error naming everything missing.
        c.bind_reader(&user);
        let kc = c.impersonating(&user, dir.path()).unwrap();
        let r = meshscope(&kc, &["verify", "-n", &s.ns]);
        let e = r.outcome.unwrap_err();
        assert!(
            e.starts_with("RBAC forbids get, create on pods/portforward in namespace \"istio-system\"; grant deploy/rbac/meshscope-verifier.yaml, or at least:"),
            "{e}"
        );
        assert!(
            e.contains("grant deploy/rbac/meshscope-verifier.yaml")
                && e.contains("kind: Role\n")
                && e.contains("resources: [\"pods/portforward\"]\n  verbs: [\"get\", \"create\"]")
                && e.contains("--istiod-url"),
            "{e}"
        );
        // The shipped verifier Role is enough.
        let verifier = repo_root().join("deploy/rbac/meshscope-verifier.yaml");
        c.kubectl_ok(&["apply", "-f", verifier.to_str().unwrap()], None);
        c.kubectl_ok(
            &[
                "create",
                "rolebinding",
                &user,
                "-n",
                "istio-system",
                "--role=meshscope-verifier",
                &format!("--user={user}"),
            ],
            None,
        );
        c.await_grant(
            &user,
            &[
                "create",
                "pods",
                "--subresource=portforward",
                "-n",
                "istio-system",
            ],
        );
        let r = meshscope(&kc, &["verify", "pod/client-0", "-n", &s.ns]);
        assert_eq!(r.outcome, Ok(Outcome::Ok), "{}\n{}", r.stdout, r.stderr);
    }));
    let _ = c.kubectl(
        &["delete", "clusterrolebinding", &user, "--ignore-not-found"],
        None,
    );
    let _ = c.kubectl(
        &[
            "delete",
            "rolebinding",
            &user,
            "-n",
            "istio-system",
            "--ignore-not-found",
        ],
        None,
    );
    c.force_delete_pod("istio-system", &pod);
    let _ = c.kubectl(&["delete", "node", &node], None);
    s.sim.close();
    if let Err(e) = s.sc.world.delete(c) {
        eprintln!("cleanup: {e:#}");
    }
    if let Err(p) = result {
        eprintln!("istiod log:\n{}", s.istiod.log_tail(30));
        std::panic::resume_unwind(p);
    }
}

/// With several istiod replicas, each proxy is checked against the one it
/// is connected to (found through every replica's `/debug/syncz`).
#[test]
fn verify_asks_the_replica_each_proxy_is_connected_to() {
    meshscope_e2e::needs_cluster!();
    let _serial = serial();
    let s = setup("vrep", 900);
    let second = Istiod::start(s.c).expect("a second istiod starts");
    let services: Vec<(String, String)> = ["web", "db", "extra"]
        .iter()
        .map(|n| (s.ns.clone(), s.host(n)))
        .collect();
    second
        .wait_for(&services, &[], Duration::from_secs(60))
        .expect("the second istiod sees the services");
    // ghost-0 connects to the second replica only.
    let ghost =
        s.sc.world
            .pods
            .iter()
            .find(|p| p.name == "ghost-0")
            .unwrap()
            .proxy_spec();
    let sim2 = Sim::connect_many(&second.grpc_url(), vec![ghost], 1).expect("ghost-0 connects");
    sim2.wait_stable(Duration::from_millis(1000), Duration::from_secs(60))
        .expect("config settles");
    let url2 = format!("http://{}", second.monitoring);
    let r = meshscope(
        &s.c.kubeconfig,
        &[
            "verify",
            "-n",
            &s.ns,
            "--istiod-url",
            &s.url,
            "--istiod-url",
            &url2,
            "-o",
            "json",
        ],
    );
    sim2.close();
    assert_eq!(r.outcome, Ok(Outcome::Ok), "{}\n{}", r.stdout, r.stderr);
    let p = proxies(&r.stdout);
    assert_eq!(p.len(), 6);
    for (key, check) in &p {
        let want = if key.ends_with("/ghost-0") {
            &url2
        } else {
            &s.url
        };
        assert_eq!(check["istiod"], want.as_str(), "{key}: {check}");
        assert_eq!(check["status"], "OK", "{key}: {check}");
    }
    // One replica down: its proxies show as not connected, with a warning.
    drop(second);
    let r = meshscope(
        &s.c.kubeconfig,
        &[
            "verify",
            "-n",
            &s.ns,
            "--istiod-url",
            &s.url,
            "--istiod-url",
            &url2,
        ],
    );
    s.sim.close();
    let _ = s.sc.world.delete(s.c);
    assert_eq!(
        r.outcome,
        Ok(Outcome::Findings),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    assert!(
        r.stderr.contains(&format!(
            "warning: cannot reach istiod {url2} for /debug/syncz"
        )) && r.stdout.contains("NOT CONNECTED"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
}
