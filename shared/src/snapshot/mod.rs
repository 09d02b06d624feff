//! `MeshSnapshot`: the mesh as the scope engine sees it, with the indexes
//! every question (which Sidecar, which services, which proxies) needs.
//!
//! [`MeshSnapshot::build_with_mesh`] builds it in steps, each in the
//! module of its job: `workloads` (controllers, pods, injection),
//! `services` (Services and ServiceEntry hosts, ranks, inbound ports) and
//! `config` (Sidecars, VirtualServices, DestinationRules), with
//! `destination_rules` filing the DestinationRules as istiod looks them
//! up. The records themselves are in `model`.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::error::Error;
use crate::hash::HashMap;
use crate::inputs::Inputs;
use crate::mesh::{MeshConfig, Options};
use crate::telemetry::{CustomAuthz, TelemetryInfo};
use crate::visibility::{self, Resolved};

mod config;
pub mod destination_rules;
mod model;
mod routes;
mod services;
mod workloads;

pub use crate::labels::{selector_matches, Labels};
pub use crate::meta::{Created, NamespaceInfo};
pub use config::sidecar_listeners;
pub use destination_rules::{Consolidated, DrIndex, EntryId};
pub use model::managed_by_meshscope;
pub use model::{
    DrId, DrInfo, EnvoyFilterInfo, GatewayInfo, Inbound, Listener, PodId, PodInfo, PortInfo,
    Protocol, Resolution, RouteOrigin, SeId, SeInfo, ServerInfo, ServiceInfo, SidecarId,
    SidecarInfo, SvcId, SvcKind, VsDest, VsId, VsInfo, WaypointInfo, Workload, WorkloadId,
    WorkloadKind, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
};
pub use services::{catch_all_ports, EXPORT_TO_ANNOTATION};

/// The whole mesh, indexed.
#[derive(Clone, Debug)]
pub struct MeshSnapshot {
    pub options: Options,
    pub mesh: MeshConfig,
    pub namespaces: BTreeMap<String, NamespaceInfo>,
    pub workloads: Vec<Workload>,
    pub pods: Vec<PodInfo>,
    pub services: Vec<ServiceInfo>,
    pub sidecars: Vec<SidecarInfo>,
    pub virtual_services: Vec<VsInfo>,
    pub destination_rules: Vec<DrInfo>,
    pub service_entries: Vec<SeInfo>,
    /// networking.istio.io Gateways.
    pub gateways: Vec<GatewayInfo>,
    /// EnvoyFilters.
    pub envoy_filters: Vec<EnvoyFilterInfo>,
    /// Gateway API Gateways istiod can use as waypoints.
    pub waypoints: Vec<WaypointInfo>,
    /// istiod runs with ambient on, as the input shows (`config::ambient`:
    /// an `istio-waypoint` GatewayClass or Gateway, or the
    /// `istio.io/dataplane-mode=ambient` label on a namespace or pod).
    pub ambient: bool,
    /// Telemetries, oldest first ([`crate::telemetry`]).
    pub telemetries: Vec<TelemetryInfo>,
    /// AuthorizationPolicies with `action: CUSTOM`, oldest first.
    pub custom_authz: Vec<CustomAuthz>,
    /// Per namespace: selector Sidecars first, then selector-less ones, each
    /// half oldest first (ties by name), as istiod orders them.
    pub(crate) sidecars_by_ns: HashMap<String, Vec<SidecarId>>,
    pub(crate) root_default: Option<SidecarId>,
    pub(crate) services_by_host: HashMap<String, Vec<SvcId>>,
    pub(crate) services_by_ns: HashMap<String, Vec<SvcId>>,
    pub(crate) services_by_addr: HashMap<IpAddr, Vec<SvcId>>,
    pub(crate) pods_by_ip: HashMap<IpAddr, Vec<PodId>>,
    /// Endpoint addresses of headless Services, from EndpointSlices: the
    /// pods behind them that were not read themselves.
    pub(crate) headless_by_ip: HashMap<IpAddr, Vec<SvcId>>,
    pub(crate) pods_by_name: HashMap<String, Vec<PodId>>,
    pub(crate) workloads_by_ns: HashMap<String, Vec<WorkloadId>>,
    pub(crate) vss_by_ns: HashMap<String, Vec<VsId>>,
    pub(crate) drs_by_ns: HashMap<String, Vec<DrId>>,
    /// The DestinationRules as istiod files them for lookup.
    pub(crate) dr_index: DrIndex,
}

impl MeshSnapshot {
    pub fn build(inputs: &Inputs, options: Options) -> Result<Self, Error> {
        let mesh = match inputs.mesh_config_text() {
            Some(text) => MeshConfig::from_yaml(text)?,
            None => MeshConfig::default(),
        };
        Ok(Self::build_with_mesh(inputs, options, mesh))
    }

