//! Tests of the admission rules, through [`review`].

use serde_json::json;

use super::*;
use crate::audit::{audit, AuditScope};
use crate::mesh::{MeshConfig, Options};

// === builders ===

fn mk_namespace(name: &str, labels: &[(&str, &str)]) -> Value {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

fn mk_sidecar(ns: &str, name: &str, selector: Option<&[(&str, &str)]>, hosts: &[&str]) -> Value {
    let mut spec = json!({});
    if let Some(sel) = selector {
        let labels: serde_json::Map<String, Value> =
            sel.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        spec["workloadSelector"] = json!({ "labels": labels });
    }
    if !hosts.is_empty() {
        spec["egress"] = json!([{ "hosts": hosts }]);
    }
    json!({
        "apiVersion": "networking.istio.io/v1", "kind": "Sidecar",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": spec
    })
}

fn mk_deployment(ns: &str, name: &str, labels: &[(&str, &str)]) -> Value {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "app:1"}]}
            }
        }
    })
}

fn mk_service_entry(ns: &str, name: &str, resolution: &str, export_to: Option<&[&str]>) -> Value {
    let mut v = json!({
        "apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"hosts": ["api.example.com"], "ports": [{"number": 443, "name": "tls", "protocol": "TLS"}],
                 "resolution": resolution, "location": "MESH_EXTERNAL"}
    });
    if let Some(e) = export_to {
        v["spec"]["exportTo"] = json!(e);
    }
    v
}

/// Namespaces `enforce`, `warn`, `off` and `plain` (no policy label),
/// all injected, plus `ambient` and `uninjected`.
fn mesh(extra: impl IntoIterator<Item = Value>) -> MeshSnapshot {
    mesh_with(extra, MeshConfig::default(), Options::default())
}

fn mesh_with(
    extra: impl IntoIterator<Item = Value>,
    mesh: MeshConfig,
    options: Options,
) -> MeshSnapshot {
    let mut inputs = Inputs::default();
    for (ns, policy) in [("enforce", "enforce"), ("warn", "warn"), ("off", "off")] {
        inputs
            .add(mk_namespace(
                ns,
                &[("istio-injection", "enabled"), (POLICY_LABEL, policy)],
            ))
            .unwrap();
    }
    inputs
        .add(mk_namespace("plain", &[("istio-injection", "enabled")]))
        .unwrap();
    inputs
        .add(mk_namespace(
            "ambient",
            &[
                ("istio.io/dataplane-mode", "ambient"),
                (POLICY_LABEL, "enforce"),
            ],
        ))
        .unwrap();
    inputs
        .add(mk_namespace("uninjected", &[(POLICY_LABEL, "enforce")]))
        .unwrap();
    inputs.add(mk_namespace("istio-system", &[])).unwrap();
    for v in extra {
        inputs.add(v).unwrap();
    }
    MeshSnapshot::build_with_mesh(&inputs, options, mesh)
}

fn enforce_cfg() -> Config {
    Config {
        default_policy: Policy::Warn,
        mutate_service_entry_export_to: false,
    }
}

fn request<'a>(endpoint: Endpoint, op: Operation, object: &'a Value) -> Request<'a> {
    let kind = object["kind"].as_str().unwrap();
    let group = object["apiVersion"]
        .as_str()
        .unwrap()
        .split_once('/')
        .map_or("", |(g, _)| g);
    Request {
        endpoint,
        operation: op,
        group,
        kind,
        namespace: object["metadata"]["namespace"].as_str().unwrap(),
        name: object["metadata"]["name"].as_str().unwrap_or(""),
        // As the webhook gets it: the object's JSON. Leaked: a test's
        // few objects live until the test ends anyway.
        object: Some(Box::leak(
            serde_json::value::to_raw_value(object).expect("must encode"),
        )),
        namespace_fallback: None,
    }
}

fn validate(snap: &MeshSnapshot, object: &Value) -> Decision {
    review(
        &request(Endpoint::Validate, Operation::Create, object),
        snap,
        &enforce_cfg(),
    )
}

fn codes(d: &Decision) -> Vec<&'static str> {
    d.codes()
}

// === MS0001 ===

