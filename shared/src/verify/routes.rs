//! Comparing the Gateway API HTTP and gRPC mesh routes `explain` predicts
//! for a proxy with the virtual hosts istiod sends it (`/debug/config_dump`'s
//! RouteConfigurations): a route that applies gives its parent's host a
//! virtual host whose routes name exactly its backends' clusters
//! (`crate::gateway_routes`); a route that does not apply leaves none of
//! its backends in the host's virtual host.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::{Generated, TcpChain};
use crate::gateway_routes::{backend_clusters, own_namespace_only, RouteSeen};
use crate::snapshot::{MeshSnapshot, VsInfo};

/// A host whose routes meshscope predicts otherwise than istiod sends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RouteDiff {
    /// The host the routes are for (their parent's).
    pub host: String,
    /// The routes for it the proxy's scope selects, `HTTPRoute ns/name`.
    pub routes: Vec<String>,
    /// The clusters the host's virtual host names, as predicted; `None`:
    /// no route applies, so none of the routes' backends.
    pub predicted: Option<Vec<String>>,
    /// The clusters istiod's virtual host for the host names; `None`: it
    /// sends no virtual host for the host.
    pub istiod: Option<Vec<String>>,
    /// For TCP and TLS routes: the listeners compared (their filter
    /// chains' TCP proxies stand for the virtual host).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<String>,
}

impl RouteDiff {
    /// One line: what istiod routes the host to, and what was predicted.
    pub fn describe(&self) -> String {
        let list = |c: &Option<Vec<String>>, none: &str| match c {
            Some(c) if !c.is_empty() => c.join(", "),
            Some(_) => "no cluster".to_string(),
            None => none.to_string(),
        };
        let (on, nothing) = match self.listeners.is_empty() {
            true => (String::new(), "nothing (no virtual host)"),
            false => (
                format!(" on {}", self.listeners.join(", ")),
                "nothing (no filter chain)",
            ),
        };
        format!(
            "routes for {} ({}){on}: istiod routes to {}; meshscope predicts {}",
            self.host,
            self.routes.join(", "),
            list(&self.istiod, nothing),
            list(&self.predicted, "none of the routes' backends"),
        )
    }
}

/// The hosts of `seen` where prediction and what istiod generated
/// disagree: for HTTP and gRPC routes the virtual hosts, over every port's
/// route configuration or only the port the host's routes all attach to;
/// for TCP and TLS routes the TCP proxies of the filter chains on their
/// listeners (a TLS route's: those matching the host's name).
pub fn route_diffs(seen: &[RouteSeen], g: &Generated) -> Vec<RouteDiff> {
    let mut by_host: BTreeMap<(&str, bool, bool), Vec<&RouteSeen>> = BTreeMap::new();
    for r in seen {
        by_host.entry((&r.host, r.http, r.tls)).or_default().push(r);
    }
    by_host
        .into_iter()
        .filter_map(|((host, http, tls), routes)| {
            if !http {
                // A route with no listener (a headless parent's, or one
                // bound to a Gateway not in the input) is not compared.
                if routes.iter().all(|r| r.listeners.is_empty()) {
                    return None;
                }
                let actual = stream_clusters(g, host, tls, &routes);
                return diff(host, &routes, actual.as_ref());
            }
            let port = routes[0]
                .port
                .filter(|p| routes.iter().all(|r| r.port == Some(*p)));
            let actual = match port {
                Some(p) => g.port_virtual_hosts.get(&(p, host.to_string())),
                None => g.virtual_hosts.get(host),
            };
            diff(host, &routes, actual)
        })
        .collect()
}

/// The clusters the TCP proxies on `routes`' listeners name: a TLS
/// route's chains that match `host` by name, a TCP route's that match no
/// name; `None` when there is none.
fn stream_clusters(
    g: &Generated,
    host: &str,
    tls: bool,
    routes: &[&RouteSeen],
) -> Option<BTreeSet<String>> {
    let listeners: BTreeSet<&String> = routes.iter().flat_map(|r| &r.listeners).collect();
    let chains: Vec<&TcpChain> = listeners
        .into_iter()
        .filter_map(|l| g.tcp_chains.get(l))
        .flatten()
        .filter(|c| match tls {
            true => c.server_names.iter().any(|n| n == host),
            false => c.server_names.is_empty(),
        })
        .collect();
    (!chains.is_empty()).then(|| {
        chains
            .iter()
            .flat_map(|c| c.clusters.iter().cloned())
            .collect()
    })
}

fn diff(host: &str, routes: &[&RouteSeen], actual: Option<&BTreeSet<String>>) -> Option<RouteDiff> {
    let applied: Vec<&&RouteSeen> = routes.iter().filter(|r| r.applies).collect();
    let predicted: Option<BTreeSet<String>> = (!applied.is_empty()).then(|| {
        applied
            .iter()
            .flat_map(|r| r.clusters.iter().cloned())
            .collect()
    });
    let agrees = match (&predicted, actual) {
        (Some(p), Some(a)) => p == a,
        (Some(_), None) => false,
        // No route applies: istiod's virtual host for the host (its
        // default one, if any) names none of the routes' backends other
        // than the host's own cluster.
        (None, a) => {
            let own = format!("||{host}");
            !routes
                .iter()
                .flat_map(|r| &r.clusters)
                .filter(|c| !c.ends_with(&own))
                .any(|c| a.is_some_and(|a| a.contains(c)))
        }
    };
    (!agrees).then(|| RouteDiff {
        host: host.to_string(),
        routes: routes.iter().map(|r| r.route.clone()).collect(),
        predicted: predicted.map(|p| p.into_iter().collect()),
        istiod: actual.map(|a| a.iter().cloned().collect()),
        listeners: routes
            .iter()
            .flat_map(|r| r.listeners.iter().cloned())
            .collect::<BTreeSet<String>>()
            .into_iter()
            .collect(),
    })
}

