//! Selectors that stay true, through the built `kubectl-meshscope` binary
//! against the real kube-apiserver and kube-controller-manager (whose
//! controllers create the pods, with their pod-template-hash, job-name and
//! controller-uid labels): per-version Deployments get their own
//! matchLabels, a canary told apart only by its release label is skipped
//! with the reason, a Job is selected by its template's labels, an older
//! managed Sidecar that selects another workload is MS0012 until apply
//! replaces its selector, and a workload name longer than a label value is
//! pruned through its full-name annotation.

use std::path::Path;

use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::world::server_side_apply;
use meshscope_test_support::audit_json;
use serde_json::Value;

/// `kubectl-meshscope ARGS` with KUBECONFIG set: exit code, stdout, stderr.
fn binary(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    meshscope_e2e::run::binary(args)
        .env("KUBECONFIG", kubeconfig)
        .run()
}

fn deployment(ns: &str, name: &str, sel: &str, labels: &str) -> String {
    format!(
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {sel}\n  template:\n    metadata:\n      labels: {labels}\n    spec:\n      containers: [{{name: c, image: example/{name}:1}}]\n"
    )
}

/// The recommended Sidecars of a YAML stream: name → (selector, labels,
/// annotations).
fn sidecars(yaml: &str) -> Vec<(String, Value)> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| serde::Deserialize::deserialize(d).expect("valid YAML"))
        .filter(|v: &Value| !v.is_null())
        .map(|v| (v["metadata"]["name"].as_str().unwrap().to_string(), v))
        .collect()
}

fn selector(objects: &[(String, Value)], name: &str) -> Value {
    objects
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no Sidecar {name} in {objects:?}"))
        .1["spec"]["workloadSelector"]["labels"]
        .clone()
}

