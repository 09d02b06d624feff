//! The Gateway API mesh routes a proxy gets, as `explain` lists them and
//! `verify` compares them with istiod's (`docs/istio-semantics.md` §11):
//! a route its scope selects gives a virtual host for the parent's host
//! only where the parent Service is among the listener's services (not
//! merely pulled in as another route's destination:
//! `pilot/pkg/networking/core/route/route.go`, istio 1.31), and an HTTP
//! or gRPC route in another namespace than its parent only to proxies of
//! the route's own namespace. An HTTP or gRPC route's virtual host exists
//! only on the parent's HTTP (or sniffed) ports: on a parent with none,
//! istiod builds no RDS for it, though its backends' clusters still come
//! into scope (`docs/istio-semantics.md` §11). Its routes name one cluster per backend,
//! `outbound|PORT||HOST`.

use serde::Serialize;

use std::collections::{BTreeMap, BTreeSet};

use crate::codes::Code;
use crate::listeners::{OutboundListeners, Stream};
use crate::scope::Visible;
use crate::snapshot::{MeshSnapshot, Protocol, VsInfo};

/// One route a proxy's scope selects, and what istiod makes of it there.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RouteSeen {
    /// `HTTPRoute ns/name`.
    pub route: String,
    /// The host it routes (its parent's).
    pub host: String,
    /// Whether the proxy gets a virtual host for it.
    pub applies: bool,
    /// Why not, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The clusters its routes name, sorted.
    pub clusters: Vec<String>,
    /// The parent's port the route attaches to, when it names one: it
    /// routes only that port's requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// Sent as HTTP routes (RDS), as HTTP and gRPC routes are; TCP and TLS
    /// routes sit in the listener's filter chains instead.
    #[serde(skip)]
    pub http: bool,
    /// For a TCP or TLS route: the outbound listeners (`ADDRESS_PORT`)
    /// whose filter chain it is (a gateway pod's: `0.0.0.0_PORT`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<String>,
    /// A TLS route: its filter chain matches the parent's name (SNI).
    #[serde(skip)]
    pub tls: bool,
}

/// The mesh routes `vis` (the scope of proxies in `vis.namespace`) selects.
pub fn routes_seen(
    snap: &MeshSnapshot,
    vis: &Visible,
    built: &OutboundListeners,
) -> Vec<RouteSeen> {
    let selected: Vec<&VsInfo> = vis
        .virtual_services
        .iter()
        .map(|&v| &snap.virtual_services[v])
        .filter(|vs| vs.route.is_some() && vs.mesh_bound)
        .collect();
    let mut out: Vec<(&VsInfo, RouteSeen)> = selected
        .iter()
        .flat_map(|vs| {
            vs.hosts
                .iter()
                .map(move |h| (*vs, seen(snap, vis, built, vs, h)))
        })
        .collect();
    own_namespace_first(&mut out, &vis.namespace);
    port_first(snap, &mut out);
    merge(&mut out);
    tcp_first(&mut out, &vis.namespace);
    let mut out: Vec<RouteSeen> = out.into_iter().map(|(_, r)| r).collect();
    out.sort_by(|a, b| (&a.route, &a.host).cmp(&(&b.route, &b.host)));
    out
}

/// TCP routes for one parent, on one listener: istiod makes each TCPRoute
/// a VirtualService of its own (`<route>~tcp~<n>~...`, not merged:
/// `TCPRouteCollection`, `pilot/pkg/config/kube/gateway/
/// route_collections.go`), selects the proxy's own namespace's
/// gateway-semantics ones first, then the rest, each group by age, name,
/// namespace (`SelectVirtualServices`, `pilot/pkg/model/virtualservice.go`;
/// `configCompareByCreationTime`, `config.go`), and a parent's TCP filter
/// chain follows the first one whose rule fits the listener's port
/// (`buildSidecarOutboundTCPFilterChainOpts`, `networking/core/tls.go`,
/// istio 1.31). So a later route loses every listener an earlier one
/// holds, and applies nowhere when it holds none. TLS routes of one
/// parent the same way among themselves: their filter chains match the
/// parent's name, so the first one's chain takes it (random commit seed
/// 427122: two TLSRoutes for one Service, the later one's backends in no
/// chain).
fn tcp_first(routes: &mut [(&VsInfo, RouteSeen)], ns: &str) {
    let mut order: Vec<usize> = (0..routes.len())
        .filter(|&i| !routes[i].1.http && routes[i].1.applies)
        .collect();
    order.sort_by_key(|&i| {
        let vs = routes[i].0;
        let name = vs.route.as_ref().map_or(&vs.name, |r| &r.name);
        (
            vs.namespace != ns,
            vs.created,
            format!("{name}~tcp~"),
            &vs.namespace,
        )
    });
    // (parent, listener, TLS) -> the route whose chain it is.
    let mut held: BTreeMap<(String, String, bool), String> = Default::default();
    for i in order {
        let r = &mut routes[i].1;
        let mut lost = None;
        r.listeners.retain(|l| {
            let key = (r.host.clone(), l.clone(), r.tls);
            match held.get(&key) {
                Some(first) => {
                    lost = Some(first.clone());
                    false
                }
                None => {
                    held.insert(key, r.route.clone());
                    true
                }
            }
        });
        if let (Some(first), true) = (lost, r.listeners.is_empty()) {
            r.applies = false;
            r.reason = Some(format!(
                "{first} comes first on the {} listeners of {}: istiod's filter chain follows the first route",
                if r.tls { "TLS" } else { "TCP" },
                r.host
            ));
        }
    }
}

