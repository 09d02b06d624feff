//! Istio (`networking.istio.io`) gateways for the random scenarios, from a
//! stream of their own ([`istio_gateways`]): the router proxies whose
//! clusters istiod's `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG` narrows to what
//! their Gateways' VirtualServices route to, the mesh's extension
//! providers and their EnvoyFilters' referenced services
//! (`GatewayServices` and `extraServicesForProxy`,
//! `pilot/pkg/model/push_context.go`, istio 1.31).

use std::fmt::Write as _;

use super::docs::{ServiceEntryDoc, VirtualServiceDoc};
use super::draw::{chance, pick, SvcRef};
use super::scenario::{fqdn, Builder, ROOT_NS};
use crate::bench::Rng;
use crate::world::{labels, SvcPort};

/// A router pod of the scenario: its namespace and the `istio` label its
/// Gateways select it by.
struct Router {
    ns: String,
    istio: String,
}

/// What the steps draw from.
struct Draw<'a> {
    nss: &'a [String],
    svcs: &'a [SvcRef],
}

/// Istio gateways, from a stream of their own: six seeds in ten get an
/// ingress gateway ([`ingress`]), three in ten an egress one ([`egress`]);
/// four in ten an EnvoyFilter naming Services in its annotation
/// ([`envoy_filter`]), one in three extension providers calling a
/// Service ([`providers`]), and one in four an east-west gateway
/// ([`east_west`]).
pub(super) fn istio_gateways(
    g: &mut Rng,
    b: &mut Builder,
    mesh: &mut String,
    nss: &[String],
    svcs: &[SvcRef],
) {
    let d = Draw { nss, svcs };
    let mut routers = Vec::new();
    if chance(g, 0.6) {
        routers.push(ingress(g, b, &d));
    }
    if chance(g, 0.3) {
        routers.push(egress(g, b, &d));
    }
    if chance(g, 0.4) {
        envoy_filter(g, b, &d, &routers);
    }
    if chance(g, 0.33) {
        providers(g, mesh, &d);
    }
    if chance(g, 0.25) {
        east_west(g, b, &d);
    }
}

/// An east-west gateway: a router pod in a random namespace with its
/// Service on 15443, and an Istio Gateway there passing TLS through by
/// SNI (`AUTO_PASSTHROUGH`), so that its pod gets an SNI-DNAT cluster per
/// port of every Service it sees (`buildOutboundSniDnatClusters`,
/// `pilot/pkg/networking/core/cluster.go`, istio 1.31).
fn east_west(g: &mut Rng, b: &mut Builder, d: &Draw<'_>) {
    let ns = pick(g, d.nss).clone();
    router_pod(
        b,
        &ns,
        "eastwest",
        "eastwestgateway",
        vec![SvcPort::new("tls", 15443)],
    );
    b.istio(format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: cross-network\n  namespace: {ns}\nspec:\n  selector:\n    istio: eastwestgateway\n  servers:\n  - port: {{number: 15443, name: tls, protocol: TLS}}\n    tls: {{mode: AUTO_PASSTHROUGH}}\n    hosts: [\"*.local\"]\n"
    ));
}

/// A router pod `NAME-0` in `ns` with labels `app: NAME` and `istio:
/// ISTIO` (as istio's gateway chart labels them), and its Service `NAME`
/// on `ports`.
fn router_pod(b: &mut Builder, ns: &str, name: &str, istio: &str, ports: Vec<SvcPort>) -> Router {
    b.service(ns, name, ports, false);
    b.pod(
        ns,
        &format!("{name}-0"),
        labels(&[("app", name), ("istio", istio)]),
    );
    if let Some(p) = b.world.pods.last_mut() {
        p.gateway = Some(meshscope_shared::inject::Gateway::Router);
    }
    Router {
        ns: ns.to_string(),
        istio: istio.to_string(),
    }
}

/// An Istio Gateway `ns/name` selecting `istio: ISTIO`, with an HTTP
/// server on 80 for `hosts` and, when `tcp`, a TCP one on 9000 for every
/// host.
fn gateway_doc(ns: &str, name: &str, istio: &str, hosts: &[String], tcp: bool) -> String {
    let quoted: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    let mut d = format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  selector:\n    istio: {istio}\n  servers:\n  - port: {{number: 80, name: http, protocol: HTTP}}\n    hosts: [{}]\n",
        quoted.join(", ")
    );
    if tcp {
        d.push_str("  - port: {number: 9000, name: tcp, protocol: TCP}\n    hosts: [\"*\"]\n");
    }
    d
}

