//! Gateways with istiod's `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG=true`
//! (issue #38): the clusters kept and why, and the readiness findings
//! (MS0025 when a gateway would lose a cluster it needs, MS0026 when it is
//! safe). The same rules are held to a real istiod by
//! `tests/tests/istiod.rs` (`filtered_gateway_clusters_match_istiod`).

use meshscope_test_support::access_log::line;
use meshscope_test_support::fixtures::{deployment, observe, snap, snap_with_mesh};

use meshscope_shared::audit::{audit, AuditScope};
use meshscope_shared::codes::Code;
use meshscope_shared::explain::explain;
use meshscope_shared::snapshot::{MeshSnapshot, WorkloadKind};

fn service(ns: &str, name: &str, ip: &str) -> String {
    format!("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  clusterIP: {ip}\n  selector: {{app: {name}}}\n  ports:\n  - {{name: http, port: 80}}\n")
}

/// Services web, api, auth and lua in `app`; an ingress pod in `gw`
/// serving Gateway gw/public, whose VirtualService sends shop.example.com
/// to web; `filter`: an EnvoyFilter on it.
fn mesh(filter: &str) -> String {
    let mut y = String::new();
    for ns in ["app", "gw"] {
        y += &format!("---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{istio-injection: enabled}}\n");
    }
    for (i, name) in ["web", "api", "auth", "lua"].iter().enumerate() {
        y += &deployment("app", name, &format!("10.0.1.{}", i + 1));
        y += &service("app", name, &format!("10.96.1.{}", i + 1));
    }
    y += r#"---
apiVersion: v1
kind: Pod
metadata:
  name: ingress-0
  namespace: gw
  labels: {istio: ingressgateway}
spec:
  containers: [{name: istio-proxy, image: proxyv2, args: [proxy, router]}]
status:
  podIP: 10.0.9.1
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: public, namespace: gw}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: shop, namespace: app}
spec:
  hosts: [shop.example.com]
  gateways: [gw/public]
  http: [{route: [{destination: {host: web}}]}]
"#;
    y + filter
}

/// An EnvoyFilter on the ingress pod whose Lua code calls lua's cluster;
/// `annotated`: the Services its annotation lists.
fn lua_filter(annotated: &str) -> String {
    format!(
        r#"---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata:
  name: lua
  namespace: gw
  annotations: {{envoyfilter.istio.io/referenced-services: "{annotated}"}}
spec:
  workloadSelector: {{labels: {{istio: ingressgateway}}}}
  configPatches:
  - applyTo: HTTP_FILTER
    patch:
      operation: INSERT_BEFORE
      value:
        name: envoy.filters.http.lua
        typed_config:
          inline_code: 'function envoy_on_request(h) h:httpCall("outbound|80||lua.app.svc.cluster.local", {{}}, "", 100) end'
"#
    )
}

fn ingress(s: &MeshSnapshot) -> usize {
    s.find_workload(&WorkloadKind::Pod, "gw", "ingress-0")
        .unwrap()
}

fn filtered(s: &MeshSnapshot) -> meshscope_shared::gateway_clusters::Filtered {
    explain(s, ingress(s), None, None).gateway_filter.unwrap()
}

#[test]
fn with_the_flag_a_gateway_keeps_what_its_routes_and_envoy_filters_name() {
    let s = snap(&mesh(&lua_filter("app/auth.app.svc.cluster.local")));
    let e = explain(&s, ingress(&s), None, None);
    assert_eq!(e.outbound_clusters.len(), 4, "{:?}", e.outbound_clusters);
    let f = e.gateway_filter.unwrap();
    assert_eq!(f.gateways, ["gw/public"]);
    assert_eq!(
        f.outbound_clusters,
        [
            "outbound|80||auth.app.svc.cluster.local",
            "outbound|80||web.app.svc.cluster.local"
        ]
    );
    assert_eq!(f.dropped_services, 2);
    let why: Vec<(&str, &str)> = f
        .kept
        .iter()
        .flat_map(|k| k.kept_by.iter().map(move |b| (k.service.as_str(), b.kind)))
        .collect();
    assert_eq!(
        why,
        [
            ("app/auth.app.svc.cluster.local", "envoyfilter"),
            ("app/web.app.svc.cluster.local", "route")
        ]
    );
    assert!(f.estimate.bytes < e.estimate.bytes);
}

