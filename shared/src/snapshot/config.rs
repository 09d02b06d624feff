//! Building a snapshot: the Sidecars (in istiod's order, and the root
//! namespace's default), VirtualServices and DestinationRules.

use super::model::{
    managed_by_meshscope, DrId, DrInfo, EnvoyFilterInfo, GatewayInfo, Listener, PodInfo, Protocol,
    ServerInfo, SidecarId, SidecarInfo, VsDest, VsId, VsInfo, WaypointInfo,
};
use crate::hash::HashMap;
use crate::host::{resolve_short_name, Export, HostEntry};
use crate::inputs::Inputs;
use crate::istio::{Sidecar, VirtualService};
use crate::labels::{labels_field, selector_matches};
use crate::mesh::{MeshConfig, Options};
use crate::meta::{created, export_to_is_ours, name_of, ns_of};

/// The Sidecars, oldest first; by namespace, selector Sidecars first, then
/// selector-less ones; and the root namespace's default Sidecar.
pub(super) struct Sidecars {
    pub(super) all: Vec<SidecarInfo>,
    pub(super) by_ns: HashMap<String, Vec<SidecarId>>,
    pub(super) root_default: Option<SidecarId>,
}

pub(super) fn sidecars(inputs: &Inputs, options: &Options, mesh: &MeshConfig) -> Sidecars {
    let mut sidecars: Vec<SidecarInfo> = inputs
        .sidecars
        .iter()
        .map(|sc| sidecar_info(sc, options))
        .collect();
    sidecars.sort_by(|a, b| {
        (a.created, &a.name, &a.namespace).cmp(&(b.created, &b.name, &b.namespace))
    });
    let mut sidecars_by_ns: HashMap<String, Vec<SidecarId>> = HashMap::default();
    for (id, sc) in sidecars.iter().enumerate() {
        sidecars_by_ns
            .entry(sc.namespace.clone())
            .or_default()
            .push(id);
    }
    for ids in sidecars_by_ns.values_mut() {
        // Stable: keeps the time order within each half.
        ids.sort_by_key(|i| sidecars[*i].selector.is_none());
    }
    let root_default = sidecars_by_ns
        .get(&mesh.root_namespace)
        .and_then(|ids| ids.iter().find(|i| sidecars[**i].selector.is_none()))
        .copied();
    Sidecars {
        all: sidecars,
        by_ns: sidecars_by_ns,
        root_default,
    }
}

/// An exportTo as its owner wrote it; an empty list is unset.
pub(super) fn declared(export_to: Option<&[String]>) -> Option<Vec<String>> {
    export_to.filter(|l| !l.is_empty()).map(<[String]>::to_vec)
}

/// The ports `vs`'s `tcp` and `tls` routes match: each match's `port`,
/// `None` for a route without one.
fn stream_ports(vs: &VirtualService) -> Vec<Option<u32>> {
    let mut out = Vec::new();
    for r in vs.spec.tcp.iter().chain(vs.spec.tls.iter()) {
        let ports: Vec<Option<u32>> = r.matches.iter().map(|m| m.port).collect();
        match ports.is_empty() || ports.contains(&None) {
            true => out.push(None),
            false => out.extend(ports),
        }
    }
    out
}

