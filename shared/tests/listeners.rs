//! Outbound listeners by address and port, as istiod 1.31 keys them
//! (`buildSidecarOutboundListeners`, `pilot/pkg/networking/core/listener.go`):
//! the rules the 200-seed sweep found (seeds 10071, 10082, 10126, 10145,
//! 10150, 10157, 10162) and the fixed scenario `fixed-listener-keys` holds
//! to a real istiod.

use meshscope_test_support::fixtures::{labels, snap, snap_with_mesh};

use meshscope_shared::snapshot::MeshSnapshot;

fn namespace(ns: &str) -> String {
    format!("---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{istio-injection: enabled}}\n")
}

fn pod(ns: &str, name: &str, app: &str, ip: &str) -> String {
    format!("---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{app: {app}}}\nspec:\n  containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]\nstatus:\n  podIP: {ip}\n")
}

/// A Service `name` in `ns` selecting `app`; `ip` "None" for headless.
fn service(ns: &str, name: &str, app: &str, ip: &str, ports: &str) -> String {
    format!("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  clusterIP: {ip}\n  selector: {{app: {app}}}\n  ports:\n{ports}")
}

fn sidecar(ns: &str, name: &str, selector: Option<&str>, egress: &str) -> String {
    let sel = selector.map_or(String::new(), |app| {
        format!("  workloadSelector:\n    labels: {{app: {app}}}\n")
    });
    format!("---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n{sel}  egress:\n{egress}")
}

/// `c` serves: headless `peer` (TCP 7000, and 7100 named `plain` with
/// appProtocol http) and headless `mirror` (TCP 7000) over the same two
/// pods, ClusterIP `db` and `cache` on TCP 5432, ClusterIP `web` on HTTP 80.
fn servers() -> String {
    let mut y = namespace("a") + &namespace("c");
    y += &service(
        "c",
        "peer",
        "peer",
        "None",
        "  - {name: tcp-peer, port: 7000}\n  - {name: plain, port: 7100, appProtocol: http}\n",
    );
    y += &service(
        "c",
        "mirror",
        "peer",
        "None",
        "  - {name: tcp-mirror, port: 7000}\n",
    );
    y += &service(
        "c",
        "db",
        "db",
        "10.96.0.20",
        "  - {name: tcp-db, port: 5432}\n",
    );
    y += &service(
        "c",
        "cache",
        "cache",
        "10.96.0.21",
        "  - {name: tcp-cache, port: 5432}\n",
    );
    y += &service(
        "c",
        "web",
        "web",
        "10.96.0.22",
        "  - {name: http, port: 80}\n",
    );
    y += &pod("c", "peer-0", "peer", "10.1.0.10");
    y += &pod("c", "peer-1", "peer", "10.1.0.11");
    y += &pod("c", "db-0", "db", "10.1.0.20");
    y += &pod("a", "client-0", "client", "10.0.0.1");
    y
}

/// The outbound listeners of the pod `app` in `ns`.
fn listeners(s: &MeshSnapshot, ns: &str, app: &str) -> Vec<String> {
    let l = labels(&[("app", app)]);
    let vis = s.visible(ns, &s.listeners_of(s.select_sidecar(ns, &l).source));
    let own = s
        .pods
        .iter()
        .find(|p| p.namespace == ns && p.labels == l)
        .and_then(|p| p.ips.first().copied());
    s.outbound_listeners(&vis.egress, own).names()
}

const PORT_LISTENERS: &str = "  - port: {number: 7000, protocol: TCP, name: egress-7000}\n    hosts: [\"c/peer.c.svc.cluster.local\"]\n  - port: {number: 7100, protocol: TCP, name: egress-7100}\n    hosts: [\"c/peer.c.svc.cluster.local\"]\n  - port: {number: 5432, protocol: HTTP, name: egress-5432}\n    hosts: [\"c/*\"]\n  - port: {number: 8443, protocol: TCP, name: egress-8443}\n    hosts: [\"c/*\", \"~c/*\"]\n";

/// A port-specific TCP listener builds a headless Service at 0.0.0.0 (no
/// per-pod listeners) and locks that key: the catch-all's HTTP port 7100
/// adds nothing there, while its TCP port 7000 still gets one listener
/// per pod, shared by both headless Services. The HTTP-declared 5432 is
/// one 0.0.0.0 listener, and the catch-all adds `db`'s and `cache`'s own
/// (their keys were not locked). 8443 excludes every host it names.
#[test]
fn port_specific_listeners_lock_their_keys_and_the_catch_all_builds_the_rest() {
    let y = servers()
        + &sidecar(
            "a",
            "default",
            None,
            &format!("{PORT_LISTENERS}  - hosts: [\"c/*\"]\n"),
        );
    let s = snap(&y);
    assert_eq!(
        listeners(&s, "a", "client"),
        vec![
            "0.0.0.0_5432",
            "0.0.0.0_7000",
            "0.0.0.0_7100",
            "0.0.0.0_80",
            "10.1.0.10_7000",
            "10.1.0.11_7000",
            "10.96.0.20_5432",
            "10.96.0.21_5432",
        ]
    );
    // The estimate counts the same, with the two virtual listeners.
    let l = labels(&[("app", "client")]);
    let vis = s.visible("a", &s.listeners_of(s.select_sidecar("a", &l).source));
    let est = s.estimate_for_proxy(&vis, &l, "10.0.0.1".parse().ok(), Default::default());
    assert_eq!(est.listeners, 10);
}

