//! The client state machine of one proxy, without any I/O
//! ([`XdsState`]): the requests it makes, and what each response changes
//! in its resources and subscriptions.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use anyhow::anyhow;
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use prost::Message as _;

use super::refs::{self, DanglingRef, RefState};
use super::resources::{
    eds_resource_name, resource_name, route_names, short_type, ClusterType, TYPES,
};

/// Replace a whole map (a state-of-the-world wildcard response: CDS, LDS).
pub fn replace_all(
    map: &mut BTreeMap<String, u64>,
    resources: impl IntoIterator<Item = (String, u64)>,
) {
    *map = resources.into_iter().collect();
}

/// Merge a response for a non-wildcard type (EDS, RDS) into the map: the
/// resources it carries replace their previous sizes, others stay (istiod
/// sends only the changed ClusterLoadAssignments), and only subscribed names
/// are kept (a reply may still answer names no longer subscribed, and
/// unsubscribed names are never sent again).
pub fn merge_subscribed(
    map: &mut BTreeMap<String, u64>,
    resources: impl IntoIterator<Item = (String, u64)>,
    subscribed: &BTreeSet<String>,
) {
    for (name, bytes) in resources {
        if subscribed.contains(&name) {
            map.insert(name, bytes);
        }
    }
    map.retain(|name, _| subscribed.contains(name));
}

/// What changed between two subscription sets: (added, removed).
pub fn subscription_delta(
    old: &BTreeSet<String>,
    new: &BTreeSet<String>,
) -> (BTreeSet<String>, BTreeSet<String>) {
    (
        new.difference(old).cloned().collect(),
        old.difference(new).cloned().collect(),
    )
}

/// One response received.
#[derive(Clone, Debug)]
pub struct Push {
    /// When the response was read from the stream.
    pub at: Instant,
    pub type_url: String,
    /// `"cds"`, `"lds"`, `"rds"`, `"eds"`, or `"other"`.
    pub ty: &'static str,
    pub version: String,
    pub nonce: String,
    /// Resources in this response (for EDS only the changed ones).
    pub resources: usize,
    /// Sum of the resources' encoded sizes (their `Any.value` lengths).
    pub bytes: u64,
    /// The encoded size of the whole `DiscoveryResponse`.
    pub wire_bytes: u64,
    /// When the ACK was handed to the request stream (it is sent from there
    /// without further waiting); `None` until then.
    pub acked_at: Option<Instant>,
}

/// What one CDS push changed in a proxy's clusters (recorded with
/// [`XdsState::track_references`]), with the push's receipt and ACK: the
/// push-level view of a scope change that write-order checks read
/// ([`crate::watcher::check_order`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterChange {
    /// When the push was received (and applied).
    pub at: Instant,
    /// When it was ACKed; `None` until then.
    pub acked_at: Option<Instant>,
    pub nonce: String,
    pub added: BTreeSet<String>,
    pub removed: BTreeSet<String>,
}

/// Per-type state of one proxy.
#[derive(Clone, Debug, Default)]
pub(super) struct TypeState {
    /// name → encoded size.
    pub(super) resources: BTreeMap<String, u64>,
    /// For EDS and RDS: the names asked for (CDS, LDS: wildcard).
    subscribed: BTreeSet<String>,
    /// A request of this type has been sent at least once.
    requested: bool,
    version: String,
    nonce: String,
    responses: u64,
    last_response: Option<Instant>,
    /// The last time names were added to the subscription.
    last_added: Option<Instant>,
}

