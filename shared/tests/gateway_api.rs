//! Gateway API routes (issue #33): a mesh (GAMMA) route, one whose parent
//! is a Service, routes its parent's host as a VirtualService with gateway
//! semantics does; recommendations import the parent and every backend,
//! `--exports` keeps them exported to the callers, and an ingress route's
//! backend stays exported to its Gateway's namespace.

use meshscope_test_support::access_log::line;
use meshscope_test_support::fixtures::{deployment, hosts, observe, snap};

use meshscope_shared::exports::{recommend_exports, ExportKind, ExportOptions, ExportRec};
use meshscope_shared::recommend::{self, RecommendOptions};
use meshscope_shared::snapshot::{MeshSnapshot, WorkloadKind};

fn namespace(ns: &str) -> String {
    format!("---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{istio-injection: enabled}}\n")
}

fn deploy(ns: &str, name: &str, ip: &str) -> String {
    deployment(ns, name, ip)
}

fn service(ns: &str, name: &str, ip: &str) -> String {
    format!("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  clusterIP: {ip}\n  selector: {{app: {name}}}\n  ports:\n  - {{name: http, port: 80}}\n")
}

/// `route` in namespace `ns` splits Service app/a 50/50 to app/b and app/c.
fn split(ns: &str, kind: &str) -> String {
    format!(
        r#"---
apiVersion: gateway.networking.k8s.io/v1
kind: {kind}
metadata: {{name: split, namespace: {ns}}}
spec:
  parentRefs:
  - {{group: "", kind: Service, name: a, namespace: app, port: 80}}
  rules:
  - backendRefs:
    - {{name: b, namespace: app, port: 80, weight: 50}}
    - {{name: c, namespace: app, port: 80, weight: 50}}
"#
    )
}

/// An ingress Gateway in `ingress` whose HTTPRoute sends shop.example.com
/// to front/web.
const INGRESS: &str = r#"---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: public, namespace: ingress}
spec:
  gatewayClassName: istio
  listeners: [{name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop, namespace: front}
spec:
  parentRefs: [{name: public, namespace: ingress}]
  hostnames: [shop.example.com]
  rules:
  - backendRefs: [{name: web, port: 80}]
"#;

/// front/web calls app/a; app serves a, b and c.
fn mesh(route: &str) -> String {
    let mut y = namespace("front") + &namespace("app") + &namespace("ingress");
    y += &deploy("front", "web", "10.0.0.1");
    for (name, ip, svc_ip) in [
        ("a", "10.0.1.1", "10.96.1.1"),
        ("b", "10.0.1.2", "10.96.1.2"),
        ("c", "10.0.1.3", "10.96.1.3"),
    ] {
        y += &deploy("app", name, ip);
        y += &service("app", name, svc_ip);
    }
    y += &service("front", "web", "10.96.0.1");
    y + route
}

/// web's requests to `a.app:80`, which the route sent to b.
fn to_b(s: &MeshSnapshot) -> meshscope_shared::observe::Observations {
    let log = line(
        "10.0.0.1",
        "a.app:80",
        "outbound|80||b.app.svc.cluster.local",
        "10.96.1.2:80",
    );
    observe(s, &log)
}

fn web_hosts(s: &MeshSnapshot) -> Vec<String> {
    let web = s
        .find_workload(&WorkloadKind::Deployment, "front", "web")
        .unwrap();
    let recs = recommend::recommend(s, &to_b(s), &[web], &RecommendOptions::default());
    hosts(&recs[0])
}

#[test]
fn a_producer_route_brings_its_parent_and_every_backend() {
    for kind in ["HTTPRoute", "GRPCRoute"] {
        let h = web_hosts(&snap(&mesh(&split("app", kind))));
        for want in [
            "app/a.app.svc.cluster.local",
            "app/b.app.svc.cluster.local",
            "app/c.app.svc.cluster.local",
        ] {
            assert!(h.contains(&want.to_string()), "{kind}: {h:?}");
        }
    }
}

/// A TCP connection carries no authority: the line names b's cluster and,
/// as the original destination, a's address. The route lives on a's
/// listener, so a stays in scope with both backends.
#[test]
fn a_tcp_route_keeps_the_dialled_service_whose_listener_it_lives_on() {
    let yaml = mesh(&split("app", "TCPRoute"));
    let s = snap(&yaml);
    let web = s
        .find_workload(&WorkloadKind::Deployment, "front", "web")
        .unwrap();
    let tcp = "[2026-01-01T00:00:00.000Z] \"- - -\" 0 - - - \"-\" 10 20 5 - \"-\" \"-\" \"-\" \"-\" \"10.0.1.2:80\" outbound|80||b.app.svc.cluster.local 10.0.0.1:1 10.96.1.1:80 10.0.0.1:2 - -\n";
    let recs = recommend::recommend(&s, &observe(&s, tcp), &[web], &RecommendOptions::default());
    let h = hosts(&recs[0]);
    for want in [
        "app/a.app.svc.cluster.local",
        "app/b.app.svc.cluster.local",
        "app/c.app.svc.cluster.local",
    ] {
        assert!(h.contains(&want.to_string()), "{h:?}");
    }
}

/// A consumer route lives in the caller's namespace: importing it from
/// there is not enough, its parent Service must be visible too.
#[test]
fn a_consumer_route_brings_the_route_its_parent_and_every_backend() {
    let h = web_hosts(&snap(&mesh(&split("front", "HTTPRoute"))));
    for want in [
        "front/a.app.svc.cluster.local",
        "app/a.app.svc.cluster.local",
        "app/b.app.svc.cluster.local",
        "app/c.app.svc.cluster.local",
    ] {
        assert!(h.contains(&want.to_string()), "{h:?}");
    }
}

fn find<'a>(recs: &'a [ExportRec], kind: ExportKind, key: &str) -> &'a ExportRec {
    recs.iter()
        .find(|r| r.kind == kind && r.key() == key)
        .unwrap_or_else(|| panic!("{key}: {recs:?}"))
}

#[test]
fn exports_keep_a_routes_parent_and_backends_exported_to_its_callers() {
    let s = snap(&mesh(&split("app", "HTTPRoute")));
    let r = recommend_exports(&s, &to_b(&s), ExportOptions { force: false });
    for svc in ["app/a", "app/b", "app/c"] {
        assert_eq!(
            find(&r, ExportKind::Service, svc).recommended,
            [".", "front"],
            "{svc}"
        );
    }
    // The route itself has no exportTo to write.
    assert!(
        !r.iter().any(|x| x.kind == ExportKind::VirtualService),
        "{r:?}"
    );
}

#[test]
fn exports_keep_an_ingress_routes_backend_exported_to_its_gateway() {
    let s = snap(&mesh(INGRESS));
    // No traffic at all: the Gateway and route binding is the evidence.
    let none = observe(&s, "");
    let r = recommend_exports(&s, &none, ExportOptions { force: false });
    assert_eq!(
        find(&r, ExportKind::Service, "front/web").recommended,
        [".", "ingress"]
    );
}

// === MS0023: a route's service hidden where the route applies ===

/// `mesh(route)` with Service `ns/name` exported only to `export`.
fn exported(yaml: String, ns: &str, name: &str, export: &str) -> String {
    let from = format!("kind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\n");
    assert!(yaml.contains(&from), "no Service {ns}/{name}");
    let to = format!("kind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations: {{networking.istio.io/exportTo: \"{export}\"}}\n");
    yaml.replacen(&from, &to, 1)
}