/// How a VirtualService in `vs_ns` names Gateway `gw_ns/name`: by its
/// short name in the same namespace (one time in two), else in full.
fn gateway_ref(g: &mut Rng, vs_ns: &str, gw_ns: &str, name: &str) -> String {
    match vs_ns == gw_ns && chance(g, 0.5) {
        true => name.to_string(),
        false => format!("{gw_ns}/{name}"),
    }
}

/// One to two hosts of an ingress Gateway's HTTP server: every host, a
/// wildcard domain, or a host or wildcard admitting VirtualServices of
/// one namespace (`.`: the Gateway's), every one (`*`), or a namespace.
fn server_hosts(g: &mut Rng, d: &Draw<'_>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for _ in 0..1 + g.below(2) {
        let ns = pick(g, d.nss).clone();
        let h = match g.below(7) {
            0 => "*".to_string(),
            1 => "*.example.com".to_string(),
            2 => format!("{ns}/*"),
            3 => "./shop.example.com".to_string(),
            4 => "*/shop.example.com".to_string(),
            5 => format!("{ns}/*.example.com"),
            _ => format!("{ns}/api.example.com"),
        };
        if !out.contains(&h) {
            out.push(h);
        }
    }
    out
}

/// An ingress gateway: router pod `ingress-K-0` labelled `istio:
/// ingressgateway-K` in one namespace with its Service, an Istio Gateway
/// selecting it in its namespace, another or (one time in ten) the root
/// namespace, and one time in four a second Gateway selecting it from
/// elsewhere (istiod merges every Gateway whose selector matches, from
/// any namespace: `mergeGateways`, `pilot/pkg/model/push_context.go`);
/// one time in four a Gateway nobody serves. One to three
/// VirtualServices bind to them ([`ingress_route`]).
fn ingress(g: &mut Rng, b: &mut Builder, d: &Draw<'_>) -> Router {
    let k = g.below(3);
    let (name, istio) = (format!("ingress-{k}"), format!("ingressgateway-{k}"));
    let rns = pick(g, d.nss).clone();
    let tcp = chance(g, 0.3);
    let mut ports = vec![SvcPort::new("http", 80)];
    if tcp {
        ports.push(SvcPort::new("tcp", 9000));
    }
    let router = router_pod(b, &rns, &name, &istio, ports);
    // (namespace, name) of the Gateways: served ones first.
    let mut gws: Vec<(String, String)> = Vec::new();
    let gns = match g.below(10) {
        0 => ROOT_NS.to_string(),
        1..=5 => rns.clone(),
        _ => pick(g, d.nss).clone(),
    };
    // Names in the root namespace are the scenario's own.
    let gname = match gns == ROOT_NS {
        true => format!("{}-igw", d.nss[0]),
        false => "igw".to_string(),
    };
    b.istio(gateway_doc(&gns, &gname, &istio, &server_hosts(g, d), tcp));
    gws.push((gns, gname));
    if chance(g, 0.25) {
        let ns = pick(g, d.nss).clone();
        b.istio(gateway_doc(&ns, "igw2", &istio, &server_hosts(g, d), false));
        gws.push((ns, "igw2".into()));
    }
    let served = gws.len();
    if chance(g, 0.25) {
        let ns = pick(g, d.nss).clone();
        let hosts = ["*".to_string()];
        b.istio(gateway_doc(&ns, "ghost", "nobody", &hosts, false));
        gws.push((ns, "ghost".into()));
    }
    for k in 0..1 + g.below(3) {
        ingress_route(g, b, d, &gws, served, k);
    }
    router
}

/// A destination of a route: a Service by its FQDN or (one time in four)
/// its short name, which resolves in the VirtualService's namespace
/// (another namespace's Service of that name, or none); with one of its
/// ports one time in two (always for `tcp`). `None`: a Service with UDP
/// ports only, for `tcp`.
fn route_dest(
    g: &mut Rng,
    d: &Draw<'_>,
    tcp: bool,
) -> Option<(String, Option<u32>, Option<String>)> {
    let (ns, name, ports) = pick(g, d.svcs);
    let host = match chance(g, 0.25) {
        true => name.clone(),
        false => fqdn(name, ns),
    };
    let usable: Vec<u32> = ports
        .iter()
        .filter(|p| !tcp || !p.0.starts_with("udp"))
        .map(|p| p.1)
        .collect();
    if usable.is_empty() {
        return None;
    }
    let port = (tcp || chance(g, 0.5)).then(|| *pick(g, &usable));
    Some((host, port, None))
}