/// Routes of one namespace for one parent, some on one of its ports and
/// some on none: istiod makes each set its own VirtualService for the
/// host (keys `NS/PORT/HOST` and `NS/HOST`, named after them:
/// `pilot/pkg/config/kube/gateway/route_collections.go`), orders them by
/// age, then name (`sortMergedVirtualServicesByCreationTime`,
/// `pilot/pkg/model/virtualservice_controller.go`, istio 1.31), and on
/// the port the first one's virtual host takes the domain
/// (`dedupeDomains`). So the older set wins the port (the port's on a
/// tie: its name sorts first); the routes on no port keep the parent's
/// other HTTP ports, and apply nowhere when it has none. Found by random
/// fidelity seed 10007 at bd9a6b7's generator.
fn port_first(snap: &MeshSnapshot, routes: &mut [(&VsInfo, RouteSeen)]) {
    // (namespace, host) -> parent port (None: every port) -> the rank of
    // that port's VirtualService: its oldest route, then its name.
    type Ranks = BTreeMap<Option<u32>, (crate::meta::Created, String)>;
    let mut sets: BTreeMap<(&str, &str), Ranks> = BTreeMap::new();
    for (vs, r) in routes.iter().filter(|(_, r)| r.applies && r.http) {
        let name = match r.port {
            Some(p) => format!("{}~{p}~{}", vs.namespace, r.host),
            None => format!("{}~{}", vs.namespace, r.host),
        };
        let set = sets.entry((&vs.namespace, &r.host)).or_default();
        let rank = set.entry(r.port).or_insert((vs.created, name));
        rank.0 = rank.0.min(vs.created);
    }
    let mut reasons: Vec<Option<String>> = vec![None; routes.len()];
    for (i, (vs, r)) in routes
        .iter()
        .enumerate()
        .filter(|(_, (_, r))| r.applies && r.http)
    {
        let (ns, host) = (vs.namespace.as_str(), r.host.as_str());
        let set = &sets[&(ns, host)];
        let Some(every) = set.get(&None) else {
            continue;
        };
        reasons[i] = match r.port {
            Some(p) => (every < &set[&Some(p)]).then(|| {
                format!("the routes for every port of {host} in {ns} are older and take port {p}'s virtual host")
            }),
            None => {
                let taken: Vec<u32> = set
                    .iter()
                    .filter(|(p, rank)| p.is_some() && *rank < every)
                    .filter_map(|(p, _)| *p)
                    .collect();
                (!taken.is_empty() && !other_http_port(snap, host, &taken)).then(|| {
                    format!("the routes for port {} of {host} in {ns} come first there, and {host} has no other HTTP port", taken[0])
                })
            }
        };
    }
    for ((_, r), reason) in routes.iter_mut().zip(reasons) {
        if let Some(reason) = reason {
            r.applies = false;
            r.reason = Some(reason);
        }
    }
}

