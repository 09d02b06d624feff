//! Which pods run a sidecar: a pod that exists has the proxy it was created
//! with, whatever its namespace's labels say now (`docs/istio-semantics.md`
//! §6); templates and manifests not yet applied follow the injector's
//! rules. Explain, impact and version read the same answer, and audit
//! reports the pods injection missed (MS0015).

use std::collections::HashMap;

use meshscope_shared::audit::{self, AuditScope};
use meshscope_shared::detect::Evidence;
use meshscope_shared::explain::{self, Target};
use meshscope_shared::snapshot::MeshSnapshot;
use meshscope_test_support::fixtures::{inputs, snap};

const NS: &str = "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels:\n    istio-injection: enabled\n";

fn deployment(name: &str, replicas: u32) -> String {
    format!(
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: shop\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - name: app\n        image: example/{name}:1\n"
    )
}

/// A pod of Deployment `app` as the API server lists it (uid, creation
/// time, status), with `containers` and `init` (name, restartPolicy).
fn running_pod(app: &str, i: usize, containers: &[&str], init: &[(&str, Option<&str>)]) -> String {
    let mut spec = String::from("  containers:\n");
    for c in containers {
        spec += &format!("  - name: {c}\n    image: docker.io/istio/proxyv2:1.31.0\n");
    }
    if !init.is_empty() {
        spec += "  initContainers:\n";
        for (c, policy) in init {
            spec += &format!("  - name: {c}\n    image: docker.io/istio/proxyv2:1.31.0\n");
            if let Some(p) = policy {
                spec += &format!("    restartPolicy: {p}\n");
            }
        }
    }
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {app}-5d8f-{i}\n  namespace: shop\n  uid: 0000000{i}-0000-4000-8000-000000000000\n  creationTimestamp: \"2026-01-01T00:00:0{i}Z\"\n  labels: {{app: {app}, pod-template-hash: 5d8f}}\n  ownerReferences:\n  - {{apiVersion: apps/v1, kind: ReplicaSet, name: {app}-5d8f, uid: u, controller: true}}\nspec:\n{spec}status:\n  phase: Running\n  podIP: 10.0.0.{}\n",
        10 + i
    )
}

fn service(name: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: shop\nspec:\n  selector: {{app: {name}}}\n  ports:\n  - {{name: http, port: 80}}\n"
    )
}

/// `web` runs without the proxy (its namespace was labelled after it
/// started), `api` with it, `native` with it as a native sidecar, and
/// `batch` has an `istio-proxy` init container that is no sidecar.
fn mesh() -> String {
    [
        NS.to_string(),
        deployment("web", 2),
        running_pod("web", 1, &["app"], &[]),
        running_pod("web", 2, &["app"], &[]),
        deployment("api", 1),
        running_pod("api", 3, &["app", "istio-proxy"], &[]),
        deployment("native", 1),
        running_pod("native", 4, &["app"], &[("istio-proxy", Some("Always"))]),
        deployment("batch", 1),
        running_pod("batch", 5, &["app"], &[("istio-proxy", None)]),
        service("web"),
        service("api"),
    ]
    .concat()
}

fn workload(s: &MeshSnapshot, name: &str) -> usize {
    s.workloads.iter().position(|w| w.name == name).unwrap()
}

#[test]
fn a_running_pod_without_the_proxy_has_none_though_its_namespace_injects() {
    let s = snap(&mesh());
    let web = &s.workloads[workload(&s, "web")];
    assert!(!web.injection.sidecar, "{:?}", web.injection);
    assert_eq!(
        web.injection.missing.as_deref(),
        Some("namespace shop has label istio-injection=enabled")
    );
    assert_eq!(web.proxies(), 0);
    for (name, proxied) in [("api", true), ("native", true), ("batch", false)] {
        let w = &s.workloads[workload(&s, name)];
        assert_eq!(w.injection.sidecar, proxied, "{name}: {:?}", w.injection);
        assert_eq!(w.proxies(), usize::from(proxied), "{name}");
    }
    let sidecars: Vec<&str> = s
        .sidecar_workloads()
        .map(|w| s.workloads[w].name.as_str())
        .collect();
    assert_eq!(sidecars, ["api", "native"]);

    // explain says so for the pod and for its workload.
    let pod = s.find_pod("shop", "web-5d8f-1").unwrap();
    let e = explain::explain(&s, s.pods[pod].workload, Some(pod), None);
    assert!(!e.injected && e.proxy_missing, "{e:?}");
    assert!(
        e.injection_reason.contains("runs no istio-proxy container"),
        "{}",
        e.injection_reason
    );

    // impact counts the proxies version counts: those that run.
    let target = Target::parse("service/web", "shop").unwrap();
    let imp = explain::impact(&s, &target, &HashMap::new(), &|_| true, None).unwrap();
    let all = inputs(&mesh());
    let version = Evidence::from_pods(&all.pods, &[]);
    assert_eq!(imp.total_proxies, version.proxy_count);
    assert_eq!(imp.total_proxies, 2);
    assert!(
        !imp.now.workloads.keys().any(|k| k.contains("/web")),
        "{:?}",
        imp.now.workloads
    );
}

#[test]
fn audit_reports_the_pods_injection_missed_and_not_as_unscoped() {
    let s = snap(&mesh());
    let all = AuditScope {
        namespaces: None,
        workloads: None,
    };
    let f = audit::audit(&s, None, &all);
    let of = |code: &str| -> Vec<&str> {
        f.iter()
            .filter(|f| f.code.as_str() == code)
            .map(|f| f.name.as_str())
            .collect()
    };
    // batch's istio-proxy init container runs to completion: no sidecar
    // either.
    assert_eq!(of("MS0015"), ["batch", "web"]);
    assert_eq!(of("MS0001"), ["api", "native"]);
    let ms15 = f
        .iter()
        .find(|f| f.code.as_str() == "MS0015" && f.name == "web")
        .unwrap();
    assert_eq!(ms15.kind, "Deployment");
    assert_eq!(
        ms15.message,
        "Deployment shop/web runs 2 of 2 pods without an istio-proxy container although namespace shop has label istio-injection=enabled: they were created before injection applied, so they are outside the mesh until re-created; restart: kubectl rollout restart -n shop deployment/web"
    );
    assert!(audit::code_doc("MS0015").is_some());
}

#[test]
fn templates_and_pod_manifests_not_yet_applied_follow_the_label_rules() {
    // A Deployment with no pods yet, and a bare Pod manifest (no uid, no
    // creation time, no status): the injector will give both a proxy.
    let bare = "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: job\n  namespace: shop\nspec:\n  containers:\n  - name: app\n    image: example/job:1\n";
    let s = snap(&[NS, &deployment("fresh", 3), bare].concat());
    for name in ["fresh", "job"] {
        let w = &s.workloads[workload(&s, name)];
        assert!(w.injection.sidecar, "{name}: {:?}", w.injection);
        assert!(w.injection.missing.is_none());
    }
    assert_eq!(s.workloads[workload(&s, "fresh")].proxies(), 3);
    let f = audit::audit(
        &s,
        None,
        &AuditScope {
            namespaces: None,
            workloads: None,
        },
    );
    assert!(f.iter().all(|f| f.code.as_str() != "MS0015"), "{f:?}");
}
