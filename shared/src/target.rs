//! What `impact` takes a change to: `service/NAME`, `virtualservice/NAME`,
//! a Gateway API route, `gateway/NAME`, ... as kubectl names objects, and
//! where such an object is.

use crate::gateway_api::RouteKind;
use crate::snapshot::{MeshSnapshot, SvcKind};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Service {
        namespace: String,
        name: String,
    },
    ServiceEntry {
        namespace: String,
        name: String,
    },
    VirtualService {
        namespace: String,
        name: String,
    },
    DestinationRule {
        namespace: String,
        name: String,
    },
    /// A Gateway API route: the VirtualServices istiod makes of it.
    Route {
        kind: RouteKind,
        namespace: String,
        name: String,
    },
    /// A Gateway of either API (istio's or the Gateway API's).
    Gateway {
        namespace: String,
        name: String,
    },
}

impl Target {
    /// Parses `service/NAME` (also `svc/`, `serviceentry/`, `se/`,
    /// `virtualservice/`, `vs/`, `destinationrule/`, `dr/`, `httproute/`,
    /// `grpcroute/`, `tcproute/`, `tlsroute/`, `gateway/`, `gtw/`, `gw/`).
    pub fn parse(s: &str, namespace: &str) -> Option<Self> {
        let (kind, name) = s.split_once('/')?;
        let (namespace, name) = (namespace.to_string(), name.to_string());
        let lower = kind.to_ascii_lowercase();
        if let Some(kind) = RouteKind::ALL
            .into_iter()
            .find(|k| lower == k.singular() || lower == k.plural())
        {
            return Some(Target::Route {
                kind,
                namespace,
                name,
            });
        }
        Some(match lower.as_str() {
            "service" | "services" | "svc" => Target::Service { namespace, name },
            "serviceentry" | "serviceentries" | "se" => Target::ServiceEntry { namespace, name },
            "virtualservice" | "virtualservices" | "vs" => {
                Target::VirtualService { namespace, name }
            }
            "destinationrule" | "destinationrules" | "dr" => {
                Target::DestinationRule { namespace, name }
            }
            "gateway" | "gateways" | "gtw" | "gw" => Target::Gateway { namespace, name },
            _ => return None,
        })
    }

    pub fn namespace(&self) -> &str {
        match self {
            Target::Service { namespace, .. }
            | Target::ServiceEntry { namespace, .. }
            | Target::VirtualService { namespace, .. }
            | Target::DestinationRule { namespace, .. }
            | Target::Route { namespace, .. }
            | Target::Gateway { namespace, .. } => namespace,
        }
    }

    /// The namespaces that hold an object of this kind and name.
    pub fn namespaces_in(&self, snap: &MeshSnapshot) -> Vec<String> {
        let mut out: Vec<String> = match self {
            Target::Service { name, .. } | Target::ServiceEntry { name, .. } => {
                let kind = if matches!(self, Target::Service { .. }) {
                    SvcKind::Kube
                } else {
                    SvcKind::Entry
                };
                snap.services
                    .iter()
                    .filter(|s| s.kind == kind && &s.name == name)
                    .map(|s| s.namespace.clone())
                    .collect()
            }
            Target::VirtualService { name, .. } => snap
                .virtual_services
                .iter()
                .filter(|v| &v.name == name)
                .map(|v| v.namespace.clone())
                .collect(),
            Target::DestinationRule { name, .. } => snap
                .destination_rules
                .iter()
                .filter(|d| &d.name == name)
                .map(|d| d.namespace.clone())
                .collect(),
            Target::Route { kind, name, .. } => snap
                .virtual_services
                .iter()
                .filter(|v| is_route(v, *kind, name))
                .map(|v| v.namespace.clone())
                .collect(),
            Target::Gateway { name, .. } => snap
                .gateways
                .iter()
                .filter(|g| &g.name == name)
                .map(|g| g.namespace.clone())
                .collect(),
        };
        out.sort();
        out.dedup();
        out
    }

    /// The same target in another namespace.
    pub fn in_namespace(&self, ns: &str) -> Target {
        let mut t = self.clone();
        match &mut t {
            Target::Service { namespace, .. }
            | Target::ServiceEntry { namespace, .. }
            | Target::VirtualService { namespace, .. }
            | Target::DestinationRule { namespace, .. }
            | Target::Route { namespace, .. }
            | Target::Gateway { namespace, .. } => *namespace = ns.to_string(),
        }
        t
    }

    pub fn describe(&self) -> String {
        match self {
            Target::Service { namespace, name } => format!("service/{name} -n {namespace}"),
            Target::ServiceEntry { namespace, name } => {
                format!("serviceentry/{name} -n {namespace}")
            }
            Target::VirtualService { namespace, name } => {
                format!("virtualservice/{name} -n {namespace}")
            }
            Target::DestinationRule { namespace, name } => {
                format!("destinationrule/{name} -n {namespace}")
            }
            Target::Route {
                kind,
                namespace,
                name,
            } => format!("{}/{name} -n {namespace}", kind.singular()),
            Target::Gateway { namespace, name } => format!("gateway/{name} -n {namespace}"),
        }
    }
}

/// Whether `vs` is one istiod made of route `kind`/`name`.
pub(crate) fn is_route(vs: &crate::snapshot::VsInfo, kind: RouteKind, name: &str) -> bool {
    vs.route
        .as_ref()
        .is_some_and(|r| r.kind == kind && r.name == name)
}
