//! Recommendation rules: selectors, ownership of existing Sidecars, prune,
//! per-namespace mode, includes, passthrough mapping, and audit codes that
//! need traffic.

use meshscope_test_support::access_log;
use meshscope_test_support::fixtures::{hosts, labels, observe, snap};

use meshscope_shared::audit::{self, AuditScope};
use meshscope_shared::observe::Observations;
use meshscope_shared::recommend::{self, stable_selector, Outcome, RecommendOptions};
use meshscope_shared::snapshot::{MeshSnapshot, WorkloadId, WorkloadKind};

/// A Deployment selecting `sel`, with template `labels` and one pod.
fn deploy_sel(name: &str, sel: &str, labels: &str, ip: &str) -> String {
    let pod_labels = labels.replace('}', ", pod-template-hash: abc12}");
    format!(
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: shop\nspec:\n  selector:\n    matchLabels: {sel}\n  template:\n    metadata:\n      labels: {labels}\n    spec:\n      containers: [{{name: c, image: x}}]\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}-abc12-xyz98\n  namespace: shop\n  labels: {pod_labels}\n  ownerReferences:\n  - {{apiVersion: apps/v1, kind: ReplicaSet, name: {name}-abc12, uid: u, controller: true}}\nspec:\n  containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]\nstatus:\n  podIP: {ip}\n"
    )
}

/// A Deployment selecting its `app` label.
fn deploy(name: &str, labels: &str, ip: &str) -> String {
    let app = labels
        .trim_matches(['{', '}'])
        .split(", ")
        .find_map(|kv| kv.strip_prefix("app: "))
        .expect("an app label");
    deploy_sel(name, &format!("{{app: {app}}}"), labels, ip)
}

fn service(name: &str, ip: &str) -> String {
    format!("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: shop\nspec:\n  clusterIP: {ip}\n  selector: {{app: {name}}}\n  ports:\n  - {{name: http, port: 80}}\n")
}

fn base() -> String {
    "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {istio-injection: enabled}\n".to_string()
        + &deploy("web", "{app: web, tier: front}", "10.0.0.1")
        + &deploy_sel(
            "web-canary",
            "{app: web, track: canary}",
            "{app: web, track: canary}",
            "10.0.0.2",
        )
        + &deploy("cart", "{app: cart}", "10.0.0.3")
        + &deploy("idle", "{app: idle}", "10.0.0.4")
        + &service("cart", "10.96.0.3")
        + &service("web", "10.96.0.1")
}

fn line(src: &str, cluster: &str, dst: &str) -> String {
    access_log::line(src, "a", cluster, dst)
}

fn w(s: &MeshSnapshot, name: &str) -> WorkloadId {
    s.find_workload(&WorkloadKind::Deployment, "shop", name)
        .unwrap()
}

#[test]
fn selectors_start_from_match_labels_and_add_the_fewest_stable_template_labels() {
    let s = snap(&base());
    // web's own selector `app: web` also selects web-canary's pod.
    let sel = stable_selector(&s, w(&s, "web")).unwrap();
    assert_eq!(sel, labels(&[("app", "web"), ("tier", "front")]));
    // web-canary's own selector selects only its pods: used whole.
    let sel = stable_selector(&s, w(&s, "web-canary")).unwrap();
    assert_eq!(sel, labels(&[("app", "web"), ("track", "canary")]));
    assert_eq!(
        stable_selector(&s, w(&s, "cart")).unwrap(),
        labels(&[("app", "cart")])
    );
}

#[test]
fn no_stable_selector_means_the_workload_is_skipped() {
    let yaml = base() + &deploy("web-twin", "{app: web, tier: front}", "10.0.0.9");
    let s = snap(&yaml);
    let why = stable_selector(&s, w(&s, "web")).unwrap_err();
    assert!(
        why.starts_with("no stable selector: its stable labels (app=web,tier=front) also select the pods of Deployment web-twin"),
        "{why}"
    );
    let obs = observe(
        &s,
        &line(
            "10.0.0.1",
            "outbound|80||cart.shop.svc.cluster.local",
            "10.96.0.3:80",
        ),
    );
    let r = recommend::recommend(&s, &obs, &[w(&s, "web")], &RecommendOptions::default());
    assert!(
        matches!(&r[0].outcome, Outcome::Skipped(m) if m.starts_with(recommend::NO_STABLE_SELECTOR)),
        "{:?}",
        r[0].outcome
    );
}