#[test]
fn enforce_denies_an_unscoped_deployment_with_the_audit_message() {
    let dep = mk_deployment("enforce", "worker", &[("app", "worker")]);
    // A creation: the workload is not in the cluster, so its fix plans
    // from the manifest being applied.
    let d = validate(&mesh([]), &dep);
    assert!(!d.allowed);
    assert_eq!(
        d.message.as_deref(),
        Some("MS0001: Deployment enforce/worker has no Sidecar scope; create its Sidecar first from the manifest you are applying, then apply that again: kubectl meshscope apply -n enforce --workload deployment/worker --from-manifest-hints --allow-idle -f FILE (FILE: the manifest that holds this Deployment)")
    );
    assert_eq!(
        d.findings[0].message,
        d.message.as_deref().unwrap()["MS0001: ".len()..]
    );
    // An update: the workload is in the cluster, as audit sees it.
    let d = review(
        &request(Endpoint::Validate, Operation::Update, &dep),
        &mesh([]),
        &enforce_cfg(),
    );
    assert!(!d.allowed);
    assert_eq!(
        d.message.as_deref(),
        Some("MS0001: Deployment enforce/worker has no Sidecar scope; run: kubectl meshscope apply -n enforce --workload deployment/worker --from-pod-logs (not running yet: kubectl meshscope apply -n enforce --workload deployment/worker --from-manifest-hints --allow-idle)")
    );
    assert_eq!(d.outcome(), Outcome::Denied);

    // The audit of a cluster holding the same object says the same.
    let snap = mesh([dep.clone()]);
    let found = audit(
        &snap,
        None,
        &AuditScope {
            namespaces: None,
            workloads: None,
        },
    );
    let f = found.iter().find(|f| f.code.as_str() == "MS0001").unwrap();
    assert_eq!(format!("{}: {}", f.code, f.message), d.message.unwrap());
}

#[test]
fn warn_allows_an_unscoped_deployment_with_one_short_warning() {
    let d = validate(
        &mesh([]),
        &mk_deployment("warn", "worker", &[("app", "worker")]),
    );
    assert!(d.allowed);
    assert_eq!(d.warnings, vec!["MS0001: Deployment warn/worker has no Sidecar scope; see kubectl meshscope codes MS0001"]);
    assert_eq!(d.outcome(), Outcome::Warned);
}

#[test]
fn off_and_unlabelled_namespaces_follow_their_policy() {
    let snap = mesh([]);
    let d = validate(&snap, &mk_deployment("off", "worker", &[("app", "worker")]));
    assert_eq!(
        (d.allowed, d.warnings.len(), d.policy),
        (true, 0, Some(Policy::Off))
    );
    // No label: the default policy.
    let dep = mk_deployment("plain", "worker", &[("app", "worker")]);
    let d = validate(&snap, &dep);
    assert!(d.allowed && d.warnings.len() == 1);
    let cfg = Config {
        default_policy: Policy::Enforce,
        ..enforce_cfg()
    };
    let d = review(
        &request(Endpoint::Validate, Operation::Update, &dep),
        &snap,
        &cfg,
    );
    assert!(!d.allowed);
}

#[test]
fn uninjected_and_ambient_workloads_need_no_scope() {
    let snap = mesh([]);
    for ns in ["uninjected", "ambient"] {
        let d = validate(&snap, &mk_deployment(ns, "worker", &[("app", "worker")]));
        assert_eq!(
            d,
            Decision {
                policy: Some(Policy::Enforce),
                ..Decision::allow()
            },
            "{ns}"
        );
    }
    // A pod label opts out of injection.
    let d = validate(
        &snap,
        &mk_deployment("enforce", "w", &[("sidecar.istio.io/inject", "false")]),
    );
    assert!(d.allowed);
    // enableNamespacesByDefault injects unlabelled namespaces.
    let options = Options {
        inject_by_default: true,
        ..Options::default()
    };
    let snap = mesh_with(
        [mk_namespace("bare", &[(POLICY_LABEL, "enforce")])],
        MeshConfig::default(),
        options,
    );
    assert!(!validate(&snap, &mk_deployment("bare", "w", &[("app", "w")])).allowed);
}

