//! What istiod sends an ambient waypoint's proxy (a pod whose
//! `istio-proxy` runs `proxy waypoint`; node type `waypoint`), as istio
//! 1.31 builds it with `PILOT_ENABLE_AMBIENT=true` and its other defaults
//! (`pilot/pkg/networking/core/cluster_waypoint.go`, `waypoint.go`):
//!
//! - five fixed clusters, and five fixed listeners, no route
//!   configuration (its routes are inline in `main_internal`);
//! - for each service bound to it ([`MeshSnapshot::bound_waypoint`]),
//!   one `inbound-vip|PORT|http|HOST` and/or `inbound-vip|PORT|tcp|HOST`
//!   cluster per port (both for a sniffed one, none for UDP), and one
//!   more per subset of the DestinationRule its namespace's view picks
//!   (`buildWaypointInboundVIP`);
//! - the usual `outbound|...` clusters of a service a mesh VirtualService
//!   (or mesh route) for a bound service's hostname sends to, when that
//!   service is not bound to the waypoint too, or is a `MESH_EXTERNAL`
//!   entry (`filterWaypointOutboundServices`, over `referencedDestinations`
//!   of `push_context.go`), and of every extension provider's service
//!   (`ExtraWaypointServices`), among the services its namespace's view
//!   holds.
//!
//! Not modelled: services EnvoyFilters name and RequestAuthentication
//! jwks hosts (also `ExtraWaypointServices`), the `ambient.istio.io/waypoint-inbound-binding`
//! annotation, east-west waypoints and `AMBIENT_ENABLE_MULTI_NETWORK*`
//! other than their defaults, and `MESH_INTERNAL` entries with dynamic DNS
//! resolution (istiod skips those).

use std::collections::BTreeSet;

use crate::labels::Labels;
use crate::scope::Visible;
use crate::snapshot::{MeshSnapshot, Protocol, SvcId, SvcKind, WaypointInfo};
use crate::visibility::Visibility;

/// The clusters every waypoint gets: `main_internal`, `encap`,
/// `connect_originate`, and the double-HBONE pair istiod adds while
/// `AMBIENT_ENABLE_MULTI_NETWORK_WAYPOINT` is on, its default
/// (`ShouldCreateDoubleHBONEResources`, `pilot/pkg/model/context.go`).
pub const FIXED_CLUSTERS: [&str; 5] = [
    "connect_originate",
    "encap",
    "inner_connect_originate",
    "main_internal",
    "outer_connect_originate",
];

/// The listeners every waypoint gets (`listener_waypoint.go`).
pub const LISTENERS: [&str; 5] = [
    "connect_originate",
    "connect_terminate",
    "inner_connect_originate",
    "main_internal",
    "outer_connect_originate",
];

/// The label of a Gateway's pods naming it.
const GATEWAY_NAME: &str = crate::gateway_api::GATEWAY_NAME_LABEL;

impl MeshSnapshot {
    /// The waypoint istiod binds service `id` to, if any
    /// (`fetchWaypointForService` and `fetchWaypointForTarget`,
    /// `pilot/pkg/serviceregistry/ambient/waypoints.go`, 1.31): the one
    /// its own `istio.io/use-waypoint` names, else its namespace's (`none`
    /// opts out; a named waypoint that is not ready binds nothing, with
    /// no fallback to the namespace's); the waypoint's HBONE listener must
    /// admit the service's namespace, it must take service traffic, an
    /// entry whose namespace's `serviceEntryVisibility` is `NONE` binds to
    /// none, and a `NAMESPACE` one only to a waypoint of its own namespace.
    pub fn bound_waypoint(&self, id: SvcId) -> Option<&WaypointInfo> {
        let svc = &self.services[id];
        let empty = Labels::new();
        let ns_labels = self
            .namespaces
            .get(&svc.namespace)
            .map_or(&empty, |n| &n.labels);
        let named = match &svc.use_waypoint {
            Some(named) => named.clone()?,
            None => crate::meta::use_waypoint(ns_labels, &svc.namespace)??,
        };
        let wp = self
            .waypoints
            .iter()
            .find(|w| w.namespace == named.namespace && w.name == named.name)?;
        let admitted = match &wp.hbone {
            Some(l) => crate::gateway_listeners::allows_namespace(
                l,
                &wp.namespace,
                &svc.namespace,
                ns_labels,
            ),
            None => wp.namespace == svc.namespace,
        };
        // Ambient honours serviceEntryVisibility whatever applyToSidecars
        // says: NONE keeps the entry out of the ambient index
        // (`serviceEntryServiceBuilder`, `ambient/services.go`, 1.31;
        // random ambient seed 21 at ed37b57), NAMESPACE out of another
        // namespace's waypoint.
        let capped = match svc.kind {
            SvcKind::Entry => self
                .service_entry_visibility(&svc.namespace)
                .map(|r| r.visibility),
            _ => None,
        };
        let refused = match capped {
            Some(Visibility::None) => true,
            Some(Visibility::Namespace) => wp.namespace != svc.namespace,
            _ => false,
        };
        (admitted && matches!(wp.traffic.as_str(), "service" | "all") && !refused).then_some(wp)
    }

