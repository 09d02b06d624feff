//! Building a snapshot: the services (Kubernetes Services and ServiceEntry
//! hosts), their rank and indexes, the pods behind headless Services, and
//! each workload's inbound ports.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::model::{
    Inbound, PodId, PodInfo, PortInfo, Protocol, Resolution, SeInfo, ServiceInfo, SvcId, SvcKind,
    Workload,
};
use crate::hash::HashMap;
use crate::host::Export;
use crate::inputs::Inputs;
use crate::istio::ServiceEntry;
use crate::labels::{labels_field, selector_matches, Labels};
use crate::mesh::{MeshConfig, Options};
use crate::meta::{
    created, export_to_is_ours, labels, name_of, ns_of, use_waypoint, NamespaceInfo,
};
use crate::visibility;

/// The Kubernetes Services, then one service per ServiceEntry host (each
/// capped by `meshConfig.serviceEntryVisibility`), and the ServiceEntries.
pub(super) fn services(
    inputs: &Inputs,
    mesh: &MeshConfig,
    options: &Options,
    namespaces: &BTreeMap<String, NamespaceInfo>,
    pods: &[PodInfo],
) -> (Vec<ServiceInfo>, Vec<SeInfo>) {
    let mut pods_by_ns: HashMap<&str, Vec<PodId>> = HashMap::default();
    for (id, p) in pods.iter().enumerate() {
        pods_by_ns.entry(p.namespace.as_str()).or_default().push(id);
    }
    let domain = &options.cluster_domain;
    let mut services: Vec<ServiceInfo> = Vec::new();
    for s in &inputs.services {
        let alias = options.istio.external_name_alias();
        services.push(kube_service(s, mesh, domain, alias, pods, &pods_by_ns));
    }
    let mut service_entries = Vec::new();
    for se in &inputs.service_entries {
        service_entries.push(SeInfo {
            name: name_of(&se.metadata),
            namespace: ns_of(&se.metadata),
            resolution: se.spec.resolution.clone().unwrap_or_else(|| "NONE".into()),
            export_to: se.spec.export_to.clone(),
            hosts: se.spec.hosts.clone(),
            declared_ours: export_to_is_ours(&se.metadata),
            addresses: se.spec.addresses.clone(),
            catch_all_ports: catch_all_ports(&se.spec.ports),
            annotations: labels(&se.metadata.annotations),
        });
        let first = services.len();
        services.extend(entry_services(se, mesh, pods, &pods_by_ns));
        // meshConfig.serviceEntryVisibility caps what sidecars see.
        let ns = ns_of(&se.metadata);
        let ns_labels = namespaces.get(&ns).map(|n| &n.labels);
        let cap = visibility::resolve(
            mesh.service_entry_visibility.as_ref(),
            options.istio,
            ns_labels.unwrap_or(&Labels::new()),
        )
        .map(|r| r.for_sidecars());
        if let Some(cap) = cap {
            for s in &mut services[first..] {
                let listed = std::mem::replace(&mut s.listed, Export::Hidden);
                s.export = cap.cap(
                    std::mem::replace(&mut s.export, Export::Hidden),
                    &listed,
                    &ns,
                );
                s.listed = cap.cap(listed.clone(), &listed, &ns);
            }
        }
    }
    (services, service_entries)
}

/// Ranks the services: oldest first, namespace-specific exports ahead of
/// public ones.
pub(super) fn rank(services: &mut [ServiceInfo]) {
    let mut order: Vec<usize> = (0..services.len()).collect();
    order.sort_by(|a, b| {
        let (a, b) = (&services[*a], &services[*b]);
        (
            a.export.is_public(),
            a.created,
            &a.namespace,
            &a.name,
            &a.hostname,
        )
            .cmp(&(
                b.export.is_public(),
                b.created,
                &b.namespace,
                &b.name,
                &b.hostname,
            ))
    });
    for (rank, idx) in order.into_iter().enumerate() {
        services[idx].order = rank;
    }
}

