//! Gateway API objects for the random scenarios, each from a stream of
//! its own: an ingress Gateway with its HTTPRoute and a TCP or TLS route
//! ([`ingress_gateway`]), and mesh (GAMMA) routes bound to Services
//! ([`mesh_routes`]).

use std::fmt::Write as _;

use super::draw::{chance, pick, SvcRef};
use super::scenario::{fqdn, Builder};
use crate::bench::Rng;
use crate::world::{labels, SvcPort};

/// An ingress Gateway, from a stream of its own: a third of the seeds get
/// Gateway `gw` of class `istio` in one namespace with its pod as istiod's
/// deployment controller renders it (Service `gw-istio`, a pod running
/// `proxy router`: the test istiod has no `kube-gateway` template,
/// `../shared/istiod.md` §7), and an HTTPRoute bound to it, in the
/// Gateway's namespace or another, for one hostname, with one or two
/// backends in any namespace; a backend in another namespace than the
/// route's gets a ReferenceGrant one time in two (istiod refuses it
/// without one). Its HTTP listener admits routes from every namespace, its
/// own only (the default) or a selector's, and may have a hostname of its
/// own; the route may name it by `sectionName`. Half the gateways also get
/// a TCP or TLS listener and route ([`gateway_stream_route`], from
/// `streams`), and their Service the listener's port.
pub(super) fn ingress_gateway(
    f: &mut Rng,
    streams: &mut Rng,
    b: &mut Builder,
    nss: &[String],
    svcs: &[SvcRef],
) {
    if !chance(f, 0.33) {
        return;
    }
    let gns = pick(f, nss).clone();
    // istiod's deployment controller gives the Gateway's Service a port
    // per listener: the pod listens on each.
    let (stream_listener, stream_docs) = gateway_stream_route(streams, &gns, nss, svcs);
    let mut ports = vec![SvcPort::new("http", 80)];
    if stream_listener.contains("port: 9000") {
        ports.push(SvcPort::new("tcp", 9000));
    } else if stream_listener.contains("port: 9443") {
        ports.push(SvcPort::new("tls", 9443));
    }
    b.service(&gns, "gw-istio", ports, false);
    b.pod(
        &gns,
        "gw-istio-0",
        labels(&[
            ("app", "gw-istio"),
            ("gateway.networking.k8s.io/gateway-name", "gw"),
            ("sidecar.istio.io/inject", "false"),
        ]),
    );
    if let Some(p) = b.world.pods.last_mut() {
        p.gateway = Some(meshscope_shared::inject::Gateway::Router);
    }
    let rns = match chance(f, 0.5) {
        true => gns.clone(),
        false => pick(f, nss).clone(),
    };
    // The listener: routes from every namespace, from its own (the
    // default), or from those a selector picks (the route's or another);
    // one time in four a hostname of its own that the route's matches,
    // one in eight one it misses; the route names the listener one time
    // in four.
    let allowed = match f.below(4) {
        0 => String::new(),
        1 => {
            let any = pick(f, nss).clone();
            let picked = pick(f, &[rns.clone(), gns.clone(), any]).clone();
            format!(", allowedRoutes: {{namespaces: {{from: Selector, selector: {{matchLabels: {{kubernetes.io/metadata.name: {picked}}}}}}}}}")
        }
        _ => ", allowedRoutes: {namespaces: {from: All}}".to_string(),
    };
    let hostname = match f.below(8) {
        0 | 1 => ", hostname: \"*.example.com\"",
        2 => ", hostname: shop.example.org",
        _ => "",
    };
    let section = match chance(f, 0.25) {
        true => ", sectionName: http",
        false => "",
    };
    b.istio(format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: {gns}}}\nspec:\n  gatewayClassName: istio\n  listeners:\n  - {{name: http, port: 80, protocol: HTTP{hostname}{allowed}}}\n{stream_listener}"
    ));
    for d in stream_docs {
        b.istio(d);
    }
    let mut backends = String::new();
    let mut grants: Vec<(String, String)> = Vec::new();
    for _ in 0..1 + f.below(2) {
        let (bns, bname, bports) = pick(f, svcs);
        let Some(port) = bports.iter().find(|p| !p.0.starts_with("udp")) else {
            continue;
        };
        let _ = writeln!(
            backends,
            "    - {{name: {bname}, namespace: {bns}, port: {}}}",
            port.1
        );
        let pair = (bns.clone(), bname.clone());
        if *bns != rns && chance(f, 0.5) && !grants.contains(&pair) {
            grants.push(pair);
        }
    }
    if backends.is_empty() {
        return;
    }
    b.istio(format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: ingress, namespace: {rns}}}\nspec:\n  parentRefs:\n  - {{name: gw, namespace: {gns}{section}}}\n  hostnames: [shop.example.com]\n  rules:\n  - backendRefs:\n{backends}"
    ));
    for (bns, bname) in grants {
        b.istio(reference_grant_doc("HTTPRoute", &rns, &bns, &bname));
    }
}