impl TypeState {
    /// Subscribed, and the subscription has been answered.
    fn answered(&self) -> bool {
        match (self.last_response, self.last_added) {
            (Some(r), Some(a)) => r >= a,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

/// The client state machine of one proxy, without any I/O: it makes the
/// requests and consumes the responses. [`Sim`](super::Sim) drives it; it
/// is public so that the protocol can be tested on made-up responses.
#[derive(Clone, Debug)]
pub struct XdsState {
    node: Option<Node>,
    pub(super) types: BTreeMap<&'static str, TypeState>,
    pub(super) cluster_types: BTreeMap<String, ClusterType>,
    pub(super) pushes: Vec<Push>,
    /// Resources that could not be decoded: they are left out of the maps
    /// (their bytes still count in the [`Push`]).
    pub(super) decode_errors: Vec<String>,
    /// Track the clusters listeners and routes name ([`refs`]); off unless
    /// [`XdsState::track_references`] (it decodes every RDS resource).
    track_refs: bool,
    refs: RefState,
    /// With `track_refs`: per CDS push that changed the cluster set, the
    /// index of its [`Push`] and the clusters it added and removed.
    cds_changes: Vec<(usize, BTreeSet<String>, BTreeSet<String>)>,
}

impl XdsState {
    pub fn new(node: Node) -> Self {
        XdsState {
            node: Some(node),
            types: TYPES
                .iter()
                .map(|(s, _)| (*s, TypeState::default()))
                .collect(),
            cluster_types: BTreeMap::new(),
            pushes: Vec::new(),
            decode_errors: Vec::new(),
            track_refs: false,
            refs: RefState::default(),
            cds_changes: Vec::new(),
        }
    }

    /// From now on keep which clusters the listeners and route
    /// configurations name, and after every push applied, which of them the
    /// current CDS does not hold ([`XdsState::dangling`]).
    ///
    /// "The state after a push" is the state once that one response is
    /// applied (the simulator ACKs it right after): CDS and LDS replace
    /// their sets, RDS merges its resources, and route configurations no
    /// listener names any more are dropped. A cluster in CDS whose EDS has
    /// not arrived counts as held (Envoy warms it; it is not a missing
    /// cluster). So the window between a CDS push and the LDS/RDS pushes
    /// that follow it in the same istiod push cycle is counted: that is
    /// istio/istio#39837. [`refs::Episode::cause`] tells those transients
    /// apart from references that outlive a push cycle.
    pub fn track_references(&mut self) {
        self.track_refs = true;
    }

    fn request(&mut self, ty: &'static str) -> DiscoveryRequest {
        let type_url = TYPES.iter().find(|(s, _)| *s == ty).expect("known type").1;
        let st = self.types.get_mut(ty).expect("known type");
        st.requested = true;
        DiscoveryRequest {
            version_info: st.version.clone(),
            // Only the first request of the stream carries the node.
            node: self.node.take(),
            resource_names: st.subscribed.iter().cloned().collect(),
            type_url: type_url.to_string(),
            response_nonce: st.nonce.clone(),
            ..Default::default()
        }
    }

    /// The first requests: CDS (with the node) and LDS, both wildcard.
    pub fn initial_requests(&mut self) -> Vec<DiscoveryRequest> {
        vec![self.request("cds"), self.request("lds")]
    }

    /// Consume one response; returns the requests to send, in order: the
    /// ACK, then any EDS/RDS subscription changes it caused.
    pub fn on_response(&mut self, resp: &DiscoveryResponse, now: Instant) -> Vec<DiscoveryRequest> {
        let ty = short_type(&resp.type_url);
        let mut sized = Vec::with_capacity(resp.resources.len());
        let mut bytes = 0u64;
        let mut eds_wanted = BTreeSet::new();
        let mut rds_wanted = BTreeSet::new();
        let mut cluster_types = BTreeMap::new();
        let mut decoded_refs = Vec::new();
        for any in &resp.resources {
            let len = any.value.len() as u64;
            bytes += len;
            let name = match ty {
                Some("cds") => match Cluster::decode(any.value.as_slice()) {
                    Ok(c) => {
                        if let Some(n) = eds_resource_name(&c) {
                            eds_wanted.insert(n);
                        }
                        cluster_types.insert(c.name.clone(), ClusterType::of(&c));
                        Ok(c.name)
                    }
                    Err(e) => Err(anyhow!(e)),
                },
                Some("lds") => match Listener::decode(any.value.as_slice()) {
                    Ok(l) => {
                        rds_wanted.extend(route_names(&l));
                        if self.track_refs {
                            let found = (refs::listener_clusters(&l), refs::mentions(&any.value));
                            decoded_refs.push((l.name.clone(), found.0, found.1));
                        }
                        Ok(l.name)
                    }
                    Err(e) => Err(anyhow!(e)),
                },
                Some("rds") if self.track_refs => {
                    match RouteConfiguration::decode(any.value.as_slice()) {
                        Ok(rc) => {
                            let found = (refs::route_clusters(&rc), refs::mentions(&any.value));
                            decoded_refs.push((rc.name.clone(), found.0, found.1));
                            Ok(rc.name)
                        }
                        Err(e) => Err(anyhow!(e)),
                    }
                }
                _ => resource_name(any),
            };
            match name {
                Ok(n) => sized.push((n, len)),
                Err(e) => self
                    .decode_errors
                    .push(format!("{}: cannot decode a resource: {e}", resp.type_url)),
            }
        }
        self.pushes.push(Push {
            at: now,
            type_url: resp.type_url.clone(),
            ty: ty.unwrap_or("other"),
            version: resp.version_info.clone(),
            nonce: resp.nonce.clone(),
            resources: resp.resources.len(),
            bytes,
            wire_bytes: resp.encoded_len() as u64,
            acked_at: None,
        });

        let Some(ty) = ty else {
            // Not subscribed to; ACK it all the same.
            return vec![DiscoveryRequest {
                version_info: resp.version_info.clone(),
                type_url: resp.type_url.clone(),
                response_nonce: resp.nonce.clone(),
                ..Default::default()
            }];
        };
        {
            let st = self.types.get_mut(ty).expect("known type");
            st.version = resp.version_info.clone();
            st.nonce = resp.nonce.clone();
            st.responses += 1;
            st.last_response = Some(now);
            if ty == "cds" && self.track_refs {
                let new: BTreeSet<&String> = sized.iter().map(|(n, _)| n).collect();
                let added: BTreeSet<String> = new
                    .iter()
                    .filter(|n| !st.resources.contains_key(n.as_str()))
                    .map(|n| n.to_string())
                    .collect();
                let removed: BTreeSet<String> = st
                    .resources
                    .keys()
                    .filter(|n| !new.contains(n))
                    .cloned()
                    .collect();
                if !added.is_empty() || !removed.is_empty() {
                    self.cds_changes
                        .push((self.pushes.len() - 1, added, removed));
                }
            }
            match ty {
                "cds" | "lds" => replace_all(&mut st.resources, sized),
                _ => {
                    let subscribed = st.subscribed.clone();
                    merge_subscribed(&mut st.resources, sized, &subscribed)
                }
            }
        }
        let mut out = vec![self.request(ty)];
        let follow = match ty {
            "cds" => {
                self.cluster_types = cluster_types;
                Some(("eds", eds_wanted))
            }
            "lds" => Some(("rds", rds_wanted)),
            _ => None,
        };
        if let Some((dep, wanted)) = follow {
            if let Some(req) = self.resubscribe(dep, wanted, now) {
                out.push(req);
            }
        }
        if self.track_refs {
            self.check_references(ty, decoded_refs, &resp.nonce, now);
        }
        out
    }

    /// Updates the references with a push's decoded resources, and checks
    /// them against the current CDS.
    fn check_references(
        &mut self,
        ty: &'static str,
        decoded: Vec<(String, BTreeSet<String>, BTreeSet<String>)>,
        nonce: &str,
        now: Instant,
    ) {
        match ty {
            "lds" => self.refs.set_listeners(decoded),
            "rds" => self.refs.merge_routes(decoded),
            _ => {}
        }
        let routes = &self.types["rds"].resources;
        self.refs.retain_routes(|n| routes.contains_key(n));
        let clusters = &self.types["cds"].resources;
        self.refs
            .check(ty, nonce, now, |c| clusters.contains_key(c));
    }

    /// The dangling references found after each push (with
    /// [`XdsState::track_references`]); `proxy` is left empty.
    pub fn dangling(&self) -> &[DanglingRef] {
        self.refs.found()
    }

    /// The references the tracker holds now, and what it found over time.
    pub fn references(&self) -> &RefState {
        &self.refs
    }

    /// Change the subscription of `ty` to `wanted`; the request to send if
    /// it changed (or was never sent and `wanted` is not empty).
    fn resubscribe(
        &mut self,
        ty: &'static str,
        wanted: BTreeSet<String>,
        now: Instant,
    ) -> Option<DiscoveryRequest> {
        let st = self.types.get_mut(ty).expect("known type");
        if st.subscribed == wanted && (st.requested || wanted.is_empty()) {
            return None;
        }
        if !st.requested && wanted.is_empty() {
            return None;
        }
        let (added, _removed) = subscription_delta(&st.subscribed, &wanted);
        if !added.is_empty() || !st.requested {
            st.last_added = Some(now);
        }
        st.resources.retain(|n, _| wanted.contains(n));
        st.subscribed = wanted;
        Some(self.request(ty))
    }

    /// Mark every push not yet ACKed as ACKed at `at`.
    pub fn mark_acked(&mut self, at: Instant) {
        for p in self.pushes.iter_mut().rev() {
            if p.acked_at.is_some() {
                break;
            }
            p.acked_at = Some(at);
        }
    }

    /// CDS and LDS received, and the EDS and RDS subscriptions answered.
    pub fn ready(&self) -> bool {
        let t = &self.types;
        t["cds"].responses > 0
            && t["lds"].responses > 0
            && ["eds", "rds"]
                .iter()
                .all(|ty| t[ty].subscribed.is_empty() || t[ty].answered())
    }

    /// Why [`XdsState::ready`] is false, for error messages.
    pub fn waiting_for(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (ty, st) in &self.types {
            let needed = matches!(*ty, "cds" | "lds") || !st.subscribed.is_empty();
            if needed && !st.answered() {
                out.push(format!("{ty} ({} subscribed)", st.subscribed.len()));
            }
        }
        out
    }

    /// The current resources of a type (`"cds"`, ...): name → bytes.
    pub fn resources(&self, ty: &str) -> Option<&BTreeMap<String, u64>> {
        self.types.get(ty).map(|s| &s.resources)
    }

    /// The current EDS or RDS subscription.
    pub fn subscribed(&self, ty: &str) -> Option<&BTreeSet<String>> {
        self.types.get(ty).map(|s| &s.subscribed)
    }

    pub fn pushes(&self) -> &[Push] {
        &self.pushes
    }

    /// The CDS pushes that added or removed clusters, oldest first (with
    /// [`XdsState::track_references`]; empty otherwise).
    pub fn cluster_changes(&self) -> Vec<ClusterChange> {
        self.cds_changes
            .iter()
            .map(|(i, added, removed)| {
                let p = &self.pushes[*i];
                ClusterChange {
                    at: p.at,
                    acked_at: p.acked_at,
                    nonce: p.nonce.clone(),
                    added: added.clone(),
                    removed: removed.clone(),
                }
            })
            .collect()
    }

    pub fn cluster_types(&self) -> &BTreeMap<String, ClusterType> {
        &self.cluster_types
    }

    pub fn decode_errors(&self) -> &[String] {
        &self.decode_errors
    }

    pub(super) fn last_rx(&self) -> Option<Instant> {
        self.pushes.last().map(|p| p.at)
    }
}
