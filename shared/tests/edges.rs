//! What each observed edge meets outside the scope: passthrough, egress
//! proxy, blackholed, DNS failure or the dynamic forward proxy, under the
//! Sidecar's outbound policy or the mesh's, with DNS capture from the mesh
//! or the pod.

use meshscope_test_support::access_log;
use meshscope_test_support::fixtures::{observe, snap};

use meshscope_shared::audit::{self, AuditScope};
use meshscope_shared::edges::{self, Meets};
use meshscope_shared::explain;
use meshscope_shared::mesh::OutboundPolicy;
use meshscope_shared::recommend::{self, RecommendOptions};
use meshscope_shared::scope::Evaluator;
use meshscope_shared::snapshot::{MeshSnapshot, WorkloadId, WorkloadKind};

/// Deployment `web` in `shop` (pod 10.0.0.1), with `annotations` on its
/// pod template (YAML flow map).
fn web(annotations: &str) -> String {
    format!(
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: shop\nspec:\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n      annotations: {annotations}\n    spec:\n      containers: [{{name: c, image: x}}]\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: web-abc12-xyz98\n  namespace: shop\n  labels: {{app: web, pod-template-hash: abc12}}\n  annotations: {annotations}\n  ownerReferences:\n  - {{apiVersion: apps/v1, kind: ReplicaSet, name: web-abc12, uid: u, controller: true}}\nspec:\n  containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]\nstatus:\n  podIP: 10.0.0.1\n"
    )
}

fn service(name: &str, ip: &str, port: &str) -> String {
    format!("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: shop\nspec:\n  clusterIP: {ip}\n  selector: {{app: {name}}}\n  ports:\n  - {port}\n")
}

/// `mesh`: the `mesh` key of ConfigMap istio (empty: Istio's defaults);
/// `policy`: the web Sidecar's `outboundTrafficPolicy` (empty: none).
fn world(mesh: &str, policy: &str, annotations: &str) -> String {
    let mut y = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {istio-injection: enabled}\n".to_string();
    y += &format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: istio, namespace: istio-system}}\ndata:\n  mesh: {mesh:?}\n");
    y += &web(annotations);
    y += &service("cart", "10.96.0.3", "{name: http, port: 80}");
    y += &service("search", "10.96.0.4", "{name: http, port: 80}");
    y += &service("pg", "10.96.0.5", "{name: tcp-pg, port: 5432}");
    // A name only the mesh defines (STATIC endpoints) and a real DNS name.
    y += "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: db, namespace: shop}\nspec:\n  hosts: [db.internal]\n  addresses: [240.0.0.9]\n  ports: [{number: 5432, name: tcp-pg, protocol: TCP}]\n  resolution: STATIC\n  endpoints: [{address: 10.1.0.5}]\n";
    y += "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: stripe, namespace: shop}\nspec:\n  hosts: [api.stripe.com]\n  location: MESH_EXTERNAL\n  ports: [{number: 443, name: tls, protocol: TLS}]\n  resolution: DNS\n";
    y += &format!("---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: mine, namespace: shop}}\nspec:\n  workloadSelector:\n    labels: {{app: web}}\n  egress:\n  - hosts: [\"./cart.shop.svc.cluster.local\"]\n{}", if policy.is_empty() { String::new() } else { format!("  outboundTrafficPolicy: {policy}\n") });
    y
}

fn line(cluster: &str, dst: &str) -> String {
    access_log::line("10.0.0.1", "a", cluster, dst)
}

fn traffic() -> String {
    line("outbound|80||cart.shop.svc.cluster.local", "10.96.0.3:80")
        + &line("outbound|80||search.shop.svc.cluster.local", "10.96.0.4:80")
        + &line("outbound|5432||pg.shop.svc.cluster.local", "10.96.0.5:5432")
        + &line("outbound|5432||db.internal", "240.0.0.9:5432")
        + &line("outbound|443||api.stripe.com", "1.2.3.4:443")
}

fn w(s: &MeshSnapshot) -> WorkloadId {
    s.find_workload(&WorkloadKind::Deployment, "shop", "web")
        .unwrap()
}

/// What each observed destination of web meets under its Sidecar.
fn outcomes(mesh: &str, policy: &str, annotations: &str) -> Vec<(String, Meets)> {
    let s = snap(&world(mesh, policy, annotations));
    let obs = observe(&s, &traffic());
    let e = explain::explain(&s, w(&s), None, Some(&obs));
    e.observed
        .unwrap()
        .into_iter()
        .map(|o| (o.destination, o.meets))
        .collect()
}