    /// The waypoint a gateway pod in `ns` with `labels` serves: the one
    /// its Gateway-name label names in `ns`, when the Service of that name
    /// istio's waypoint template writes exists (istiod finds a waypoint
    /// proxy's waypoint through its own Service: `waypointKeyForProxy`,
    /// `pilot/pkg/model/service.go`).
    pub fn waypoint_of_pod(&self, ns: &str, labels: &Labels) -> Option<&WaypointInfo> {
        let name = labels.get(GATEWAY_NAME)?;
        let has_service = self
            .services_in(ns)
            .iter()
            .any(|&s| self.services[s].kind == SvcKind::Kube && self.services[s].name == *name);
        let wp = self
            .waypoints
            .iter()
            .find(|w| w.namespace == ns && w.name == *name)?;
        has_service.then_some(wp)
    }

    /// The services bound to `wp`, one per hostname (the copy in the
    /// binding service's namespace, as istiod looks it up).
    pub fn waypoint_services(&self, wp: &WaypointInfo) -> Vec<SvcId> {
        let mut seen = BTreeSet::new();
        (0..self.services.len())
            .filter(|&s| {
                self.bound_waypoint(s)
                    .is_some_and(|w| w.namespace == wp.namespace && w.name == wp.name)
            })
            .filter(|&s| seen.insert(self.services[s].hostname.clone()))
            .collect()
    }

    /// The clusters istiod sends a proxy of a waypoint beside the fixed
    /// ones, sorted: the `inbound-vip` clusters of the services `bound` to
    /// it ([`Self::waypoint_services`]) and the `outbound` clusters of
    /// their routes' other destinations.
    /// `vis`: the view of the waypoint's namespace istiod gives it (a
    /// gateway's, [`crate::scope::Evaluator::gateway_visible`]); `labels`:
    /// the pod's, for DestinationRules with a workload selector.
    pub fn waypoint_clusters(
        &self,
        bound: &[SvcId],
        vis: &Visible,
        labels: &Labels,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for &id in bound {
            let s = &self.services[id];
            let subsets = self.subsets_for(vis, id, Some(labels));
            for p in &s.ports {
                let kinds: &[&str] = match p.protocol {
                    Protocol::Http => &["http"],
                    Protocol::Tcp => &["tcp"],
                    Protocol::Auto => &["http", "tcp"],
                    Protocol::Udp => &[],
                };
                for k in kinds {
                    out.push(format!("inbound-vip|{}|{k}|{}", p.number, s.hostname));
                    for sub in &subsets {
                        out.push(format!("inbound-vip|{}|{k}/{sub}|{}", p.number, s.hostname));
                    }
                }
            }
        }
        let targets = self.routed_past(bound);
        let providers = self.provider_services();
        let mut routed = vis.clone();
        routed.services.retain(|id, _| {
            let s = &self.services[*id];
            targets.contains(s.hostname.as_str())
                || providers.contains(&(None, s.hostname.as_str()))
                || providers.contains(&(Some(s.namespace.as_str()), s.hostname.as_str()))
        });
        out.extend(self.outbound_clusters(&routed, Some(labels)));
        out.sort();
        out.dedup();
        out
    }