fn ms0023(yaml: &str) -> Vec<String> {
    use meshscope_shared::audit::{audit, AuditScope};
    let scope = AuditScope {
        namespaces: None,
        workloads: None,
    };
    audit(&snap(yaml), None, &scope)
        .into_iter()
        .filter(|f| f.code.as_str() == "MS0023")
        .map(|f| format!("{} {}/{}: {}", f.kind, f.namespace, f.name, f.message))
        .collect()
}

#[test]
fn ms0023_names_an_ingress_backend_hidden_from_its_gateways_namespace() {
    assert_eq!(ms0023(&mesh(INGRESS)), Vec::<String>::new());
    let f = ms0023(&exported(mesh(INGRESS), "front", "web", "."));
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].starts_with("HTTPRoute front/shop: ")
            && f[0].contains("backend web.front.svc.cluster.local is hidden from namespace ingress, where Gateway ingress/public's pods run"),
        "{f:?}"
    );
    // Exported there, it is fine again.
    assert_eq!(
        ms0023(&exported(mesh(INGRESS), "front", "web", ".,ingress")),
        Vec::<String>::new()
    );
}

#[test]
fn ms0023_names_a_mesh_routes_backend_hidden_from_a_namespace_that_sees_its_parent() {
    for kind in ["HTTPRoute", "GRPCRoute", "TCPRoute"] {
        assert_eq!(ms0023(&mesh(&split("app", kind))), Vec::<String>::new());
        let f = ms0023(&exported(mesh(&split("app", kind)), "app", "c", "."));
        assert_eq!(f.len(), 1, "{kind}: {f:?}");
        // front has a proxy and sees a; ingress runs none, but its
        // label injects the pods it will run.
        assert!(
            f[0].contains("backend c.app.svc.cluster.local is hidden from namespaces front, ingress, whose proxies get the route for a.app.svc.cluster.local"),
            "{kind}: {f:?}"
        );
        // The parent hidden too: no namespace but app gets the route.
        let both = exported(
            exported(mesh(&split("app", kind)), "app", "c", "."),
            "app",
            "a",
            ".",
        );
        assert_eq!(ms0023(&both), Vec::<String>::new(), "{kind}");
    }
}

#[test]
fn ms0023_names_a_consumer_routes_parent_hidden_from_the_routes_namespace() {
    let hidden = exported(mesh(&split("front", "HTTPRoute")), "app", "a", ".");
    let f = ms0023(&hidden);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].contains("its parent a.app.svc.cluster.local is hidden from the route's namespace front, the only one it applies to: no proxy gets the route"),
        "{f:?}"
    );
    // An HTTP consumer route applies only in its own namespace: a backend
    // exported to app alone is hidden from front, where it applies.
    let c_to_app = exported(mesh(&split("front", "HTTPRoute")), "app", "c", "app");
    let f = ms0023(&c_to_app);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].contains("hidden from namespace front,"), "{f:?}");
    // A TCP consumer route applies wherever its parent is seen.
    let f = ms0023(&exported(
        mesh(&split("front", "TCPRoute")),
        "app",
        "a",
        ".",
    ));
    assert_eq!(f, Vec::<String>::new());
}

// === impact of a route ===

#[test]
fn impact_of_a_route_reaches_the_proxies_whose_scope_imports_its_parent() {
    use meshscope_shared::explain::{impact, Target};
    use std::collections::HashMap;
    let sidecar = |ns: &str, host: &str| {
        format!("---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: default, namespace: {ns}}}\nspec:\n  egress:\n  - hosts: [\"{host}\"]\n")
    };
    let yaml = mesh(&split("app", "HTTPRoute"))
        + &sidecar("front", "app/a.app.svc.cluster.local")
        + &sidecar("app", "istio-system/*");
    let s = snap(&yaml);
    let target = Target::parse("httproute/split", "app").unwrap();
    assert_eq!(target.describe(), "httproute/split -n app");
    let imp = impact(&s, &target, &HashMap::new(), &|_| true, None).unwrap();
    let reached: Vec<&String> = imp.now.workloads.keys().collect();
    assert_eq!(reached, ["Deployment/front/web"], "{imp:?}");
    // A backend the route brings to web's scope reaches web too.
    let c = Target::parse("service/c", "app").unwrap();
    let imp = impact(&s, &c, &HashMap::new(), &|_| true, None).unwrap();
    assert!(
        imp.now.importing.contains_key("Deployment/front/web"),
        "{imp:?}"
    );
    // A kind it does not have, or a name: not found, by the route's kind.
    let grpc = Target::parse("grpcroutes/split", "app").unwrap();
    let e = impact(&s, &grpc, &HashMap::new(), &|_| true, None).unwrap_err();
    assert!(e.to_string().contains("GRPCRoute"), "{e}");
}

// === the routes explain lists ===

/// What explain says web gets of the routes, with `yaml` plus Sidecars in
/// front importing `front_hosts`.
fn web_routes(
    yaml: String,
    front_hosts: &[&str],
) -> Vec<meshscope_shared::gateway_routes::RouteSeen> {
    let hosts: Vec<String> = front_hosts.iter().map(|h| format!("\"{h}\"")).collect();
    let yaml = yaml
        + &format!("---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: default, namespace: front}}\nspec:\n  egress:\n  - hosts: [{}]\n", hosts.join(", "));
    web_routes_of(&yaml)
}

/// The routes explain gives web in `yaml`, with the Sidecars it holds.
fn web_routes_of(yaml: &str) -> Vec<meshscope_shared::gateway_routes::RouteSeen> {
    let s = snap(yaml);
    let web = s
        .find_workload(&WorkloadKind::Deployment, "front", "web")
        .unwrap();
    meshscope_shared::explain::explain(&s, web, None, None).routes
}

#[test]
fn explain_lists_the_routes_a_scope_gets_with_their_clusters() {
    let r = web_routes(
        mesh(&split("app", "HTTPRoute")),
        &["app/a.app.svc.cluster.local"],
    );
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].route, "HTTPRoute app/split");
    assert_eq!(r[0].host, "a.app.svc.cluster.local");
    assert!(r[0].applies, "{r:?}");
    assert_eq!(
        r[0].clusters,
        [
            "outbound|80||b.app.svc.cluster.local",
            "outbound|80||c.app.svc.cluster.local"
        ]
    );
    // Not importing the parent: no route selected.
    let r = web_routes(
        mesh(&split("app", "HTTPRoute")),
        &["app/b.app.svc.cluster.local"],
    );
    assert_eq!(r, Vec::new());
    // A consumer route imported from its namespace without its parent:
    // selected, but no virtual host (the parent is not listed).
    let r = web_routes(
        mesh(&split("front", "HTTPRoute")),
        &["./a.app.svc.cluster.local"],
    );
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(!r[0].applies, "{r:?}");
    // Both: it applies.
    let r = web_routes(
        mesh(&split("front", "HTTPRoute")),
        &["./a.app.svc.cluster.local", "app/a.app.svc.cluster.local"],
    );
    assert!(r[0].applies, "{r:?}");
}