/// The routes of one namespace for one host (and parent port), merged as
/// istiod merges them into one VirtualService (`mergeHTTPRoutes`,
/// `pilot/pkg/config/kube/gateway/route_collections.go`, istio 1.31): the
/// routes by age, then name; their rules in order, those that match
/// every request after the others (`sortHTTPRoutes`, `conversion.go`),
/// and nothing after the first of those (`route/route.go`). So only the
/// first catch-all rule's backends are routed to beside every other
/// rule's, and a route left with none gets no virtual host of its own.
/// Found by random fidelity seed 10005 at bd9a6b7 (two catch-all routes
/// for one parent: istiod routes the older one's backends only).
fn merge(routes: &mut [(&VsInfo, RouteSeen)]) {
    let mut order: Vec<usize> = (0..routes.len())
        .filter(|&i| routes[i].1.applies && routes[i].1.http)
        .collect();
    let key = |i: &usize| {
        let (vs, r) = &routes[*i];
        (
            vs.namespace.clone(),
            r.host.clone(),
            r.port,
            vs.created,
            r.route.clone(),
        )
    };
    order.sort_by_key(key);
    let mut first: std::collections::HashMap<(String, String, Option<u32>), String> =
        std::collections::HashMap::new();
    for i in order {
        let (vs, r) = &mut routes[i];
        let Some(origin) = &vs.route else { continue };
        let group = (vs.namespace.clone(), r.host.clone(), r.port);
        let mut clusters: BTreeSet<String> = BTreeSet::new();
        for rule in &origin.rules {
            if !rule.catch_all {
                clusters.extend(rule.clusters.iter().cloned());
            } else if !first.contains_key(&group) {
                clusters.extend(rule.clusters.iter().cloned());
                first.insert(group.clone(), r.route.clone());
            }
        }
        if let Some(winner) = first.get(&group).filter(|w| **w != r.route) {
            if clusters.is_empty() {
                r.applies = false;
                r.reason = Some(format!(
                    "merged with {winner} for {}, whose rule matching every request comes first",
                    r.host
                ));
            }
        }
        if !origin.rules.is_empty() {
            r.clusters = clusters.into_iter().collect();
        }
    }
}

/// An HTTP or gRPC route of the proxy's own namespace for a host (and the
/// same parent port) takes the host's virtual host: istiod selects the
/// gateway-semantics routes of the proxy's namespace before the others
/// (`SelectVirtualServices`, `pilot/pkg/model/virtualservice.go`) and
/// keeps the first virtual host for a domain (`dedupeDomains`,
/// `pilot/pkg/networking/core/httproute.go`, istio 1.31), so a consumer
/// route overrides the producer's there. Routes of one namespace for one
/// host are merged into one, as istiod merges them.
fn own_namespace_first(routes: &mut [(&VsInfo, RouteSeen)], ns: &str) {
    let owned: Vec<(String, Option<u32>)> = routes
        .iter()
        .filter(|(vs, r)| r.applies && r.http && vs.namespace == ns)
        .map(|(_, r)| (r.host.clone(), r.port))
        .collect();
    for (vs, r) in routes.iter_mut() {
        if r.applies && r.http && vs.namespace != ns && owned.contains(&(r.host.clone(), r.port)) {
            r.applies = false;
            r.reason = Some(format!(
                "a route of the proxy's own namespace {ns} for {} takes its virtual host",
                r.host
            ));
        }
    }
}

fn seen(
    snap: &MeshSnapshot,
    vis: &Visible,
    built: &OutboundListeners,
    vs: &VsInfo,
    host: &str,
) -> RouteSeen {
    let http = vs.http_route();
    let tls = vs
        .route
        .as_ref()
        .is_some_and(|r| r.kind == crate::gateway_api::RouteKind::Tls);
    let port = vs.route.as_ref().and_then(|r| r.port);
    let copies = snap.services_named(host);
    let listed = copies
        .iter()
        .any(|s| vis.services.contains_key(s) && !vis.pulled.contains_key(s));
    let listeners = match http {
        true => Some(Vec::new()),
        false => stream_listeners(snap, vis, built, copies, tls, port),
    };
    let reason = if !listed {
        Some(format!(
            "its parent {host} is not among the services the scope imports"
        ))
    } else if let Some(p) = port.filter(|&p| !listens_on(vis, copies, p)) {
        Some(format!(
            "it attaches to port {p} of {host}, which no egress listener of the scope serves"
        ))
    } else if http
        && !copies
            .iter()
            .any(|&s| vis.services.contains_key(&s) && has_http_port(snap, s, port))
    {
        Some(format!(
            "its parent {host} has no HTTP port: istiod sends HTTP routes only for HTTP (or sniffed) ports"
        ))
    } else if http
        && !copies
            .iter()
            .any(|&s| vis.services.contains_key(&s) && built.serves_http(s, port))
    {
        Some(format!(
            "no route configuration of the proxy holds a virtual host for {host}: no egress listener gives it an HTTP (or sniffed) port of its own"
        ))
    } else if !http && listeners.as_ref().is_some_and(Vec::is_empty) {
        Some(match (tls, stream_port(snap, copies, tls)) {
            (true, false) => format!("its parent {host} has no TLS or HTTPS port: istiod matches TLS routes only there"),
            (false, false) => format!("its parent {host} has no TCP (or sniffed) port: istiod applies TCP routes only there"),
            (_, true) => format!(
                "the proxy gets no outbound listener of {host} on the {} ports it would sit on",
                if tls { "TLS or HTTPS" } else { "TCP" }
            ),
        })
    } else if own_namespace_only(snap, vs, host) && vis.namespace != vs.namespace {
        Some(format!(
            "a consumer route applies only to proxies of its own namespace {}",
            vs.namespace
        ))
    } else {
        None
    };
    RouteSeen {
        route: vs.label(),
        host: host.to_string(),
        applies: reason.is_none(),
        reason,
        clusters: backend_clusters(vs).into_iter().collect(),
        port,
        http,
        listeners: listeners.unwrap_or_default(),
        tls,
    }
}