#[test]
fn a_provider_keeps_its_service_but_a_lightstep_one_does_not() {
    let mesh_config = "extensionProviders:\n- name: authz\n  envoyExtAuthzGrpc: {service: api.app.svc.cluster.local, port: 80}\n- name: ls\n  lightstep: {service: lua.app.svc.cluster.local, port: 80, accessToken: x}\n";
    let s = snap_with_mesh(&mesh(""), "1.31", mesh_config);
    let f = filtered(&s);
    assert_eq!(
        f.outbound_clusters,
        [
            "outbound|80||api.app.svc.cluster.local",
            "outbound|80||web.app.svc.cluster.local"
        ]
    );
}

fn readiness(s: &MeshSnapshot, logs: Option<&str>) -> Vec<(Code, String)> {
    let obs = logs.map(|l| observe(s, l));
    let scope = AuditScope {
        namespaces: None,
        workloads: None,
    };
    audit(s, obs.as_ref(), &scope)
        .into_iter()
        .filter(|f| {
            matches!(
                f.code,
                Code::GatewayFilterDropsNeededCluster | Code::GatewayFilterSafe
            )
        })
        .map(|f| (f.code, f.message))
        .collect()
}

#[test]
fn a_cluster_named_only_in_lua_code_blocks_the_flag_and_the_annotation_unblocks_it() {
    let found = readiness(
        &snap(&mesh(&lua_filter("app/auth.app.svc.cluster.local"))),
        None,
    );
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, Code::GatewayFilterDropsNeededCluster);
    assert!(
        found[0].1.contains(
            "outbound|80||lua.app.svc.cluster.local (named in EnvoyFilter gw/lua's patches"
        ),
        "{}",
        found[0].1
    );
    let found = readiness(&snap(&mesh(&lua_filter("lua.app.svc.cluster.local"))), None);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, Code::GatewayFilterSafe);
    assert!(
        found[0].1.contains("no traffic of it was observed"),
        "{}",
        found[0].1
    );
}

#[test]
fn observed_gateway_traffic_to_an_unrouted_service_blocks_the_flag() {
    let s = snap(&mesh(""));
    let to_api = line(
        "10.0.9.1",
        "api.app:80",
        "outbound|80||api.app.svc.cluster.local",
        "10.96.1.2:80",
    );
    let found = readiness(&s, Some(&to_api));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, Code::GatewayFilterDropsNeededCluster);
    assert!(
        found[0]
            .1
            .contains("outbound|80||api.app.svc.cluster.local (1 requests observed)"),
        "{}",
        found[0].1
    );
    let to_web = line(
        "10.0.9.1",
        "shop.example.com",
        "outbound|80||web.app.svc.cluster.local",
        "10.96.1.1:80",
    );
    let found = readiness(&s, Some(&to_web));
    assert_eq!(found[0].0, Code::GatewayFilterSafe, "{found:?}");
    assert!(
        found[0].1.contains("1 outbound cluster instead of 4"),
        "{}",
        found[0].1
    );
}

#[test]
fn with_the_flag_a_service_change_reaches_only_the_gateways_that_keep_it() {
    use meshscope_shared::explain::{impact, Target};
    use std::collections::HashMap;
    let s = snap(&mesh(""));
    let reached = |target: &str| {
        let t = Target::parse(target, "app").unwrap();
        let imp = impact(&s, &t, &HashMap::new(), &|_| true, None).unwrap();
        let now: Vec<String> = imp.now.gateways.keys().cloned().collect();
        let filtered: Vec<String> = imp.gateways_if_filtered.keys().cloned().collect();
        (now, filtered)
    };
    let gw = "Pod/gw/ingress-0".to_string();
    assert_eq!(reached("service/web"), (vec![gw.clone()], vec![gw.clone()]));
    assert_eq!(reached("service/api"), (vec![gw.clone()], vec![]));
    // A routing change reaches it either way.
    assert_eq!(reached("virtualservice/shop"), (vec![gw.clone()], vec![gw]));
}

// === east-west gateways ===

/// [`mesh`] with an east-west gateway in `ew`: an Istio Gateway whose
/// server passes TLS through by SNI (`AUTO_PASSTHROUGH`).
fn with_east_west() -> String {
    mesh("")
        + r#"---
apiVersion: v1
kind: Namespace
metadata: {name: ew, labels: {istio-injection: enabled}}
---
apiVersion: v1
kind: Pod
metadata:
  name: eastwest-0
  namespace: ew
  labels: {istio: eastwestgateway}
spec:
  containers: [{name: istio-proxy, image: proxyv2, args: [proxy, router]}]
status:
  podIP: 10.0.9.2
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: cross-network, namespace: ew}
spec:
  selector: {istio: eastwestgateway}
  servers: [{port: {number: 15443, name: tls, protocol: TLS}, tls: {mode: AUTO_PASSTHROUGH}, hosts: ["*.local"]}]
"#
}

