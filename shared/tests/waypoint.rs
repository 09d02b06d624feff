//! A waypoint's pod: the clusters istiod 1.31 sends it, as measured on a
//! real istiod with `PILOT_ENABLE_AMBIENT=true` (the cases of
//! `tests/tests/istiod.rs` `waypoint_*`, here without istiod): the fixed
//! ones, an `inbound-vip` cluster per port of each service bound to it
//! (and per subset), and outbound clusters only for the other services
//! its bound services' routes send to.

use meshscope_shared::explain::{explain, Explanation};
use meshscope_shared::snapshot::WorkloadKind;
use meshscope_test_support::fixtures::snap;

fn namespace(ns: &str, labels: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{{labels}}}\n"
    )
}

fn service(ns: &str, name: &str, ip: &str, labels: &str, ports: &str) -> String {
    format!("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{{labels}}}\nspec:\n  clusterIP: {ip}\n  selector: {{app: {name}}}\n  ports: [{ports}]\n")
}

/// Waypoint `wp` in `app` (its Gateway, Service and pod, as istio's
/// waypoint template writes them), Services a (80 http, 9090 tcp) and b
/// (8080 http), and `extra`.
fn mesh(extra: &str, gateway_labels: &str, allowed: &str) -> String {
    let mut y = namespace("app", "") + &namespace("other", "");
    y += &service(
        "app",
        "a",
        "10.96.0.1",
        "istio.io/use-waypoint: wp",
        "{name: http, port: 80}, {name: tcp-x, port: 9090}",
    );
    y += &service("app", "b", "10.96.0.2", "", "{name: http, port: 8080}");
    y += &service(
        "app",
        "wp",
        "10.96.0.10",
        "gateway.istio.io/managed: istio.io-mesh-controller, gateway.networking.k8s.io/gateway-name: wp",
        "{name: status-port, port: 15021, appProtocol: tcp}, {name: mesh, port: 15008, appProtocol: all}",
    );
    y += &format!("---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: wp\n  namespace: app\n  labels: {{{gateway_labels}}}\nspec:\n  gatewayClassName: istio-waypoint\n  listeners:\n  - {{name: mesh, port: 15008, protocol: HBONE{allowed}}}\n");
    y += "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: wp\n  namespace: app\nspec:\n  selector:\n    matchLabels: {gateway.networking.k8s.io/gateway-name: wp}\n  template:\n    metadata:\n      labels: {gateway.networking.k8s.io/gateway-name: wp}\n    spec:\n      containers: [{name: istio-proxy, image: x, args: [proxy, waypoint]}]\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: wp-abc12-xyz98\n  namespace: app\n  labels: {gateway.networking.k8s.io/gateway-name: wp, gateway.istio.io/managed: istio.io-mesh-controller, pod-template-hash: abc12}\n  ownerReferences:\n  - {apiVersion: apps/v1, kind: ReplicaSet, name: wp-abc12, uid: u, controller: true}\nspec:\n  containers: [{name: istio-proxy, image: proxyv2, args: [proxy, waypoint]}]\nstatus:\n  podIP: 10.10.0.10\n";
    y + extra
}

fn explain_wp(yaml: &str) -> Explanation {
    let s = snap(yaml);
    let w = s
        .find_workload(&WorkloadKind::Deployment, "app", "wp")
        .expect("the waypoint's Deployment");
    explain(&s, w, None, None)
}

fn clusters(yaml: &str) -> Vec<String> {
    explain_wp(yaml).outbound_clusters
}

const A: [&str; 2] = [
    "inbound-vip|80|http|a.app.svc.cluster.local",
    "inbound-vip|9090|tcp|a.app.svc.cluster.local",
];

#[test]
fn a_waypoint_gets_an_inbound_vip_cluster_per_port_of_each_service_bound_to_it() {
    let e = explain_wp(&mesh("", "", ""));
    assert_eq!(e.outbound_clusters, A);
    assert_eq!(e.estimate.clusters, 7, "five fixed clusters and a's two");
    assert_eq!(e.outbound_listeners.len(), 5);
    assert!(e.outbound_routes.is_empty());
    assert!(
        e.scope_reason.contains("1 service(s) bound"),
        "{}",
        e.scope_reason
    );
    // The namespace's label binds b too, never the waypoint's own Service;
    // `none` on b opts it out.
    let ns = mesh("", "", "").replacen(
        "name: app\n  labels: {}",
        "name: app\n  labels: {istio.io/use-waypoint: wp}",
        1,
    );
    let mut want = A.to_vec();
    want.push("inbound-vip|8080|http|b.app.svc.cluster.local");
    want.sort();
    assert_eq!(clusters(&ns), want);
    let none = ns.replace(
        "name: b\n  namespace: app\n  labels: {}",
        "name: b\n  namespace: app\n  labels: {istio.io/use-waypoint: none}",
    );
    assert_eq!(clusters(&none), A);
}

#[test]
fn a_waypoint_for_workloads_or_not_ready_binds_no_service() {
    for labels in [
        "istio.io/waypoint-for: workload",
        "istio.io/waypoint-for: none",
    ] {
        assert!(clusters(&mesh("", labels, "")).is_empty(), "{labels}");
    }
    assert_eq!(clusters(&mesh("", "istio.io/waypoint-for: all", "")), A);
    // A Gateway whose status has no address is no waypoint yet.
    let pending = mesh("", "", "").replace(
        "  - {name: mesh, port: 15008, protocol: HBONE}\n",
        "  - {name: mesh, port: 15008, protocol: HBONE}\nstatus:\n  addresses: []\n",
    );
    assert!(clusters(&pending).is_empty());
}

