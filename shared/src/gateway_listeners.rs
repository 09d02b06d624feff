//! Which listener of a Gateway API `Gateway` admits a route bound to it,
//! and for which hostnames, as istiod 1.31 decides
//! (`referenceAllowed`, `namespacesFromSelector`, `buildHostnameMatch`
//! in `pilot/pkg/config/kube/gateway/conversion.go`;
//! `GenerateGatewaySupportedKinds` in
//! `pilot/pkg/config/kube/gatewaycommon/conversion.go`). A listener
//! admits a route when all of these hold:
//!
//! - the parentRef's `port` and `sectionName`, when given, are the
//!   listener's;
//! - one of the route's hostnames (`*` for none) overlaps the listener's
//!   `hostname` (none: any);
//! - the route's namespace is allowed (`allowedRoutes.namespaces.from`:
//!   `Same`, the default, `All`, or `Selector` over the namespace's labels
//!   with `kubernetes.io/metadata.name` implied);
//! - its kind is one the listener's protocol supports (HTTP and HTTPS:
//!   HTTPRoute and GRPCRoute; TCP: TCPRoute; TLS: TLSRoute, and TCPRoute
//!   when it terminates TLS), narrowed by `allowedRoutes.kinds`.
//!
//! The route's virtual hosts on the gateway are its hostnames that
//! overlap an admitting listener's, or that listener's hostname for a
//! route without one.

use crate::gateway_api::{Listener, ParentRef, RouteKind, GATEWAY_API_GROUP};
use crate::host::hosts_overlap;
use crate::labels::Labels;

/// The route as a Gateway's listeners see it.
pub struct Attaching<'a> {
    pub kind: RouteKind,
    pub namespace: &'a str,
    /// The route namespace's labels.
    pub namespace_labels: &'a Labels,
    pub hostnames: &'a [String],
}

/// Where a route binds on a Gateway: the hostnames it gets virtual hosts
/// for, and the ports of the listeners that admit it (where a TCP or TLS
/// route's filter chains sit on the gateway's pods).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Admitted {
    pub hosts: Vec<String>,
    pub ports: Vec<u32>,
}

/// Where route `r` binds on a Gateway in `gw_ns` with `listeners`,
/// through `parent`; `None` when no listener admits it.
pub fn admitted_hosts(
    listeners: &[Listener],
    gw_ns: &str,
    parent: &ParentRef,
    r: &Attaching<'_>,
) -> Option<Admitted> {
    let route_hosts: Vec<String> = match r.hostnames.is_empty() {
        true => vec!["*".to_string()],
        false => r.hostnames.to_vec(),
    };
    let mut out = Admitted::default();
    let mut admitted = false;
    for l in listeners.iter().filter(|l| admits(l, gw_ns, parent, r)) {
        let hosts: Vec<String> = match &l.hostname {
            None => route_hosts.clone(),
            Some(lh) => route_hosts
                .iter()
                .filter(|h| hosts_overlap(h, lh))
                .map(|h| narrower(h, lh))
                .collect(),
        };
        if hosts.is_empty() {
            continue;
        }
        admitted = true;
        if !out.ports.contains(&l.port) {
            out.ports.push(l.port);
        }
        for h in hosts {
            if !out.hosts.contains(&h) {
                out.hosts.push(h);
            }
        }
    }
    admitted.then_some(out)
}

/// Whether listener `l` admits the route through `parent` (hostnames
/// aside).
fn admits(l: &Listener, gw_ns: &str, parent: &ParentRef, r: &Attaching<'_>) -> bool {
    parent.port.is_none_or(|p| p == l.port)
        && parent.section_name.as_ref().is_none_or(|s| *s == l.name)
        && namespace_allowed(l, gw_ns, r)
        && supported_kinds(l).contains(&r.kind)
}

/// The label every namespace carries with its name, implied when absent
/// (`toNamespaceSet`, `conversion.go`).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Whether listener `l` of a Gateway in `gw_ns` lets objects of
/// namespace `ns` (with `labels`) attach: its `allowedRoutes.namespaces`.
pub fn allows_namespace(l: &Listener, gw_ns: &str, ns: &str, labels: &Labels) -> bool {
    let r = Attaching {
        kind: RouteKind::Http,
        namespace: ns,
        namespace_labels: labels,
        hostnames: &[],
    };
    namespace_allowed(l, gw_ns, &r)
}

fn namespace_allowed(l: &Listener, gw_ns: &str, r: &Attaching<'_>) -> bool {
    let ns = l
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    match ns.and_then(|n| n.from.as_deref()) {
        None | Some("Same") => r.namespace == gw_ns,
        Some("All") => true,
        Some("Selector") => match ns.and_then(|n| n.selector.clone()) {
            // No selector: istiod allows every namespace.
            None => true,
            Some(sel) => {
                let mut labels = r.namespace_labels.clone();
                labels
                    .entry(NAMESPACE_NAME_LABEL.to_string())
                    .or_insert_with(|| r.namespace.to_string());
                sel.parse().matches(&labels)
            }
        },
        Some(_) => false,
    }
}

/// The route kinds listener `l` admits.
fn supported_kinds(l: &Listener) -> Vec<RouteKind> {
    let terminates = l
        .tls
        .as_ref()
        .and_then(|t| t.mode.as_deref())
        .is_some_and(|m| m == "Terminate");
    let supported = match l.protocol.as_str() {
        "HTTP" | "HTTPS" => vec![RouteKind::Http, RouteKind::Grpc],
        "TCP" => vec![RouteKind::Tcp],
        "TLS" if terminates => vec![RouteKind::Tls, RouteKind::Tcp],
        "TLS" => vec![RouteKind::Tls],
        _ => Vec::new(),
    };
    let Some(kinds) = l.allowed_routes.as_ref().map(|a| &a.kinds) else {
        return supported;
    };
    if kinds.is_empty() {
        return supported;
    }
    supported
        .into_iter()
        .filter(|k| {
            kinds.iter().any(|g| {
                g.kind == k.as_str()
                    && g.group.as_deref().unwrap_or(GATEWAY_API_GROUP) == GATEWAY_API_GROUP
            })
        })
        .collect()
}

/// Of two overlapping hostnames, the narrower: the domain a virtual host
/// for both serves.
fn narrower(a: &str, b: &str) -> String {
    match crate::host::host_subset_of(a, b) {
        true => a.to_string(),
        false => b.to_string(),
    }
}