/// verify's lost route: web called `a.app`, routed by the route; istiod's
/// virtual hosts must route it to a backend, else the route is missing.
#[test]
fn a_called_parent_without_its_routes_virtual_host_is_a_missing_route() {
    use meshscope_shared::verify::missing_routes;
    use std::collections::{BTreeMap, BTreeSet};
    let dialled = BTreeSet::from(["a.app".to_string()]);
    let set = |c: &[&str]| -> BTreeSet<String> {
        c.iter()
            .map(|h| format!("outbound|80||{h}.app.svc.cluster.local"))
            .collect()
    };
    let vh = |c: &[&str]| BTreeMap::from([("a.app".to_string(), set(c))]);
    let s = snap(&mesh(&split("app", "HTTPRoute")));
    let lost = missing_routes(&s, "front", &dialled, &BTreeMap::new());
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].host, "a.app.svc.cluster.local");
    assert_eq!(lost[0].routes, ["HTTPRoute app/split"]);
    // a's own default virtual host: the requests skip the split.
    assert_eq!(missing_routes(&s, "front", &dialled, &vh(&["a"])).len(), 1);
    assert!(missing_routes(&s, "front", &dialled, &vh(&["b", "c"])).is_empty());
    // A consumer route in ingress applies to ingress's proxies only: web in
    // front has none, so nothing is missing. A TCP route is not an HTTP one.
    let consumer = snap(&mesh(&split("ingress", "HTTPRoute")));
    assert!(missing_routes(&consumer, "front", &dialled, &BTreeMap::new()).is_empty());
    let tcp = snap(&mesh(&split("app", "TCPRoute")));
    assert!(missing_routes(&tcp, "front", &dialled, &BTreeMap::new()).is_empty());
}

/// An HTTP route on a parent without an HTTP port: istiod builds no RDS
/// for it (found by random fidelity seeds 8 and 9 at 797aaa8).
#[test]
fn an_http_route_on_a_parent_without_an_http_port_gets_no_virtual_host() {
    let yaml = mesh(&split("app", "HTTPRoute")).replace(
        "name: a\n  namespace: app\nspec:\n  clusterIP: 10.96.1.1\n  selector: {app: a}\n  ports:\n  - {name: http, port: 80}",
        "name: a\n  namespace: app\nspec:\n  clusterIP: 10.96.1.1\n  selector: {app: a}\n  ports:\n  - {name: tcp-db, port: 80}",
    );
    assert!(yaml.contains("tcp-db"));
    let r = web_routes(yaml, &["app/a.app.svc.cluster.local"]);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(!r[0].applies, "{r:?}");
    assert!(
        r[0].reason
            .as_deref()
            .unwrap_or("")
            .contains("no HTTP port"),
        "{r:?}"
    );
}

/// istiod leaves a backend of weight 0 out of the route: it is neither
/// among the route's clusters nor imported for it.
#[test]
fn a_backend_of_weight_zero_is_dropped_from_the_route() {
    let yaml = mesh(&split("app", "HTTPRoute")).replace(
        "{name: c, namespace: app, port: 80, weight: 50}",
        "{name: c, namespace: app, port: 80, weight: 0}",
    );
    assert!(yaml.contains("weight: 0"));
    let r = web_routes(yaml.clone(), &["app/a.app.svc.cluster.local"]);
    assert_eq!(r[0].clusters, ["outbound|80||b.app.svc.cluster.local"]);
    let h = web_hosts(&snap(&yaml));
    assert!(
        h.contains(&"app/b.app.svc.cluster.local".to_string()),
        "{h:?}"
    );
    assert!(
        !h.contains(&"app/c.app.svc.cluster.local".to_string()),
        "{h:?}"
    );
}

/// A route on port 80 of its parent (a, serving 80 and 9090), for a scope
/// whose only egress listener is bound to 9090: istiod builds no route
/// configuration for port 80 there (random fidelity seed 10007 at
/// f9bc7b3).
#[test]
fn a_route_on_a_port_no_egress_listener_serves_does_not_apply() {
    let a = "selector: {app: a}\n  ports:\n  - {name: http, port: 80}\n";
    let yaml = mesh(&split("app", "HTTPRoute")).replace(a, &format!("{a}  - {{name: grpc, port: 9090}}\n"))
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: front}\nspec:\n  egress:\n  - port: {number: 9090, protocol: GRPC, name: g}\n    hosts: [\"app/*\"]\n";
    let routes = web_routes_of(&yaml);
    assert_eq!(routes.len(), 1, "{routes:?}");
    assert!(!routes[0].applies, "{routes:?}");
    assert!(
        routes[0]
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("port 80"),
        "{routes:?}"
    );
    // The same scope with a catch-all listener: it applies.
    let yaml = yaml.replace(
        "  - port: {number: 9090, protocol: GRPC, name: g}\n    hosts:",
        "  - hosts:",
    );
    let routes = web_routes_of(&yaml);
    assert!(routes[0].applies, "{routes:?}");
}

// === MS0024: a Gateway route's backend in another namespace needs a ReferenceGrant ===

/// The INGRESS route moved to the Gateway's namespace, its backend named
/// in `front`; with `grant`, a ReferenceGrant in `front` for it.
fn ingress_across(grant: Option<&str>) -> String {
    let route = INGRESS
        .replace(
            "metadata: {name: shop, namespace: front}",
            "metadata: {name: shop, namespace: ingress}",
        )
        .replace(
            "backendRefs: [{name: web, port: 80}]",
            "backendRefs: [{name: web, namespace: front, port: 80}]",
        );
    let grant = grant.map_or(String::new(), |to| {
        format!("---\napiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: g, namespace: front}}\nspec:\n  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: ingress}}]\n  to: [{to}]\n")
    });
    mesh(&(route + &grant))
}

fn codes(yaml: &str, code: &str) -> Vec<String> {
    use meshscope_shared::audit::{audit, AuditScope};
    let scope = AuditScope {
        namespaces: None,
        workloads: None,
    };
    audit(&snap(yaml), None, &scope)
        .into_iter()
        .filter(|f| f.code.as_str() == code)
        .map(|f| format!("{} {}/{}: {}", f.kind, f.namespace, f.name, f.message))
        .collect()
}

#[test]
fn ms0024_names_a_gateway_routes_backend_in_another_namespace_without_a_grant() {
    let f = codes(&ingress_across(None), "MS0024");
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].starts_with("HTTPRoute ingress/shop: ")
            && f[0].contains("bound to Gateway ingress/public, sends requests to front/web"),
        "{f:?}"
    );
    // A grant by name, or for every Service, permits it.
    for to in [
        "{group: \"\", kind: Service, name: web}",
        "{group: \"\", kind: Service}",
    ] {
        assert_eq!(
            codes(&ingress_across(Some(to)), "MS0024"),
            Vec::<String>::new(),
            "{to}"
        );
    }
    // One for another Service does not.
    let other = "{group: \"\", kind: Service, name: cart}";
    assert_eq!(codes(&ingress_across(Some(other)), "MS0024").len(), 1);
}

#[test]
fn exports_keep_an_ingress_backend_for_its_gateway_only_where_a_grant_permits_it() {
    let recommended = |yaml: String| {
        let s = snap(&yaml);
        let r = recommend_exports(&s, &observe(&s, ""), ExportOptions { force: false });
        find(&r, ExportKind::Service, "front/web")
            .recommended
            .clone()
    };
    let by_name = "{group: \"\", kind: Service, name: web}";
    assert_eq!(recommended(ingress_across(Some(by_name))), [".", "ingress"]);
    // istiod refuses the backend: the gateway never sends to it.
    assert_eq!(recommended(ingress_across(None)), ["."]);
}

// === gateways' router proxies in impact ===

/// explain's answer for the gateway pod of `yaml` (its [`GATEWAY_POD`]).
fn gateway_explanation(yaml: &str) -> meshscope_shared::explain::Explanation {
    let s = snap(yaml);
    let gw = s
        .find_workload(&WorkloadKind::Pod, "ingress", "public-istio-0")
        .unwrap();
    meshscope_shared::explain::explain(&s, gw, None, None)
}