fn expect(got: &[(String, Meets)], want: &[(&str, Meets)]) {
    let want: Vec<(String, Meets)> = want.iter().map(|(d, m)| (d.to_string(), *m)).collect();
    assert_eq!(got, want.as_slice());
}

#[test]
fn allow_any_passes_everything_outside_the_scope_through() {
    expect(
        &outcomes("", "", "{}"),
        &[
            ("api.stripe.com:443", Meets::Passthrough),
            ("cart.shop.svc.cluster.local:80", Meets::InScope),
            ("db.internal:5432", Meets::Passthrough),
            ("pg.shop.svc.cluster.local:5432", Meets::Passthrough),
            ("search.shop.svc.cluster.local:80", Meets::Passthrough),
        ],
    );
}

#[test]
fn the_sidecar_policy_overrides_the_mesh_and_an_empty_one_means_registry_only() {
    let blackholed = [
        ("api.stripe.com:443", Meets::Blackholed),
        ("cart.shop.svc.cluster.local:80", Meets::InScope),
        ("db.internal:5432", Meets::Blackholed),
        ("pg.shop.svc.cluster.local:5432", Meets::Blackholed),
        ("search.shop.svc.cluster.local:80", Meets::Blackholed),
    ];
    expect(&outcomes("", "{mode: REGISTRY_ONLY}", "{}"), &blackholed);
    // istiod copies the Sidecar's policy whole: no mode is the zero value.
    expect(&outcomes("", "{}", "{}"), &blackholed);
    // The mesh's REGISTRY_ONLY, when the Sidecar says nothing.
    let mesh = "outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n";
    expect(&outcomes(mesh, "", "{}"), &blackholed);
    // A Sidecar's ALLOW_ANY beats the mesh's REGISTRY_ONLY.
    let got = outcomes(mesh, "{mode: ALLOW_ANY}", "{}");
    assert_eq!(got[2], ("db.internal:5432".to_string(), Meets::Passthrough));
}

#[test]
fn an_egress_proxy_takes_what_allow_any_lets_out() {
    let got = outcomes(
        "",
        "{mode: ALLOW_ANY, egressProxy: {host: egress.istio-system.svc.cluster.local, port: {number: 80}}}",
        "{}",
    );
    assert_eq!(
        got.iter().filter(|(_, m)| *m == Meets::EgressProxy).count(),
        4,
        "{got:?}"
    );
    // Under REGISTRY_ONLY the egress proxy is never used.
    let got = outcomes(
        "",
        "{mode: REGISTRY_ONLY, egressProxy: {host: egress.istio-system.svc.cluster.local}}",
        "{}",
    );
    assert!(got.iter().all(|(_, m)| *m != Meets::EgressProxy), "{got:?}");
}

#[test]
fn dns_capture_fails_names_only_the_mesh_defines() {
    let dns = "defaultConfig:\n  proxyMetadata:\n    ISTIO_META_DNS_CAPTURE: \"true\"\n";
    let want = [
        // A real DNS name still resolves upstream.
        ("api.stripe.com:443", Meets::Passthrough),
        ("cart.shop.svc.cluster.local:80", Meets::InScope),
        ("db.internal:5432", Meets::DnsFailure),
        // Cluster DNS serves Kubernetes Services.
        ("pg.shop.svc.cluster.local:5432", Meets::Passthrough),
        ("search.shop.svc.cluster.local:80", Meets::Passthrough),
    ];
    expect(&outcomes(dns, "", "{}"), &want);
    // The pod's proxy.istio.io/config turns it on, or off, for that pod.
    let on =
        "{proxy.istio.io/config: \"proxyMetadata:\\n  ISTIO_META_DNS_CAPTURE: \\\"true\\\"\\n\"}";
    expect(&outcomes("", "", on), &want);
    let off =
        "{proxy.istio.io/config: \"proxyMetadata:\\n  ISTIO_META_DNS_CAPTURE: \\\"false\\\"\\n\"}";
    assert_eq!(
        outcomes(dns, "", off)[2],
        ("db.internal:5432".to_string(), Meets::Passthrough)
    );
}