#[test]
fn another_namespace_binds_only_where_the_hbone_listener_allows_it() {
    let c = service(
        "other",
        "c",
        "10.96.1.1",
        "istio.io/use-waypoint: wp, istio.io/use-waypoint-namespace: app",
        "{name: http, port: 80}",
    );
    assert_eq!(clusters(&mesh(&c, "", "")), A, "Same, by default");
    let mut want = A.to_vec();
    want.push("inbound-vip|80|http|c.other.svc.cluster.local");
    want.sort();
    let all = ", allowedRoutes: {namespaces: {from: All}}";
    assert_eq!(clusters(&mesh(&c, "", all)), want);
    // exportTo does not matter to the binding.
    let hidden = c.replace(
        "  labels: {",
        "  annotations: {networking.istio.io/exportTo: \".\"}\n  labels: {",
    );
    assert_eq!(clusters(&mesh(&hidden, "", all)), want);
}

#[test]
fn subsets_and_route_destinations_add_clusters() {
    let dr = "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: a, namespace: app}\nspec:\n  host: a.app.svc.cluster.local\n  subsets: [{name: v1, labels: {v: '1'}}]\n";
    let mut want = A.to_vec();
    want.extend([
        "inbound-vip|80|http/v1|a.app.svc.cluster.local",
        "inbound-vip|9090|tcp/v1|a.app.svc.cluster.local",
    ]);
    want.sort();
    assert_eq!(clusters(&mesh(dr, "", "")), want);
    // A route from a bound service to one not bound adds the latter's
    // outbound clusters; to a bound one, nothing.
    let vs = "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a, namespace: app}\nspec:\n  hosts: [a]\n  http:\n  - route:\n    - destination: {host: b}\n";
    let mut want = A.to_vec();
    want.push("outbound|8080||b.app.svc.cluster.local");
    want.sort();
    assert_eq!(clusters(&mesh(vs, "", "")), want);
    let both = mesh(vs, "", "").replace(
        "name: b\n  namespace: app\n  labels: {}",
        "name: b\n  namespace: app\n  labels: {istio.io/use-waypoint: wp}",
    );
    let mut want = A.to_vec();
    want.push("inbound-vip|8080|http|b.app.svc.cluster.local");
    want.sort();
    assert_eq!(clusters(&both), want);
    // A VirtualService bound to a Gateway only adds nothing.
    let gw_only = vs.replace("  hosts: [a]\n", "  hosts: [a]\n  gateways: [app/somegw]\n");
    assert_eq!(clusters(&mesh(&gw_only, "", "")), A);
}

#[test]
fn a_sniffed_port_gets_both_kinds_and_udp_none() {
    let svc = mesh("", "", "").replace(
        "{name: http, port: 80}, {name: tcp-x, port: 9090}",
        "{name: foo, port: 7001}, {name: dns, port: 53, protocol: UDP}, {name: tls-x, port: 443}",
    );
    assert_eq!(
        clusters(&svc),
        [
            "inbound-vip|443|tcp|a.app.svc.cluster.local",
            "inbound-vip|7001|http|a.app.svc.cluster.local",
            "inbound-vip|7001|tcp|a.app.svc.cluster.local",
        ]
    );
}

/// Every extension provider's service is an outbound cluster of the
/// waypoint, used or not, bound to it or not (random ambient seeds 5
/// and 8 against istiod).
#[test]
fn extension_provider_services_are_outbound_clusters() {
    let cfg = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: istio, namespace: istio-system}\ndata:\n  mesh: |-\n    extensionProviders:\n    - name: zipkin\n      zipkin: {service: a.app.svc.cluster.local, port: 80}\n    - name: otel\n      opentelemetry: {service: app/b.app.svc.cluster.local, port: 8080}\n";
    let mut want = A.to_vec();
    want.extend([
        "outbound|80||a.app.svc.cluster.local",
        "outbound|9090||a.app.svc.cluster.local",
        "outbound|8080||b.app.svc.cluster.local",
    ]);
    want.sort();
    assert_eq!(clusters(&mesh(cfg, "", "")), want);
}

/// Ambient honours `serviceEntryVisibility` even with `applyToSidecars:
/// false`: an entry of visibility NONE binds to no waypoint, a NAMESPACE
/// one only to its own namespace's (random ambient seed 21 at ed37b57).
#[test]
fn service_entry_visibility_keeps_entries_off_a_waypoint() {
    let entry = |ns: &str| {
        format!("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: api\n  namespace: {ns}\n  labels: {{istio.io/use-waypoint: wp, istio.io/use-waypoint-namespace: app}}\nspec:\n  hosts: [api.example.com]\n  ports: [{{number: 443, name: tls, protocol: TLS}}]\n  resolution: NONE\n  location: MESH_EXTERNAL\n")
    };
    let cfg = |visibility: &str| {
        format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: istio, namespace: istio-system}}\ndata:\n  mesh: |-\n    serviceEntryVisibility:\n      defaultVisibility: {visibility}\n      applyToSidecars: false\n")
    };
    let vip = "inbound-vip|443|tcp|api.example.com".to_string();
    let all = ", allowedRoutes: {namespaces: {from: All}}";
    let bound = |ns: &str, visibility: &str| {
        clusters(&mesh(&(entry(ns) + &cfg(visibility)), "", all)).contains(&vip)
    };
    assert!(bound("app", "PUBLIC") && bound("other", "PUBLIC"));
    assert!(!bound("app", "NONE") && !bound("other", "NONE"));
    assert!(bound("app", "NAMESPACE") && !bound("other", "NAMESPACE"));
}