#[test]
fn idle_workloads_are_skipped_unless_allow_idle() {
    let s = snap(&base());
    let obs = Observations::default();
    let r = recommend::recommend(&s, &obs, &[w(&s, "idle")], &RecommendOptions::default());
    assert!(matches!(&r[0].outcome, Outcome::Skipped(m) if m.starts_with("no evidence")));
    let opts = RecommendOptions {
        allow_idle: true,
        ..Default::default()
    };
    let r = recommend::recommend(&s, &obs, &[w(&s, "idle")], &opts);
    assert_eq!(hosts(&r[0]), vec!["~/*"]);
}

/// issue #35 item 2: a workload whose callers' logs show requests to it,
/// but whose own proxy's log is missing, is told what was seen and what
/// is missing, not "no traffic", and is not pointed at --allow-idle (a
/// closed scope would cut whatever it calls).
#[test]
fn a_workload_only_its_callers_logs_show_is_told_its_own_log_is_missing() {
    let s = snap(&base());
    let call = line(
        "10.0.0.1",
        "outbound|80||cart.shop.svc.cluster.local",
        "10.96.0.3:80",
    );
    let obs = observe(&s, &format!("{call}{call}"));
    let r = recommend::recommend(&s, &obs, &[w(&s, "cart")], &RecommendOptions::default());
    let Outcome::Skipped(why) = &r[0].outcome else {
        panic!("{:?}", r[0].outcome)
    };
    assert_eq!(
        why,
        "no evidence: 2 requests to it were seen in the logs of its callers (web), but none from its own proxy, so what it calls is unknown; read its own istio-proxy log too (--from-pod-logs, or add its file to --access-log)"
    );
    assert!(r[0].outcome.is_no_evidence());
}