#[test]
fn any_sidecar_istiod_would_apply_scopes_the_workload() {
    let dep = mk_deployment("enforce", "worker", &[("app", "worker")]);
    let selector = mk_sidecar("enforce", "worker", Some(&[("app", "worker")]), &["./*"]);
    let other = mk_sidecar("enforce", "other", Some(&[("app", "other")]), &["./*"]);
    let ns_default = mk_sidecar("enforce", "default", None, &["./*"]);
    let root = mk_sidecar("istio-system", "default", None, &["./*"]);
    assert!(validate(&mesh([selector]), &dep).allowed);
    assert!(!validate(&mesh([other.clone()]), &dep).allowed);
    assert!(validate(&mesh([other, ns_default]), &dep).allowed);
    assert!(validate(&mesh([root]), &dep).allowed);
    // A selector Sidecar in the root namespace is not a mesh default.
    let root_sel = mk_sidecar("istio-system", "sel", Some(&[("app", "worker")]), &["./*"]);
    assert!(!validate(&mesh([root_sel]), &dep).allowed);
}

// === MS0012 ===

/// A Sidecar meshscope generated for `workload` (a Deployment).
fn mk_managed_sidecar(ns: &str, name: &str, sel: &[(&str, &str)], workload: &str) -> Value {
    let mut v = mk_sidecar(ns, name, Some(sel), &["./*"]);
    v["metadata"]["labels"] = json!({
        "app.kubernetes.io/managed-by": "kubectl-meshscope",
        "meshscope.io/workload-kind": "Deployment",
        "meshscope.io/workload-name": workload,
    });
    v
}

#[test]
fn a_workload_scoped_by_another_workloads_generated_sidecar_gets_an_ms0012_warning() {
    let reviews = mk_managed_sidecar(
        "enforce",
        "reviews-v2-deployment-meshscope",
        &[("version", "v2")],
        "reviews-v2",
    );
    let snap = mesh([reviews]);
    // ratings-v2, created after reviews-v2's Sidecar, carries version: v2.
    let dep = mk_deployment(
        "enforce",
        "ratings-v2",
        &[("app", "ratings"), ("version", "v2")],
    );
    let d = validate(&snap, &dep);
    // It has a scope, so even enforce only warns.
    assert!(d.allowed, "{d:?}");
    assert_eq!(codes(&d), ["MS0012"]);
    assert_eq!(d.warnings.len(), 1);
    assert!(
        d.warnings[0] == "MS0012: Deployment enforce/ratings-v2 is scoped by the Sidecar generated for Deployment reviews-v2",
        "{:?}",
        d.warnings
    );
    assert!(d.warnings[0].chars().count() <= MAX_WARNING_CHARS);
    // The same finding as the audit's for that workload.
    let mut inputs = Inputs::default();
    inputs
        .add(mk_namespace("enforce", &[("istio-injection", "enabled")]))
        .unwrap();
    inputs.add(dep.clone()).unwrap();
    inputs
        .add(mk_managed_sidecar(
            "enforce",
            "reviews-v2-deployment-meshscope",
            &[("version", "v2")],
            "reviews-v2",
        ))
        .unwrap();
    let full = MeshSnapshot::build(&inputs, Options::default()).unwrap();
    let found = audit(
        &full,
        None,
        &AuditScope {
            namespaces: None,
            workloads: None,
        },
    );
    let f = found.iter().find(|f| f.code.as_str() == "MS0012").unwrap();
    assert_eq!(f, &d.findings[0]);

    // The workload the Sidecar was generated for is not warned.
    let own = mk_deployment(
        "enforce",
        "reviews-v2",
        &[("app", "reviews"), ("version", "v2")],
    );
    let d = validate(&snap, &own);
    assert!(d.allowed && d.warnings.is_empty(), "{d:?}");
    // Nor is one selected by a Sidecar its owner wrote.
    let mine = mk_sidecar("enforce", "mine", Some(&[("version", "v2")]), &["./*"]);
    let d = validate(&mesh([mine]), &dep);
    assert!(d.allowed && d.warnings.is_empty(), "{d:?}");
    // Under warn, the warning is the same and nothing is denied.
    let mut warn_dep = dep.clone();
    warn_dep["metadata"]["namespace"] = json!("warn");
    let snap = mesh([mk_managed_sidecar(
        "warn",
        "reviews-v2-deployment-meshscope",
        &[("version", "v2")],
        "reviews-v2",
    )]);
    assert_eq!(codes(&validate(&snap, &warn_dep)), ["MS0012"]);
}

