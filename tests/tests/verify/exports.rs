//! `apply --exports --wait` and `verify` of exportTo, on a real istiod
//! (issue #35, item 7): an exportTo change is pushed by istiod as a
//! Sidecar is, and a wrong one blackholes the callers it leaves out.
//!
//! Three namespaces, no Sidecar: `b` serves `api`, `a`'s client calls it
//! (the access log), `d`'s idle pod calls nothing. The recommended exportTo
//! of `api` is `b` and `a`, so `d`'s proxy loses `api`'s cluster.

use std::time::{Duration, Instant};

use kubectl_meshscope::Outcome;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::fidelity::{Builder, Scenario, DEFAULT_MESH};
use meshscope_e2e::istiod::Istiod;
use meshscope_e2e::outbound_text_line;
use meshscope_e2e::world::{labels, SvcPort};
use meshscope_e2e::xds::Sim;

use super::{meshscope, proxies, serial, tag, Run};

struct Mesh {
    c: &'static Cluster,
    a: String,
    b: String,
    d: String,
    sc: Scenario,
    sim: Sim,
    url: String,
    log: tempfile::NamedTempFile,
}

impl Mesh {
    fn api(&self) -> String {
        format!("outbound|8080||api.{}.svc.cluster.local", self.b)
    }
    fn clusters(&self, ns: &str, pod: &str) -> Vec<String> {
        self.sim
            .get(&format!("{ns}/{pod}"))
            .expect("a simulated sidecar")
            .cluster_names()
    }
    fn apply_exports(&self, wait: &str) -> Run {
        let log = self.log.path().to_str().unwrap();
        meshscope(
            &self.c.kubeconfig,
            &[
                "apply",
                "--exports",
                "-n",
                &self.b,
                "--access-log",
                log,
                wait,
                "--istiod-url",
                &self.url,
            ],
        )
    }
    fn verify(&self, ns: &str, extra: &[&str]) -> Run {
        let log = self.log.path().to_str().unwrap();
        let mut args = vec![
            "verify",
            "-n",
            ns,
            "--istiod-url",
            &self.url,
            "--access-log",
            log,
        ];
        args.extend_from_slice(extra);
        meshscope(&self.c.kubeconfig, &args)
    }
    /// Sets (`Some`) or removes `api`'s exportTo annotation as its owner
    /// would, with kubectl, and waits for istiod's push.
    fn annotate_api(&self, value: Option<&str>) {
        let t0 = Instant::now();
        let a = match value {
            Some(v) => format!("networking.istio.io/exportTo={v}"),
            None => "networking.istio.io/exportTo-".to_string(),
        };
        self.c.kubectl_ok(
            &[
                "annotate",
                "service",
                "api",
                "-n",
                &self.b,
                &a,
                "--overwrite",
            ],
            None,
        );
        self.sim
            .wait_push_after(t0, Duration::from_millis(1000), Duration::from_secs(60))
            .expect("istiod pushes the exportTo change");
    }
}

fn mesh(istiod: &mut Option<Istiod>) -> Mesh {
    let c = Cluster::shared();
    let ns = |n: &str| format!("vex{}-{n}", tag());
    let (a, b, d) = (ns("a"), ns("b"), ns("d"));
    let mut w = Builder::new(300 + tag() % 50);
    for n in [&a, &b, &d] {
        w.namespace(n);
    }
    w.service(&b, "api", vec![SvcPort::new("http", 8080)], false);
    for (n, pod, app) in [
        (&b, "api-0", "api"),
        (&a, "client-0", "client"),
        (&d, "idle-0", "idle"),
    ] {
        w.pod(n, pod, labels(&[("app", app)]));
    }
    let sc = w.finish("verify-exports".into(), DEFAULT_MESH.into());
    let client_ip = sc
        .world
        .pods
        .iter()
        .find(|p| p.name == "client-0")
        .map(|p| p.ip.clone())
        .unwrap();
    let host = format!("api.{b}.svc.cluster.local");
    let mut log = String::new();
    for n in 0..3 {
        log.push_str(&outbound_text_line(
            n,
            &client_ip,
            &host,
            8080,
            "10.255.0.1:80",
        ));
    }
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, log.as_bytes()).unwrap();
    sc.world.apply(c).expect("world applied");
    let started = istiod.insert(Istiod::start(c).expect("istiod starts"));
    started
        .wait_for(&[(b.clone(), host)], &[], Duration::from_secs(60))
        .expect("istiod sees the service");
    let specs = sc.world.pods.iter().map(|p| p.proxy_spec()).collect();
    let sim = Sim::connect_many_settled(&started.grpc_url(), specs, 4);
    let url = format!("http://{}", started.monitoring);
    Mesh {
        c,
        a,
        b,
        d,
        sc,
        sim,
        url,
        log: file,
    }
}

