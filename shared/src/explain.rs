//! `explain` and `impact`: the facts behind a proxy's scope, and which
//! proxies a config change is pushed to (`docs/istio-semantics.md` §4).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::edges::{self, Meets, Policy};
use crate::error::Error;
use crate::observe::Observations;
use crate::scope::{ConfigEstimate, Evaluator, ScopeSource, Visible};
use crate::snapshot::{
    selector_matches, DrId, Labels, Listener, MeshSnapshot, PodId, SvcId, SvcKind, VsId, WorkloadId,
};
use crate::target::is_route;
pub use crate::target::Target;

#[derive(Clone, Debug, Serialize)]
pub struct SidecarNote {
    pub sidecar: String,
    pub used: bool,
    /// It could apply to the pod (a matching selector, or no selector).
    pub selects: bool,
    pub reason: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct ObservedDestination {
    pub destination: String,
    pub requests: u64,
    /// `in-scope`, `out-of-scope`, or `unregistered`.
    pub status: &'static str,
    /// What the traffic meets under the scope and its outbound policy.
    pub meets: Meets,
}

/// A hostname the proxy imports that several namespaces define: which
/// copy it gets (a proxy holds one per hostname), and the others.
#[derive(Clone, Debug, Serialize)]
pub struct DuplicatedHost {
    pub hostname: String,
    /// The namespace whose copy the proxy gets, and its ports.
    pub gets: String,
    pub gets_ports: String,
    /// The other definitions, as `namespace (ports)`, marked when not
    /// exported to the proxy's namespace.
    pub others: Vec<String>,
}

/// The outbound policy and DNS capture that decide what traffic outside
/// the scope meets.
#[derive(Clone, Debug, Serialize)]
pub struct Fallthrough {
    pub policy: Policy,
    /// The cluster the outbound catch-all sends TCP to
    /// ([`Policy::catch_all_cluster`]).
    pub catch_all_cluster: String,
    pub dns_capture: bool,
}

/// A service the mesh config makes the proxy call itself (an extension
/// provider's), and whether its scope imports it.
#[derive(Clone, Debug, Serialize)]
pub struct RequiredHost {
    /// The egress host that imports it.
    pub host: String,
    pub service: String,
    pub port: Option<u32>,
    pub why: Vec<String>,
    /// `in-scope`, `out-of-scope` (MS0013), or `unusable` (see `problem`).
    pub status: &'static str,
    pub problem: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PushSources {
    pub sidecar: Option<String>,
    pub services: usize,
    /// The services it serves (`ns/hostname`): the Services and
    /// ServiceEntries that select it, whose changes reach it whatever its
    /// scope imports.
    pub serving: Vec<String>,
    pub virtual_services: Vec<String>,
    pub destination_rules: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    pub pod: Option<String>,
    pub namespace: String,
    pub workload: String,
    pub injected: bool,
    pub ambient: bool,
    /// The injector's rules inject pods like it, but it runs without the
    /// proxy (created before they applied; MS0015).
    pub proxy_missing: bool,
    pub injection_reason: String,
    /// A gateway or waypoint proxy: istiod ignores Sidecars for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<crate::inject::Gateway>,
    pub scope_source: &'static str,
    pub sidecar: Option<String>,
    pub scope_reason: String,
    pub sidecars: Vec<SidecarNote>,
    pub egress_hosts: Vec<String>,
    /// Extension-provider services the proxy calls itself.
    pub required: Vec<RequiredHost>,
    pub visible_service_count: usize,
    pub visible_services: Vec<String>,
    /// The outbound clusters istiod sends this proxy (see
    /// [`MeshSnapshot::outbound_clusters`]); for a waypoint's pod, its
    /// `inbound-vip` clusters too ([`crate::waypoint`]).
    pub outbound_clusters: Vec<String>,
    /// For a gateway's or waypoint's pod, the outbound clusters istiod
    /// sends it instead when, in a push, a sidecar of its namespace with
    /// the implicit default scope had its scope computed first: istiod
    /// then reuses that sidecar scope for the gateway
    /// ([`Evaluator::gateway_alternative`]).
    /// `None` when no such sidecar exists or the two agree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outbound_clusters_if_shared: Option<Vec<String>>,
    /// For a gateway's router proxy: what it gets with istiod's
    /// `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG=true`
    /// ([`crate::gateway_clusters`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_filter: Option<crate::gateway_clusters::Filtered>,
    /// For an east-west gateway's pod (an `AUTO_PASSTHROUGH` server): its
    /// SNI-DNAT clusters, with the flag on or off
    /// ([`crate::gateway_clusters::sni_dnat_clusters`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sni_dnat_clusters: Vec<String>,
    /// Those SNI-DNAT clusters when istiod gives the gateway its
    /// namespace's sidecar scope instead (as `outbound_clusters_if_shared`;
    /// random seed 5008).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sni_dnat_clusters_if_shared: Option<Vec<String>>,
    /// The outbound listeners istiod sends this proxy, by name (see
    /// [`MeshSnapshot::outbound_listeners`]; the virtual ones aside).
    pub outbound_listeners: Vec<String>,
    /// The route configurations those listeners name (RDS).
    pub outbound_routes: Vec<String>,
    /// The Gateway API routes the proxy gets and their clusters: the mesh
    /// routes its scope selects, and for a gateway's pod the routes of the
    /// Gateways it serves ([`crate::gateway_routes::routes_for`]).
    pub routes: Vec<crate::gateway_routes::RouteSeen>,
    pub estimate: ConfigEstimate,
    pub unscoped_estimate: ConfigEstimate,
    pub pushed_by: PushSources,
    pub observed: Option<Vec<ObservedDestination>>,
    pub fallthrough: Fallthrough,
    /// Imported hostnames defined in several namespaces.
    pub duplicated_hosts: Vec<DuplicatedHost>,
}

fn source_kind(s: ScopeSource) -> &'static str {
    match s {
        ScopeSource::Workload(_) => "workload",
        ScopeSource::Namespace(_) => "namespace",
        ScopeSource::Root(_) => "root",
        ScopeSource::Implicit => "none",
    }
}

pub fn explain(
    snap: &MeshSnapshot,
    w: WorkloadId,
    pod: Option<PodId>,
    obs: Option<&Observations>,
) -> Explanation {
    let wl = &snap.workloads[w];
    let ns = wl.namespace.as_str();
    let (labels, injection): (&Labels, _) = match pod {
        Some(p) => (&snap.pods[p].labels, &snap.pods[p].injection),
        None => (snap.workload_labels(w), &wl.injection),
    };
    // The proxy estimated: the pod's, else the workload's first.
    let own_ip = pod
        .or(wl.pods.first().copied())
        .and_then(|p| snap.pods[p].ips.first().copied());
    let sel = snap.select_for(ns, labels, injection);
    let mut notes = Vec::new();
    for &id in snap.sidecars_in(ns) {
        let sc = &snap.sidecars[id];
        let used = sel.source.sidecar() == Some(id);
        let reason = match &sc.selector {
            Some(s) if !selector_matches(s, labels) => format!(
                "its workloadSelector {} does not match the pod's labels",
                fmt(s)
            ),
            Some(_) if used => {
                "its workloadSelector matches the pod's labels, and it is the oldest that does"
                    .into()
            }
            Some(_) => format!(
                "it also selects the pod, but {} is older (istiod uses the oldest)",
                sel.matching_selectors
                    .first()
                    .map_or("another", |s| snap.sidecars[*s].name.as_str())
            ),
            None if used => {
                "the namespace-wide default (no selector Sidecar selects the pod)".into()
            }
            None if !sel.matching_selectors.is_empty() => {
                "a selector Sidecar selects the pod, and selector Sidecars always win".into()
            }
            None => format!(
                "another namespace-wide Sidecar, {}, is older",
                sel.namespace_defaults
                    .first()
                    .map_or("?", |s| snap.sidecars[*s].name.as_str())
            ),
        };
        let selects = sc
            .selector
            .as_ref()
            .is_none_or(|s| selector_matches(s, labels));
        notes.push(SidecarNote {
            sidecar: sc.key(),
            used,
            selects,
            reason,
        });
    }
    if let Some(root) = snap.root_default() {
        if snap.sidecars[root].namespace != ns {
            let used = sel.source == ScopeSource::Root(root);
            notes.push(SidecarNote {
                sidecar: snap.sidecars[root].key(),
                used,
                selects: true,
                reason: if used {
                    "the mesh default: nothing in the pod's namespace applies".into()
                } else {
                    "the mesh default, used only when nothing in the pod's namespace applies".into()
                },
            });
        }
    }
    let mut scope_reason = sel.source.describe(snap);
    if let Some(g) = injection.gateway {
        for n in &mut notes {
            n.used = false;
            n.reason = format!("istiod ignores Sidecars for a {} proxy", g.as_str());
        }
        scope_reason = format!(
            "none: a {} proxy gets its namespace's default scope whatever Sidecar exists, so it imports every visible service (*/*)",
            g.as_str()
        );
    }
    let mut eval = Evaluator::new(snap);
    let vis = match injection.gateway {
        Some(_) => eval.gateway_visible(ns),
        None => eval.visible_for(sel.source, ns),
    };
    let unscoped = eval.unscoped(ns);
    // A router proxy may get its namespace's sidecar scope instead
    // ([`Evaluator::gateway_alternative`]).
    let router = injection.gateway == Some(crate::inject::Gateway::Router);
    let router_shared = match router {
        true => eval
            .gateway_alternative(ns, labels)
            .map(|_| eval.visible_for(ScopeSource::Implicit, ns)),
        false => None,
    };
    let listeners = snap.outbound_listeners(&vis.egress, own_ip);
    let mut listener_names = listeners.names();
    if snap.ambient {
        // istiod's HBONE-sending listener, with ambient on (see
        // `estimate_labelled`).
        listener_names.push("connect_originate".into());
        listener_names.sort();
    }
    let mut visible_services: Vec<String> = vis
        .services
        .iter()
        .map(|(id, ports)| {
            let s = &snap.services[*id];
            let ports: Vec<String> = ports.iter().map(u32::to_string).collect();
            format!("{}/{}:{}", s.namespace, s.hostname, ports.join(","))
        })
        .collect();
    visible_services.sort();
    let egress_hosts: Vec<String> = match sel.source.sidecar() {
        Some(s) if snap.sidecars[s].has_egress() => {
            snap.sidecars[s].egress_hosts().map(String::from).collect()
        }
        _ => vec!["*/*".into()],
    };
    let policy = edges::policy_for(snap, sel.source);
    let fallthrough = Fallthrough {
        catch_all_cluster: policy.catch_all_cluster(),
        policy,
        dns_capture: edges::dns_capture(snap, w),
    };
    let observed = obs.map(|o| observed_for(snap, o, w, &vis, &fallthrough));
    let duplicated_hosts = duplicated_for(snap, &vis, ns);
    let required = crate::required::required_for(snap, ns, Some(labels))
        .into_iter()
        .map(|r| {
            let status = if r.problem.is_some() {
                "unusable"
            } else if crate::recommend::required_outside(snap, std::slice::from_ref(&r), &vis)
                .is_empty()
            {
                "in-scope"
            } else {
                "out-of-scope"
            };
            RequiredHost {
                host: r.host,
                service: r.service,
                port: r.port,
                why: r.why,
                status,
                problem: r.problem,
            }
        })
        .collect();
    let mut e = Explanation {
        pod: pod.map(|p| snap.pods[p].name.clone()),
        namespace: ns.to_string(),
        workload: format!("{}/{}", wl.kind, wl.name),
        injected: injection.sidecar,
        ambient: injection.ambient,
        proxy_missing: injection.missing.is_some(),
        injection_reason: injection.reason.clone(),
        gateway: injection.gateway,
        scope_source: source_kind(sel.source),
        sidecar: sel.source.sidecar().map(|s| snap.sidecars[s].key()),
        scope_reason,
        sidecars: notes,
        egress_hosts,
        required,
        visible_service_count: vis.services.len(),
        visible_services,
        outbound_clusters: snap.outbound_clusters(&vis, Some(labels)),
        outbound_clusters_if_shared: match injection.gateway {
            Some(_) => eval.gateway_alternative(ns, labels),
            None => None,
        },
        gateway_filter: router.then(|| {
            crate::gateway_clusters::filtered(
                snap,
                &vis,
                router_shared.as_deref(),
                labels,
                own_ip,
                wl.inbound,
            )
        }),
        sni_dnat_clusters: match router {
            true => crate::gateway_clusters::sni_dnat_clusters(snap, &vis, labels),
            false => Vec::new(),
        },
        sni_dnat_clusters_if_shared: router_shared
            .as_deref()
            .map(|s| crate::gateway_clusters::sni_dnat_clusters(snap, s, labels)),
        routes: crate::gateway_routes::routes_for(
            snap,
            &vis,
            injection.gateway,
            labels,
            &listeners,
        ),
        outbound_listeners: listener_names,
        outbound_routes: listeners
            .route_names()
            .into_iter()
            .map(String::from)
            .collect(),
        estimate: snap
            .estimate_for_proxy(&vis, labels, own_ip, wl.inbound)
            .under_policy(fallthrough.policy.mode),
        unscoped_estimate: snap
            .estimate_for_proxy(&unscoped, labels, own_ip, wl.inbound)
            .under_policy(snap.mesh.outbound_traffic_policy),
        pushed_by: PushSources {
            sidecar: sel.source.sidecar().map(|s| snap.sidecars[s].key()),
            services: vis.services.len(),
            serving: serving(snap, w),
            virtual_services: vis
                .virtual_services
                .iter()
                .map(|v| {
                    let v = &snap.virtual_services[*v];
                    format!("{}/{}", v.namespace, v.name)
                })
                .collect(),
            destination_rules: vis
                .destination_rules
                .iter()
                .map(|d| {
                    let d = &snap.destination_rules[*d];
                    format!("{}/{}", d.namespace, d.name)
                })
                .collect(),
        },
        observed,
        fallthrough,
        duplicated_hosts,
    };
    if injection.gateway == Some(crate::inject::Gateway::Waypoint) {
        as_waypoint(&mut e, snap.waypoint_view(ns, labels, &vis));
    }
    if injection.gateway == Some(crate::inject::Gateway::Router) {
        as_router(&mut e, snap, labels);
    }
    e
}

/// A gateway's listeners and route configurations come from the servers
/// of the Gateways it serves, not from a scope
/// ([`crate::gateway_servers`]).
fn as_router(e: &mut Explanation, snap: &MeshSnapshot, labels: &Labels) {
    let cfg = crate::gateway_servers::gateway_config(
        snap,
        &e.namespace,
        labels,
        &e.routes,
        &e.sni_dnat_clusters,
    );
    e.outbound_listeners = cfg.listeners;
    if snap.ambient {
        e.outbound_listeners.push("connect_originate".into());
        e.outbound_listeners.sort();
    }
    e.outbound_routes = cfg.routes;
}

/// What istiod sends a waypoint instead of a scope: its clusters, its
/// fixed listeners, no route configuration (its routes are inline in its
/// `main_internal` listener, not compared: [`crate::waypoint`]).
fn as_waypoint(e: &mut Explanation, v: crate::waypoint::WaypointView) {
    e.outbound_clusters = v.clusters;
    e.outbound_clusters_if_shared = None;
    e.gateway_filter = None;
    e.outbound_listeners = crate::waypoint::LISTENERS.map(String::from).to_vec();
    e.outbound_routes.clear();
    e.estimate = v.estimate;
    e.scope_reason = v.reason;
    for r in &mut e.routes {
        r.applies = false;
        r.reason = Some("a waypoint gets no route configuration: its routes are inline in its main_internal listener".into());
    }
}

fn duplicated_for(snap: &MeshSnapshot, vis: &Visible, ns: &str) -> Vec<DuplicatedHost> {
    let mut out = Vec::new();
    for &id in vis.services.keys() {
        let got = &snap.services[id];
        let others: Vec<String> = snap
            .services_named(&got.hostname)
            .iter()
            .filter(|o| snap.services[**o].namespace != got.namespace)
            .map(|o| {
                let s = &snap.services[*o];
                format!(
                    "{} ({}{})",
                    s.namespace,
                    crate::duplicates::ports_text(snap, *o),
                    if s.export.visible_to(ns) {
                        ""
                    } else {
                        "; not exported here"
                    }
                )
            })
            .collect();
        if !others.is_empty() {
            out.push(DuplicatedHost {
                hostname: got.hostname.clone(),
                gets: got.namespace.clone(),
                gets_ports: crate::duplicates::ports_text(snap, id),
                others,
            });
        }
    }
    out.sort_by(|a, b| a.hostname.cmp(&b.hostname));
    out
}

fn observed_for(
    snap: &MeshSnapshot,
    obs: &Observations,
    w: WorkloadId,
    vis: &Visible,
    f: &Fallthrough,
) -> Vec<ObservedDestination> {
    let mut out = Vec::new();
    if let Some(t) = obs.of(w) {
        for e in edges::edge_outcomes(snap, t, vis, &f.policy, f.dns_capture) {
            out.push(ObservedDestination {
                destination: e.destination,
                requests: e.requests,
                status: if e.meets == Meets::InScope {
                    "in-scope"
                } else {
                    "out-of-scope"
                },
                meets: e.meets,
            });
        }
    }
    for u in obs.unregistered.iter().filter(|u| u.workload == w) {
        out.push(ObservedDestination {
            destination: u.address.clone(),
            requests: u.requests,
            status: "unregistered",
            meets: edges::meets_unregistered(u, &f.policy),
        });
    }
    out
}

/// The services `w` serves, as sorted `ns/hostname`s.
fn serving(snap: &MeshSnapshot, w: WorkloadId) -> Vec<String> {
    let ns = &snap.workloads[w].namespace;
    let mut out: Vec<String> = (snap.services_in(ns).iter())
        .filter(|id| snap.serves(w, **id))
        .map(|id| {
            let s = &snap.services[*id];
            format!("{}/{}", s.namespace, s.hostname)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn fmt(l: &Labels) -> String {
    l.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

// === impact ===

/// The workloads `obs` shows calling a host of `ids`, with their requests.
fn observed_callers(
    snap: &MeshSnapshot,
    ids: &[SvcId],
    obs: &crate::observe::Observations,
) -> BTreeMap<String, u64> {
    let hosts: Vec<&str> = ids
        .iter()
        .map(|i| snap.services[*i].hostname.as_str())
        .collect();
    let mut out = BTreeMap::new();
    for (w, t) in &obs.traffic {
        let n: u64 = t
            .outbound
            .iter()
            .filter(|((h, _), _)| hosts.contains(&h.as_str()))
            .map(|(_, e)| e.requests)
            .sum();
        if n > 0 {
            out.insert(snap.workloads[*w].key(), n);
        }
    }
    out
}

enum Keys {
    Services(Vec<SvcId>),
    /// A VirtualService, or the ones istiod makes of a route.
    Vss(Vec<VsId>),
    Dr(DrId),
    /// A Gateway: sidecars never depend on one.
    Gateway,
}

impl Keys {
    /// Whether workload `w` serves the target (a Service or ServiceEntry
    /// selecting its pods, whose inbound config it changes).
    fn served_by(&self, snap: &MeshSnapshot, w: WorkloadId) -> bool {
        match self {
            Keys::Services(ids) => ids.iter().any(|i| snap.serves(w, *i)),
            Keys::Vss(_) | Keys::Dr(_) | Keys::Gateway => false,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ImpactSide {
    pub proxies: usize,
    pub bytes: u64,
    /// `kind/ns/name` -> proxies: every workload the change is pushed to.
    pub workloads: BTreeMap<String, usize>,
    /// Those whose scope imports the target, so that they can call it
    /// (whether or not they do: [`Impact::observed_callers`]).
    pub importing: BTreeMap<String, usize>,
    /// Those that serve it: the target's Service or ServiceEntry selects
    /// their pods, and istiod builds their inbound config from it.
    pub serving: BTreeMap<String, usize>,
    /// Gateways' router proxies it is pushed to: every change of routing
    /// config, and a service their namespace sees.
    pub gateways: BTreeMap<String, usize>,
}

impl ImpactSide {
    /// Counts `n` proxies of workload `key`, each sent `bytes`, for the
    /// reasons given (none: not reached).
    fn count(&mut self, key: String, n: usize, bytes: u64, calls: bool, serves: bool) {
        if !calls && !serves {
            return;
        }
        self.proxies += n;
        self.bytes += bytes * n as u64;
        if calls {
            self.importing.insert(key.clone(), n);
        }
        if serves {
            self.serving.insert(key.clone(), n);
        }
        self.workloads.insert(key, n);
    }

    /// Counts `n` router proxies of gateway workload `key`, each sent
    /// `bytes`, when the change `reaches` them or they serve the target.
    fn count_gateway(&mut self, key: String, n: usize, bytes: u64, reached: bool, serves: bool) {
        if !reached && !serves {
            return;
        }
        self.proxies += n;
        self.bytes += bytes * n as u64;
        if reached {
            self.gateways.insert(key.clone(), n);
        }
        if serves {
            self.serving.insert(key.clone(), n);
        }
        self.workloads.insert(key, n);
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Impact {
    pub target: String,
    pub total_proxies: usize,
    pub now: ImpactSide,
    pub after: ImpactSide,
    /// The gateways' router proxies the change reaches when istiod runs
    /// with `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG=true` (workload key ->
    /// proxies): a Service or ServiceEntry change reaches a gateway only
    /// when the gateway keeps it ([`crate::gateway_clusters`]).
    pub gateways_if_filtered: BTreeMap<String, usize>,
    /// With a traffic source, for a Service or ServiceEntry: `kind/ns/name`
    /// -> requests, of the workloads seen calling it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_callers: Option<BTreeMap<String, u64>>,
}

/// Which proxies a change to `target` is pushed to, now and under the
/// `proposed` egress listeners (per workload; others keep their scope):
/// sidecars whose scope depends on it (istiod's `DependsOnConfig`), and
/// for a Service or ServiceEntry also those it selects, whose inbound
/// config it changes (`docs/istio-semantics.md` §4); and gateways' router
/// proxies ([`count_routers`]). A change reaches proxies in every
/// namespace, so every injected workload is counted unless `counted`
/// (e.g. `-l`) narrows it.
pub fn impact(
    snap: &MeshSnapshot,
    target: &Target,
    proposed: &HashMap<WorkloadId, Vec<Listener>>,
    counted: &dyn Fn(WorkloadId) -> bool,
    obs: Option<&crate::observe::Observations>,
) -> Result<Impact, Error> {
    let keys = impact_keys(snap, target)?;
    let depends = |v: &Visible| match &keys {
        Keys::Services(ids) => ids.iter().any(|i| v.imports_service(*i)),
        Keys::Vss(ids) => ids.iter().any(|id| v.virtual_services.contains(id)),
        Keys::Dr(id) => v.destination_rules.contains(id),
        Keys::Gateway => false,
    };
    let mut eval = Evaluator::new(snap);
    let mut out = Impact {
        target: target.describe(),
        total_proxies: 0,
        now: ImpactSide::default(),
        after: ImpactSide::default(),
        gateways_if_filtered: BTreeMap::new(),
        observed_callers: match (&keys, obs) {
            (Keys::Services(ids), Some(obs)) => Some(observed_callers(snap, ids, obs)),
            _ => None,
        },
    };
    for w in snap.sidecar_workloads().filter(|w| counted(*w)) {
        let wl = &snap.workloads[w];
        let n = wl.proxies();
        out.total_proxies += n;
        // Serving does not depend on the scope: the same now and after.
        let serves = keys.served_by(snap, w);
        let sel = snap.select_sidecar(&wl.namespace, snap.workload_labels(w));
        let now = eval.visible_for(sel.source, &wl.namespace);
        let bytes = |v: &Visible| snap.estimate(v, wl.inbound).bytes;
        out.now
            .count(wl.key(), n, bytes(&now), depends(&now), serves);
        let after_vis;
        let after: &Visible = match proposed.get(&w) {
            Some(listeners) => {
                after_vis = snap.visible(&wl.namespace, listeners);
                &after_vis
            }
            None => &now,
        };
        out.after
            .count(wl.key(), n, bytes(after), depends(after), serves);
    }
    count_routers(snap, &keys, counted, &mut eval, &mut out);
    Ok(out)
}

/// Counts gateways' router proxies: istiod pushes them every change but a
/// Sidecar's, and a Service's or ServiceEntry's only when their
/// namespace's default scope sees it (`proxyDependentOnConfig`,
/// `pilot/pkg/xds/proxy_dependencies.go`, istio 1.31); a Gateway's change
/// reaches them all and no sidecar (`UnAffectedConfigKinds`, there). No
/// Sidecar applies to them: the same now and after. With
/// `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG=true`, a Service's or
/// ServiceEntry's change reaches only gateways that keep it
/// (`ServiceAttachedToGateway`, push_context.go, there).
fn count_routers(
    snap: &MeshSnapshot,
    keys: &Keys,
    counted: &dyn Fn(WorkloadId) -> bool,
    eval: &mut Evaluator<'_>,
    out: &mut Impact,
) {
    let router = |w: &WorkloadId| {
        snap.workloads[*w].injection.gateway == Some(crate::inject::Gateway::Router)
    };
    for w in (0..snap.workloads.len()).filter(|w| router(w) && counted(*w)) {
        let wl = &snap.workloads[w];
        let n = wl.proxies();
        out.total_proxies += n;
        let vis = eval.gateway_visible(&wl.namespace);
        let reached = match keys {
            Keys::Services(ids) => ids.iter().any(|i| vis.imports_service(*i)),
            Keys::Vss(_) | Keys::Dr(_) | Keys::Gateway => true,
        };
        let serves = keys.served_by(snap, w);
        let bytes = snap.estimate(&vis, wl.inbound).bytes;
        for side in [&mut out.now, &mut out.after] {
            side.count_gateway(wl.key(), n, bytes, reached, serves);
        }
        let labels = snap.workload_labels(w);
        // An east-west gateway (an AUTO_PASSTHROUGH server) counts every
        // Service as attached (`ServiceAttachedToGateway`).
        let east_west = crate::gateway_clusters::served_gateways(snap, &wl.namespace, labels)
            .iter()
            .any(|g| g.auto_passthrough);
        let kept = match keys {
            Keys::Services(_) if east_west => reached,
            Keys::Services(ids) => {
                let wanted = crate::gateway_clusters::wanted(snap, &wl.namespace, labels);
                ids.iter().any(|&i| {
                    let s = &snap.services[i];
                    vis.imports_service(i) && !wanted.why(&s.namespace, &s.hostname).is_empty()
                })
            }
            _ => reached,
        };
        if kept {
            out.gateways_if_filtered.insert(wl.key(), n);
        }
    }
}

/// The objects a change to `target` is a change of, to istiod.
fn impact_keys(snap: &MeshSnapshot, target: &Target) -> Result<Keys, Error> {
    let not_found = |kind: &str, ns: &str, name: &str| Error::Object {
        kind: kind.into(),
        name: format!("{ns}/{name}"),
        reason: "not found in the snapshot".into(),
    };
    Ok(match target {
        Target::Service { namespace, name } | Target::ServiceEntry { namespace, name } => {
            let kind = if matches!(target, Target::Service { .. }) {
                SvcKind::Kube
            } else {
                SvcKind::Entry
            };
            let ids: Vec<SvcId> = (0..snap.services.len())
                .filter(|i| {
                    let s = &snap.services[*i];
                    s.kind == kind && &s.namespace == namespace && &s.name == name
                })
                .collect();
            if ids.is_empty() {
                let k = if kind == SvcKind::Kube {
                    "Service"
                } else {
                    "ServiceEntry"
                };
                return Err(not_found(k, namespace, name));
            }
            Keys::Services(ids)
        }
        Target::VirtualService { namespace, name } => Keys::Vss(vec![snap
            .vss_in(namespace)
            .iter()
            .copied()
            .find(|v| {
                let vs = &snap.virtual_services[*v];
                &vs.name == name && vs.route.is_none()
            })
            .ok_or_else(|| not_found("VirtualService", namespace, name))?]),
        Target::Route {
            kind,
            namespace,
            name,
        } => {
            let ids: Vec<VsId> = snap
                .vss_in(namespace)
                .iter()
                .copied()
                .filter(|v| is_route(&snap.virtual_services[*v], *kind, name))
                .collect();
            if ids.is_empty() {
                return Err(not_found(kind.as_str(), namespace, name));
            }
            Keys::Vss(ids)
        }
        Target::DestinationRule { namespace, name } => Keys::Dr(
            snap.drs_in(namespace)
                .iter()
                .copied()
                .find(|d| &snap.destination_rules[*d].name == name)
                .ok_or_else(|| not_found("DestinationRule", namespace, name))?,
        ),
        Target::Gateway { namespace, name } => {
            let g = snap
                .gateways
                .iter()
                .find(|g| &g.namespace == namespace && &g.name == name)
                .ok_or_else(|| not_found("Gateway", namespace, name))?;
            if let Some(controller) = &g.foreign {
                return Err(Error::Object {
                    kind: "Gateway".into(),
                    name: format!("{namespace}/{name}"),
                    reason: format!(
                        "its class belongs to controller {controller}, not istiod: istiod pushes no proxy a change of it"
                    ),
                });
            }
            Keys::Gateway
        }
    })
}