/// VirtualService `gvsK` in any namespace for a host under
/// `example.com` (or all of them), bound to one or two of `gws` (the
/// first `served` of which the ingress pod serves; one time in five one
/// it does not), routing http to one or two Services, mirroring one time
/// in four, one time in four with a tcp route to one more; one time in
/// four with an `exportTo`.
fn ingress_route(
    g: &mut Rng,
    b: &mut Builder,
    d: &Draw<'_>,
    gws: &[(String, String)],
    served: usize,
    k: usize,
) {
    let ns = pick(g, d.nss).clone();
    let host = *pick(
        g,
        &[
            "shop.example.com",
            "api.example.com",
            "*.example.com",
            "web.example.org",
        ],
    );
    let mut refs: Vec<String> = Vec::new();
    for _ in 0..1 + g.below(2) {
        let pool = match chance(g, 0.2) && served < gws.len() {
            true => &gws[served..],
            false => &gws[..served],
        };
        let (gns, gname) = pick(g, pool);
        let r = gateway_ref(g, &ns, gns, gname);
        if !refs.contains(&r) {
            refs.push(r);
        }
    }
    let http: Vec<_> = (0..1 + g.below(2))
        .filter_map(|_| route_dest(g, d, false))
        .collect();
    let mut vs = VirtualServiceDoc::new(&ns, &format!("gvs{k}"))
        .host(host)
        .destinations(http);
    if chance(g, 0.25) {
        if let Some(m) = route_dest(g, d, false) {
            vs = vs.mirror((m.0, None, None));
        }
    }
    if chance(g, 0.25) {
        vs = vs.tcp_destinations(route_dest(g, d, true));
    }
    if chance(g, 0.25) {
        let other = pick(g, d.nss).clone();
        vs = vs.export_to([pick(g, &[".", "*", other.as_str()]).to_string()]);
    }
    let mut doc = vs.yaml();
    let _ = writeln!(doc, "  gateways: [{}]", refs.join(", "));
    b.istio(doc);
}

/// The external host the egress gateway's VirtualService routes through it.
const EGRESS_HOST: &str = "egress.example.org";

/// An egress gateway: router pod `egressgateway-0` labelled `istio:
/// egressgateway` with its Service, a DNS ServiceEntry of [`EGRESS_HOST`]
/// in any namespace, an Istio Gateway selecting the pod for that host (or
/// every one) in its namespace or another, and VirtualService
/// `via-egress` in any namespace bound to `mesh` and that Gateway: the
/// sidecars' requests go to the gateway's Service, the gateway's to the
/// entry's host (or, one time in four, to a Service).
fn egress(g: &mut Rng, b: &mut Builder, d: &Draw<'_>) -> Router {
    let ens = pick(g, d.nss).clone();
    let router = router_pod(
        b,
        &ens,
        "egressgateway",
        "egressgateway",
        vec![SvcPort::new("http", 80)],
    );
    let sns = pick(g, d.nss).clone();
    b.istio(
        ServiceEntryDoc::new(&sns, "egress-api")
            .host(EGRESS_HOST)
            .port(80, "http", "HTTP")
            .yaml(),
    );
    let gns = match chance(g, 0.6) {
        true => ens.clone(),
        false => pick(g, d.nss).clone(),
    };
    let hosts = [pick(g, &[EGRESS_HOST, "*"]).to_string()];
    b.istio(gateway_doc(&gns, "egw", "egressgateway", &hosts, false));
    let vns = pick(g, d.nss).clone();
    let gw = gateway_ref(g, &vns, &gns, "egw");
    let (out, port) = match chance(g, 0.75) {
        true => (EGRESS_HOST.to_string(), 80),
        false => {
            let (ns, name, ports) = pick(g, d.svcs);
            (fqdn(name, ns), pick(g, ports).1)
        }
    };
    let via = fqdn("egressgateway", &ens);
    b.istio(format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: via-egress\n  namespace: {vns}\nspec:\n  hosts: [{EGRESS_HOST}]\n  gateways: [mesh, {gw}]\n  http:\n  - match: [{{gateways: [mesh], port: 80}}]\n    route:\n    - destination: {{host: {via}, port: {{number: 80}}}}\n  - match: [{{gateways: [{gw}], port: 80}}]\n    route:\n    - destination: {{host: {out}, port: {{number: {port}}}}}\n"
    ));
    router
}