#[test]
fn user_owned_sidecars_are_never_replaced_and_missing_hosts_are_reported() {
    let yaml = base() + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: mine\n  namespace: shop\nspec:\n  workloadSelector:\n    labels: {tier: front}\n  egress:\n  - hosts: [\"istio-system/*\"]\n";
    let s = snap(&yaml);
    let obs = observe(
        &s,
        &line(
            "10.0.0.1",
            "outbound|80||cart.shop.svc.cluster.local",
            "10.96.0.3:80",
        ),
    );
    let r = recommend::recommend(&s, &obs, &[w(&s, "web")], &RecommendOptions::default());
    match &r[0].outcome {
        Outcome::UserOwned { sidecar, missing } => {
            assert_eq!(s.sidecars[*sidecar].name, "mine");
            assert_eq!(
                missing,
                &vec!["shop/cart.shop.svc.cluster.local".to_string()]
            );
        }
        other => panic!("{other:?}"),
    }
    // And audit says the traffic leaves the scope.
    let f = audit::audit(
        &s,
        Some(&obs),
        &AuditScope {
            namespaces: None,
            workloads: None,
        },
    );
    assert!(
        f.iter()
            .any(|f| f.code.as_str() == "MS0011" && f.name == "web"),
        "{f:?}"
    );
}

#[test]
fn managed_sidecars_gain_hosts_and_prune_drops_unseen_ones() {
    let yaml = base() + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: generated\n  namespace: shop\n  labels: {app.kubernetes.io/managed-by: kubectl-meshscope}\nspec:\n  workloadSelector:\n    labels: {tier: front}\n  egress:\n  - hosts: [\"shop/old.shop.svc.cluster.local\"]\n";
    let s = snap(&yaml);
    let obs = observe(
        &s,
        &line(
            "10.0.0.1",
            "outbound|80||cart.shop.svc.cluster.local",
            "10.96.0.3:80",
        ),
    );
    let r = recommend::recommend(&s, &obs, &[w(&s, "web")], &RecommendOptions::default());
    assert_eq!(
        r[0].sidecar().unwrap().metadata.name.as_deref(),
        Some("generated")
    );
    assert_eq!(
        hosts(&r[0]),
        vec![
            "shop/cart.shop.svc.cluster.local",
            "shop/old.shop.svc.cluster.local"
        ]
    );
    let opts = RecommendOptions {
        prune: true,
        ..Default::default()
    };
    let r = recommend::recommend(&s, &obs, &[w(&s, "web")], &opts);
    assert_eq!(hosts(&r[0]), vec!["shop/cart.shop.svc.cluster.local"]);
}

#[test]
fn per_namespace_mode_unions_hosts_into_one_selectorless_sidecar() {
    let s = snap(&base());
    let logs = line(
        "10.0.0.1",
        "outbound|80||cart.shop.svc.cluster.local",
        "10.96.0.3:80",
    ) + &line(
        "10.0.0.3",
        "outbound|80||web.shop.svc.cluster.local",
        "10.96.0.1:80",
    );
    let obs = observe(&s, &logs);
    let ws: Vec<WorkloadId> = s.sidecar_workloads().collect();
    let opts = RecommendOptions {
        per_namespace: true,
        include: vec!["istio-system/*".into()],
        ..Default::default()
    };
    let r = recommend::recommend(&s, &obs, &ws, &opts);
    assert_eq!(r.len(), 1);
    let sc = r[0].sidecar().unwrap();
    assert!(sc.spec.workload_selector.is_none());
    assert_eq!(
        hosts(&r[0]),
        vec![
            "istio-system/*",
            "shop/cart.shop.svc.cluster.local",
            "shop/web.shop.svc.cluster.local"
        ]
    );
}

#[test]
fn passthrough_to_a_cluster_ip_is_a_dependency_and_unknown_ips_are_unregistered() {
    let s = snap(&base());
    let logs = line("10.0.0.3", "PassthroughCluster", "10.96.0.1:80")
        + &line("10.0.0.3", "PassthroughCluster", "192.0.2.50:5432")
        + &line("10.0.0.3", "BlackHoleCluster", "192.0.2.51:443");
    let obs = observe(&s, &logs);
    let r = recommend::recommend(&s, &obs, &[w(&s, "cart")], &RecommendOptions::default());
    assert_eq!(hosts(&r[0]), vec!["shop/web.shop.svc.cluster.local"]);
    let un: Vec<(&str, bool)> = obs
        .unregistered
        .iter()
        .map(|u| (u.address.as_str(), u.blocked))
        .collect();
    assert_eq!(un.len(), 2);
    assert!(un.contains(&("192.0.2.50:5432", false)) && un.contains(&("192.0.2.51:443", true)));
}

#[test]
fn everything_and_empty_egress_sidecars_are_reported() {
    let yaml = base()
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: all\n  namespace: shop\nspec:\n  workloadSelector:\n    labels: {app: cart}\n  egress:\n  - hosts: [\"*/*\"]\n"
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: ingress-only\n  namespace: shop\nspec:\n  workloadSelector:\n    labels: {app: idle}\n  ingress:\n  - port: {number: 80, protocol: HTTP}\n    defaultEndpoint: 127.0.0.1:8080\n";
    let s = snap(&yaml);
    let f = audit::audit(
        &s,
        None,
        &AuditScope {
            namespaces: None,
            workloads: None,
        },
    );
    let codes: Vec<(&str, &str)> = f
        .iter()
        .map(|f| (f.code.as_str(), f.name.as_str()))
        .collect();
    assert!(codes.contains(&("MS0010", "all")), "{codes:?}");
    assert!(codes.contains(&("MS0006", "ingress-only")), "{codes:?}");
    assert!(!codes.contains(&("MS0001", "cart")) && codes.contains(&("MS0001", "web")));
}

#[test]
fn a_host_no_service_defines_is_reported_with_why_and_never_written() {
    let s = snap(&base());
    let logs = line(
        "10.0.0.1",
        "outbound|80||cart.shop.svc.cluster.local",
        "10.96.0.3:80",
    ) + &line(
        "10.0.0.1",
        "outbound|80||cart.shop.svc.corp.local",
        "10.96.0.3:80",
    ) + &line(
        "10.0.0.1",
        "outbound|443||payments.internal.example",
        "10.96.9.9:443",
    );
    let obs = observe(&s, &logs);
    assert_eq!(
        obs.cluster_domains(),
        [
            ("cluster.local".to_string(), 1),
            ("corp.local".to_string(), 1)
        ]
        .into()
    );
    let r = recommend::recommend(&s, &obs, &[w(&s, "web")], &RecommendOptions::default());
    assert_eq!(hosts(&r[0]), vec!["shop/cart.shop.svc.cluster.local"]);
    assert_eq!(
        r[0].unknown,
        vec![
            "cart.shop.svc.corp.local:80: no Service or ServiceEntry defines it: its cluster domain is corp.local, not cluster.local (--cluster-domain)",
            "payments.internal.example:443: no Service or ServiceEntry in the input defines it",
        ]
    );
    assert!(!hosts(&r[0]).iter().any(|h| h.starts_with("*/")));
}