/// The outbound listeners a TCP or TLS route's filter chain sits on, as
/// `ADDRESS_PORT`: those on which the parent's copy the scope lists was
/// built with a TCP chain (a TCP or sniffed port) for a TCP route or a
/// TLS one (a TLS or HTTPS port) for a TLS route, on `port` when the route
/// names one ([`OutboundListeners::streams_of`]; `tls.go`, istio 1.31).
/// A listener istiod does not build for the proxy, or builds for another
/// service, carries no route (random fidelity seed 16 at a753530). `None`
/// for a headless parent, whose listeners are per endpoint (not compared).
fn stream_listeners(
    snap: &MeshSnapshot,
    vis: &Visible,
    built: &OutboundListeners,
    copies: &[crate::snapshot::SvcId],
    tls: bool,
    port: Option<u32>,
) -> Option<Vec<String>> {
    let Some(&s) = copies
        .iter()
        .find(|s| vis.services.contains_key(s) && !vis.pulled.contains_key(s))
    else {
        return Some(Vec::new());
    };
    let svc = &snap.services[s];
    if svc.addresses.is_empty() && svc.resolution == crate::snapshot::Resolution::Passthrough {
        return None;
    }
    let kind = if tls { Stream::Tls } else { Stream::Tcp };
    Some(built.streams_of(s, kind, port))
}

/// The cluster a gateway's HTTP or gRPC route names for a backend istiod
/// refused it (a Destination without a host: `GetDestinationCluster`,
/// `pilot/pkg/networking/core/route/route.go`, istio 1.31): requests
/// sent there fail.
pub const UNKNOWN_SERVICE: &str = "UnknownService";