/// The services by hostname (in rank order), by address and by namespace.
pub(super) struct ServiceIndexes {
    pub(super) by_host: HashMap<String, Vec<SvcId>>,
    pub(super) by_addr: HashMap<IpAddr, Vec<SvcId>>,
    pub(super) by_ns: HashMap<String, Vec<SvcId>>,
}

/// Indexes ranked services (see [`rank`]).
pub(super) fn indexes(services: &[ServiceInfo]) -> ServiceIndexes {
    let mut by_host: HashMap<String, Vec<SvcId>> = HashMap::default();
    let mut by_addr: HashMap<IpAddr, Vec<SvcId>> = HashMap::default();
    let mut by_ns: HashMap<String, Vec<SvcId>> = HashMap::default();
    for (id, s) in services.iter().enumerate() {
        by_host.entry(s.hostname.clone()).or_default().push(id);
        by_ns.entry(s.namespace.clone()).or_default().push(id);
        for a in &s.addresses {
            by_addr.entry(*a).or_default().push(id);
        }
    }
    for ids in by_host.values_mut() {
        ids.sort_by_key(|i| services[*i].order);
    }
    ServiceIndexes {
        by_host,
        by_addr,
        by_ns,
    }
}

/// The endpoint addresses of headless Services, from their EndpointSlices.
pub(super) fn headless_by_ip(
    inputs: &Inputs,
    services: &[ServiceInfo],
    services_by_ns: &HashMap<String, Vec<SvcId>>,
) -> HashMap<IpAddr, Vec<SvcId>> {
    let mut headless_by_ip: HashMap<IpAddr, Vec<SvcId>> = HashMap::default();
    for slice in &inputs.endpoint_slices {
        let ns = ns_of(&slice.metadata);
        let Some(svc_name) = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::inputs::SERVICE_NAME_LABEL))
        else {
            continue;
        };
        let Some(&svc) = services_by_ns.get(&ns).and_then(|ids| {
            ids.iter().find(|id| {
                let s = &services[**id];
                s.kind == SvcKind::Kube
                    && s.resolution == Resolution::Passthrough
                    && s.name == *svc_name
            })
        }) else {
            continue;
        };
        for ip in slice
            .endpoints
            .iter()
            .flat_map(|e| &e.addresses)
            .filter_map(|a| a.parse::<IpAddr>().ok())
        {
            let at = headless_by_ip.entry(ip).or_default();
            if !at.contains(&svc) {
                at.push(svc);
            }
        }
    }
    headless_by_ip
}

/// Inbound ports: the distinct targetPorts of the Kubernetes Services in
/// the workload's namespace that select its pods.
pub(super) fn inbound_ports(
    workloads: &mut [Workload],
    pods: &[PodInfo],
    services: &[ServiceInfo],
    services_by_ns: &HashMap<String, Vec<SvcId>>,
) {
    for w in workloads.iter_mut() {
        let wl_labels = match w.pods.first() {
            Some(p) => &pods[*p].labels,
            None => &w.labels,
        };
        let mut seen: BTreeMap<u32, Protocol> = BTreeMap::new();
        for &id in services_by_ns
            .get(&w.namespace)
            .map_or(&[][..], |v| v.as_slice())
        {
            let svc = &services[id];
            let Some(sel) = &svc.selector else { continue };
            if !selector_matches(sel, wl_labels) {
                continue;
            }
            // UDP ports get an inbound cluster too.
            for p in &svc.ports {
                seen.entry(p.target_port).or_insert(p.protocol);
            }
        }
        let count = |f: fn(&Protocol) -> bool| seen.values().filter(|p| f(p)).count() as u32;
        w.inbound = Inbound {
            http: count(|p| *p == Protocol::Http),
            tcp: count(|p| matches!(p, Protocol::Tcp | Protocol::Udp)),
            sniffed: count(|p| *p == Protocol::Auto),
        };
    }
}