#[test]
fn apply_exports_wait_is_confirmed_on_istiod_and_verify_sees_a_blackholing_export_to() {
    meshscope_e2e::needs_cluster!();
    let _serial = serial();
    let mut istiod = None;
    let m = mesh(&mut istiod);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&m)));
    m.sim.close();
    if let Err(e) = m.sc.world.delete(m.c) {
        eprintln!("cleanup: {e:#}");
    }
    if let Err(p) = result {
        if let Some(i) = &istiod {
            eprintln!("istiod log:\n{}", i.log_tail(30));
        }
        std::panic::resume_unwind(p);
    }
}

fn scenario(m: &Mesh) {
    let api = m.api();
    let (a, b, d) = (&m.a, &m.b, &m.d);
    assert!(m.clusters(d, "idle-0").contains(&api), "no exportTo yet");

    // idle-0's Envoy does not answer pushes: the wait gives up at its
    // limit, names it, and exits 1; the exportTo is written all the same.
    let idle = m.sim.get(&format!("{d}/idle-0")).unwrap();
    idle.hold_acks();
    let t0 = Instant::now();
    let r = m.apply_exports("--wait=3s");
    let took = t0.elapsed();
    idle.release_acks();
    assert_eq!(
        r.outcome,
        Ok(Outcome::Findings),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    assert!(took < Duration::from_secs(20), "a 3 s --wait took {took:?}");
    assert!(
        r.stdout
            .contains(&format!("service/api configured (namespace {b})")),
        "{}",
        r.stdout
    );
    let timed_out = r
        .stderr
        .lines()
        .find(|l| l.starts_with("timed out after 3s waiting for: "))
        .unwrap_or_else(|| panic!("the wait names what it gave up on: {}", r.stderr));
    assert!(
        timed_out.contains(&format!("{d}/idle-0 (")) && !timed_out.contains("client-0"),
        "{timed_out}"
    );

    // Released, istiod's view of every namespace matches the prediction,
    // and the caller keeps its edge: verify is OK.
    let deadline = Instant::now() + Duration::from_secs(30);
    for ns in [d, a] {
        loop {
            let r = m.verify(ns, &["-o", "json"]);
            if r.outcome == Ok(Outcome::Ok) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "verify -n {ns}: {}\n{}",
                r.stdout,
                r.stderr
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    assert!(!m.clusters(d, "idle-0").contains(&api));

    // Undone, then applied again with time to spare: returns once istiod
    // pushed it and idle-0 ACKed, the caller still served.
    m.annotate_api(None);
    assert!(m.clusters(d, "idle-0").contains(&api));
    let t0 = Instant::now();
    let r = m.apply_exports("--wait=60s");
    let took = t0.elapsed();
    assert_eq!(r.outcome, Ok(Outcome::Ok), "{}\n{}", r.stdout, r.stderr);
    let waited = r
        .stderr
        .lines()
        .find(|l| l.starts_with("waited "))
        .unwrap_or_else(|| panic!("--wait says what it waited for: {}", r.stderr));
    // (Injected pods other tests left in the cluster change too; none is
    // connected, so none is waited for.)
    assert!(waited.contains("push 1 exportTo change ("), "{waited}");
    eprintln!(
        "apply --exports --wait: {waited} (the command took {:.2} s)",
        took.as_secs_f64()
    );
    let pushes = idle.pushes_since(t0);
    assert!(
        !pushes.is_empty(),
        "apply --exports --wait returned before any push to idle-0"
    );
    assert!(
        pushes
            .iter()
            .all(|p| p.acked_at.is_some_and(|at| at - t0 <= took)),
        "apply --exports --wait returned before idle-0 ACKed"
    );
    assert!(!m.clusters(d, "idle-0").contains(&api), "idle-0 at return");
    assert!(
        m.clusters(a, "client-0").contains(&api),
        "client-0 at return"
    );
    assert!(
        r.stdout.contains("idle-0") && r.stdout.contains("client-0"),
        "the proxies waited for, checked: {}",
        r.stdout
    );
    // Nothing to change: nothing to wait for.
    let r = m.apply_exports("--wait=10s");
    assert_eq!(r.outcome, Ok(Outcome::Ok), "{}", r.stderr);
    assert!(
        r.stderr.contains("nothing written, so nothing to wait for"),
        "{}",
        r.stderr
    );

    // Its owner narrows api to its own namespace: the caller is
    // blackholed, and verify says which edge istiod no longer serves.
    m.annotate_api(Some("."));
    let r = m.verify(a, &["-o", "json"]);
    assert_eq!(r.outcome, Ok(Outcome::Findings), "{}", r.stderr);
    let c0 = &proxies(&r.stdout)[&format!("{a}/client-0")];
    assert_eq!(c0["status"], "MISSING", "{c0}");
    assert_eq!(c0["missing_edges"][0]["cluster"], api.as_str(), "{c0}");
    let r = m.verify(d, &[]);
    assert_eq!(r.outcome, Ok(Outcome::Ok), "{}\n{}", r.stdout, r.stderr);
}