fn live_selector(c: &Cluster, ns: &str, name: &str) -> Value {
    let out = c.sidecar_jsonpath(ns, name, "{.spec.workloadSelector.labels}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn audit_codes(c: &Cluster, ns: &str) -> Vec<(String, String)> {
    let (code, out, err) = binary(&c.kubeconfig, &["audit", "-n", ns, "-o", "json"]);
    assert!(code == 0 || code == 1, "{err}");
    audit_json::codes_and_names(&out)
}

#[test]
fn recommended_selectors_stay_true_for_deployments_canaries_and_jobs() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("stable", &[("istio-injection", "enabled")]);
    let mut y = String::new();
    for v in ["v1", "v2"] {
        let l = format!("{{app: reviews, version: {v}}}");
        y += &deployment(&ns, &format!("reviews-{v}"), &l, &l);
    }
    y += &deployment(
        &ns,
        "web",
        "{app: web, track: stable}",
        "{app: web, track: stable, app.kubernetes.io/version: 1.2.3}",
    );
    y += &deployment(
        &ns,
        "web-canary",
        "{app: web, app.kubernetes.io/version: 1.2.4}",
        "{app: web, app.kubernetes.io/version: 1.2.4}",
    );
    y += &format!(
        "---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  namespace: {ns}\nspec:\n  template:\n    metadata:\n      labels: {{app: migrate}}\n    spec:\n      restartPolicy: Never\n      containers: [{{name: c, image: example/migrate:1}}]\n"
    );
    c.apply(&y);
    c.wait_pods(&ns, "reviews", 2).unwrap();
    c.wait_pods(&ns, "web", 2).unwrap();
    c.wait_pods(&ns, "migrate", 1).unwrap();

    let (code, out, err) = binary(
        &c.kubeconfig,
        &["recommend", "-n", &ns, "--allow-idle", "-o", "yaml"],
    );
    assert_eq!(code, 0, "{err}");
    let objects = sidecars(&out);
    // The Deployments' own selectors, not `version: v2` alone.
    for v in ["v1", "v2"] {
        assert_eq!(
            selector(&objects, &format!("reviews-{v}-deployment-meshscope")),
            serde_json::json!({"app": "reviews", "version": v})
        );
    }
    assert_eq!(
        selector(&objects, "web-deployment-meshscope"),
        serde_json::json!({"app": "web", "track": "stable"})
    );
    // The Job's template labels, not the per-run job-name or controller-uid
    // the API server added to it.
    assert_eq!(
        selector(&objects, "migrate-job-meshscope"),
        serde_json::json!({"app": "migrate"})
    );
    assert!(
        !objects.iter().any(|(n, _)| n.starts_with("web-canary")),
        "{out}"
    );
    assert!(
        err.contains(&format!(
            "skipped Deployment/{ns}/web-canary: no stable selector: its stable labels (app=web) also select the pods of Deployment web; only labels that do not stay true tell them apart (app.kubernetes.io/version changes per release)"
        )),
        "{err}"
    );
    let mut names: Vec<&str> = objects.iter().map(|(n, _)| n.as_str()).collect();
    names.dedup();
    assert_eq!(names.len(), objects.len(), "{names:?}");

    // Applied, the scopes overlap nowhere.
    let (code, _, err) = binary(&c.kubeconfig, &["apply", "-n", &ns, "--allow-idle"]);
    assert_eq!(code, 0, "{err}");
    let found = audit_codes(c, &ns);
    assert!(
        !found
            .iter()
            .any(|(code, _)| code == "MS0004" || code == "MS0012"),
        "{found:?}"
    );

    // A managed selector that picked up an unstable label (here the
    // ReplicaSet's pod-template-hash) is replaced, and apply says so.
    let hash = c
        .kubectl_ok(
            &[
                "get",
                "pods",
                "-n",
                &ns,
                "-l",
                "app=reviews,version=v1",
                "-o",
                "jsonpath={.items[0].metadata.labels.pod-template-hash}",
            ],
            None,
        )
        .trim()
        .to_string();
    server_side_apply(
        c,
        "kubectl-meshscope",
        &[],
        &format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: reviews-v1-deployment-meshscope\n  namespace: {ns}\n  labels:\n    app.kubernetes.io/managed-by: kubectl-meshscope\n    meshscope.io/workload-kind: Deployment\n    meshscope.io/workload-name: reviews-v1\nspec:\n  workloadSelector:\n    labels: {{app: reviews, version: v1, pod-template-hash: '{hash}'}}\n  egress:\n  - hosts: [\"~/*\"]\n"
        ),
    )
    .unwrap();
    let (code, _, err) = binary(&c.kubeconfig, &["apply", "-n", &ns, "--allow-idle"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "note: Deployment/{ns}/reviews-v1: selector app=reviews,pod-template-hash={hash},version=v1 replaced by app=reviews,version=v1 (pod-template-hash changes per revision)"
        )),
        "{err}"
    );
    assert_eq!(
        live_selector(c, &ns, "reviews-v1-deployment-meshscope"),
        serde_json::json!({"app": "reviews", "version": "v1"})
    );
}