    /// The snapshot of `inputs`: workloads and pods first (injection needs
    /// their namespaces), then services (their endpoints count the pods,
    /// and inbound ports come from the Services that select a workload),
    /// then the Istio configuration.
    pub fn build_with_mesh(inputs: &Inputs, options: Options, mesh: MeshConfig) -> Self {
        let mut namespaces = workloads::namespaces(inputs);
        let (mut workloads, mut pods) = workloads::workloads_and_pods(inputs);
        // Namespaces that only appear on objects still exist for scoping.
        for w in &workloads {
            namespaces.entry(w.namespace.clone()).or_default();
        }
        workloads::decide_injection(&mut workloads, &mut pods, &namespaces, &options);
        let (pods_by_ip, pods_by_name) = workloads::pod_indexes(&pods);
        let workloads_by_ns = workloads::workloads_by_ns(&workloads);

        // Services and VirtualServices take the exportTo defaults as this
        // release reads them; DestinationRules read theirs as written.
        let exports = mesh.export_defaults_for(options.istio);
        let (mut services, service_entries) =
            services::services(inputs, &exports, &options, &namespaces, &pods);
        services::rank(&mut services);
        let by = services::indexes(&services);
        let headless_by_ip = services::headless_by_ip(inputs, &services, &by.by_ns);
        services::inbound_ports(&mut workloads, &pods, &services, &by.by_ns);

        let domain = &options.cluster_domain;
        let sidecars = config::sidecars(inputs, &options, &mesh);
        let (virtual_services, vss_by_ns) = config::virtual_services(inputs, &exports, domain);
        let (destination_rules, drs_by_ns) = config::destination_rules(inputs, &mesh, domain);
        let dr_index = DrIndex::build(
            &destination_rules,
            &mesh.default_destination_rule_export_to,
            &mesh.root_namespace,
        );

        MeshSnapshot {
            gateways: config::gateways(inputs, &pods),
            envoy_filters: config::envoy_filters(inputs),
            waypoints: config::waypoints(inputs),
            ambient: config::ambient(inputs),
            telemetries: crate::telemetry::telemetries(&inputs.telemetries),
            custom_authz: crate::telemetry::custom_authz(&inputs.authorization_policies),
            options,
            mesh,
            namespaces,
            workloads,
            pods,
            services,
            sidecars: sidecars.all,
            virtual_services,
            destination_rules,
            service_entries,
            sidecars_by_ns: sidecars.by_ns,
            root_default: sidecars.root_default,
            services_by_host: by.by_host,
            services_by_ns: by.by_ns,
            services_by_addr: by.by_addr,
            pods_by_ip,
            headless_by_ip,
            pods_by_name,
            workloads_by_ns,
            vss_by_ns,
            drs_by_ns,
            dr_index,
        }
    }

    // === lookups ===

    pub fn namespace(&self, ns: &str) -> Option<&NamespaceInfo> {
        self.namespaces.get(ns)
    }

    pub fn workloads_in(&self, ns: &str) -> &[WorkloadId] {
        self.workloads_by_ns.get(ns).map_or(&[], Vec::as_slice)
    }

    pub fn sidecars_in(&self, ns: &str) -> &[SidecarId] {
        self.sidecars_by_ns.get(ns).map_or(&[], Vec::as_slice)
    }

    pub fn root_default(&self) -> Option<SidecarId> {
        self.root_default
    }

    /// What `meshConfig.serviceEntryVisibility` says of the ServiceEntries
    /// in `ns` (Istio 1.31+, when the mesh config has it).
    pub fn service_entry_visibility(&self, ns: &str) -> Option<Resolved> {
        let empty = Labels::new();
        let labels = self.namespaces.get(ns).map_or(&empty, |n| &n.labels);
        visibility::resolve(
            self.mesh.service_entry_visibility.as_ref(),
            self.options.istio,
            labels,
        )
    }

    pub fn services_named(&self, hostname: &str) -> &[SvcId] {
        self.services_by_host
            .get(hostname)
            .map_or(&[], Vec::as_slice)
    }

    /// The hosts a name an app in `ns` dialled (an HTTP authority without
    /// its port) stands for: the name, and the Kubernetes service it is a
    /// short form of. istiod lists `svc.ns.svc.<domain>` in Envoy's
    /// virtual host domains as `svc.ns` and `svc.ns.svc` too, and as `svc`
    /// in its own namespace (`GenerateAltVirtualHosts`,
    /// `pilot/pkg/networking/core/httproute.go`, istio 1.31).
    pub fn dialled_hosts(&self, name: &str, ns: &str) -> Vec<String> {
        let domain = &self.options.cluster_domain;
        let mut out = vec![name.to_string()];
        if name.contains('*') || name.parse::<std::net::IpAddr>().is_ok() {
            return out;
        }
        let full = match name.split('.').count() {
            1 => format!("{name}.{ns}.svc.{domain}"),
            2 => format!("{name}.svc.{domain}"),
            3 if name.ends_with(".svc") => format!("{name}.{domain}"),
            _ => return out,
        };
        // A bare name always means the namespace's own service (istiod
        // expands it so in routes too); the longer forms only where such a
        // service exists, so that `example.com` is not taken for one.
        if name.split('.').count() == 1 || !self.services_named(&full).is_empty() {
            out.push(full);
        }
        out
    }

