//! The listeners and route configurations istiod builds for a router
//! proxy from the servers of the Gateways it serves (a Gateway API
//! listener becomes a server): one listener `0.0.0.0_PORT` per port the
//! pod listens on for them, a route configuration `http.PORT` per plain
//! HTTP port and `https.PORT.NAME.GATEWAY.NAMESPACE` per terminated HTTPS
//! server (`mergeGateways`, `resolvePorts` and `gatewayRDSRouteName`,
//! `pilot/pkg/model/gateway.go`; `buildGatewayListeners`,
//! `pilot/pkg/networking/core/gateway.go`, istio 1.31). A TCP or TLS
//! port's listener exists only with a filter chain: a route for it, or,
//! passing TLS through by SNI (`AUTO_PASSTHROUGH`), a Service to send to.
//! `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG` does not change them.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::gateway_routes::{PodPorts, RouteSeen};
use crate::labels::Labels;
use crate::snapshot::{GatewayInfo, MeshSnapshot, ServerInfo};

/// A router proxy's listeners and route configurations, by name.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct GatewayConfig {
    pub listeners: Vec<String>,
    pub routes: Vec<String>,
}

/// How istiod serves one server.
enum Kind {
    /// Plain HTTP (HTTP, HTTP2, gRPC): a route configuration per port.
    Http,
    /// HTTPS terminated at the gateway: a route configuration per server.
    Https,
    /// TCP, or TLS (terminated or passed through): filter chains only.
    Stream,
}

fn kind(s: &ServerInfo) -> Kind {
    match (s.plain_http(), s.terminated_https()) {
        (true, _) => Kind::Http,
        (_, true) => Kind::Https,
        _ => Kind::Stream,
    }
}

/// The ports the pod listens on for server port `port` of `g`: an Istio
/// Gateway (selected by labels) takes the targetPort of the first of the
/// pod's Service ports with that number, else the port itself; a Gateway
/// API one every such targetPort, and none without one (`resolvePorts`).
fn resolved(g: &GatewayInfo, pod: &PodPorts, port: u32) -> Vec<u32> {
    let targets = pod.0.as_ref().and_then(|m| m.get(&port));
    match (g.kube, targets) {
        (_, Some(t)) if !g.kube => t.iter().next().copied().into_iter().collect(),
        (_, Some(t)) => t.iter().copied().collect(),
        (false, None) => vec![port],
        (true, None) if pod.0.is_none() => vec![port],
        (true, None) => Vec::new(),
    }
}

/// The listeners and route configurations of a router proxy with
/// `labels` in `ns`, given the routes it gets (`routes`, for Gateway API
/// TCP and TLS routes' listeners) and its SNI-DNAT clusters
/// (`sni_dnat`).
pub fn gateway_config(
    snap: &MeshSnapshot,
    ns: &str,
    labels: &Labels,
    routes: &[RouteSeen],
    sni_dnat: &[String],
) -> GatewayConfig {
    let pod = PodPorts::of(snap, ns, labels);
    let mut listeners = BTreeSet::new();
    let mut names = BTreeSet::new();
    for g in crate::gateway_clusters::served_gateways(snap, ns, labels) {
        for s in &g.servers {
            for p in resolved(g, &pod, s.port) {
                let listener = format!("0.0.0.0_{p}");
                match kind(s) {
                    Kind::Http => {
                        names.insert(format!("http.{p}"));
                    }
                    Kind::Https => {
                        names.insert(format!(
                            "https.{}.{}.{}.{}",
                            s.port, s.name, g.name, g.namespace
                        ));
                    }
                    Kind::Stream if !chained(snap, ns, g, s, &listener, routes, sni_dnat) => {
                        continue;
                    }
                    Kind::Stream => {}
                }
                listeners.insert(listener);
            }
        }
    }
    GatewayConfig {
        listeners: listeners.into_iter().collect(),
        routes: names.into_iter().collect(),
    }
}

/// Whether stream server `s` of `g` gets a filter chain on `listener` of
/// a proxy in `ns`: passing TLS through by SNI, when there is a Service to
/// send to; for a Gateway API listener, when a route applies on it; for an
/// Istio Gateway's, when a VirtualService bound to it, exported to `ns`,
/// with a host the server admits, has a `tcp` or `tls` route for its port
/// (`VirtualServicesForGateway`, push_context.go;
/// `buildGatewayNetworkFiltersFromTCPRoutes`, `networking/core/gateway.go`,
/// istio 1.31; random seed 5006).
fn chained(
    snap: &MeshSnapshot,
    ns: &str,
    g: &GatewayInfo,
    s: &ServerInfo,
    listener: &str,
    routes: &[RouteSeen],
    sni_dnat: &[String],
) -> bool {
    if s.tls_mode.as_deref() == Some("AUTO_PASSTHROUGH") {
        return !sni_dnat.is_empty();
    }
    if g.kube {
        return routes
            .iter()
            .any(|r| r.applies && r.listeners.iter().any(|l| l == listener));
    }
    let key = g.key();
    snap.virtual_services.iter().any(|vs| {
        let admitted = vs.hosts.iter().any(|h| {
            s.hosts.iter().any(|sh| {
                crate::gateway_routes::server_admits(sh, &g.namespace, &vs.namespace, h).is_some()
            })
        });
        vs.gateways.contains(&key)
            && vs.export.visible_to(ns)
            && admitted
            && vs
                .stream_ports
                .iter()
                .any(|sp| sp.is_none_or(|n| n == s.port))
    })
}
