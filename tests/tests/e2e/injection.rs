//! Which running pods have a sidecar, against the real API server: a pod
//! created before its namespace was labelled `istio-injection=enabled`
//! (the rollout restart forgotten) runs without the proxy, and `explain`,
//! `audit`, `impact` and `version` all say so; `verify` is held to the
//! same pods in tests/tests/verify.rs, where istiod runs.

use kubectl_meshscope::Outcome;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::run::{meshscope, meshscope_at as live};
use meshscope_test_support::audit_json::codes_and_names;
use serde_json::Value;

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Deployment `web` (its pods only run `app`: no injector runs here, and
/// its namespace is not labelled yet), Service `web`, and bare Pod
/// `proxied`, which carries the istio-proxy an injector would have added.
fn objects(ns: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers: [{{name: app, image: example/web:1}}]\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  selector: {{app: web}}\n  ports: [{{name: http, port: 80}}]\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: proxied\n  namespace: {ns}\n  labels: {{app: proxied}}\nspec:\n  containers:\n  - {{name: app, image: example/proxied:1}}\n  - {{name: istio-proxy, image: docker.io/istio/proxyv2:1.31.0}}\n"
    )
}

#[test]
fn a_pod_started_before_its_namespace_was_labelled_has_no_sidecar_in_every_command() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("late", &[]);
    c.apply(&objects(&ns));
    let web = c.wait_pods(&ns, "web", 1).expect("web's pod")[0].clone();
    c.kubectl_ok(
        &["label", "namespace", &ns, "istio-injection=enabled"],
        None,
    );
    let k = &c.kubeconfig;

    // explain: the pod, and its workload.
    for target in [vec!["pod", web.as_str()], vec!["deployment/web"]] {
        let mut args = vec!["explain"];
        args.extend(&target);
        args.extend(["-n", &ns]);
        let r = live(k, &args);
        assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
        assert!(
            r.stdout.contains(
                "Injection:        none (no sidecar, though injection applies: MS0015)"
            ) && r.stdout.contains(&format!(
                "namespace {ns} has label istio-injection=enabled, but the pod runs no istio-proxy container"
            )),
            "{target:?}: {}",
            r.stdout
        );
        args.extend(["-o", "json"]);
        let e = json(&live(k, &args).stdout);
        assert_eq!(
            (&e["injected"], &e["proxy_missing"]),
            (&false.into(), &true.into())
        );
    }

    // audit: web's pods are reported as missed by injection, not unscoped;
    // the pod that has the proxy is unscoped.
    let r = live(k, &["audit", "-n", &ns, "-o", "json"]);
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    let mut found = codes_and_names(&r.stdout);
    found.sort();
    assert_eq!(
        found,
        [
            ("MS0001".to_string(), "proxied".to_string()),
            ("MS0015".to_string(), "web".to_string())
        ]
    );
    let v = json(&r.stdout);
    let ms15 = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "MS0015")
        .unwrap();
    assert_eq!(
        ms15["message"],
        format!("Deployment {ns}/web runs 1 of 1 pod without an istio-proxy container although namespace {ns} has label istio-injection=enabled: it was created before injection applied, so it is outside the mesh until re-created; restart: kubectl rollout restart -n {ns} deployment/web")
    );

    // impact: a change to web reaches the proxy that runs, not web's pod.
    let r = live(k, &["impact", "service/web", "-n", &ns, "-o", "json"]);
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    let now = &json(&r.stdout)["now"]["workloads"];
    assert!(
        now.get(format!("Pod/{ns}/proxied")).is_some()
            && now.get(format!("Deployment/{ns}/web")).is_none(),
        "{now}"
    );

    // The same pods, dumped: impact counts the proxies version counts.
    let dump = [
        c.kubectl_ok(&["get", "namespace", &ns, "-o", "yaml"], None),
        c.kubectl_ok(
            &[
                "get",
                "-n",
                &ns,
                "-o",
                "yaml",
                "pods,deployments,replicasets,services",
            ],
            None,
        ),
    ]
    .join("---\n");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dump.yaml");
    std::fs::write(&file, dump).unwrap();
    let f = file.to_str().unwrap();
    let r = meshscope(&["version", "--manifests", f, "-o", "json"]);
    assert_eq!(json(&r.stdout)["proxies"], serde_json::json!({"1.31": 1}));
    let r = meshscope(&[
        "impact",
        "service/web",
        "-n",
        &ns,
        "--manifests",
        f,
        "-o",
        "json",
    ]);
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    assert_eq!(json(&r.stdout)["total_proxies"], 1, "{}", r.stdout);

    let _ = c.kubectl(&["delete", "namespace", &ns, "--wait=false"], None);
}