/// The pod istiod's deployment controller runs for Gateway ingress/public
/// (`proxy router`).
const GATEWAY_POD: &str = r#"---
apiVersion: v1
kind: Pod
metadata:
  name: public-istio-0
  namespace: ingress
  labels: {gateway.networking.k8s.io/gateway-name: public, sidecar.istio.io/inject: "false"}
spec:
  containers: [{name: istio-proxy, image: proxyv2, args: [proxy, router]}]
status:
  podIP: 10.0.9.1
"#;

/// `mesh(INGRESS)` and a mesh route, with the Gateway's pod in `ingress`.
fn with_gateway_pod() -> String {
    mesh(&(INGRESS.to_string() + &split("app", "HTTPRoute"))) + GATEWAY_POD
}

#[test]
fn impact_reaches_a_gateways_pods_on_every_routing_change_and_a_gateway_change_nothing_else() {
    use meshscope_shared::explain::{impact, Target};
    use std::collections::HashMap;
    let gw = "Pod/ingress/public-istio-0";
    let reached = |yaml: &str, target: &str, ns: &str| {
        let s = snap(yaml);
        let t = Target::parse(target, ns).unwrap();
        let imp = impact(&s, &t, &HashMap::new(), &|_| true, None).unwrap();
        let all: Vec<String> = imp.now.workloads.keys().cloned().collect();
        let gateways: Vec<String> = imp.now.gateways.keys().cloned().collect();
        (all, gateways)
    };
    let yaml = with_gateway_pod();
    // A Gateway's change reaches its pods, and no sidecar.
    assert_eq!(
        reached(&yaml, "gateway/public", "ingress"),
        (vec![gw.into()], vec![gw.into()])
    );
    // A route's change reaches the gateway's pods whatever it routes.
    let (all, gateways) = reached(&yaml, "httproute/split", "app");
    assert_eq!(gateways, [gw], "{all:?}");
    // A service's change, only where the gateway's namespace sees it.
    let (_, gateways) = reached(&yaml, "service/b", "app");
    assert_eq!(gateways, [gw]);
    let hidden = exported(yaml.clone(), "app", "b", ".");
    let (all, gateways) = reached(&hidden, "service/b", "app");
    assert!(
        gateways.is_empty() && !all.contains(&gw.to_string()),
        "{all:?}"
    );
    // An unknown Gateway is not found.
    let s = snap(&yaml);
    let t = Target::parse("gateway/private", "ingress").unwrap();
    let e = impact(&s, &t, &HashMap::new(), &|_| true, None).unwrap_err();
    assert!(e.to_string().contains("Gateway ingress/private"), "{e}");
}

// === the routes a gateway's pod serves ===

/// What explain says the gateway pod of `ingress_across(grant)` gets.
fn gateway_routes(grant: Option<&str>) -> Vec<meshscope_shared::gateway_routes::RouteSeen> {
    gateway_explanation(&(ingress_across(grant) + GATEWAY_POD)).routes
}

#[test]
fn a_gateway_pod_serves_its_gateways_routes_and_a_refused_backend_is_unknown_service() {
    let served = |grant| {
        gateway_routes(grant)
            .into_iter()
            .filter(|r| r.applies)
            .map(|r| (r.route, r.host, r.clusters))
            .collect::<Vec<_>>()
    };
    let route = "HTTPRoute ingress/shop".to_string();
    let host = "shop.example.com".to_string();
    let grant = "{group: \"\", kind: Service, name: web}";
    assert_eq!(
        served(Some(grant)),
        [(
            route.clone(),
            host.clone(),
            vec!["outbound|80||web.front.svc.cluster.local".to_string()]
        )]
    );
    assert_eq!(
        served(None),
        [(route, host, vec!["UnknownService".to_string()])]
    );
}

/// istiod gives a gateway's pod the services exported to its namespace and
/// none that a route's or VirtualService's destinations pull in: b,
/// exported `~,ingress` (hidden from the index, visible as a
/// destination), is no cluster of the gateway although the split route
/// it sees names it (random fidelity seed 10005 at 3eddb53).
#[test]
fn a_gateway_pod_gets_no_service_that_only_a_destination_pulls_in() {
    let clusters = |yaml: String| gateway_explanation(&yaml).outbound_clusters;
    let b = "outbound|80||b.app.svc.cluster.local".to_string();
    let c = "outbound|80||c.app.svc.cluster.local".to_string();
    let tilde = clusters(exported(with_gateway_pod(), "app", "b", "~,ingress"));
    assert!(!tilde.contains(&b) && tilde.contains(&c), "{tilde:?}");
    let plain = clusters(exported(with_gateway_pod(), "app", "b", "ingress"));
    assert!(plain.contains(&b), "{plain:?}");
}

/// With a sidecar of the gateway's namespace on the implicit default
/// scope, istiod may hand the gateway that sidecar's scope instead (by the
/// order of the push: random seeds 10005 and 10028 at 4b13cd9 saw both):
/// explain names those clusters too, and only then.
#[test]
fn a_gateway_pod_may_get_its_namespaces_sidecar_default_and_explain_says_which_clusters() {
    let alternative = |yaml: String| gateway_explanation(&yaml).outbound_clusters_if_shared;
    let b = "outbound|80||b.app.svc.cluster.local".to_string();
    let tilde = exported(with_gateway_pod(), "app", "b", "~,ingress");
    assert_eq!(alternative(tilde.clone()), None, "no sidecar in ingress");
    let with_sidecar = tilde + &deploy("ingress", "edge", "10.0.9.2");
    let shared = alternative(with_sidecar.clone()).expect("a sidecar scope to share");
    assert!(shared.contains(&b), "{shared:?}");
    // A namespace Sidecar there: the sidecar never computes the default.
    let scoped = with_sidecar
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: ingress}\nspec:\n  egress:\n  - hosts: [\"./*\"]\n";
    assert_eq!(alternative(scoped), None);
}

/// A consumer route beside the producer's for one parent: in the
/// consumer's namespace its virtual host is istiod's (the routes of the
/// proxy's own namespace come first and the first virtual host for a
/// domain wins), the producer's does not apply there; elsewhere the
/// producer's applies.
#[test]
fn a_consumer_route_takes_the_virtual_host_from_the_producers_in_its_namespace() {
    let producer = split("app", "HTTPRoute").replace(
        "    - {name: c, namespace: app, port: 80, weight: 50}\n",
        "",
    );
    let consumer = split("front", "HTTPRoute").replace(
        "    - {name: b, namespace: app, port: 80, weight: 50}\n",
        "",
    );
    assert_ne!(producer, split("app", "HTTPRoute"));
    let r = web_routes(
        mesh(&(producer + &consumer)),
        &["./a.app.svc.cluster.local", "app/*"],
    );
    let applied: Vec<(&str, &[String])> = r
        .iter()
        .filter(|r| r.applies)
        .map(|r| (r.route.as_str(), r.clusters.as_slice()))
        .collect();
    assert_eq!(
        applied,
        [(
            "HTTPRoute front/split",
            &["outbound|80||c.app.svc.cluster.local".to_string()][..]
        )],
        "{r:?}"
    );
    let producer = r.iter().find(|r| r.route == "HTTPRoute app/split").unwrap();
    assert!(
        producer
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("own namespace front"),
        "{producer:?}"
    );
}