/// The EnvoyFilters, with what they say they use and what they name.
pub(super) fn envoy_filters(inputs: &Inputs) -> Vec<EnvoyFilterInfo> {
    inputs
        .envoy_filters
        .iter()
        .map(|f| {
            let referenced_services = f
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::istio::REFERENCED_SERVICES_ANNOTATION))
                .map(|v| {
                    // Split as istiod splits it, spaces kept.
                    v.split(',')
                        .filter(|r| !r.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            let mut named_clusters = std::collections::BTreeSet::new();
            for p in &f.spec.config_patches {
                named_clusters_in(p, &mut named_clusters);
            }
            EnvoyFilterInfo {
                name: name_of(&f.metadata),
                namespace: ns_of(&f.metadata),
                selector: f
                    .spec
                    .workload_selector
                    .as_ref()
                    .map(|s| s.labels.clone().into_iter().collect()),
                referenced_services,
                named_clusters: named_clusters.into_iter().collect(),
            }
        })
        .collect()
}

/// Every `outbound|PORT|SUBSET|HOST` spelled in `v`'s strings, alone or
/// inside code (a Lua `httpCall`).
fn named_clusters_in(v: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
    match v {
        serde_json::Value::String(s) => {
            let mut rest = s.as_str();
            while let Some(i) = rest.find("outbound|") {
                let tail = &rest[i..];
                let end = tail
                    .find(|c: char| c.is_whitespace() || "\"'`,;()[]{}<>".contains(c))
                    .unwrap_or(tail.len());
                let name = &tail[..end];
                if name.split('|').count() == 4 && !name.ends_with('|') {
                    out.insert(name.to_string());
                }
                rest = &tail[end.max(1)..];
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| named_clusters_in(x, out)),
        serde_json::Value::Object(m) => m.values().for_each(|x| named_clusters_in(x, out)),
        _ => {}
    }
}

/// The Gateways, with the namespaces of the pods each selects.
pub(super) fn gateways(inputs: &Inputs, pods: &[PodInfo]) -> Vec<GatewayInfo> {
    let istio = inputs.gateways.iter().map(|g| {
        let selector: crate::labels::Labels = g.spec.selector.clone().into_iter().collect();
        let pod_namespaces = pods
            .iter()
            .filter(|p| !selector.is_empty() && selector_matches(&selector, &p.labels))
            .map(|p| p.namespace.clone())
            .collect();
        GatewayInfo {
            name: name_of(&g.metadata),
            namespace: ns_of(&g.metadata),
            selector,
            pod_namespaces,
            servers: g
                .spec
                .servers
                .iter()
                .filter_map(|s| {
                    let p = s.port.as_ref()?;
                    Some(ServerInfo {
                        port: p.number,
                        name: p.name.clone(),
                        protocol: p.protocol.clone(),
                        tls_mode: s.tls.as_ref().and_then(|t| t.mode.clone()),
                        hosts: s.hosts.clone(),
                    })
                })
                .collect(),
            auto_passthrough: g.spec.servers.iter().any(|s| {
                s.tls.as_ref().and_then(|t| t.mode.as_deref()) == Some("AUTO_PASSTHROUGH")
            }),
            kube: false,
            foreign: None,
        }
    });
    // A Gateway API Gateway's pods run in its namespace, whether or not
    // they have started.
    let kube = inputs.kube_gateways.iter().map(|g| {
        let (name, ns) = (name_of(&g.metadata), ns_of(&g.metadata));
        GatewayInfo {
            selector: [(
                crate::gateway_api::GATEWAY_NAME_LABEL.to_string(),
                name.clone(),
            )]
            .into_iter()
            .collect(),
            pod_namespaces: [ns.clone()].into_iter().collect(),
            servers: g
                .spec
                .listeners
                .iter()
                .map(|l| ServerInfo {
                    port: l.port,
                    name: l.name.clone(),
                    protocol: l.protocol.clone(),
                    tls_mode: l.tls.as_ref().and_then(|t| t.mode.clone()),
                    hosts: Vec::new(),
                })
                .collect(),
            auto_passthrough: false,
            foreign: crate::gateway_api::foreign_controller(g, &inputs.gateway_classes),
            name,
            namespace: ns,
            kube: true,
        }
    });
    istio.chain(kube).collect()
}

/// Whether istiod runs with ambient on (`PILOT_ENABLE_AMBIENT=true`), as
/// the input shows it: the GatewayClass `istio-waypoint`, which istiod
/// creates then and only then (`GetClassInfos`,
/// `pilot/pkg/config/kube/gatewaycommon/classinfo.go`, 1.31), a Gateway
/// of that class, or a namespace or pod enrolled in ambient
/// (`istio.io/dataplane-mode: ambient`).
pub(crate) fn ambient(inputs: &Inputs) -> bool {
    const WAYPOINT_CLASS: &str = "istio-waypoint";
    let enrolled = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.labels
            .as_ref()
            .and_then(|l| l.get(crate::inject::DATAPLANE_LABEL))
            .is_some_and(|v| v == "ambient")
    };
    inputs
        .gateway_classes
        .iter()
        .any(|c| name_of(&c.metadata) == WAYPOINT_CLASS)
        || inputs
            .kube_gateways
            .iter()
            .any(|g| g.spec.gateway_class_name == WAYPOINT_CLASS)
        || inputs.namespaces.iter().any(|n| enrolled(&n.metadata))
        || inputs.pods.iter().any(|p| enrolled(&p.metadata))
}

/// The Gateway API Gateways istiod can use as waypoints ([`WaypointInfo`]).
pub(super) fn waypoints(inputs: &Inputs) -> Vec<WaypointInfo> {
    const WAYPOINT_FOR: &str = "istio.io/waypoint-for";
    let ready =
        |g: &crate::gateway_api::Gateway| g.status.as_ref().is_none_or(|s| !s.addresses.is_empty());
    inputs
        .kube_gateways
        .iter()
        .filter(|g| ready(g))
        .map(|g| {
            let class = inputs
                .gateway_classes
                .iter()
                .find(|c| name_of(&c.metadata) == g.spec.gateway_class_name);
            let label = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
                m.labels.as_ref().and_then(|l| l.get(WAYPOINT_FOR)).cloned()
            };
            let traffic = label(&g.metadata)
                .or_else(|| class.and_then(|c| label(&c.metadata)))
                .unwrap_or_else(|| "service".to_string());
            WaypointInfo {
                name: name_of(&g.metadata),
                namespace: ns_of(&g.metadata),
                traffic,
                hbone: g
                    .spec
                    .listeners
                    .iter()
                    .find(|l| l.protocol == "HBONE" && l.port == 15008)
                    .cloned(),
            }
        })
        .collect()
}