/// A name the workload called that a Gateway API HTTP or gRPC mesh route
/// routes, where istiod sends the proxy no virtual host routing it to any
/// of the route's backends: its requests skip the route (or find no
/// route at all).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MissingRoute {
    /// The name as the workload dialled it (`a.app`).
    pub dialled: String,
    /// The host it stands for, the routes' parent.
    pub host: String,
    /// The routes for it that apply to the proxy's namespace.
    pub routes: Vec<String>,
}

/// The called names of a workload in `ns` (`dialled`) whose mesh routes
/// istiod does not send it (`virtual_hosts`: domain → clusters).
pub fn missing_routes(
    snap: &MeshSnapshot,
    ns: &str,
    dialled: &BTreeSet<String>,
    virtual_hosts: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<MissingRoute> {
    let mut out = Vec::new();
    for d in dialled {
        for host in snap.dialled_hosts(d, ns) {
            let routes: Vec<&VsInfo> = snap
                .virtual_services
                .iter()
                .filter(|vs| routes_for(snap, vs, &host, ns))
                .collect();
            if routes.is_empty() {
                continue;
            }
            let backends: BTreeSet<String> =
                routes.iter().flat_map(|vs| backend_clusters(vs)).collect();
            let routed = [d, &host]
                .iter()
                .filter_map(|n| virtual_hosts.get(n.as_str()))
                .any(|c| !c.is_disjoint(&backends));
            if !routed {
                out.push(MissingRoute {
                    dialled: d.clone(),
                    host: host.clone(),
                    routes: routes.iter().map(|vs| vs.label()).collect(),
                });
            }
        }
    }
    out
}

/// Whether `vs` is an HTTP or gRPC mesh route for `host` that applies to
/// proxies of `ns`: visible there, and a consumer route only in its own
/// namespace.
fn routes_for(snap: &MeshSnapshot, vs: &VsInfo, host: &str, ns: &str) -> bool {
    vs.http_route()
        && vs.mesh_bound
        && vs.hosts.iter().any(|h| h == host)
        && vs.export.visible_to(ns)
        && (vs.namespace == ns || !own_namespace_only(snap, vs, host))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "a.app.svc.cluster.local";

    fn cl(h: &str) -> String {
        format!("outbound|80||{h}.app.svc.cluster.local")
    }

    fn seen(applies: bool, backends: &[&str]) -> RouteSeen {
        RouteSeen {
            route: "HTTPRoute app/split".into(),
            host: A.into(),
            applies,
            reason: (!applies).then(|| "why".into()),
            clusters: backends.iter().map(|b| cl(b)).collect(),
            port: None,
            http: true,
            listeners: Vec::new(),
            tls: false,
        }
    }

    fn vhs(clusters: &[&str]) -> Generated {
        Generated {
            virtual_hosts: BTreeMap::from([(
                A.to_string(),
                clusters.iter().map(|b| cl(b)).collect(),
            )]),
            ..Generated::default()
        }
    }

    #[test]
    fn a_route_that_applies_must_get_exactly_its_backends() {
        let r = [seen(true, &["b", "c"])];
        assert!(route_diffs(&r, &vhs(&["b", "c"])).is_empty());
        let lost = route_diffs(&r, &Generated::default());
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].istiod, None);
        assert!(
            lost[0].describe().contains("istiod routes to nothing"),
            "{}",
            lost[0].describe()
        );
        // The host's default virtual host instead of the route: lost too.
        let d = route_diffs(&r, &vhs(&["a"]));
        assert_eq!(d[0].istiod, Some(vec![cl("a")]));
        assert_eq!(d[0].predicted, Some(vec![cl("b"), cl("c")]));
    }

    #[test]
    fn a_route_that_does_not_apply_must_leave_its_backends_out() {
        let r = [seen(false, &["a", "b"])];
        assert!(route_diffs(&r, &Generated::default()).is_empty());
        assert!(route_diffs(&r, &vhs(&["a"])).is_empty());
        let d = route_diffs(&r, &vhs(&["a", "b"]));
        assert_eq!(d.len(), 1);
        assert!(d[0].describe().contains("none of the routes' backends"));
    }

    #[test]
    fn routes_merged_for_one_host_are_compared_together() {
        let mut other = seen(true, &["c"]);
        other.route = "HTTPRoute front/other".into();
        let r = [seen(true, &["b"]), other.clone(), seen(false, &["d"])];
        assert!(route_diffs(&r, &vhs(&["b", "c"])).is_empty());
        let d = route_diffs(&r, &vhs(&["b"]));
        assert_eq!(d[0].routes.len(), 3);
    }

    #[test]
    fn a_route_on_one_port_is_compared_with_that_ports_virtual_host() {
        let mut r = seen(true, &["b"]);
        r.port = Some(80);
        // Port 8080's default virtual host names a's own cluster there.
        let mut g = vhs(&["b"]);
        g.virtual_hosts
            .get_mut(A)
            .unwrap()
            .insert("outbound|8080||a.app.svc.cluster.local".into());
        g.port_virtual_hosts
            .insert((80, A.to_string()), BTreeSet::from([cl("b")]));
        assert!(route_diffs(std::slice::from_ref(&r), &g).is_empty());
        r.port = None;
        assert_eq!(route_diffs(&[r], &g).len(), 1);
    }

    #[test]
    fn tcp_routes_are_not_compared_with_http_routes() {
        let mut tcp = seen(true, &["b"]);
        tcp.http = false;
        assert!(route_diffs(&[tcp], &Generated::default()).is_empty());
    }
}