/// A Gateway of a class another controller implements binds no route:
/// istiod makes nothing of it, so its backends are not kept exported to
/// its namespace and `impact gateway/NAME` says whose it is. A class not
/// in the input counts as istiod's (nothing it may route is left out).
#[test]
fn a_gateway_of_another_controllers_class_binds_no_route() {
    use meshscope_shared::explain::{impact, Target};
    use std::collections::HashMap;
    let other = INGRESS.replace("gatewayClassName: istio", "gatewayClassName: eg");
    let class = "---\napiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: eg}\nspec: {controllerName: gateway.envoyproxy.io/gatewayclass-controller}\n";
    let recommended = |yaml: String| {
        let s = snap(&yaml);
        let r = recommend_exports(&s, &observe(&s, ""), ExportOptions { force: false });
        find(&r, ExportKind::Service, "front/web")
            .recommended
            .clone()
    };
    assert_eq!(recommended(mesh(&other)), [".", "ingress"], "class unknown");
    assert_eq!(recommended(mesh(&(other.clone() + class))), ["."]);
    let s = snap(&mesh(&(other + class)));
    let t = Target::parse("gateway/public", "ingress").unwrap();
    let e = impact(&s, &t, &HashMap::new(), &|_| true, None).unwrap_err();
    assert!(
        e.to_string()
            .contains("gateway.envoyproxy.io/gatewayclass-controller, not istiod"),
        "{e}"
    );
    // istio's own class, named by a GatewayClass: bound.
    let istio = "---\napiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: istio}\nspec: {controllerName: istio.io/gateway-controller}\n";
    assert_eq!(
        recommended(mesh(&(INGRESS.to_string() + istio))),
        [".", "ingress"]
    );
}

/// Routes of one namespace for one parent are merged as istiod merges
/// them: the older route's catch-all rule is the last one routed, so a
/// younger catch-all route adds nothing to the virtual host, while a rule
/// with a match still does (random seed 10005 at bd9a6b7).
#[test]
fn merged_routes_route_every_matching_rule_and_the_first_catch_all_only() {
    let route = |name: &str, backend: &str, matches: &str| {
        format!(
            "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: app}}\nspec:\n  parentRefs:\n  - {{group: \"\", kind: Service, name: a, namespace: app}}\n  rules:\n  - backendRefs: [{{name: {backend}, port: 80}}]\n{matches}"
        )
    };
    let applied = |yaml: String| -> Vec<(String, Vec<String>)> {
        web_routes(mesh(&yaml), &["app/*"])
            .into_iter()
            .filter(|r| r.applies)
            .map(|r| (r.route, r.clusters))
            .collect()
    };
    let b = "outbound|80||b.app.svc.cluster.local".to_string();
    let c = "outbound|80||c.app.svc.cluster.local".to_string();
    // Both catch-all (the API's default match counts as none).
    let default_match = "    matches: [{path: {type: PathPrefix, value: /}}]\n";
    let yaml = route("one", "b", "") + &route("two", "c", default_match);
    assert_eq!(
        applied(yaml),
        [("HTTPRoute app/one".to_string(), vec![b.clone()])]
    );
    // The younger one matches a path: routed too.
    let api = "    matches: [{path: {type: PathPrefix, value: /api}}]\n";
    let yaml = route("one", "b", "") + &route("two", "c", api);
    assert_eq!(
        applied(yaml),
        [
            ("HTTPRoute app/one".to_string(), vec![b]),
            ("HTTPRoute app/two".to_string(), vec![c])
        ]
    );
}

/// A gateway's scope keeps, per hostname, the first copy exported to its
/// namespace in istiod's order (exported by name or privately before
/// public, then by age, name and namespace), not its own namespace's as
/// a sidecar's scope does (random fidelity seed 4, 01:01 UTC).
#[test]
fn a_gateway_pod_keeps_the_first_exported_copy_of_a_host_not_its_own_namespaces() {
    let entry = |ns: &str, port: u32, export: &str| {
        format!("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: multi, namespace: {ns}}}\nspec:\n  hosts: [multi.example.com]\n  ports: [{{number: {port}, name: http, protocol: HTTP}}]\n  resolution: DNS\n  exportTo: [\"{export}\"]\n")
    };
    let yaml = with_gateway_pod() + &entry("ingress", 9090, ".") + &entry("app", 8080, "ingress");
    let clusters = gateway_explanation(&yaml).outbound_clusters;
    let multi: Vec<&String> = clusters.iter().filter(|c| c.contains("multi")).collect();
    assert_eq!(multi, ["outbound|8080||multi.example.com"], "{clusters:?}");
}

/// Two entries of one host in one namespace that istiod may merge (same
/// resolution, labels and exportTo) both give a gateway's pod their
/// ports, as a sidecar's scope merges them (random fidelity seeds 10022
/// and 10039 at 6f98a79).
#[test]
fn a_gateway_pod_gets_every_port_of_mergeable_entries_of_one_host() {
    let entry = |name: &str, port: u32| {
        format!("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: {name}, namespace: app}}\nspec:\n  hosts: [same.example.com]\n  ports: [{{number: {port}, name: p{port}, protocol: HTTPS}}]\n  resolution: DNS\n")
    };
    let yaml = with_gateway_pod() + &entry("one", 443) + &entry("two", 9090);
    let clusters = gateway_explanation(&yaml).outbound_clusters;
    let same: Vec<&String> = clusters.iter().filter(|c| c.contains("same")).collect();
    assert_eq!(
        same,
        [
            "outbound|443||same.example.com",
            "outbound|9090||same.example.com"
        ],
        "{clusters:?}"
    );
}

/// Routes of one namespace for parent a, one on its port 80 and one on
/// none: the older one takes port 80's virtual host, and a has no other
/// HTTP port, so the other routes nothing (random seed 10007 at bd9a6b7's
/// generator: the port's route came first).
#[test]
fn a_route_on_a_port_and_one_on_none_the_older_takes_the_port() {
    let route = |name: &str, backend: &str, port: &str, at: &str| {
        format!(
            "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: app, creationTimestamp: \"{at}\"}}\nspec:\n  parentRefs:\n  - {{group: \"\", kind: Service, name: a, namespace: app{port}}}\n  rules:\n  - backendRefs: [{{name: {backend}, port: 80}}]\n"
        )
    };
    let applied = |yaml: String| -> Vec<(String, bool)> {
        web_routes(mesh(&yaml), &["app/*"])
            .into_iter()
            .map(|r| (r.route, r.applies))
            .collect()
    };
    let (early, late) = ("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z");
    let on_port = |at| route("on-port", "b", ", port: 80", at);
    let on_none = |at| route("on-none", "c", "", at);
    let yes = |n: &str, a: bool| (format!("HTTPRoute app/{n}"), a);
    assert_eq!(
        applied(on_port(early) + &on_none(late)),
        [yes("on-none", false), yes("on-port", true)]
    );
    assert_eq!(
        applied(on_port(late) + &on_none(early)),
        [yes("on-none", true), yes("on-port", false)]
    );
    // Same age: the port's VirtualService name (`app~80~...`) sorts first.
    assert_eq!(
        applied(on_port(early) + &on_none(early)),
        [yes("on-none", false), yes("on-port", true)]
    );
}