/// The VirtualServices, and their ids by namespace.
pub(super) fn virtual_services(
    inputs: &Inputs,
    mesh: &MeshConfig,
    domain: &str,
) -> (Vec<VsInfo>, HashMap<String, Vec<VsId>>) {
    let mut virtual_services: Vec<VsInfo> = inputs
        .virtual_services
        .iter()
        .map(|vs| vs_info(vs, mesh, domain))
        .collect();
    virtual_services.extend(super::routes::virtual_services(inputs, mesh, domain));
    let mut vss_by_ns: HashMap<String, Vec<VsId>> = HashMap::default();
    for (id, v) in virtual_services.iter().enumerate() {
        vss_by_ns.entry(v.namespace.clone()).or_default().push(id);
    }
    (virtual_services, vss_by_ns)
}

/// The DestinationRules, and their ids by namespace, oldest first.
pub(super) fn destination_rules(
    inputs: &Inputs,
    mesh: &MeshConfig,
    domain: &str,
) -> (Vec<DrInfo>, HashMap<String, Vec<DrId>>) {
    let destination_rules: Vec<DrInfo> = inputs
        .destination_rules
        .iter()
        .map(|dr| {
            let ns = ns_of(&dr.metadata);
            DrInfo {
                name: name_of(&dr.metadata),
                host: resolve_short_name(&dr.spec.host, &ns, domain),
                subsets: dr
                    .spec
                    .subsets
                    .iter()
                    .filter_map(|v| v.get("name").and_then(|n| n.as_str()))
                    .map(String::from)
                    .collect(),
                subset_labels: dr
                    .spec
                    .subsets
                    .iter()
                    .filter(|v| v.get("name").and_then(|n| n.as_str()).is_some())
                    .map(labels_field)
                    .collect(),
                export: Export::for_destination_rule(
                    dr.spec.export_to.as_deref(),
                    &mesh.default_destination_rule_export_to,
                    &ns,
                ),
                export_to: dr.spec.export_to.clone().unwrap_or_default(),
                selector: dr
                    .spec
                    .workload_selector
                    .as_ref()
                    .map(|s| s.match_labels.clone()),
                declared: declared(dr.spec.export_to.as_deref()),
                declared_ours: export_to_is_ours(&dr.metadata),
                created: created(&dr.metadata),
                namespace: ns,
            }
        })
        .collect();
    let mut drs_by_ns: HashMap<String, Vec<DrId>> = HashMap::default();
    for (id, d) in destination_rules.iter().enumerate() {
        drs_by_ns.entry(d.namespace.clone()).or_default().push(id);
    }
    for ids in drs_by_ns.values_mut() {
        ids.sort_by(|a, b| {
            let (a, b) = (&destination_rules[*a], &destination_rules[*b]);
            (a.created, &a.name).cmp(&(b.created, &b.name))
        });
    }
    (destination_rules, drs_by_ns)
}

/// The listeners istiod builds from a Sidecar's egress (invalid hosts
/// dropped).
pub fn sidecar_listeners(sc: &Sidecar, options: &Options) -> Vec<Listener> {
    sidecar_info(sc, options).listeners
}