/// A Service's `networking.istio.io/exportTo` annotation, as istiod reads
/// it: split on commas, each item trimmed; an empty value is no annotation
/// (`pilot/pkg/serviceregistry/kube/conversion.go`, release-1.31). Also
/// the `listed` form of [`ServiceInfo::listed`].
fn service_export(meta: &ObjectMeta, mesh: &MeshConfig, ns: &str) -> (Export, Export) {
    let ann: Option<Vec<String>> = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get("networking.istio.io/exportTo"))
        .filter(|v| !v.is_empty())
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let default = &mesh.default_service_export_to;
    (
        Export::for_service(ann.as_deref(), default, ns),
        Export::listed(ann.as_deref(), default, ns),
    )
}

/// The labels of the endpoints istiod builds a ServiceEntry's DNS
/// clusters from ([`ServiceInfo::dns_endpoint_labels`]).
fn endpoint_labels(
    se: &ServiceEntry,
    ns: &str,
    pods: &[PodInfo],
    pods_by_ns: &HashMap<&str, Vec<PodId>>,
) -> Vec<Labels> {
    if let Some(sel) = &se.spec.workload_selector {
        return pods_by_ns.get(ns).map_or_else(Vec::new, |ids| {
            ids.iter()
                .map(|p| &pods[*p].labels)
                .filter(|l| !sel.labels.is_empty() && selector_matches(&sel.labels, l))
                .cloned()
                .collect()
        });
    }
    if se.spec.endpoints.is_empty() {
        return vec![Labels::new()];
    }
    se.spec.endpoints.iter().map(labels_field).collect()
}

/// The Service's `networking.istio.io/exportTo` items as written, `None`
/// when the annotation is absent or empty.
fn service_declared(meta: &ObjectMeta) -> Option<Vec<String>> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(EXPORT_TO_ANNOTATION))
        .filter(|v| !v.is_empty())
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect())
}

/// The ports on which a CIDR address makes a ServiceEntry a listener-wide
/// catch-all: TCP or unset protocols (an HTTP port routes by Host; TLS and
/// HTTPS match by SNI). For `0.0.0.0/0` istiod adds no prefix range to the
/// filter chain (`toFilterChainMatch`, networking/core/listener.go, 1.31).
pub fn catch_all_ports(ports: &[crate::istio::ServiceEntryPort]) -> Vec<u32> {
    ports
        .iter()
        .filter(|p| {
            let upper = p.protocol.as_deref().map(str::to_ascii_uppercase);
            let sni = matches!(upper.as_deref(), Some("TLS" | "HTTPS"));
            let tcp_like = matches!(
                Protocol::parse(p.protocol.as_deref().unwrap_or("")),
                Protocol::Tcp | Protocol::Auto
            );
            tcp_like && !sni
        })
        .map(|p| p.number)
        .collect()
}

/// The annotation that is a Kubernetes Service's exportTo.
pub const EXPORT_TO_ANNOTATION: &str = "networking.istio.io/exportTo";

fn count_selected(
    selector: &BTreeMap<String, String>,
    ns: &str,
    pods: &[PodInfo],
    pods_by_ns: &HashMap<&str, Vec<PodId>>,
) -> u32 {
    if selector.is_empty() {
        return 0;
    }
    pods_by_ns
        .get(ns)
        .map(|ids| {
            ids.iter()
                .filter(|p| selector_matches(selector, &pods[**p].labels))
                .count() as u32
        })
        .unwrap_or(0)
}

/// The first IP of each pod in `ns` that `selector` selects (pods without
/// one are no endpoint yet).
fn selected_ips(
    selector: &BTreeMap<String, String>,
    ns: &str,
    pods: &[PodInfo],
    pods_by_ns: &HashMap<&str, Vec<PodId>>,
) -> Vec<Option<IpAddr>> {
    if selector.is_empty() {
        return Vec::new();
    }
    pods_by_ns
        .get(ns)
        .into_iter()
        .flatten()
        .map(|p| &pods[*p])
        .filter(|p| selector_matches(selector, &p.labels))
        .filter_map(|p| p.ips.first().map(|ip| Some(*ip)))
        .collect()
}