/// A TCP route's filter chain sits on its parent's TCP (or sniffed) port
/// listeners at the parent's address, a TLS route's on its TLS and HTTPS
/// ones; on other ports istiod applies neither (`tls.go`), and `verify`
/// compares the TCP proxies there with istiod's LDS.
#[test]
fn tcp_and_tls_routes_sit_on_their_parents_tcp_and_tls_listeners() {
    use meshscope_shared::verify::{route_diffs, Generated, TcpChain};
    let with_port = |kind: &str, port: &str| {
        mesh(&split("app", kind)).replace(
            "name: a\n  namespace: app\nspec:\n  clusterIP: 10.96.1.1\n  selector: {app: a}\n  ports:\n  - {name: http, port: 80}",
            &format!("name: a\n  namespace: app\nspec:\n  clusterIP: 10.96.1.1\n  selector: {{app: a}}\n  ports:\n  - {{name: {port}, port: 80}}"),
        )
    };
    let one = |kind: &str, port: &str| {
        let r = web_routes(with_port(kind, port), &["app/*"]);
        assert_eq!(r.len(), 1, "{r:?}");
        r.into_iter().next().unwrap()
    };
    let tcp = one("TCPRoute", "tcp-db");
    assert!(tcp.applies, "{tcp:?}");
    assert_eq!(tcp.listeners, ["10.96.1.1_80"]);
    let sniffed = one("TCPRoute", "plain");
    assert!(
        sniffed.applies && sniffed.listeners == ["10.96.1.1_80"],
        "{sniffed:?}"
    );
    for (kind, port, why) in [
        ("TCPRoute", "http", "no TCP (or sniffed) port"),
        ("TCPRoute", "https-x", "no TCP (or sniffed) port"),
        ("TLSRoute", "tcp-db", "no TLS or HTTPS port"),
    ] {
        let r = one(kind, port);
        assert!(!r.applies, "{kind} on {port}: {r:?}");
        assert!(r.reason.as_deref().unwrap_or("").contains(why), "{r:?}");
    }
    // A headless parent's listeners are per endpoint: none is named.
    let r = web_routes(
        with_port("TCPRoute", "tcp-db").replace("clusterIP: 10.96.1.1", "clusterIP: None"),
        &["app/*"],
    );
    assert!(r[0].applies && r[0].listeners.is_empty(), "{r:?}");
    let tls = one("TLSRoute", "tls");
    assert!(tls.applies && tls.listeners == ["10.96.1.1_80"], "{tls:?}");
    // A port-specific egress listener declaring TCP builds the TLS port
    // with TCP chains: no TLS route (random seed 18 at 42f6b68).
    let declared = with_port("TLSRoute", "tls")
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: front}\nspec:\n  egress:\n  - port: {number: 80, protocol: TCP, name: tcp}\n    hosts: [\"app/*\"]\n";
    let r = web_routes_of(&declared);
    assert!(r.len() == 1 && !r[0].applies, "{r:?}");
    // verify: the listener's TCP proxy names both backends, or only a's.
    let chain = |names: &[&str], clusters: &[&str]| TcpChain {
        server_names: names.iter().map(|n| n.to_string()).collect(),
        clusters: clusters.iter().map(|c| c.to_string()).collect(),
    };
    let lds = |c: TcpChain| Generated {
        tcp_chains: [("10.96.1.1_80".to_string(), vec![c])].into(),
        ..Generated::default()
    };
    let b = "outbound|80||b.app.svc.cluster.local";
    let c = "outbound|80||c.app.svc.cluster.local";
    let a = "outbound|80||a.app.svc.cluster.local";
    assert!(route_diffs(std::slice::from_ref(&tcp), &lds(chain(&[], &[b, c]))).is_empty());
    let lost = route_diffs(&[tcp], &lds(chain(&[], &[a])));
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(
        lost[0]
            .describe()
            .contains("istiod routes to outbound|80||a.app"),
        "{lost:?}"
    );
    // A TLS route's chain is the one matching its parent's name.
    let host = "a.app.svc.cluster.local";
    assert!(route_diffs(std::slice::from_ref(&tls), &lds(chain(&[host], &[b, c]))).is_empty());
    assert_eq!(route_diffs(&[tls], &lds(chain(&[], &[b, c]))).len(), 1);
}

/// A sniffed port's listener holds its TCP proxy in the default filter
/// chain, which matches no name: verify reads it as the TCP route's chain
/// (random fidelity seed 717600 at ed37b57).
#[test]
fn a_sniffed_listeners_default_filter_chain_is_read_as_its_tcp_chain() {
    // `/debug/config_dump?types=lds`: a list of the Listeners.
    let dump = serde_json::json!({"configs": [{
            "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
            "name": "10.96.1.1_7000",
            "filterChains": [{
                "filterChainMatch": {"applicationProtocols": ["http/1.1", "h2c"]},
                "filters": [{"name": "envoy.filters.network.http_connection_manager",
                    "typedConfig": {"@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"}}]
            }],
            "defaultFilterChain": {"filters": [{"name": "envoy.filters.network.tcp_proxy",
                "typedConfig": {"@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                    "weightedClusters": {"clusters": [
                        {"name": "outbound|80||b.app.svc.cluster.local", "weight": 1},
                        {"name": "outbound|80||c.app.svc.cluster.local", "weight": 1}]}}}]}
    }]});
    let g = meshscope_shared::verify::parse_config_dump(dump.to_string().as_bytes()).unwrap();
    let chains = &g.tcp_chains["10.96.1.1_7000"];
    assert_eq!(chains.len(), 1, "{chains:?}");
    assert!(chains[0].server_names.is_empty(), "{chains:?}");
    assert_eq!(
        chains[0].clusters.iter().collect::<Vec<_>>(),
        [
            "outbound|80||b.app.svc.cluster.local",
            "outbound|80||c.app.svc.cluster.local"
        ]
    );
}

/// A route's VirtualService takes the mesh's default exportTo: under
/// `defaultVirtualServiceExportTo: ["."]` a gateway sees only the routes of
/// its own namespace (`VirtualServicesForGateway`, istio 1.31; random
/// fidelity seed 21 at ed37b57).
#[test]
fn a_gateway_does_not_serve_a_route_the_default_export_to_hides_from_it() {
    let yaml = mesh(INGRESS) + GATEWAY_POD;
    let explain = |mesh: &str| {
        let s = meshscope_test_support::fixtures::snap_with_mesh(&yaml, "1.31", mesh);
        let gw = s
            .find_workload(&WorkloadKind::Pod, "ingress", "public-istio-0")
            .unwrap();
        meshscope_shared::explain::explain(&s, gw, None, None).routes
    };
    let open = explain("defaultVirtualServiceExportTo: [\"*\"]");
    assert!(open.len() == 1 && open[0].applies, "{open:?}");
    let hidden = explain("defaultVirtualServiceExportTo: [\".\"]");
    assert!(hidden.len() == 1 && !hidden[0].applies, "{hidden:?}");
    let why = hidden[0].reason.as_deref().unwrap_or("");
    assert!(why.contains("defaultVirtualServiceExportTo"), "{why}");
    // The gateway's own namespace's route still binds.
    let own = yaml.replace(
        "namespace: front}\nspec:\n  parentRefs",
        "namespace: ingress}\nspec:\n  parentRefs",
    );
    let s = meshscope_test_support::fixtures::snap_with_mesh(
        &own,
        "1.31",
        "defaultVirtualServiceExportTo: [\".\"]",
    );
    let gw = s
        .find_workload(&WorkloadKind::Pod, "ingress", "public-istio-0")
        .unwrap();
    let r = meshscope_shared::explain::explain(&s, gw, None, None).routes;
    assert!(r.len() == 1 && r[0].applies, "{r:?}");
}