/// A TCP or TLS listener of the ingress Gateway and a route bound to it,
/// from a stream of its own: half the gateways get a TCP listener on 9000
/// or a TLS one on 9443 passing TLS through (routes from every
/// namespace), with a TCPRoute or TLSRoute (for one hostname) naming it
/// by `sectionName`, from the Gateway's namespace or another, to one or
/// two weighted backends in any namespace; a backend in another namespace
/// gets a ReferenceGrant one time in two. Returns the listener's line and
/// the documents.
fn gateway_stream_route(
    s: &mut Rng,
    gns: &str,
    nss: &[String],
    svcs: &[SvcRef],
) -> (String, Vec<String>) {
    if !chance(s, 0.5) {
        return (String::new(), Vec::new());
    }
    let (kind, section, listener, hostnames) = match chance(s, 0.5) {
        true => (
            "TLSRoute",
            "tls",
            "  - {name: tls, port: 9443, protocol: TLS, tls: {mode: Passthrough}, allowedRoutes: {namespaces: {from: All}}}\n",
            "  hostnames: [secure.example.com]\n",
        ),
        false => (
            "TCPRoute",
            "tcp",
            "  - {name: tcp, port: 9000, protocol: TCP, allowedRoutes: {namespaces: {from: All}}}\n",
            "",
        ),
    };
    let rns = match chance(s, 0.5) {
        true => gns.to_string(),
        false => pick(s, nss).clone(),
    };
    let mut backends = String::new();
    let mut docs = Vec::new();
    for _ in 0..1 + s.below(2) {
        let (bns, bname, bports) = pick(s, svcs);
        let Some(port) = bports.iter().find(|p| !p.0.starts_with("udp")) else {
            continue;
        };
        let _ = writeln!(
            backends,
            "    - {{name: {bname}, namespace: {bns}, port: {}, weight: {}}}",
            port.1,
            1 + s.below(9)
        );
        if *bns != rns && chance(s, 0.5) {
            docs.push(reference_grant_doc(kind, &rns, bns, bname));
        }
    }
    if backends.is_empty() {
        return (String::new(), Vec::new());
    }
    docs.push(format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\nmetadata: {{name: gw-{section}, namespace: {rns}}}\nspec:\n  parentRefs:\n  - {{name: gw, namespace: {gns}, sectionName: {section}}}\n{hostnames}  rules:\n  - backendRefs:\n{backends}"
    ));
    (listener.to_string(), docs)
}