fn kube_service(
    s: &Service,
    mesh: &MeshConfig,
    domain: &str,
    alias: bool,
    pods: &[PodInfo],
    pods_by_ns: &HashMap<&str, Vec<PodId>>,
) -> ServiceInfo {
    let ns = ns_of(&s.metadata);
    let name = name_of(&s.metadata);
    let spec = s.spec.clone().unwrap_or_default();
    let headless = spec.cluster_ip.as_deref() == Some("None");
    let external = spec.type_.as_deref() == Some("ExternalName");
    let mut addresses: Vec<IpAddr> = spec
        .cluster_ips
        .iter()
        .flatten()
        .filter_map(|a| a.parse().ok())
        .collect();
    if let Some(a) = spec.cluster_ip.as_deref().and_then(|a| a.parse().ok()) {
        if !addresses.contains(&a) {
            addresses.push(a);
        }
    }
    let ports = spec
        .ports
        .iter()
        .flatten()
        .map(|p| PortInfo {
            number: p.port as u32,
            protocol: if p.protocol.as_deref() == Some("UDP") {
                Protocol::Udp
            } else {
                Protocol::of_service_port(
                    p.port as u32,
                    p.name.as_deref(),
                    p.app_protocol.as_deref(),
                )
            },
            tls: p.protocol.as_deref() != Some("UDP")
                && Protocol::service_port_is_tls(p.name.as_deref(), p.app_protocol.as_deref()),
            target_port: match &p.target_port {
                Some(IntOrString::Int(n)) if *n > 0 => *n as u32,
                _ => p.port as u32,
            },
        })
        .collect();
    let declared = service_declared(&s.metadata);
    // istiod never indexes the endpoints of a Service whose annotation
    // holds `~`, whatever else it lists: its EndpointSlice handler stops
    // before the EDS update (`serviceNeedsPush`,
    // serviceregistry/kube/controller/endpointslice.go, 1.31). Its EDS
    // clusters are empty, and a headless one gets no per-pod listeners.
    let unindexed = declared
        .as_ref()
        .is_some_and(|d| d.iter().any(|e| e == "~"));
    let endpoints = match &spec.selector {
        Some(sel) if !unindexed => count_selected(sel, &ns, pods, pods_by_ns),
        _ => 0,
    };
    let passthrough_endpoints = match &spec.selector {
        Some(sel) if headless && !external && !unindexed => {
            selected_ips(sel, &ns, pods, pods_by_ns)
        }
        _ => Vec::new(),
    };
    let (export, listed) = service_export(&s.metadata, mesh, &ns);
    ServiceInfo {
        kind: SvcKind::Kube,
        hostname: format!("{name}.{ns}.svc.{domain}"),
        export,
        listed,
        labels: Labels::new(),
        export_list: Vec::new(),
        declared,
        declared_ours: export_to_is_ours(&s.metadata),
        use_waypoint: waypoint_of(&labels(&s.metadata.labels), &ns),
        mesh_external: false,
        created: created(&s.metadata),
        addresses,
        resolution: if external && alias {
            Resolution::Alias
        } else if external {
            Resolution::Dns
        } else if headless {
            Resolution::Passthrough
        } else {
            Resolution::Eds
        },
        endpoints,
        passthrough_endpoints,
        mesh_defined_name: false,
        dns_endpoint_labels: None,
        dfp_ports: None,
        ports,
        selector: spec
            .selector
            .filter(|s| !s.is_empty())
            .map(|s| s.into_iter().collect()),
        workload_selector: None,
        name,
        namespace: ns,
        order: 0,
    }
}