/// Without a catch-all, an HTTP-declared port over TCP ClusterIP
/// Services is a single 0.0.0.0 listener (seed 10150).
#[test]
fn an_http_declared_port_over_tcp_services_is_one_wildcard_listener() {
    let y = servers()
        + &sidecar(
            "a",
            "default",
            None,
            "  - port: {number: 5432, protocol: HTTP, name: egress-5432}\n    hosts: [\"c/*\"]\n",
        );
    assert_eq!(listeners(&snap(&y), "a", "client"), vec!["0.0.0.0_5432"]);
}

/// Two headless Services over the same pods share each pod's listener,
/// and a pod gets none for its own IP.
#[test]
fn headless_services_over_the_same_pods_share_a_listener_per_pod() {
    let s = snap(&servers());
    let client = listeners(&s, "a", "client");
    for want in ["10.1.0.10_7000", "10.1.0.11_7000", "0.0.0.0_7100"] {
        assert!(client.contains(&want.to_string()), "{client:?}");
    }
    assert_eq!(
        client.iter().filter(|n| n.ends_with("_7000")).count(),
        2,
        "{client:?}"
    );
    let peer = listeners(&s, "c", "peer");
    assert!(peer.contains(&"10.1.0.11_7000".to_string()), "{peer:?}");
    assert!(!peer.contains(&"10.1.0.10_7000".to_string()), "{peer:?}");
}

/// From 1.21 an `ExternalName` Service is an alias of the hostname it
/// names: no cluster, listener or route of its own. Before, it was a DNS
/// service with a cluster and a `0.0.0.0` listener per port.
#[test]
fn an_external_name_service_is_an_alias_from_1_21() {
    let y = namespace("a")
        + &namespace("c")
        + "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: alias\n  namespace: c\nspec:\n  type: ExternalName\n  externalName: api.example.com\n  ports:\n  - {name: http, port: 80}\n  - {name: tcp-ext, port: 6000}\n"
        + &pod("a", "client-0", "client", "10.0.0.1");
    let clusters = |s: &MeshSnapshot| {
        let vis = s.visible(
            "a",
            &s.listeners_of(s.select_sidecar("a", &Default::default()).source),
        );
        s.outbound_clusters(&vis, None)
    };
    let now = snap_with_mesh(&y, "1.31", "");
    assert!(clusters(&now).is_empty());
    assert!(listeners(&now, "a", "client").is_empty());
    let old = snap_with_mesh(&y, "1.20", "");
    assert_eq!(
        clusters(&old),
        vec![
            "outbound|6000||alias.c.svc.cluster.local",
            "outbound|80||alias.c.svc.cluster.local"
        ]
    );
    assert_eq!(
        listeners(&old, "a", "client"),
        vec!["0.0.0.0_6000", "0.0.0.0_80"]
    );
}

/// A port named by number is sniffed: at a service address its listener
/// names a route of its own (`<host>:<port>`), shared by a headless
/// Service's per-pod listeners; on 27017 it is TCP (no route).
#[test]
fn sniffed_ports_name_a_route_per_service_port() {
    let y = namespace("a")
        + &namespace("c")
        + &service(
            "c",
            "store",
            "store",
            "10.96.0.30",
            "  - {name: \"27017\", port: 27017}\n  - {name: \"9091\", port: 9091}\n",
        )
        + &service(
            "c",
            "ring",
            "ring",
            "None",
            "  - {name: \"7200\", port: 7200}\n",
        )
        + &service(
            "c",
            "web",
            "web",
            "10.96.0.31",
            "  - {name: http, port: 9091}\n",
        )
        + &pod("c", "ring-0", "ring", "10.1.0.40")
        + &pod("c", "ring-1", "ring", "10.1.0.41")
        + &pod("a", "client-0", "client", "10.0.0.1");
    let s = snap(&y);
    let vis = s.visible(
        "a",
        &s.listeners_of(s.select_sidecar("a", &Default::default()).source),
    );
    let l = s.outbound_listeners(&vis.egress, "10.0.0.1".parse().ok());
    assert_eq!(
        l.names(),
        vec![
            "0.0.0.0_9091",
            "10.1.0.40_7200",
            "10.1.0.41_7200",
            "10.96.0.30_27017",
            "10.96.0.30_9091",
        ]
    );
    assert_eq!(
        l.route_names(),
        vec![
            "9091",
            "ring.c.svc.cluster.local:7200",
            "store.c.svc.cluster.local:9091",
        ]
    );
    // Route 9091 holds web's virtual host and the sniffed store's.
    assert_eq!(l.virtual_hosts(), 2);
}