/// A Gateway's listeners decide which routes bind, and for which
/// hostnames (`referenceAllowed`, `conversion.go`): routes from the
/// Gateway's namespace only by default, a selector over namespace labels,
/// the parentRef's sectionName and port, overlapping hostnames, and the
/// kinds the listener's protocol takes.
#[test]
fn a_gateways_listeners_decide_which_routes_bind_and_for_which_hostnames() {
    let served = |listener: &str, parent: &str, hostnames: &str| -> Vec<String> {
        let yaml = INGRESS
            .replace(
                "{name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}",
                listener,
            )
            .replace("{name: public, namespace: ingress}]", parent)
            .replace("hostnames: [shop.example.com]", hostnames);
        let yaml = mesh(&yaml) + GATEWAY_POD;
        gateway_explanation(&yaml)
            .routes
            .into_iter()
            .filter(|r| r.applies)
            .map(|r| r.host)
            .collect()
    };
    let all = "{name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}";
    let parent = "{name: public, namespace: ingress}]";
    let shop = "hostnames: [shop.example.com]";
    assert_eq!(served(all, parent, shop), ["shop.example.com"]);
    // The default admits the Gateway's own namespace only: front's route
    // does not bind.
    let same = "{name: http, port: 80, protocol: HTTP}";
    assert!(served(same, parent, shop).is_empty());
    // A selector over the route namespace's labels (its name implied).
    let by_name = "{name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {kubernetes.io/metadata.name: front}}}}}";
    assert_eq!(served(by_name, parent, shop), ["shop.example.com"]);
    let other = by_name.replace("name: front}", "name: app}");
    assert!(served(&other, parent, shop).is_empty());
    // sectionName and port must name the listener.
    let section = "{name: public, namespace: ingress, sectionName: https}]";
    assert!(served(all, section, shop).is_empty());
    let port = "{name: public, namespace: ingress, port: 80}]";
    assert_eq!(served(all, port, shop), ["shop.example.com"]);
    // Hostnames: the listener's narrows a route without one; a route whose
    // hostnames miss the listener's does not bind.
    let wild = all.replace(
        "protocol: HTTP,",
        "protocol: HTTP, hostname: \"*.example.com\",",
    );
    assert_eq!(served(&wild, parent, ""), ["*.example.com"]);
    assert_eq!(served(&wild, parent, shop), ["shop.example.com"]);
    assert!(served(&wild, parent, "hostnames: [shop.example.org]").is_empty());
    // A TCP listener takes no HTTPRoute; allowedRoutes.kinds narrows.
    let tcp = all.replace("protocol: HTTP", "protocol: TCP");
    assert!(served(&tcp, parent, shop).is_empty());
    let grpc_only = all.replace("{from: All}}", "{from: All}, kinds: [{kind: GRPCRoute}]}");
    assert!(served(&grpc_only, parent, shop).is_empty());
}

/// The parent's HTTP port counts only on a copy the scope sees: with the
/// Service hidden from front (`exportTo: .`) and a ServiceEntry of its
/// hostname with only a TCP port visible there, istiod builds no virtual
/// host for a consumer route in front (random fidelity commit seed 270952
/// at cd9fed2).
#[test]
fn an_http_route_needs_an_http_port_on_the_parent_copy_the_scope_sees() {
    let consumer = split("front", "HTTPRoute").replace(", port: 80}}", "}}");
    let hidden = mesh(&consumer).replace(
        "name: a\n  namespace: app\nspec:",
        "name: a\n  namespace: app\n  annotations: {networking.istio.io/exportTo: \".\"}\nspec:",
    ) + "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: squat, namespace: front}\nspec:\n  hosts: [a.app.svc.cluster.local]\n  addresses: [240.0.0.1]\n  ports: [{number: 5432, name: tcp, protocol: TCP}]\n  resolution: DNS\n";
    assert!(hidden.contains("exportTo"));
    let r = web_routes(hidden, &["*/*"]);
    let a: Vec<_> = r
        .iter()
        .filter(|r| r.host == "a.app.svc.cluster.local")
        .collect();
    assert_eq!(a.len(), 1, "{r:?}");
    assert!(!a[0].applies, "{r:?}");
    assert!(
        a[0].reason
            .as_deref()
            .unwrap_or("")
            .contains("no HTTP port"),
        "{r:?}"
    );
}

/// A TCP route sits only on a listener istiod builds for its parent: an
/// entry without an address listens on `0.0.0.0_PORT`, and when a
/// port-specific egress listener of the Sidecar has built that listener
/// for another entry, the catch-all leaves it alone (`locked`,
/// `buildSidecarOutboundListener`, `pilot/pkg/networking/core/listener.go`,
/// istio 1.31), so the parent gets no chain there and the route no
/// listener.
#[test]
fn a_tcp_route_gets_no_listener_another_service_holds_for_a_port_specific_egress_listener() {
    let entry = |ns: &str, name: &str| {
        format!("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  hosts: [{name}.example.com]\n  ports: [{{number: 5432, name: tcp, protocol: TCP}}]\n  resolution: DNS\n")
    };
    let route = "---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TCPRoute\nmetadata: {name: db, namespace: app}\nspec:\n  parentRefs:\n  - {group: networking.istio.io, kind: ServiceEntry, name: db, namespace: app}\n  rules:\n  - backendRefs:\n    - {name: b, namespace: app, port: 80}\n";
    let yaml = mesh(route) + &namespace("ops") + &entry("app", "db") + &entry("ops", "other");
    let sidecar = |egress: &str| {
        format!("---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: default, namespace: front}}\nspec:\n  egress:\n{egress}")
    };
    let shared = yaml.clone() + &sidecar("  - hosts: [\"app/*\", \"ops/*\"]\n");
    let r = web_routes_of(&shared);
    assert!(r.len() == 1 && r[0].applies, "{r:?}");
    assert_eq!(r[0].listeners, ["0.0.0.0_5432"]);
    let held = yaml
        + &sidecar("  - port: {number: 5432, protocol: TCP, name: tcp}\n    hosts: [\"ops/*\"]\n  - hosts: [\"app/*\"]\n");
    let r = web_routes_of(&held);
    assert!(r.len() == 1 && !r[0].applies, "{r:?}");
    assert!(
        r[0].reason
            .as_deref()
            .unwrap_or("")
            .contains("gets no outbound listener of db.example.com"),
        "{r:?}"
    );
}

/// Two TCP routes for one parent: istiod's TCP filter chain follows the
/// first VirtualService it selects, those of the proxy's own namespace
/// before the others, each group by age, then name.
#[test]
fn of_two_tcp_routes_for_one_parent_the_first_istiod_selects_takes_the_listener() {
    let tcp = |name: &str, ns: &str, backend: &str| {
        format!("---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TCPRoute\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  parentRefs:\n  - {{group: \"\", kind: Service, name: a, namespace: app}}\n  rules:\n  - backendRefs:\n    - {{name: {backend}, namespace: app, port: 80}}\n")
    };
    let yaml = |routes: &str| {
        mesh(routes).replace(
            "name: a\n  namespace: app\nspec:\n  clusterIP: 10.96.1.1\n  selector: {app: a}\n  ports:\n  - {name: http, port: 80}",
            "name: a\n  namespace: app\nspec:\n  clusterIP: 10.96.1.1\n  selector: {app: a}\n  ports:\n  - {name: tcp-db, port: 80}",
        )
    };
    let applying = |r: &[meshscope_shared::gateway_routes::RouteSeen]| -> Vec<String> {
        r.iter()
            .filter(|r| r.applies)
            .map(|r| r.route.clone())
            .collect()
    };
    // Same age: the name decides.
    let r = web_routes(
        yaml(&(tcp("zeta", "app", "b") + &tcp("alpha", "app", "c"))),
        &["app/*"],
    );
    assert_eq!(applying(&r), ["TCPRoute app/alpha"], "{r:?}");
    let lost = r.iter().find(|r| r.route == "TCPRoute app/zeta").unwrap();
    assert!(
        lost.reason
            .as_deref()
            .unwrap_or("")
            .contains("TCPRoute app/alpha comes first"),
        "{lost:?}"
    );
    // A route of the proxy's own namespace comes before both.
    let r = web_routes(
        yaml(&(tcp("zeta", "app", "b") + &tcp("alpha", "app", "c") + &tcp("zulu", "front", "b"))),
        &["app/*", "front/*"],
    );
    assert_eq!(applying(&r), ["TCPRoute front/zulu"], "{r:?}");
}