fn sidecar_info(sc: &Sidecar, options: &Options) -> SidecarInfo {
    let mut invalid_hosts = Vec::new();
    let listeners = sc
        .spec
        .egress
        .iter()
        .map(|l| Listener {
            port: l
                .port
                .as_ref()
                .and_then(|p| p.number)
                .filter(|n| *n != 0)
                .filter(|_| {
                    l.port.as_ref().and_then(|p| p.protocol.as_deref()) != Some("HTTP_PROXY")
                }),
            protocol: l
                .port
                .as_ref()
                .and_then(|p| p.protocol.as_deref())
                .filter(|p| !p.is_empty() && *p != "HTTP_PROXY")
                .map(Protocol::parse),
            tls: l
                .port
                .as_ref()
                .and_then(|p| p.protocol.as_deref())
                .is_some_and(Protocol::tls_name),
            hosts: l
                .hosts
                .iter()
                .filter_map(|h| match HostEntry::parse(h, options.istio) {
                    Ok(e) => Some(e),
                    Err(e) => {
                        invalid_hosts.push(e);
                        None
                    }
                })
                .collect(),
        })
        .collect();
    SidecarInfo {
        name: name_of(&sc.metadata),
        namespace: ns_of(&sc.metadata),
        created: created(&sc.metadata),
        selector: sc.spec.workload_selector.as_ref().map(|s| s.labels.clone()),
        listeners,
        invalid_hosts,
        managed: managed_by_meshscope(sc.metadata.labels.as_ref()),
        object: sc.clone(),
    }
}

fn vs_info(vs: &VirtualService, mesh: &MeshConfig, domain: &str) -> VsInfo {
    let ns = ns_of(&vs.metadata);
    let mut dests = Vec::new();
    let mut push = |d: &crate::istio::Destination, src: &[String]| {
        if d.host.is_empty() {
            return;
        }
        dests.push(VsDest {
            host: resolve_short_name(&d.host, &ns, domain),
            port: d.port.as_ref().and_then(|p| p.number),
            source_namespaces: src.to_vec(),
        });
    };
    let delegates = vs
        .spec
        .http
        .iter()
        .filter_map(|r| r.delegate.as_ref())
        .filter(|d| !d.name.is_empty())
        .map(|d| {
            let dns = d.namespace.clone().filter(|n| !n.is_empty());
            (dns.unwrap_or_else(|| ns.clone()), d.name.clone())
        })
        .collect();
    for r in &vs.spec.http {
        // A route whose matches name source namespaces applies to those
        // only, even beside a match that names none
        // (`virtualServiceDestinationsFilteredBySourceNamespace`,
        // push_context.go 1.31); with none named it applies everywhere.
        let src: Vec<String> = r
            .matches
            .iter()
            .filter_map(|m| m.source_namespace.clone())
            .filter(|n| !n.is_empty())
            .collect();
        for d in r.route.iter().filter_map(|d| d.destination.as_ref()) {
            push(d, &src);
        }
        if let Some(m) = &r.mirror {
            push(m, &src);
        }
        for d in r.mirrors.iter().filter_map(|d| d.destination.as_ref()) {
            push(d, &src);
        }
    }
    for r in vs.spec.tcp.iter().chain(vs.spec.tls.iter()) {
        for d in r.route.iter().filter_map(|d| d.destination.as_ref()) {
            push(d, &[]);
        }
    }
    VsInfo {
        name: name_of(&vs.metadata),
        hosts: vs
            .spec
            .hosts
            .iter()
            .map(|h| resolve_short_name(h, &ns, domain))
            .collect(),
        mesh_bound: vs.spec.gateways.is_empty() || vs.spec.gateways.iter().any(|g| g == "mesh"),
        gateways: vs
            .spec
            .gateways
            .iter()
            .filter(|g| *g != "mesh")
            .map(|g| match g.split_once('/') {
                Some(_) => g.clone(),
                None => format!("{ns}/{g}"),
            })
            .collect(),
        declared: declared(vs.spec.export_to.as_deref()),
        declared_ours: export_to_is_ours(&vs.metadata),
        export: Export::for_virtual_service(
            vs.spec.export_to.as_deref(),
            &mesh.default_virtual_service_export_to,
            &ns,
        ),
        dests,
        stream_ports: stream_ports(vs),
        delegates,
        created: created(&vs.metadata),
        namespace: ns,
        route: None,
    }
}