    /// The services of the mesh config's extension providers, as
    /// `(namespace, hostname)` (`None`: any namespace's copy): a waypoint
    /// gets their outbound clusters whether or not it uses them, and even
    /// for a service bound to it (`extraServicesForProxy`,
    /// `pilot/pkg/model/push_context.go`, 1.31; found by random ambient
    /// fidelity seeds 5 and 8 at the commit that added waypoints).
    fn provider_services(&self) -> BTreeSet<(Option<&str>, &str)> {
        self.mesh
            .extension_providers
            .iter()
            .filter_map(|p| p.service.as_deref())
            .map(|s| match s.split_once('/') {
                Some((ns, host)) => (Some(ns), host),
                None => (None, s),
            })
            .collect()
    }

    /// The hostnames a mesh VirtualService (or mesh route) for one of
    /// `bound`'s hostnames sends requests to, other than those of `bound`
    /// itself that are not `MESH_EXTERNAL` entries.
    fn routed_past(&self, bound: &[SvcId]) -> BTreeSet<&str> {
        let hosts: Vec<&str> = bound
            .iter()
            .map(|&s| self.services[s].hostname.as_str())
            .collect();
        let inbound = |h: &str| {
            bound
                .iter()
                .any(|&s| self.services[s].hostname == h && !self.services[s].mesh_external)
        };
        self.virtual_services
            .iter()
            .filter(|vs| vs.mesh_bound && vs.hosts.iter().any(|h| hosts.contains(&h.as_str())))
            .flat_map(|vs| vs.dests.iter().map(|d| d.host.as_str()))
            .filter(|h| !inbound(h))
            .collect()
    }
}

/// What `explain` says of a waypoint's pod.
#[derive(Clone, Debug)]
pub struct WaypointView {
    /// The clusters compared with istiod's ([`MeshSnapshot::waypoint_clusters`]).
    pub clusters: Vec<String>,
    pub estimate: crate::scope::ConfigEstimate,
    pub reason: String,
}

impl MeshSnapshot {
    /// [`WaypointView`] of a waypoint's pod in `ns` with `labels`, whose
    /// namespace's view is `vis`. The estimate counts the fixed clusters
    /// and listeners too; its bytes use the sidecars' per-cluster figures
    /// (not calibrated on waypoints).
    pub fn waypoint_view(&self, ns: &str, labels: &Labels, vis: &Visible) -> WaypointView {
        let name = labels.get(GATEWAY_NAME).map_or("?", String::as_str);
        let Some(wp) = self.waypoint_of_pod(ns, labels) else {
            return WaypointView {
                clusters: Vec::new(),
                estimate: fixed_estimate(0),
                reason: format!(
                    "none: istiod ignores Sidecars for a waypoint, and finds no waypoint {ns}/{name} for this pod (no Gateway {name} in {ns} with addresses in its status, or no Service {name} there), so it binds no service to it"
                ),
            };
        };
        let bound = self.waypoint_services(wp);
        let clusters = self.waypoint_clusters(&bound, vis, labels);
        let c = crate::scope::COST_MODEL;
        let mut estimate = fixed_estimate(clusters.len() as u64);
        estimate.bytes_cds += clusters
            .iter()
            .map(|n| c.named_cluster(n.len()))
            .sum::<u64>();
        estimate.bytes = estimate.bytes_cds + estimate.bytes_lds;
        let bound = bound.len();
        WaypointView {
            clusters,
            estimate,
            reason: format!(
                "none: istiod ignores Sidecars for a waypoint; waypoint {ns}/{name} gets an inbound-vip cluster per port of the {bound} service(s) bound to it, and outbound clusters only for other services their routes send to"
            ),
        }
    }
}

/// The counts of a waypoint with `clusters` clusters beside the fixed
/// ones, its fixed clusters' and listeners' bytes as a sidecar's.
fn fixed_estimate(clusters: u64) -> crate::scope::ConfigEstimate {
    let c = crate::scope::COST_MODEL;
    crate::scope::ConfigEstimate {
        clusters: FIXED_CLUSTERS.len() as u64 + clusters,
        listeners: LISTENERS.len() as u64,
        bytes_cds: c.cds_fixed,
        bytes_lds: c.lds_fixed,
        bytes: c.cds_fixed + c.lds_fixed,
        ..Default::default()
    }
}