/// A TCPRoute bound to a Gateway's TCP listener sits on the gateway pod's
/// listener of that port (`0.0.0.0_PORT`), at the targetPort of the
/// pod's Service: a Service that selects the pod without the port gives
/// no listener, and the route does not apply (`resolvePorts`,
/// `pilot/pkg/model/gateway.go`, istio 1.31; seed 4 of the generator
/// that first made gateway TCP routes).
#[test]
fn a_gateways_tcp_route_sits_on_the_listener_of_its_services_port() {
    use meshscope_shared::verify::{route_diffs, Generated, TcpChain};
    let gateway = INGRESS.replace(
        "listeners: [{name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}]",
        "listeners:\n  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}\n  - {name: tcp, port: 9000, protocol: TCP, allowedRoutes: {namespaces: {from: All}}}",
    ) + "---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TCPRoute\nmetadata: {name: db, namespace: front}\nspec:\n  parentRefs: [{name: public, namespace: ingress, sectionName: tcp}]\n  rules:\n  - backendRefs: [{name: web, port: 80}]\n";
    let svc = |ports: &str| {
        format!("---\napiVersion: v1\nkind: Service\nmetadata: {{name: public-istio, namespace: ingress}}\nspec:\n  clusterIP: 10.96.9.9\n  selector: {{gateway.networking.k8s.io/gateway-name: public}}\n  ports: [{ports}]\n")
    };
    let tcp = |extra: &str| {
        let routes = gateway_explanation(&(mesh(&gateway) + GATEWAY_POD + extra)).routes;
        routes
            .into_iter()
            .find(|r| r.route == "TCPRoute front/db")
            .expect("the TCP route is among the gateway's")
    };
    // No Service of the pod in the input: the listener's own port.
    let r = tcp("");
    assert!(r.applies && r.listeners == ["0.0.0.0_9000"], "{r:?}");
    assert_eq!(r.clusters, ["outbound|80||web.front.svc.cluster.local"]);
    // The Service's targetPort.
    let r = tcp(&svc(
        "{name: http, port: 80}, {name: tcp, port: 9000, targetPort: 19000}",
    ));
    assert!(r.applies && r.listeners == ["0.0.0.0_19000"], "{r:?}");
    // A Service without the port: no listener.
    let r = tcp(&svc("{name: http, port: 80}"));
    assert!(!r.applies && r.listeners.is_empty(), "{r:?}");
    assert!(
        r.reason.as_deref().unwrap_or("").contains("port 9000"),
        "{r:?}"
    );
    // verify: the listener's TCP proxy names the backend, or another.
    let chain = |clusters: &[&str]| Generated {
        tcp_chains: [(
            "0.0.0.0_9000".to_string(),
            vec![TcpChain {
                server_names: Vec::new(),
                clusters: clusters.iter().map(|c| c.to_string()).collect(),
            }],
        )]
        .into(),
        ..Generated::default()
    };
    let r = tcp("");
    let web = "outbound|80||web.front.svc.cluster.local";
    assert!(route_diffs(std::slice::from_ref(&r), &chain(&[web])).is_empty());
    assert_eq!(
        route_diffs(&[r], &chain(&["outbound|80||a.app.svc.cluster.local"])).len(),
        1
    );
}

/// An HTTP route's virtual host lives in the route configuration of an
/// HTTP or sniffed listener built for its parent: a Sidecar whose only
/// egress listener is bound to the parent's port but declares TCP gives
/// it none, and the route does not apply (random seed 40010).
#[test]
fn an_http_route_needs_an_http_listener_built_for_its_parent() {
    let yaml = mesh(&split("app", "HTTPRoute"));
    let sidecar = |protocol: &str| {
        format!("---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: default, namespace: front}}\nspec:\n  egress:\n  - port: {{number: 80, protocol: {protocol}, name: p}}\n    hosts: [\"app/*\"]\n")
    };
    let http = web_routes_of(&(yaml.clone() + &sidecar("HTTP")));
    assert!(http.len() == 1 && http[0].applies, "{http:?}");
    let tcp = web_routes_of(&(yaml + &sidecar("TCP")));
    assert!(tcp.len() == 1 && !tcp[0].applies, "{tcp:?}");
    let why = tcp[0].reason.as_deref().unwrap_or("");
    assert!(
        why.contains("no route configuration of the proxy holds"),
        "{why}"
    );
}

/// A route configuration `<port>` takes its virtual hosts from the
/// port-specific egress listener on that port: a parent the catch-all
/// imports on that port gets none, so its route does not apply (random
/// seed 33 at 24c0573).
#[test]
fn a_port_specific_listener_owns_its_ports_route_configuration() {
    let yaml = mesh(&split("app", "HTTPRoute"))
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: front}\nspec:\n  egress:\n  - port: {number: 80, protocol: HTTP, name: http}\n    hosts: [\"app/none.app.svc.cluster.local\"]\n  - hosts: [\"app/*\"]\n";
    let r = web_routes_of(&yaml);
    assert!(r.len() == 1 && !r[0].applies, "{r:?}");
    // Imported by the port's own listener, it applies.
    let r = web_routes_of(&yaml.replace("[\"app/none.app.svc.cluster.local\"]", "[\"app/*\"]"));
    assert!(r.len() == 1 && r[0].applies, "{r:?}");
}

/// A gateway's TLS route sends a refused backend's share to
/// `UnknownService`, as HTTP routes do (random seeds 40004, 40014).
#[test]
fn a_gateways_tls_route_sends_a_refused_backends_share_to_unknown_service() {
    let gateway = INGRESS.replace(
        "listeners: [{name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}]",
        "listeners:\n  - {name: tls, port: 9443, protocol: TLS, tls: {mode: Passthrough}, allowedRoutes: {namespaces: {from: All}}}",
    ) + "---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TLSRoute\nmetadata: {name: secure, namespace: front}\nspec:\n  parentRefs: [{name: public, namespace: ingress, sectionName: tls}]\n  hostnames: [secure.example.com]\n  rules:\n  - backendRefs: [{name: web, port: 80}, {name: a, namespace: app, port: 80}]\n";
    let routes = gateway_explanation(&(mesh(&gateway) + GATEWAY_POD)).routes;
    let r = routes
        .iter()
        .find(|r| r.route == "TLSRoute front/secure")
        .expect("the TLS route");
    assert!(
        r.applies && r.tls && r.listeners == ["0.0.0.0_9443"],
        "{r:?}"
    );
    assert_eq!(
        r.clusters,
        ["UnknownService", "outbound|80||web.front.svc.cluster.local"],
        "{r:?}"
    );
}