#[test]
fn every_workload_kind_is_read_from_its_pod_template() {
    let snap = mesh([]);
    let tpl =
        json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}});
    let objects = [
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "x", "namespace": "enforce"}, "spec": {"template": tpl}}),
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "x", "namespace": "enforce"}, "spec": {"template": tpl}}),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "x", "namespace": "enforce"}, "spec": {"template": tpl}}),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x", "namespace": "enforce"}, "spec": {"template": tpl}}),
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "x", "namespace": "enforce"}, "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": tpl}}}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "enforce", "labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}}),
    ];
    for o in &objects {
        let d = validate(&snap, o);
        let kind = o["kind"].as_str().unwrap();
        assert_eq!(
            d.message
                .as_deref()
                .map(|m| m.starts_with(&format!("MS0001: {kind} enforce/x "))),
            Some(true),
            "{kind}"
        );
    }
}

#[test]
fn controller_owned_pods_replicasets_and_cronjob_jobs_are_judged_through_their_controller() {
    let snap = mesh([]);
    let owner = |kind: &str| json!([{"apiVersion": "apps/v1", "kind": kind, "name": "o", "uid": "1", "controller": true}]);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "enforce", "ownerReferences": owner("ReplicaSet")}, "spec": {"containers": [{"name": "c"}]}});
    assert!(validate(&snap, &pod).allowed);
    let tpl = json!({"spec": {"containers": [{"name": "c"}]}});
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "r", "namespace": "enforce", "ownerReferences": owner("Deployment")}, "spec": {"template": tpl}});
    assert!(validate(&snap, &rs).allowed);
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "enforce", "ownerReferences": owner("CronJob")}, "spec": {"template": tpl}});
    assert!(validate(&snap, &job).allowed);
    // A Job owned by something else is still checked.
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "enforce", "ownerReferences": owner("Workflow")}, "spec": {"template": tpl}});
    assert!(!validate(&snap, &job).allowed);
}

#[test]
fn an_istio_proxy_container_or_host_network_decides_injection() {
    let snap = mesh([]);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "uninjected"},
                     "spec": {"containers": [{"name": "app"}, {"name": "istio-proxy"}]}});
    assert!(!validate(&snap, &pod).allowed);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "enforce"},
                     "spec": {"hostNetwork": true, "containers": [{"name": "app"}]}});
    assert!(validate(&snap, &pod).allowed);
}

#[test]
fn exemptions_need_a_reason() {
    let snap = mesh([]);
    let mut dep = mk_deployment("enforce", "worker", &[("app", "worker")]);
    dep["metadata"]["annotations"] = json!({EXEMPT_ANNOTATION: "batch job, talks to everything"});
    let d = validate(&snap, &dep);
    assert!(d.allowed && d.warnings.is_empty());
    assert_eq!(d.exempt.as_deref(), Some("batch job, talks to everything"));
    assert_eq!(d.outcome(), Outcome::Exempt);
    dep["metadata"]["annotations"] = json!({EXEMPT_ANNOTATION: "  "});
    let d = validate(&snap, &dep);
    assert!(!d.allowed);
    assert_eq!(d.exempt, None);
    assert_eq!(
        d.warnings,
        vec!["meshscope.io/exempt on Deployment enforce/worker has no reason, so it is ignored"]
    );
}

#[test]
fn deletes_connects_other_kinds_and_terminating_objects_are_allowed() {
    let snap = mesh([]);
    let dep = mk_deployment("enforce", "worker", &[("app", "worker")]);
    for op in [Operation::Delete, Operation::Connect] {
        assert_eq!(
            review(
                &request(Endpoint::Validate, op, &dep),
                &snap,
                &enforce_cfg()
            ),
            Decision::allow()
        );
    }
    let mut r = request(Endpoint::Validate, Operation::Delete, &dep);
    r.object = None;
    assert_eq!(review(&r, &snap, &enforce_cfg()), Decision::allow());
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "enforce"}});
    assert_eq!(validate(&snap, &cm), Decision::allow());
    let mut gone = dep.clone();
    gone["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    assert_eq!(
        review(
            &request(Endpoint::Validate, Operation::Update, &gone),
            &snap,
            &enforce_cfg()
        ),
        Decision::allow()
    );
}

#[test]
fn a_namespace_the_snapshot_does_not_know_yet_uses_the_fallback() {
    let snap = mesh([]);
    let dep = mk_deployment("fresh", "worker", &[("app", "worker")]);
    let mut r = request(Endpoint::Validate, Operation::Create, &dep);
    assert!(review(&r, &snap, &enforce_cfg()).allowed);
    let info = NamespaceInfo {
        labels: [
            ("istio-injection".to_string(), "enabled".to_string()),
            (POLICY_LABEL.to_string(), "enforce".to_string()),
        ]
        .into(),
    };
    r.namespace_fallback = Some(&info);
    assert!(!review(&r, &snap, &enforce_cfg()).allowed);
}

