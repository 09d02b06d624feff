//! A scenario for gateways' clusters with and without istiod's
//! `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG`: an Istio ingress Gateway whose
//! VirtualServices route and mirror to some Services, one bound to a
//! Gateway nobody serves, an EnvoyFilter naming one Service in its
//! annotation and another only in its Lua code, mesh providers of a kept
//! type (zipkin) and an ignored one (lightstep), and an east-west gateway
//! (an `AUTO_PASSTHROUGH` server) with its SNI-DNAT clusters.

use super::docs::VirtualServiceDoc;
use super::scenario::{fqdn, Builder, Scenario, DEFAULT_MESH};
use crate::world::{labels, SvcPort};

/// The scenario; `slot` keeps its names and IPs apart.
pub fn gateway_filtering(slot: u64) -> Scenario {
    let mut b = Builder::new(slot);
    let (a, g, t) = (
        format!("gf{slot}-a"),
        format!("gf{slot}-gw"),
        format!("gf{slot}-t"),
    );
    for ns in [&a, &g, &t] {
        b.namespace(ns);
    }
    for name in ["web", "api", "auth", "lua", "unused", "mirror"] {
        b.service(&a, name, vec![SvcPort::new("http", 80)], false);
        b.pod(&a, &format!("{name}-0"), labels(&[("app", name)]));
    }
    b.service(&t, "zipkin", vec![SvcPort::new("http-zipkin", 9411)], false);
    b.service(&t, "lightstep", vec![SvcPort::new("grpc", 8360)], false);
    b.service(&g, "ingress", vec![SvcPort::new("http", 80)], false);
    b.pod(
        &g,
        "ingress-0",
        labels(&[("app", "ingress"), ("istio", "ingressgateway")]),
    );
    if let Some(p) = b.world.pods.last_mut() {
        p.gateway = Some(meshscope_shared::inject::Gateway::Router);
    }
    b.istio(format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: gw\n  namespace: {g}\nspec:\n  selector:\n    istio: ingressgateway\n  servers:\n  - port: {{number: 80, name: http, protocol: HTTP}}\n    hosts: [\"*\"]\n"
    ));
    b.istio(format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: shop\n  namespace: {a}\nspec:\n  hosts: [shop.example.com]\n  gateways: [{g}/gw]\n  http:\n  - route:\n    - destination: {{host: web, port: {{number: 80}}}}\n    mirror: {{host: {}}}\n",
        fqdn("mirror", &a)
    ));
    b.istio(
        VirtualServiceDoc::new(&a, "mesh-only")
            .host(fqdn("api", &a))
            .destination((fqdn("api", &a), Some(80), None))
            .yaml(),
    );
    b.istio(format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: elsewhere\n  namespace: {a}\nspec:\n  hosts: [other.example.com]\n  gateways: [nobody]\n  http:\n  - route:\n    - destination: {{host: {}}}\n",
        fqdn("unused", &a)
    ));
    b.istio(format!(
        "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata:\n  name: auth-lua\n  namespace: {g}\n  annotations:\n    envoyfilter.istio.io/referenced-services: {a}/{}\nspec:\n  workloadSelector:\n    labels:\n      istio: ingressgateway\n  configPatches:\n  - applyTo: HTTP_FILTER\n    match:\n      context: GATEWAY\n      listener:\n        filterChain:\n          filter:\n            name: envoy.filters.network.http_connection_manager\n    patch:\n      operation: INSERT_BEFORE\n      value:\n        name: envoy.filters.http.lua\n        typed_config:\n          \"@type\": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua\n          default_source_code:\n            inline_string: |\n              function envoy_on_request(h)\n                h:httpCall(\"outbound|80||{}\", {{[\":method\"] = \"GET\", [\":path\"] = \"/\", [\":authority\"] = \"lua\"}}, \"\", 1000)\n              end\n",
        fqdn("auth", &a),
        fqdn("lua", &a)
    ));
    east_west(&mut b, &t);
    let mesh = format!(
        "{DEFAULT_MESH}extensionProviders:\n- name: zipkin\n  zipkin: {{service: {}, port: 9411}}\n- name: lightstep\n  lightstep: {{service: {}, port: 8360, accessToken: x}}\n",
        fqdn("zipkin", &t),
        fqdn("lightstep", &t)
    );
    b.finish("fixed-gateway-filtering".into(), mesh)
}

/// An east-west gateway in `ns`: its pod, its Service's port 15443 and an
/// Istio Gateway passing TLS through by SNI; and a DestinationRule with
/// subsets, whose SNI-DNAT clusters it gets too.
fn east_west(b: &mut Builder, ns: &str) {
    b.service(ns, "eastwest", vec![SvcPort::new("tls", 15443)], false);
    b.pod(
        ns,
        "eastwest-0",
        labels(&[("app", "eastwest"), ("istio", "eastwestgateway")]),
    );
    if let Some(p) = b.world.pods.last_mut() {
        p.gateway = Some(meshscope_shared::inject::Gateway::Router);
    }
    b.istio(format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: cross-network\n  namespace: {ns}\nspec:\n  selector:\n    istio: eastwestgateway\n  servers:\n  - port: {{number: 15443, name: tls, protocol: TLS}}\n    tls: {{mode: AUTO_PASSTHROUGH}}\n    hosts: [\"*.local\"]\n"
    ));
    b.istio(
        super::docs::DestinationRuleDoc::new(ns, "zipkin", &fqdn("zipkin", ns))
            .subsets(&["v1"])
            .yaml(),
    );
}