    pub fn services_in(&self, ns: &str) -> &[SvcId] {
        self.services_by_ns.get(ns).map_or(&[], Vec::as_slice)
    }

    pub fn services_at(&self, ip: &IpAddr) -> &[SvcId] {
        self.services_by_addr.get(ip).map_or(&[], Vec::as_slice)
    }

    /// Headless Services whose EndpointSlices list `ip`.
    pub fn headless_services_at(&self, ip: &IpAddr) -> &[SvcId] {
        self.headless_by_ip.get(ip).map_or(&[], Vec::as_slice)
    }

    pub fn pods_at(&self, ip: &IpAddr) -> &[PodId] {
        self.pods_by_ip.get(ip).map_or(&[], Vec::as_slice)
    }

    pub fn pods_named(&self, name: &str) -> &[PodId] {
        self.pods_by_name.get(name).map_or(&[], Vec::as_slice)
    }

    pub fn vss_in(&self, ns: &str) -> &[VsId] {
        self.vss_by_ns.get(ns).map_or(&[], Vec::as_slice)
    }

    /// The VirtualService `ns/name` that `root`'s routes delegate to, as
    /// istiod merges it: one without hosts, exported to the root's
    /// namespace.
    pub fn delegate_of(&self, root: VsId, ns: &str, name: &str) -> Option<VsId> {
        let root_ns = &self.virtual_services[root].namespace;
        self.vss_in(ns).iter().copied().find(|d| {
            let d = &self.virtual_services[*d];
            d.name == name && d.hosts.is_empty() && d.export.visible_to(root_ns)
        })
    }

    /// The destinations of VirtualService `id`'s routes, its delegates'
    /// included (istiod merges them into the root before it imports
    /// destinations).
    pub fn route_destinations(&self, id: VsId) -> impl Iterator<Item = &VsDest> + '_ {
        let vs = &self.virtual_services[id];
        vs.dests.iter().chain(
            vs.delegates
                .iter()
                .filter_map(move |(ns, name)| self.delegate_of(id, ns, name))
                .flat_map(|d| self.virtual_services[d].dests.iter()),
        )
    }

    pub fn drs_in(&self, ns: &str) -> &[DrId] {
        self.drs_by_ns.get(ns).map_or(&[], Vec::as_slice)
    }

    pub fn find_pod(&self, ns: &str, name: &str) -> Option<PodId> {
        self.pods_named(name)
            .iter()
            .copied()
            .find(|p| self.pods[*p].namespace == ns)
    }

    pub fn find_workload(&self, kind: &WorkloadKind, ns: &str, name: &str) -> Option<WorkloadId> {
        self.workloads_in(ns).iter().copied().find(|w| {
            let w = &self.workloads[*w];
            &w.kind == kind && w.name == name
        })
    }

    /// The EnvoyFilters applying to a proxy with `labels` in `ns`: those of
    /// the root namespace and of `ns` whose workloadSelector its labels
    /// hold (none: all) (`EnvoyFilters`, `pilot/pkg/model/push_context.go`,
    /// istio 1.31).
    pub fn envoy_filters_for<'a>(
        &'a self,
        ns: &'a str,
        labels: &'a Labels,
    ) -> impl Iterator<Item = &'a EnvoyFilterInfo> + 'a {
        self.envoy_filters.iter().filter(move |f| {
            (f.namespace == ns || f.namespace == self.mesh.root_namespace)
                && f.selector
                    .as_ref()
                    .is_none_or(|s| selector_matches(s, labels))
        })
    }

    /// The labels a workload's proxies present to Sidecar selection.
    pub fn workload_labels(&self, w: WorkloadId) -> &Labels {
        let wl = &self.workloads[w];
        match wl.pods.first() {
            Some(p) => &self.pods[*p].labels,
            None => &wl.labels,
        }
    }

    /// Whether `w`'s proxies serve `svc`: a Kubernetes Service whose
    /// selector, or a ServiceEntry whose `workloadSelector`, picks them in
    /// its own namespace. istiod builds their inbound config from it (their
    /// service targets), so a change to it is pushed to them whatever their
    /// scope imports (`docs/istio-semantics.md` §4).
    pub fn serves(&self, w: WorkloadId, svc: SvcId) -> bool {
        let s = &self.services[svc];
        let selector = match s.kind {
            SvcKind::Kube => s.selector.as_ref(),
            SvcKind::Entry => s.workload_selector.as_ref(),
        };
        selector.is_some_and(|sel| {
            s.namespace == self.workloads[w].namespace
                && selector_matches(sel, self.workload_labels(w))
        })
    }

    /// Workloads that run an Envoy sidecar and so need a Sidecar scope.
    pub fn sidecar_workloads(&self) -> impl Iterator<Item = WorkloadId> + '_ {
        (0..self.workloads.len()).filter(|w| self.workloads[*w].injection.sidecar)
    }
}