#[test]
fn generated_names_are_shown_as_prefixes() {
    let mut dep = mk_deployment("enforce", "", &[("app", "w")]);
    dep["metadata"].as_object_mut().unwrap().remove("name");
    dep["metadata"]["generateName"] = json!("worker-");
    let d = validate(&mesh([]), &dep);
    assert!(d
        .message
        .unwrap()
        .starts_with("MS0001: Deployment enforce/worker-* has no Sidecar scope"));
}

// === MS0002 ===

fn mk_catch_all_entry(ns: &str, export_to: Option<&[&str]>) -> Value {
    let mut v = mk_service_entry(ns, "all-tcp", "NONE", export_to);
    v["spec"]["hosts"] = json!(["any.tcp.internal"]);
    v["spec"]["addresses"] = json!(["0.0.0.0/0"]);
    v["spec"]["ports"] = json!([{"number": 5432, "name": "tcp-pg", "protocol": "TCP"}]);
    v
}

#[test]
fn catch_all_service_entries_are_denied_unless_exported_narrowly() {
    let snap = mesh([]);
    let d = validate(&snap, &mk_catch_all_entry("enforce", None));
    assert!(!d.allowed);
    let message = d.message.unwrap();
    assert!(
        message.starts_with("MS0016: ServiceEntry enforce/all-tcp has address 0.0.0.0/0"),
        "{message}"
    );
    assert!(message.contains("port 5432"), "{message}");
    let d = validate(&snap, &mk_catch_all_entry("warn", Some(&["*"])));
    assert!(d.allowed && codes(&d) == ["MS0016"] && d.warnings.len() == 2);
    assert!(validate(&snap, &mk_catch_all_entry("enforce", Some(&["."]))).allowed);
    // An HTTP port routes by Host: no catch-all.
    let mut http = mk_catch_all_entry("enforce", None);
    http["spec"]["ports"] = json!([{"number": 80, "name": "http", "protocol": "HTTP"}]);
    assert!(validate(&snap, &http).allowed);
}

#[test]
fn wildcard_service_entries_exported_everywhere_are_flagged() {
    let snap = mesh([]);
    let mut se = mk_service_entry("warn", "wild", "NONE", None);
    se["spec"]["hosts"] = json!(["*.example.com"]);
    let d = validate(&snap, &se);
    assert!(d.allowed && codes(&d) == ["MS0017"], "{:?}", d.warnings);
    se["spec"]["exportTo"] = json!(["."]);
    assert!(validate(&snap, &se).warnings.is_empty());
}