fn entry_services<'a>(
    se: &'a ServiceEntry,
    mesh: &'a MeshConfig,
    pods: &'a [PodInfo],
    pods_by_ns: &'a HashMap<&str, Vec<PodId>>,
) -> impl Iterator<Item = ServiceInfo> + 'a {
    let ns = ns_of(&se.metadata);
    let name = name_of(&se.metadata);
    let export = Export::for_service(
        se.spec.export_to.as_deref(),
        &mesh.default_service_export_to,
        &ns,
    );
    let listed = Export::listed(
        se.spec.export_to.as_deref(),
        &mesh.default_service_export_to,
        &ns,
    );
    let own_labels = labels(&se.metadata.labels);
    let resolution = match se.spec.resolution.as_deref() {
        Some("DNS") => Resolution::Dns,
        Some("DNS_ROUND_ROBIN") => Resolution::DnsRoundRobin,
        Some("STATIC") => Resolution::Eds,
        _ => Resolution::Passthrough,
    };
    let addresses: Vec<IpAddr> = se
        .spec
        .addresses
        .iter()
        .filter_map(|a| a.split('/').next().and_then(|a| a.parse().ok()))
        .collect();
    let ports: Vec<PortInfo> = se
        .spec
        .ports
        .iter()
        .map(|p| PortInfo {
            number: p.number,
            protocol: if p.protocol.as_deref() == Some("UDP") {
                Protocol::Udp
            } else {
                Protocol::parse(p.protocol.as_deref().unwrap_or(""))
            },
            tls: Protocol::tls_name(p.protocol.as_deref().unwrap_or("")),
            target_port: 0,
        })
        .collect();
    let endpoints = match &se.spec.workload_selector {
        Some(sel) => count_selected(&sel.labels, &ns, pods, pods_by_ns),
        None => se.spec.endpoints.len().max(1) as u32,
    };
    let passthrough_endpoints = match &se.spec.workload_selector {
        _ if resolution != Resolution::Passthrough || !addresses.is_empty() => Vec::new(),
        Some(sel) => selected_ips(&sel.labels, &ns, pods, pods_by_ns),
        None => se
            .spec
            .endpoints
            .iter()
            .map(|e| e["address"].as_str().and_then(|a| a.parse().ok()))
            .collect(),
    };
    let dfp_ports: Vec<u32> = se
        .spec
        .ports
        .iter()
        .filter(|p| {
            matches!(
                p.protocol
                    .as_deref()
                    .map(str::to_ascii_uppercase)
                    .as_deref(),
                Some("HTTP" | "HTTP2" | "GRPC" | "TLS")
            )
        })
        .map(|p| p.number)
        .collect();
    let dynamic = se.spec.resolution.as_deref() == Some("DYNAMIC_DNS");
    let dns_endpoint_labels = matches!(resolution, Resolution::Dns | Resolution::DnsRoundRobin)
        .then(|| endpoint_labels(se, &ns, pods, pods_by_ns));
    let mesh_defined_name = se.spec.workload_selector.is_some()
        || resolution == Resolution::Eds
        || (resolution != Resolution::Passthrough && !se.spec.endpoints.is_empty());
    let created = created(&se.metadata);
    se.spec.hosts.iter().map(move |h| ServiceInfo {
        kind: SvcKind::Entry,
        name: name.clone(),
        namespace: ns.clone(),
        hostname: h.clone(),
        ports: ports.clone(),
        export: export.clone(),
        listed: listed.clone(),
        labels: own_labels.clone(),
        export_list: se.spec.export_to.clone().unwrap_or_default(),
        declared: se.spec.export_to.clone().filter(|l| !l.is_empty()),
        declared_ours: export_to_is_ours(&se.metadata),
        use_waypoint: waypoint_of(&labels(&se.metadata.labels), &ns_of(&se.metadata)),
        mesh_external: se.spec.location.as_deref() != Some("MESH_INTERNAL"),
        created,
        addresses: addresses.clone(),
        resolution,
        endpoints,
        passthrough_endpoints: passthrough_endpoints.clone(),
        mesh_defined_name,
        dns_endpoint_labels: dns_endpoint_labels.clone(),
        dfp_ports: (dynamic && h.starts_with('*')).then(|| dfp_ports.clone()),
        selector: None,
        workload_selector: se.spec.workload_selector.as_ref().map(|s| s.labels.clone()),
        order: 0,
    })
}

/// [`use_waypoint`], with a gateway's own Service (labelled
/// `gateway.istio.io/managed`) never bound to one.
fn waypoint_of(l: &Labels, ns: &str) -> Option<Option<crate::meta::WaypointRef>> {
    match l.contains_key("gateway.istio.io/managed") {
        true => Some(None),
        false => use_waypoint(l, ns),
    }
}