#[test]
fn an_older_sidecar_selecting_another_workload_is_ms0012_until_apply_replaces_its_selector() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("overlap", &[("istio-injection", "enabled")]);
    let reviews = "{app: reviews, version: v2}";
    let ratings = "{app: ratings, version: v2}";
    c.apply(
        &(deployment(&ns, "reviews-v2", reviews, reviews)
            + &deployment(&ns, "ratings-v2", ratings, ratings)),
    );
    c.wait_pods(&ns, "reviews", 1).unwrap();
    c.wait_pods(&ns, "ratings", 1).unwrap();
    // reviews-v2's Sidecar as an older meshscope wrote it: `version: v2`
    // alone, unique until ratings-v2 arrived.
    server_side_apply(
        c,
        "kubectl-meshscope",
        &[],
        &format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: reviews-v2-deployment-meshscope\n  namespace: {ns}\n  labels:\n    app.kubernetes.io/managed-by: kubectl-meshscope\n    meshscope.io/workload-kind: Deployment\n    meshscope.io/workload-name: reviews-v2\nspec:\n  workloadSelector:\n    labels: {{version: v2}}\n  egress:\n  - hosts: [\"~/*\"]\n"
        ),
    )
    .unwrap();

    let found = audit_codes(c, &ns);
    assert!(
        found.contains(&("MS0012".into(), "ratings-v2".into())),
        "{found:?}"
    );
    assert!(
        !found.contains(&("MS0012".into(), "reviews-v2".into())),
        "{found:?}"
    );
    // `codes` documents it.
    let (code, out, _) = binary(&c.kubeconfig, &["codes", "MS0012"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("MS0012 (warning): Scoped by another workload's Sidecar"),
        "{out}"
    );

    // Recommending ratings-v2 alone says what keeps the overlap.
    let (code, out, err) = binary(
        &c.kubeconfig,
        &[
            "recommend",
            "-n",
            &ns,
            "--allow-idle",
            "--workload",
            "deployment/ratings-v2",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("name: ratings-v2-deployment-meshscope"),
        "{out}"
    );
    assert!(
        err.contains(&format!(
            "note: Deployment/{ns}/ratings-v2: MS0012: Sidecar {ns}/reviews-v2-deployment-meshscope, generated for Deployment reviews-v2, also selects it and is the one istiod applies; re-apply it: kubectl meshscope apply -n {ns} --workload deployment/reviews-v2"
        )),
        "{err}"
    );

    // Applying the namespace replaces the old selector and gives ratings-v2
    // its own Sidecar.
    let (code, _, err) = binary(&c.kubeconfig, &["apply", "-n", &ns, "--allow-idle"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "note: Deployment/{ns}/reviews-v2: selector version=v2 replaced by app=reviews,version=v2 (it also selected Deployment ratings-v2)"
        )),
        "{err}"
    );
    assert_eq!(
        live_selector(c, &ns, "reviews-v2-deployment-meshscope"),
        serde_json::json!({"app": "reviews", "version": "v2"})
    );
    assert_eq!(
        live_selector(c, &ns, "ratings-v2-deployment-meshscope"),
        serde_json::json!({"app": "ratings", "version": "v2"})
    );
    let found = audit_codes(c, &ns);
    assert!(
        !found
            .iter()
            .any(|(code, _)| code == "MS0004" || code == "MS0012"),
        "{found:?}"
    );
}

#[test]
fn a_workload_name_longer_than_a_label_value_is_labelled_cut_and_pruned_by_its_full_name() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("longname", &[("istio-injection", "enabled")]);
    let name = format!("checkout-{}", "x".repeat(70));
    c.apply(&deployment(
        &ns,
        &name,
        "{app: checkout}",
        "{app: checkout}",
    ));
    c.wait_pods(&ns, "checkout", 1).unwrap();
    let (code, _, err) = binary(&c.kubeconfig, &["apply", "-n", &ns, "--allow-idle"]);
    assert_eq!(code, 0, "{err}");
    let sidecar = format!("{name}-deployment-meshscope");
    let meta: Value =
        serde_json::from_str(&c.sidecar_jsonpath(&ns, &sidecar, "{.metadata}")).unwrap();
    let label = meta["labels"]["meshscope.io/workload-name"]
        .as_str()
        .unwrap();
    assert!(
        label.len() <= 63 && label.starts_with("checkout-x"),
        "{label}"
    );
    assert_eq!(
        meta["annotations"]["meshscope.io/workload-name-full"],
        name.as_str()
    );
    // Still there: nothing to prune.
    let (code, _, err) = binary(
        &c.kubeconfig,
        &["apply", "-n", &ns, "--allow-idle", "--prune"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        c.kubectl(
            &["get", "sidecars.networking.istio.io", &sidecar, "-n", &ns],
            None
        )
        .status
        .success(),
        "{err}"
    );
    // Gone: pruned.
    c.delete_deployment(&ns, &name);
    let (code, out, err) = binary(
        &c.kubeconfig,
        &["apply", "-n", &ns, "--allow-idle", "--prune"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("{sidecar} pruned")), "{out}\n{err}");
}