#[test]
fn dns_service_entries_without_export_to_are_denied_or_warned() {
    let snap = mesh([]);
    let se = mk_service_entry("enforce", "api", "DNS", None);
    let d = validate(&snap, &se);
    assert!(!d.allowed);
    let message = d.message.unwrap();
    assert!(
        message.starts_with("MS0002: ServiceEntry enforce/api has resolution DNS and no exportTo")
    );
    // A creation: the object is not in the cluster, so no command can read
    // it; the fix is an exportTo in the manifest being applied (issue #35
    // item 3).
    assert!(
        message.contains("add exportTo to its manifest before applying it: spec.exportTo: [\".\"] keeps it to namespace enforce"),
        "{message}"
    );
    assert!(
        message.contains(
            "kubectl meshscope recommend --exports -f FILE -n enforce --from-pod-logs plans it"
        ),
        "{message}"
    );
    let d = validate(
        &snap,
        &mk_service_entry("warn", "api", "DNS_ROUND_ROBIN", None),
    );
    assert!(
        d.allowed && codes(&d) == ["MS0002"] && d.warnings.len() == 1,
        "{:?}",
        d.warnings
    );
    // An update of one in the cluster: the webhook has no traffic, so it
    // names the command that computes the list.
    let updated = mk_service_entry("warn", "api", "DNS_ROUND_ROBIN", None);
    let d = review(
        &request(Endpoint::Validate, Operation::Update, &updated),
        &snap,
        &enforce_cfg(),
    );
    assert!(d.allowed && codes(&d) == ["MS0002"] && d.warnings.len() == 2);
    assert!(d
        .warnings
        .iter()
        .all(|w| w.chars().count() <= MAX_WARNING_CHARS));
    assert_eq!(
        d.warnings[1],
        "MS0002: exportTo from traffic: kubectl meshscope recommend --exports -n warn --from-pod-logs"
    );
    for ok in [
        mk_service_entry("enforce", "api", "DNS", Some(&["."])),
        mk_service_entry("enforce", "api", "STATIC", None),
        mk_service_entry("enforce", "api", "NONE", None),
    ] {
        assert!(validate(&snap, &ok).allowed);
    }
    // An explicit empty list is as good as none.
    assert!(!validate(&snap, &mk_service_entry("enforce", "api", "DNS", Some(&[]))).allowed);
    // When the mesh exports nothing everywhere by default, there is no risk.
    let private = MeshConfig {
        default_service_export_to: vec![".".into()],
        ..MeshConfig::default()
    };
    assert!(validate(&mesh_with([], private, Options::default()), &se).allowed);
    // Nor when the mesh's serviceEntryVisibility keeps the namespace's
    // ServiceEntries to it for sidecars (Istio 1.31+).
    let capped = |apply: bool| {
        MeshConfig::from_yaml(&format!(
            "serviceEntryVisibility:\n  applyToSidecars: {apply}\n  policies:\n  - visibility: NAMESPACE\n    matchingRules:\n    - namespaceSelector:\n        matchLabels: {{{POLICY_LABEL}: enforce}}\n"
        ))
        .unwrap()
    };
    assert!(validate(&mesh_with([], capped(true), Options::default()), &se).allowed);
    let d = validate(&mesh_with([], capped(false), Options::default()), &se);
    assert!(!d.allowed);
    assert!(d
        .message
        .unwrap()
        .ends_with("or set meshConfig.serviceEntryVisibility.applyToSidecars: true (it makes ServiceEntries in enforce visible NAMESPACE, which sidecars ignore until then)"));
    let before = Options {
        istio: "1.30".parse().unwrap(),
        ..Options::default()
    };
    assert!(!validate(&mesh_with([], capped(true), before), &se).allowed);
}

#[test]
fn mutate_mode_patches_export_to_here_and_says_so() {
    let snap = mesh([]);
    let cfg = Config {
        mutate_service_entry_export_to: true,
        ..enforce_cfg()
    };
    let mut se = mk_service_entry("enforce", "api", "DNS", None);
    let d = review(
        &request(Endpoint::Mutate, Operation::Create, &se),
        &snap,
        &cfg,
    );
    assert!(d.allowed);
    assert_eq!(d.outcome(), Outcome::Patched);
    assert_eq!(d.warnings, vec!["MS0002: meshscope set exportTo: [\".\"] on ServiceEntry enforce/api (resolution DNS, no exportTo)"]);
    json_patch::patch(&mut se, &d.patch.unwrap()).unwrap();
    assert_eq!(se["spec"]["exportTo"], json!(["."]));
    // The validating webhook then sees the patched object.
    assert!(
        review(
            &request(Endpoint::Validate, Operation::Create, &se),
            &snap,
            &cfg
        )
        .allowed
    );
    // ...and still denies one that was not patched.
    let unpatched = mk_service_entry("enforce", "api", "DNS", None);
    assert!(
        !review(
            &request(Endpoint::Validate, Operation::Create, &unpatched),
            &snap,
            &cfg
        )
        .allowed
    );
}

#[test]
fn the_mutating_endpoint_does_nothing_else() {
    let snap = mesh([]);
    let se = mk_service_entry("enforce", "api", "DNS", None);
    // Mutation off: no patch, no warning (the validating webhook speaks).
    assert_eq!(
        review(
            &request(Endpoint::Mutate, Operation::Create, &se),
            &snap,
            &enforce_cfg()
        ),
        Decision::allow()
    );
    let cfg = Config {
        mutate_service_entry_export_to: true,
        ..enforce_cfg()
    };
    let dep = mk_deployment("enforce", "worker", &[("app", "worker")]);
    assert_eq!(
        review(
            &request(Endpoint::Mutate, Operation::Create, &dep),
            &snap,
            &cfg
        ),
        Decision::allow()
    );
    // Off namespaces and exempt objects are left alone.
    let off = mk_service_entry("off", "api", "DNS", None);
    assert!(review(
        &request(Endpoint::Mutate, Operation::Create, &off),
        &snap,
        &cfg
    )
    .patch
    .is_none());
    let mut exempt = se.clone();
    exempt["metadata"]["annotations"] = json!({EXEMPT_ANNOTATION: "shared egress gateway"});
    let d = review(
        &request(Endpoint::Mutate, Operation::Update, &exempt),
        &snap,
        &cfg,
    );
    assert!(d.patch.is_none() && d.exempt.is_some());
}