/// A ReferenceGrant in `ns` that lets `kind`s of namespace `from_ns` send
/// requests to Service `name`.
fn reference_grant_doc(kind: &str, from_ns: &str, ns: &str, name: &str) -> String {
    let lower = kind.to_lowercase();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: from-{lower}-{from_ns}-{name}, namespace: {ns}}}\nspec:\n  from: [{{group: gateway.networking.k8s.io, kind: {kind}, namespace: {from_ns}}}]\n  to: [{{group: \"\", kind: Service, name: {name}}}]\n"
    )
}

/// Gateway API mesh (GAMMA) routes, from a stream of their own: half the
/// seeds get one or two, each an HTTPRoute, GRPCRoute, (on a parent with
/// a TCP port) TCPRoute or (on one with a TLS port, for the parent's name)
/// TLSRoute in the parent's namespace (producer) or
/// another (consumer), with one to three weighted backends in any
/// namespace, one in six of weight 0, one route in three on one port of
/// its parent; the second route, one time in two after an HTTP, gRPC or
/// TCP one, names the same kind, namespace and parent (one time in two on
/// the same port, else on a port when the first named none and on none
/// when it named one): istiod merges HTTP and gRPC ones, orders the two
/// VirtualServices by age and name (seed 10007 at bd9a6b7), and keeps
/// the first TCP one's filter chain. Not generated, as the engine does
/// not model them yet (issue #33): headless parents, a parent a
/// VirtualService routes too (which of the two istiod's virtual host
/// follows).
pub(super) fn mesh_routes(f: &mut Rng, b: &mut Builder, nss: &[String], svcs: &[SvcRef]) {
    if !chance(f, 0.5) {
        return;
    }
    // The first route's kind, namespace, parent (and its ports) and port,
    // when it is an HTTP, gRPC or TCP one: the second names them one time
    // in two.
    type First<'a> = (&'a str, String, String, Vec<(String, u32)>, String);
    let mut first: Option<First> = None;
    for k in 0..1 + f.below(2) {
        if let Some((kind, ns, parent, pports, port)) = first.clone().filter(|_| chance(f, 0.5)) {
            let backends = route_backends(f, svcs);
            let port = match (chance(f, 0.5), port.is_empty()) {
                (true, _) => port,
                (false, true) => format!(", port: {}", pick(f, &pports).1),
                (false, false) => String::new(),
            };
            let parent_ref = format!("{{{parent}{port}}}");
            if !backends.is_empty() {
                b.istio(format!(
                    "apiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\nmetadata: {{name: route{k}, namespace: {ns}}}\nspec:\n  parentRefs:\n  - {parent_ref}\n  rules:\n  - backendRefs:\n{backends}"
                ));
            }
            continue;
        }
        let (pns, parent, pports) = pick(f, svcs).clone();
        if b.is_headless(&pns, &parent) || b.routed_by_virtual_service(&fqdn(&parent, &pns)) {
            continue;
        }
        let tcp_port = pports.iter().any(|p| p.0 == "tcp-db" || p.0 == "plain");
        let tls_port = pports.iter().any(|p| p.0 == "tls" || p.0 == "https-x");
        let kind = match f.below(6) {
            0 | 1 if tcp_port => "TCPRoute",
            4 | 5 if tls_port => "TLSRoute",
            0 | 1 => "GRPCRoute",
            _ => "HTTPRoute",
        };
        // A TLSRoute matches SNI names (at least one): the parent's.
        let hostnames = match kind {
            "TLSRoute" => format!("  hostnames: [{}]\n", fqdn(&parent, &pns)),
            _ => String::new(),
        };
        let ns = if chance(f, 0.5) {
            pns.clone()
        } else {
            pick(f, nss).clone()
        };
        let backends = route_backends(f, svcs);
        if backends.is_empty() {
            continue;
        }
        // One route in three attaches to one port of its parent.
        let port = match chance(f, 0.33) {
            true => format!(", port: {}", pick(f, &pports).1),
            false => String::new(),
        };
        let parent_base = format!("group: \"\", kind: Service, name: {parent}, namespace: {pns}");
        let parent_ref = format!("{{{parent_base}{port}}}");
        b.istio(format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\nmetadata: {{name: route{k}, namespace: {ns}}}\nspec:\n  parentRefs:\n  - {parent_ref}\n{hostnames}  rules:\n  - backendRefs:\n{backends}"
        ));
        if matches!(kind, "HTTPRoute" | "GRPCRoute" | "TCPRoute") {
            first = Some((kind, ns, parent_base, pports, port));
        }
    }
}

/// One to three backends in any namespace, one in six of weight 0
/// (istiod drops it), as `backendRefs` lines.
fn route_backends(f: &mut Rng, svcs: &[SvcRef]) -> String {
    let mut backends = String::new();
    for _ in 0..1 + f.below(3) {
        let (bns, bname, bports) = pick(f, svcs);
        let Some(port) = bports.iter().find(|p| !p.0.starts_with("udp")) else {
            continue;
        };
        let _ = writeln!(
            backends,
            "    - {{name: {bname}, namespace: {bns}, port: {}, weight: {}}}",
            port.1,
            f.below(6).min(1) * (1 + f.below(99))
        );
    }
    backends
}