#[test]
fn an_east_west_gateway_gets_an_sni_dnat_cluster_per_port_of_every_service_it_sees() {
    let s = snap(&with_east_west());
    let ew = s
        .find_workload(&WorkloadKind::Pod, "ew", "eastwest-0")
        .unwrap();
    let e = explain(&s, ew, None, None);
    assert_eq!(
        e.sni_dnat_clusters,
        ["api", "auth", "lua", "web"].map(|n| format!("outbound_.80_._.{n}.app.svc.cluster.local"))
    );
    // The ingress gateway passes nothing through.
    assert!(explain(&s, ingress(&s), None, None)
        .sni_dnat_clusters
        .is_empty());
}

#[test]
fn exports_keep_the_east_west_gateways_namespace_only_for_services_called_through_it() {
    use meshscope_shared::exports::{recommend_exports, ExportOptions};
    let s = snap(&with_east_west());
    // A caller in another network reached web through the gateway.
    let log = line(
        "10.0.9.2",
        "web.app.svc.cluster.local",
        "outbound_.80_._.web.app.svc.cluster.local",
        "10.0.1.1:80",
    );
    let obs = observe(&s, &log);
    let recs = recommend_exports(&s, &obs, ExportOptions::default());
    let of = |name: &str| {
        recs.iter()
            .find(|r| r.namespace == "app" && r.name == name)
            .map(|r| r.recommended.clone())
            .unwrap()
    };
    assert!(of("web").contains(&"ew".to_string()), "{:?}", of("web"));
    assert!(!of("api").contains(&"ew".to_string()), "{:?}", of("api"));
}

#[test]
fn traffic_an_east_west_gateway_passes_through_does_not_block_the_flag() {
    let s = snap(&with_east_west());
    let log = line(
        "10.0.9.2",
        "web.app.svc.cluster.local",
        "outbound_.80_._.web.app.svc.cluster.local",
        "10.0.1.1:80",
    );
    // Both gateways, the east-west one judged with its traffic.
    let found = readiness(&s, Some(&log));
    assert!(
        found.iter().all(|(c, _)| *c == Code::GatewayFilterSafe),
        "{found:?}"
    );
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found
        .iter()
        .any(|(_, m)| m.contains("and observed traffic: 0 outbound clusters instead of 4")));
}

#[test]
fn with_the_flag_every_service_change_still_reaches_an_east_west_gateway() {
    use meshscope_shared::explain::{impact, Target};
    use std::collections::HashMap;
    let s = snap(&with_east_west());
    let t = Target::parse("service/api", "app").unwrap();
    let imp = impact(&s, &t, &HashMap::new(), &|_| true, None).unwrap();
    let filtered: Vec<&String> = imp.gateways_if_filtered.keys().collect();
    assert_eq!(filtered, ["Pod/ew/eastwest-0"]);
}

#[test]
fn a_gateways_listeners_and_route_configurations_follow_its_servers() {
    let s = snap(&with_east_west());
    let e = explain(&s, ingress(&s), None, None);
    assert_eq!(e.outbound_listeners, ["0.0.0.0_80"]);
    assert_eq!(e.outbound_routes, ["http.80"]);
    let ew = s
        .find_workload(&WorkloadKind::Pod, "ew", "eastwest-0")
        .unwrap();
    let e = explain(&s, ew, None, None);
    assert_eq!(e.outbound_listeners, ["0.0.0.0_15443"]);
    assert!(e.outbound_routes.is_empty(), "{:?}", e.outbound_routes);
}

/// [`mesh`] with a TCP server on 9000 and a VirtualService in `app`
/// routing it, exported to `export`.
fn with_tcp(export: &str) -> String {
    mesh("").replace(
        "  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: [\"*\"]}]",
        "  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: [\"*\"]}, {port: {number: 9000, name: tcp, protocol: TCP}, hosts: [\"*\"]}]",
    ) + &format!(
        "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: db, namespace: app}}\nspec:\n  hosts: [db.example.com]\n  gateways: [gw/public]\n  exportTo: [\"{export}\"]\n  tcp: [{{route: [{{destination: {{host: api, port: {{number: 80}}}}}}]}}]\n"
    )
}

#[test]
fn a_tcp_server_gets_a_listener_only_from_a_route_the_gateways_namespace_sees() {
    let listeners = |yaml: &str| {
        let s = snap(yaml);
        explain(&s, ingress(&s), None, None).outbound_listeners
    };
    assert_eq!(listeners(&with_tcp("*")), ["0.0.0.0_80", "0.0.0.0_9000"]);
    assert_eq!(listeners(&with_tcp(".")), ["0.0.0.0_80"]);
    assert_eq!(listeners(&mesh("")), ["0.0.0.0_80"]);
}