// === Sidecar hygiene ===

#[test]
fn a_sidecar_without_egress_gets_ms0006_and_is_never_denied() {
    let sc = mk_sidecar("enforce", "web", Some(&[("app", "web")]), &[]);
    let d = validate(&mesh([]), &sc);
    assert!(d.allowed);
    assert_eq!(codes(&d), ["MS0006"]);
    assert!(d.warnings[0].starts_with("MS0006: Sidecar enforce/web has no egress"));
}

#[test]
fn a_second_namespace_default_gets_ms0005() {
    let old = mk_sidecar("warn", "default", None, &["./*"]);
    // Being created, it has no creation time yet: it is the newest.
    let mut new = mk_sidecar("warn", "another", None, &["./*"]);
    new["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("creationTimestamp");
    let d = validate(&mesh([old.clone()]), &new);
    assert_eq!(codes(&d), ["MS0005"]);
    assert!(
        d.findings[0]
            .message
            .contains("istiod uses default (the oldest)"),
        "{:?}",
        d.findings
    );
    // Updating the one default is not a conflict with itself.
    let d = review(
        &request(Endpoint::Validate, Operation::Update, &old),
        &mesh([old.clone()]),
        &enforce_cfg(),
    );
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn equal_or_nested_selectors_get_ms0004() {
    let old = mk_sidecar("warn", "web", Some(&[("app", "web")]), &["./*"]);
    let snap = mesh([old]);
    let same = mk_sidecar("warn", "web-2", Some(&[("app", "web")]), &["./*"]);
    let d = validate(&snap, &same);
    assert_eq!(codes(&d), ["MS0004"]);
    assert!(
        d.findings[0]
            .message
            .contains("(web, web-2); istiod uses web (the oldest)"),
        "{}",
        d.findings[0].message
    );
    let narrower = mk_sidecar(
        "warn",
        "web-v2",
        Some(&[("app", "web"), ("version", "v2")]),
        &["./*"],
    );
    assert_eq!(codes(&validate(&snap, &narrower)), ["MS0004"]);
    let disjoint = mk_sidecar("warn", "api", Some(&[("app", "api")]), &["./*"]);
    assert!(validate(&snap, &disjoint).warnings.is_empty());
    // Another namespace's Sidecars never conflict.
    let elsewhere = mk_sidecar("enforce", "web", Some(&[("app", "web")]), &["./*"]);
    assert!(validate(&snap, &elsewhere).warnings.is_empty());
}

#[test]
fn a_root_namespace_sidecar_with_a_selector_gets_ms0008() {
    let sc = mk_sidecar("istio-system", "gw", Some(&[("app", "gw")]), &["./*"]);
    assert_eq!(codes(&validate(&mesh([]), &sc)), ["MS0008"]);
    let root_default = mk_sidecar("istio-system", "default", None, &["./*"]);
    assert!(validate(&mesh([]), &root_default).warnings.is_empty());
}

#[test]
fn sidecar_checks_follow_the_namespace_policy_and_exemptions() {
    let mut sc = mk_sidecar("off", "web", None, &[]);
    assert!(validate(&mesh([]), &sc).warnings.is_empty());
    sc["metadata"]["namespace"] = json!("warn");
    sc["metadata"]["annotations"] = json!({EXEMPT_ANNOTATION: "ingress tuning only"});
    assert!(validate(&mesh([]), &sc).warnings.is_empty());
}

#[test]
fn the_registered_kinds_are_exactly_the_ones_the_rules_read() {
    for (group, _, kind) in VALIDATED {
        assert!(subject(group, kind).is_some(), "{group}/{kind}");
    }
    for (group, _, kind) in MUTATED {
        assert_eq!(subject(group, kind), Some(Subject::ServiceEntry));
    }
    assert_eq!(subject("apps", "ControllerRevision"), None);
    assert_eq!(subject("", "Sidecar"), None);
}

// === warnings ===

#[test]
fn warnings_that_fit_are_kept_whole() {
    assert_eq!(
        finding_warning(Code::SidecarWithoutEgress, "short"),
        "MS0006: short"
    );
}

#[test]
fn long_warnings_keep_the_first_clause_and_point_at_the_code() {
    let msg = "Deployment shop/worker has no Sidecar scope; run: kubectl meshscope apply -n shop --workload deployment/worker --from-pod-logs (not running yet: kubectl meshscope apply -n shop --workload deployment/worker --from-manifest-hints --allow-idle)";
    let w = finding_warning(Code::UnscopedWorkload, msg);
    assert_eq!(
        w,
        "MS0001: Deployment shop/worker has no Sidecar scope; see kubectl meshscope codes MS0001"
    );
    let long = format!("{} {}", "word".repeat(20), "x ".repeat(60));
    let w = finding_warning(Code::UnscopedWorkload, &long);
    assert!(w.chars().count() <= MAX_WARNING_CHARS, "{w}");
    assert!(w.ends_with('…'));
}

#[test]
fn policies_parse_and_bad_labels_fall_back_with_a_warning() {
    assert_eq!("enforce".parse::<Policy>(), Ok(Policy::Enforce));
    assert!("Enforce".parse::<Policy>().is_err());
    let info = NamespaceInfo {
        labels: [(POLICY_LABEL.to_string(), "block".to_string())].into(),
    };
    let (p, w) = namespace_policy("shop", Some(&info), Policy::Warn);
    assert_eq!(p, Policy::Warn);
    assert!(w.unwrap().contains("\"block\""));
    assert_eq!(
        namespace_policy("shop", None, Policy::Enforce),
        (Policy::Enforce, None)
    );
}

// === exemptions: the webhook and audit read them alike ===

#[test]
fn audit_reports_what_the_webhook_exempts_as_exempt_with_the_reason() {
    let mut se = mk_service_entry("warn", "api", "DNS", None);
    se["metadata"]["annotations"] = json!({EXEMPT_ANNOTATION: " shared egress gateway "});
    let mut dep = mk_deployment("warn", "worker", &[("app", "worker")]);
    dep["metadata"]["annotations"] = json!({EXEMPT_ANNOTATION: "batch job, scoped in Q3"});
    let mut sc = mk_sidecar("warn", "tuning", Some(&[("app", "nobody")]), &[]);
    sc["metadata"]["annotations"] = json!({EXEMPT_ANNOTATION: ""});
    let plain = mk_service_entry("warn", "other", "DNS", None);
    let snap = mesh([se.clone(), dep.clone(), sc.clone(), plain]);
    let scope = AuditScope {
        namespaces: None,
        workloads: None,
    };
    let found = audit(&snap, None, &scope);
    let exempt = |kind: &str, name: &str| -> Vec<(&'static str, Option<String>)> {
        found
            .iter()
            .filter(|f| f.kind == kind && f.name == name)
            .map(|f| (f.code.as_str(), f.exempt.clone()))
            .collect()
    };
    let d = validate(&snap, &se);
    assert_eq!(d.exempt.as_deref(), Some("shared egress gateway"));
    assert_eq!(
        exempt("ServiceEntry", "api"),
        [("MS0002", d.exempt.clone())]
    );
    let d = validate(&snap, &dep);
    assert_eq!(exempt("Deployment", "worker"), [("MS0001", d.exempt)]);
    // No reason: not exempt, in the webhook (which warns) or in audit.
    let d = validate(&snap, &sc);
    assert_eq!(d.exempt, None);
    assert_eq!(
        exempt("Sidecar", "tuning"),
        [("MS0003", None), ("MS0006", None)]
    );
    assert_eq!(
        crate::audit::ignored_exemptions(&snap, &scope),
        ["meshscope.io/exempt on Sidecar warn/tuning has no reason, so it is ignored"]
    );
    assert!(d
        .warnings
        .contains(&crate::audit::ignored_exemptions(&snap, &scope)[0]));
    assert_eq!(exempt("ServiceEntry", "other"), [("MS0002", None)]);
    // Exempt findings count apart in the summary.
    let s = crate::audit::summarize(&found);
    assert_eq!(s.exempt, 2);
    assert_eq!(s.by_code.get(&Code::DnsServiceEntryMeshWide), Some(&1));
}