#[test]
fn dynamic_dns_sends_http_to_the_forward_proxy_and_the_rest_through() {
    let mesh = "outboundTrafficPolicy:\n  mode: ALLOW_ANY_DYNAMIC_DNS\n";
    expect(
        &outcomes(mesh, "", "{}"),
        &[
            ("api.stripe.com:443", Meets::Passthrough),
            ("cart.shop.svc.cluster.local:80", Meets::InScope),
            ("db.internal:5432", Meets::Passthrough),
            ("pg.shop.svc.cluster.local:5432", Meets::Passthrough),
            (
                "search.shop.svc.cluster.local:80",
                Meets::DynamicForwardProxy,
            ),
        ],
    );
}

#[test]
fn explain_names_the_policy_and_where_it_comes_from() {
    let s = snap(&world("", "{mode: REGISTRY_ONLY}", "{}"));
    let e = explain::explain(&s, w(&s), None, None);
    assert_eq!(e.fallthrough.policy.mode, OutboundPolicy::RegistryOnly);
    assert_eq!(e.fallthrough.policy.from, "Sidecar shop/mine");
    assert!(!e.fallthrough.dns_capture);
    let s = snap(&world("", "", "{}"));
    let e = explain::explain(&s, w(&s), None, None);
    assert_eq!(
        e.fallthrough.policy.describe(),
        "ALLOW_ANY (from mesh config)"
    );
}

#[test]
fn ms0011_names_what_each_edge_meets() {
    let dns = "outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\ndefaultConfig:\n  proxyMetadata:\n    ISTIO_META_DNS_CAPTURE: \"1\"\n";
    let s = snap(&world(dns, "", "{}"));
    let obs = observe(&s, &traffic());
    let f = audit::audit(
        &s,
        Some(&obs),
        &AuditScope {
            namespaces: None,
            workloads: None,
        },
    );
    let m = f
        .iter()
        .find(|f| f.code.as_str() == "MS0011")
        .map(|f| f.message.clone())
        .expect("MS0011");
    assert!(
        m.contains("blackholed: api.stripe.com:443, pg.shop.svc.cluster.local:5432, search.shop.svc.cluster.local:80; dns-failure: db.internal:5432"),
        "{m}"
    );
    assert!(
        m.contains("Under outbound policy REGISTRY_ONLY (from mesh config) with DNS capture on"),
        "{m}"
    );
    assert!(
        m.contains("blackholed: BlackHoleCluster answers a 502 for HTTP and resets TCP"),
        "{m}"
    );
    assert!(m.contains("only the proxy's name table"), "{m}");
    assert!(m.contains("Add shop/api.stripe.com"), "{m}");
}

#[test]
fn recommend_reports_edges_under_the_recommended_sidecar() {
    // No Sidecar: the recommendation imports every observed host, so every
    // edge is in scope, except one the namespace cannot see.
    let mut y = world("outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n", "", "{}");
    y = y[..y
        .find("---\napiVersion: networking.istio.io/v1\nkind: Sidecar")
        .unwrap()]
        .to_string();
    y += "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: secret\n  namespace: vault\n  annotations: {networking.istio.io/exportTo: \".\"}\nspec:\n  clusterIP: 10.96.0.9\n  ports:\n  - {name: http, port: 80}\n";
    let s = snap(&y);
    let obs = observe(
        &s,
        &(traffic()
            + &line(
                "outbound|80||secret.vault.svc.cluster.local",
                "10.96.0.9:80",
            )),
    );
    let r = recommend::recommend(&s, &obs, &[w(&s)], &RecommendOptions::default());
    let edges: Vec<(&str, Meets)> = r[0]
        .edges
        .iter()
        .map(|e| (e.destination.as_str(), e.meets))
        .collect();
    assert_eq!(
        edges.iter().filter(|(_, m)| *m == Meets::InScope).count(),
        5,
        "{edges:?}"
    );
    assert!(
        edges.contains(&("secret.vault.svc.cluster.local:80", Meets::Blackholed)),
        "{edges:?}"
    );
    assert_eq!(
        edges::summarize_outside(&r[0].edges),
        "blackholed: secret.vault.svc.cluster.local:80"
    );
    // The same rule the evaluator applies to the recommended listeners.
    let mut eval = Evaluator::new(&s);
    let vis = eval.unscoped("shop");
    let all = edges::edge_outcomes(
        &s,
        obs.of(w(&s)).unwrap(),
        &vis,
        &edges::mesh_policy(&s),
        false,
    );
    assert_eq!(all.len(), 6);
}