/// The annotation's entries: one or two Services by hostname or
/// `namespace/hostname` (one time in six in a namespace it is not in), or
/// a host that is no Service.
fn referenced_services(g: &mut Rng, d: &Draw<'_>) -> String {
    let mut refs: Vec<String> = Vec::new();
    for _ in 0..1 + g.below(2) {
        let (ns, name, _) = pick(g, d.svcs);
        let host = fqdn(name, ns);
        let r = match g.below(6) {
            0 | 1 => host,
            2 | 3 => format!("{ns}/{host}"),
            4 => format!("{}/{host}", pick(g, d.nss)),
            _ => "nothing.example.com".to_string(),
        };
        if !refs.contains(&r) {
            refs.push(r);
        }
    }
    refs.join(",")
}

/// An EnvoyFilter inserting a Lua HTTP filter at gateways, naming
/// Services in `envoyfilter.istio.io/referenced-services` (with the flag
/// on a router proxy it applies to keeps them: `convertToEnvoyFilterWrapper`,
/// `pilot/pkg/model/envoyfilter.go`): in a router's namespace, the root
/// namespace or another, selecting that router (its `istio` label), a
/// label no pod has, or (one time in five) every proxy of its namespace.
fn envoy_filter(g: &mut Rng, b: &mut Builder, d: &Draw<'_>, routers: &[Router]) {
    let router = match routers.is_empty() {
        true => None,
        false => Some(pick(g, routers)),
    };
    let ns = match (g.below(10), router) {
        (0..=4, Some(r)) => r.ns.clone(),
        (5..=7, _) => ROOT_NS.to_string(),
        _ => pick(g, d.nss).clone(),
    };
    let selector = match (g.below(5), router) {
        (0..=2, Some(r)) => format!(
            "  workloadSelector:\n    labels:\n      istio: {}\n",
            r.istio
        ),
        (0..=3, _) => "  workloadSelector:\n    labels:\n      istio: nobody\n".to_string(),
        _ => String::new(),
    };
    let name = match ns == ROOT_NS {
        true => format!("{}-lua", d.nss[0]),
        false => "gw-lua".to_string(),
    };
    let refs = referenced_services(g, d);
    let (sns, sname, _) = pick(g, d.svcs);
    let called = fqdn(sname, sns);
    b.istio(format!(
        "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations:\n    envoyfilter.istio.io/referenced-services: \"{refs}\"\nspec:\n{selector}  configPatches:\n  - applyTo: HTTP_FILTER\n    match:\n      context: GATEWAY\n      listener:\n        filterChain:\n          filter:\n            name: envoy.filters.network.http_connection_manager\n    patch:\n      operation: INSERT_BEFORE\n      value:\n        name: envoy.filters.http.lua\n        typed_config:\n          \"@type\": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua\n          default_source_code:\n            inline_string: |\n              function envoy_on_request(h)\n                h:httpCall(\"outbound|80||{called}\", {{[\":method\"] = \"GET\", [\":path\"] = \"/\", [\":authority\"] = \"lua\"}}, \"\", 1000)\n              end\n"
    ));
}

/// One or two mesh extension providers calling a Service (by hostname,
/// or `namespace/hostname`): external authorization over gRPC or HTTP,
/// or OpenTelemetry tracing, whose Services a router proxy keeps with the
/// flag on (`extraServicesForProxy`, `pilot/pkg/model/push_context.go`).
/// Added to the providers `mesh` has, if any.
fn providers(g: &mut Rng, mesh: &mut String, d: &Draw<'_>) {
    let mut items = String::new();
    for k in 0..1 + g.below(2) {
        let (ns, name, ports) = pick(g, d.svcs);
        let Some(port) = ports.iter().find(|p| !p.0.starts_with("udp")).map(|p| p.1) else {
            continue;
        };
        let service = match chance(g, 0.6) {
            true => fqdn(name, ns),
            false => format!("{ns}/{}", fqdn(name, ns)),
        };
        let kind = *pick(
            g,
            &["envoyExtAuthzGrpc", "envoyExtAuthzHttp", "opentelemetry"],
        );
        let _ = writeln!(
            items,
            "- name: extra{k}\n  {kind}: {{service: \"{service}\", port: {port}}}"
        );
    }
    if items.is_empty() {
        return;
    }
    let head = "extensionProviders:\n";
    match mesh.contains(head) {
        true => *mesh = mesh.replacen(head, &format!("{head}{items}"), 1),
        false => {
            mesh.push_str(head);
            mesh.push_str(&items);
        }
    }
}