/// The Gateway API routes a gateway's pod in `ns` with `labels` serves:
/// those bound to a Gateway API Gateway whose pods it is (the Gateway's
/// namespace, its name in [`crate::gateway_api::GATEWAY_NAME_LABEL`]),
/// one per hostname its Gateway's listeners admit
/// ([`crate::gateway_listeners`]), each routing to its permitted
/// backends' clusters, and to [`UNKNOWN_SERVICE`] for the refused ones.
/// A route not exported to the gateway's namespace does not apply.
/// istiod builds a router's RDS from the Gateways bound to it
/// (`buildGatewayHTTPRouteConfig`, `pilot/pkg/networking/core/gateway.go`,
/// istio 1.31).
pub fn served_routes(
    snap: &MeshSnapshot,
    ns: &str,
    labels: &crate::labels::Labels,
) -> Vec<RouteSeen> {
    let serves = |key: &str| {
        snap.gateways.iter().any(|g| {
            g.kube
                && g.foreign.is_none()
                && g.key() == key
                && g.namespace == ns
                && labels.get(crate::gateway_api::GATEWAY_NAME_LABEL) == Some(&g.name)
        })
    };
    let pod_ports = PodPorts::of(snap, ns, labels);
    let mut out: Vec<RouteSeen> = snap
        .virtual_services
        .iter()
        .filter(|vs| vs.route.is_some() && vs.gateways.iter().any(|g| serves(g)))
        .flat_map(|vs| {
            // istiod gives a route's VirtualService the mesh's default
            // exportTo and looks a gateway's up by its own namespace
            // (`VirtualServicesForGateway`, `pilot/pkg/model/push_context.go`,
            // istio 1.31; random fidelity seed 21 at ed37b57).
            let origin = vs.route.as_ref();
            let admitting = origin.map_or(&[][..], |o| &o.listener_ports[..]);
            let listens = pod_ports.listens_on(admitting);
            let hidden = (!vs.export.visible_to(ns)).then(|| {
                format!(
                    "the mesh's defaultVirtualServiceExportTo keeps the route in {} from the gateway's namespace {ns}",
                    vs.namespace
                )
            });
            let unserved = (!admitting.is_empty() && listens.is_empty()).then(|| {
                format!(
                    "no Service of the gateway's pod has port {}: istiod builds no listener for it",
                    join_ports(admitting)
                )
            });
            let reason = hidden.or(unserved);
            let mut clusters = backend_clusters(vs);
            // A refused backend's share goes to `UnknownService`, for TCP
            // and TLS routes too (random seeds 40004, 40014, 40033).
            if origin.is_some_and(|o| !o.refused.is_empty()) {
                clusters.insert(UNKNOWN_SERVICE.to_string());
            }
            // A TCP or TLS route's chains sit on the gateway's listener of
            // each port it listens on for an admitting listener
            // (`0.0.0.0_PORT`, `buildGatewayListeners`,
            // `pilot/pkg/networking/core/gateway.go`, istio 1.31).
            let listeners: Vec<String> = match vs.http_route() {
                true => Vec::new(),
                false => listens.iter().map(|p| format!("0.0.0.0_{p}")).collect(),
            };
            let tls = origin.is_some_and(|o| o.kind == crate::gateway_api::RouteKind::Tls);
            vs.hosts.iter().map(move |h| RouteSeen {
                route: vs.label(),
                host: h.clone(),
                applies: reason.is_none(),
                reason: reason.clone(),
                clusters: clusters.iter().cloned().collect(),
                port: None,
                http: vs.http_route(),
                listeners: listeners.clone(),
                tls,
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.route, &a.host).cmp(&(&b.route, &b.host)));
    out
}

/// The ports a gateway's pod listens on, by the port of its Services
/// (those of its namespace that select it): a Gateway listener's port
/// must be one, and the pod listens on its targetPort (`resolvePorts`,
/// `pilot/pkg/model/gateway.go`, istio 1.31). `None` when no Service in
/// the input selects the pod: each listener's own port, more in scope,
/// never less.
pub(crate) struct PodPorts(pub(crate) Option<BTreeMap<u32, BTreeSet<u32>>>);

impl PodPorts {
    pub(crate) fn of(snap: &MeshSnapshot, ns: &str, labels: &crate::labels::Labels) -> Self {
        let mut by_port: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
        let mut any = false;
        for &id in snap.services_in(ns) {
            let svc = &snap.services[id];
            let selects = svc
                .selector
                .as_ref()
                .is_some_and(|sel| !sel.is_empty() && crate::labels::selector_matches(sel, labels));
            if svc.kind != crate::snapshot::SvcKind::Kube || !selects {
                continue;
            }
            any = true;
            for p in &svc.ports {
                by_port.entry(p.number).or_default().insert(p.target_port);
            }
        }
        PodPorts(any.then_some(by_port))
    }

    /// The ports the pod listens on for Gateway listener ports `ports`.
    fn listens_on(&self, ports: &[u32]) -> Vec<u32> {
        let mut out: BTreeSet<u32> = BTreeSet::new();
        for p in ports {
            match &self.0 {
                None => {
                    out.insert(*p);
                }
                Some(by_port) => out.extend(by_port.get(p).into_iter().flatten()),
            }
        }
        out.into_iter().collect()
    }
}

fn join_ports(ports: &[u32]) -> String {
    let all: Vec<String> = ports.iter().map(u32::to_string).collect();
    all.join(" or ")
}

/// Whether a copy of the parent has a port a TLS route (`tls`) or a TCP
/// one could sit on, by its own protocol.
fn stream_port(snap: &MeshSnapshot, copies: &[crate::snapshot::SvcId], tls: bool) -> bool {
    copies
        .iter()
        .flat_map(|&s| &snap.services[s].ports)
        .any(|p| match tls {
            true => p.tls,
            false => !p.tls && matches!(p.protocol, Protocol::Tcp | Protocol::Auto),
        })
}

/// Whether an egress listener of `vis` serves one of `copies` on `port`:
/// a catch-all listener, or one bound to that port.
fn listens_on(vis: &Visible, copies: &[crate::snapshot::SvcId], port: u32) -> bool {
    vis.egress.iter().any(|l| {
        l.port.is_none_or(|lp| lp == port) && l.services.iter().any(|s| copies.contains(s))
    })
}

/// Whether a copy of `host` has an HTTP (or sniffed) port outside `taken`.
fn other_http_port(snap: &MeshSnapshot, host: &str, taken: &[u32]) -> bool {
    snap.services_named(host).iter().any(|&s| {
        snap.services[s].ports.iter().any(|p| {
            !taken.contains(&p.number) && matches!(p.protocol, Protocol::Http | Protocol::Auto)
        })
    })
}

/// Whether Service `s` has a port istiod builds HTTP routes for (`only`
/// that one, when given): an HTTP, HTTP2 or gRPC one, or one it sniffs
/// (`Protocol::Auto`).
fn has_http_port(snap: &MeshSnapshot, s: crate::snapshot::SvcId, only: Option<u32>) -> bool {
    snap.services[s]
        .ports
        .iter()
        .filter(|p| only.is_none_or(|n| p.number == n))
        .any(|p| matches!(p.protocol, Protocol::Http | Protocol::Auto))
}

/// The clusters route `vs`'s rules name: one per backend with a port,
/// `outbound|PORT||HOST`.
pub fn backend_clusters(vs: &VsInfo) -> BTreeSet<String> {
    vs.dests
        .iter()
        .filter_map(|d| d.port.map(|p| format!("outbound|{p}||{}", d.host)))
        .collect()
}

/// Whether route `vs` for `parent` applies only to proxies of the route's
/// own namespace: an HTTP or gRPC route none of whose parent's copies is
/// in that namespace (a consumer route).
pub fn own_namespace_only(snap: &MeshSnapshot, vs: &VsInfo, parent: &str) -> bool {
    vs.http_route()
        && !snap
            .services_named(parent)
            .iter()
            .any(|&s| snap.services[s].namespace == vs.namespace)
}

/// MS0024 for each route bound to a Gateway, in a namespace `in_scope`
/// accepts, that sends requests to another namespace's backend no
/// ReferenceGrant permits: istiod drops that backend from the route (its
/// share of requests through the gateway fails).
pub fn refused_backends(
    snap: &MeshSnapshot,
    in_scope: impl Fn(&str) -> bool,
) -> Vec<crate::finding::Finding> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for vs in snap
        .virtual_services
        .iter()
        .filter(|v| in_scope(&v.namespace))
    {
        let Some(origin) = vs.route.as_ref().filter(|o| !o.refused.is_empty()) else {
            continue;
        };
        if !seen.insert((vs.namespace.as_str(), origin.kind, origin.name.as_str())) {
            continue;
        }
        let kind = origin.kind.as_str();
        let ns = &vs.namespace;
        let list = origin.refused.join(", ");
        out.push(crate::finding::finding(
            Code::RouteWithoutReferenceGrant,
            kind,
            ns,
            &origin.name,
            format!(
                "{kind} {ns}/{}, bound to Gateway {}, sends requests to {list} in another namespace, and no ReferenceGrant there permits {kind}s from namespace {ns}: istiod routes its share of the requests to a cluster named UnknownService, and they fail; add a ReferenceGrant in that namespace (from: group gateway.networking.k8s.io, kind {kind}, namespace {ns}; to: group \"\", kind Service)",
                origin.name,
                vs.gateways.join(", ")
            ),
        ));
    }
    out
}

/// The Gateway API routes a proxy gets: for a sidecar, the mesh routes
/// its scope selects; for a router proxy, the routes of the Gateways it
/// serves ([`served_routes`]), the mesh routes
/// listed as not applying there (istiod builds a gateway's RDS from its
/// Gateways alone: `buildGatewayHTTPRouteConfig`,
/// `pilot/pkg/networking/core/gateway.go`, istio 1.31). A waypoint is left
/// as its scope gives (not checked against istiod). `built`: the outbound
/// listeners the proxy gets ([`MeshSnapshot::outbound_listeners`]).
pub fn routes_for(
    snap: &MeshSnapshot,
    vis: &Visible,
    gateway: Option<crate::inject::Gateway>,
    labels: &crate::labels::Labels,
    built: &OutboundListeners,
) -> Vec<RouteSeen> {
    let mut routes = routes_seen(snap, vis, built);
    if gateway == Some(crate::inject::Gateway::Router) {
        for r in &mut routes {
            r.applies = false;
            r.reason = Some(
                "a router proxy gets the routes of the Gateways it serves, not mesh routes".into(),
            );
        }
        routes.extend(served_routes(snap, &vis.namespace, labels));
        routes.extend(istio_gateway_routes(snap, &vis.namespace, labels));
    }
    routes
}

/// The VirtualServices bound to the Istio Gateways a router proxy with
/// `labels` in `ns` serves: each host a server of such a Gateway admits
/// gets a virtual host, if the VirtualService is exported to `ns`
/// (`VirtualServicesForGateway`, push_context.go; `buildGatewayHTTPRouteConfig`,
/// `pilot/pkg/networking/core/gateway.go`, istio 1.31). A server host
/// `ns/host` admits VirtualServices of that namespace only (`.`: the
/// Gateway's, `*`: any).
pub fn istio_gateway_routes(
    snap: &MeshSnapshot,
    ns: &str,
    labels: &crate::labels::Labels,
) -> Vec<RouteSeen> {
    let served: Vec<&crate::snapshot::GatewayInfo> =
        crate::gateway_clusters::served_gateways(snap, ns, labels)
            .into_iter()
            .filter(|g| !g.kube)
            .collect();
    let mut out = Vec::new();
    for vs in snap.virtual_services.iter().filter(|v| v.route.is_none()) {
        let bound: Vec<_> = served
            .iter()
            .filter(|g| vs.gateways.contains(&g.key()))
            .collect();
        if bound.is_empty() {
            continue;
        }
        let hidden = (!vs.export.visible_to(ns))
            .then(|| format!("its exportTo keeps it from the gateway's namespace {ns}"));
        for h in &vs.hosts {
            // Every host of an HTTP server that intersects it.
            let domains: BTreeSet<String> = bound
                .iter()
                .flat_map(|g| {
                    g.servers
                        .iter()
                        .filter(|s| s.routes_http())
                        .flat_map(move |s| s.hosts.iter().map(move |sh| (*g, sh)))
                })
                .filter_map(|(g, sh)| server_admits(sh, &g.namespace, &vs.namespace, h))
                .collect();
            let reason = hidden.clone().or_else(|| {
                domains
                    .is_empty()
                    .then(|| format!("no HTTP server of {} admits host {h}", join_keys(&bound)))
            });
            let seen = |host: String| RouteSeen {
                route: vs.label(),
                host,
                applies: reason.is_none(),
                reason: reason.clone(),
                clusters: backend_clusters(vs).into_iter().collect(),
                port: None,
                http: true,
                listeners: Vec::new(),
                tls: false,
            };
            match domains.is_empty() {
                true => out.push(seen(h.clone())),
                false => out.extend(domains.into_iter().map(seen)),
            }
        }
    }
    out.sort_by(|a, b| (&a.route, &a.host).cmp(&(&b.route, &b.host)));
    out
}

fn join_keys(gws: &[&&crate::snapshot::GatewayInfo]) -> String {
    let keys: Vec<String> = gws.iter().map(|g| format!("Gateway {}", g.key())).collect();
    keys.join(", ")
}

/// The virtual host's domain when server host `server` (`[ns/]host`) of
/// a Gateway in `gw_ns` admits host `host` of a VirtualService in
/// `vs_ns`: the more specific of the two.
pub(crate) fn server_admits(server: &str, gw_ns: &str, vs_ns: &str, host: &str) -> Option<String> {
    let (ns, sh) = server.split_once('/').unwrap_or(("*", server));
    let ns_ok = match ns {
        "*" => true,
        "." => vs_ns == gw_ns,
        n => n == vs_ns,
    };
    if !ns_ok {
        return None;
    }
    let covers = |wide: &str, narrow: &str| {
        wide == "*"
            || wide == narrow
            || wide
                .strip_prefix('*')
                .is_some_and(|suffix| narrow.ends_with(suffix) && narrow.len() > suffix.len())
    };
    match (covers(sh, host), covers(host, sh)) {
        (true, _) => Some(host.to_string()),
        (false, true) => Some(sh.to_string()),
        _ => None,
    }
}
