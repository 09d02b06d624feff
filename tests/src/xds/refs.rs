//! Which clusters a proxy's listeners and routes name, and which of those
//! its CDS does not hold: the "dangling reference" of istio/istio#39837 and
//! #15226 (a route or a `tcp_proxy` that names a cluster Envoy does not
//! have answers 503 NC, or closes the connection).
//!
//! What counts as a reference (what istiod 1.31 writes for a sidecar's
//! outbound and inbound config):
//!
//! * a `tcp_proxy` network filter's `cluster` or `weighted_clusters`;
//! * an `HttpConnectionManager`'s inline `route_config` (inbound chains,
//!   and outbound chains that istiod inlines), read like an RDS resource;
//! * in a `RouteConfiguration`: every route action's `cluster`,
//!   `weighted_clusters` and `request_mirror_policies`, and the mirror
//!   policies of virtual hosts and of the route configuration.
//!
//! A route action's `cluster_header` names no cluster in the config (Envoy
//! reads it from each request) and is not counted; istiod does not write
//! it. Tracing providers (`collector_cluster`) and other filters name
//! bootstrap clusters, which are not in CDS; they are not decoded.
//! `BlackHoleCluster`, `PassthroughCluster` and `InboundPassthroughCluster`
//! are CDS clusters istiod pushes like any other, and are checked the same.
//!
//! [`mentions`] is the cross-check of the decoder: every string in a
//! resource's encoded bytes (at any depth, `Any` payloads included) that
//! looks like an istiod cluster name. A mention the decoder does not
//! report as a reference is a field it does not read.
//!
//! This module is a leaf: it knows protobuf and Envoy's types, nothing of
//! the simulator.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::listener::v3::{filter, Listener};
use envoy_types::pb::envoy::config::route::v3::{
    route, route_action, weighted_cluster::ClusterWeight, RouteConfiguration,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, HttpConnectionManager,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use prost::Message as _;

/// Type URL of the HTTP connection manager network filter.
pub const HCM_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
/// Type URL of the TCP proxy network filter.
pub const TCP_PROXY_TYPE: &str =
    "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";

/// The clusters a listener names: its `tcp_proxy` filters and the inline
/// route configurations of its HTTP connection managers (RDS names are
/// not clusters; their RouteConfigurations are read on their own).
pub fn listener_clusters(l: &Listener) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for chain in l.filter_chains.iter().chain(l.default_filter_chain.iter()) {
        for f in &chain.filters {
            let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
                continue;
            };
            match any.type_url.as_str() {
                TCP_PROXY_TYPE => {
                    if let Ok(tcp) = TcpProxy::decode(any.value.as_slice()) {
                        tcp_clusters(&tcp, &mut out);
                    }
                }
                HCM_TYPE => {
                    let Ok(hcm) = HttpConnectionManager::decode(any.value.as_slice()) else {
                        continue;
                    };
                    if let Some(RouteSpecifier::RouteConfig(rc)) = &hcm.route_specifier {
                        out.extend(route_clusters(rc));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

fn tcp_clusters(tcp: &TcpProxy, out: &mut BTreeSet<String>) {
    match &tcp.cluster_specifier {
        Some(tcp_proxy::ClusterSpecifier::Cluster(c)) => {
            out.insert(c.clone());
        }
        Some(tcp_proxy::ClusterSpecifier::WeightedClusters(w)) => {
            out.extend(w.clusters.iter().map(|c| c.name.clone()));
        }
        None => {}
    }
}

/// The clusters a route configuration names.
pub fn route_clusters(rc: &RouteConfiguration) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mirrors = |v: &[route_action::RequestMirrorPolicy], out: &mut BTreeSet<String>| {
        out.extend(v.iter().map(|m| m.cluster.clone()));
    };
    mirrors(&rc.request_mirror_policies, &mut out);
    for vh in &rc.virtual_hosts {
        mirrors(&vh.request_mirror_policies, &mut out);
        for r in &vh.routes {
            let Some(route::Action::Route(a)) = &r.action else {
                continue;
            };
            match &a.cluster_specifier {
                Some(route_action::ClusterSpecifier::Cluster(c)) => {
                    out.insert(c.clone());
                }
                Some(route_action::ClusterSpecifier::WeightedClusters(w)) => {
                    out.extend(w.clusters.iter().map(|c: &ClusterWeight| c.name.clone()));
                }
                // cluster_header and cluster specifier plugins: chosen per
                // request, no name in the config.
                _ => {}
            }
            mirrors(&a.request_mirror_policies, &mut out);
        }
    }
    out.retain(|c| !c.is_empty());
    out
}

/// Is `s` a cluster name istiod writes into CDS: `outbound|<port>|<subset>|
/// <host>`, `inbound|<port>|<subset>|<host>` (istiod leaves the inbound host
/// empty), or one of the special
/// clusters? (istiod's stat prefixes such as `inbound|http|0` and metadata
/// such as `InboundPassthroughCluster;...` are not.)
pub fn is_istiod_cluster_name(s: &str) -> bool {
    if matches!(
        s,
        "BlackHoleCluster"
            | "PassthroughCluster"
            | "InboundPassthroughCluster"
            | "InboundPassthroughClusterIpv4"
            | "InboundPassthroughClusterIpv6"
    ) {
        return true;
    }
    let parts: Vec<&str> = s.split('|').collect();
    parts.len() == 4
        && matches!(parts[0], "outbound" | "inbound")
        && parts[1].parse::<u16>().is_ok()
}

/// Every string in an encoded message, at any depth, that
/// [`is_istiod_cluster_name`]: the decoder's cross-check. The bytes are
/// read as protobuf wire format without a schema; a length-delimited field
/// is taken as a string when it is one, and read as a message when it
/// parses as one.
pub fn mentions(bytes: &[u8]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(bytes, 0, &mut out);
    out
}

/// Walks `b` as a message; false if it is not one.
fn walk(b: &[u8], depth: usize, out: &mut BTreeSet<String>) -> bool {
    if depth > 64 {
        return false;
    }
    let mut found = BTreeSet::new();
    let mut i = 0;
    while i < b.len() {
        let Some((key, n)) = varint(&b[i..]) else {
            return false;
        };
        i += n;
        if key >> 3 == 0 {
            return false;
        }
        match key & 7 {
            0 => match varint(&b[i..]) {
                Some((_, n)) => i += n,
                None => return false,
            },
            1 => i += 8,
            5 => i += 4,
            2 => {
                let Some((len, n)) = varint(&b[i..]) else {
                    return false;
                };
                i += n;
                let Some(end) = i.checked_add(len as usize).filter(|e| *e <= b.len()) else {
                    return false;
                };
                let field = &b[i..end];
                match std::str::from_utf8(field) {
                    Ok(s) if is_istiod_cluster_name(s) => {
                        found.insert(s.to_string());
                    }
                    _ => {
                        walk(field, depth + 1, &mut found);
                    }
                }
                i = end;
            }
            _ => return false,
        }
    }
    if i != b.len() {
        return false;
    }
    out.extend(found);
    true
}

fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

// ---------------------------------------------------------------------------
// Dangling references over time

/// One dangling reference in one proxy's state after one push: `resource`
/// (`lds/<listener>` or `rds/<route config>`) names `cluster`, which the
/// proxy's current CDS does not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DanglingRef {
    /// `ns/name` (`xds::Proxy::dangling` fills it in).
    pub proxy: String,
    /// When the push was received (and applied; the simulator ACKs it
    /// right after).
    pub at: Instant,
    /// `"cds"`, `"lds"`, `"rds"`, `"eds"`.
    pub push: &'static str,
    pub nonce: String,
    pub resource: String,
    pub cluster: String,
}

/// Why a dangling reference came and went (see [`Episode::cause`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    /// A CDS push dropped a cluster that a listener or route still named,
    /// and the LDS or RDS push that came next, before any other CDS push,
    /// dropped the reference: the window between the CDS and the LDS/RDS
    /// pushes of one istiod push cycle (CDS → EDS → LDS → RDS).
    CdsBeforeListenerOrRoute,
    /// An LDS or RDS push named a cluster the proxy's CDS did not hold.
    NamedBeforeCluster,
    /// Still dangling after a later CDS push, or at the time of asking: not
    /// a transient of one push cycle.
    Persistent,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::CdsBeforeListenerOrRoute => "cds-before-lds-rds",
            Cause::NamedBeforeCluster => "named-before-cluster",
            Cause::Persistent => "persistent",
        }
    }
}

/// A dangling reference from the push that made it to the push that
/// ended it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Episode {
    pub resource: String,
    pub cluster: String,
    pub opened_at: Instant,
    pub opened_by: &'static str,
    pub opened_nonce: String,
    /// When and by which push type it ended; `None` while it lasts.
    pub closed: Option<(Instant, &'static str)>,
    /// A CDS push came while it lasted (and did not end it).
    pub survived_cds: bool,
    /// Pushes after which it was still there (the opening one included).
    pub pushes: u32,
}

impl Episode {
    pub fn cause(&self) -> Cause {
        match self.closed {
            None => Cause::Persistent,
            Some(_) if self.survived_cds => Cause::Persistent,
            Some((_, by)) if self.opened_by == "cds" && matches!(by, "lds" | "rds") => {
                Cause::CdsBeforeListenerOrRoute
            }
            Some(_) if matches!(self.opened_by, "lds" | "rds") => Cause::NamedBeforeCluster,
            Some(_) => Cause::Persistent,
        }
    }

    /// How long it lasted (so far, for one that has not ended).
    pub fn duration(&self, now: Instant) -> Duration {
        self.closed.map_or(now, |(t, _)| t) - self.opened_at
    }
}

/// The referenced clusters of a proxy's current LDS and RDS resources, and
/// the dangling references found after each push.
#[derive(Clone, Debug, Default)]
pub struct RefState {
    /// Listener name → clusters it names.
    listeners: BTreeMap<String, BTreeSet<String>>,
    /// Route configuration name → clusters it names.
    routes: BTreeMap<String, BTreeSet<String>>,
    /// Per resource (`lds/..`, `rds/..`): mentions the decoder did not
    /// read as references.
    undecoded: BTreeMap<String, BTreeSet<String>>,
    found: Vec<DanglingRef>,
    episodes: Vec<Episode>,
    /// (resource, cluster) → index into `episodes` of the open one.
    open: BTreeMap<(String, String), usize>,
    checked: u64,
}

impl RefState {
    /// An LDS push: the listeners' references replace the previous ones
    /// (`decoded` holds name, references, mentions of each).
    pub fn set_listeners(&mut self, decoded: Vec<(String, BTreeSet<String>, BTreeSet<String>)>) {
        self.listeners.clear();
        self.undecoded.retain(|k, _| !k.starts_with("lds/"));
        for (name, refs, mentions) in decoded {
            self.note_undecoded(format!("lds/{name}"), &refs, mentions);
            self.listeners.insert(name, refs);
        }
    }

    /// An RDS push: these route configurations replace theirs; others stay.
    pub fn merge_routes(&mut self, decoded: Vec<(String, BTreeSet<String>, BTreeSet<String>)>) {
        for (name, refs, mentions) in decoded {
            self.note_undecoded(format!("rds/{name}"), &refs, mentions);
            self.routes.insert(name, refs);
        }
    }

    /// Keep only the route configurations the proxy still holds.
    pub fn retain_routes(&mut self, held: impl Fn(&str) -> bool) {
        self.routes.retain(|n, _| held(n));
        self.undecoded
            .retain(|k, _| k.strip_prefix("rds/").is_none_or(&held));
    }

    fn note_undecoded(&mut self, key: String, refs: &BTreeSet<String>, mentions: BTreeSet<String>) {
        let extra: BTreeSet<String> = mentions.difference(refs).cloned().collect();
        if extra.is_empty() {
            self.undecoded.remove(&key);
        } else {
            self.undecoded.insert(key, extra);
        }
    }

    /// `lds/<name>` and `rds/<name>` → the clusters each names.
    pub fn referenced(&self) -> BTreeMap<String, BTreeSet<String>> {
        let lds = self.listeners.iter().map(|(n, r)| (format!("lds/{n}"), r));
        let rds = self.routes.iter().map(|(n, r)| (format!("rds/{n}"), r));
        lds.chain(rds).map(|(k, r)| (k, r.clone())).collect()
    }

    pub fn undecoded(&self) -> &BTreeMap<String, BTreeSet<String>> {
        &self.undecoded
    }

    /// After a push has been applied: record the references `clusters`
    /// (the current CDS) does not hold, and open and close episodes.
    pub fn check(
        &mut self,
        push: &'static str,
        nonce: &str,
        at: Instant,
        clusters: impl Fn(&str) -> bool,
    ) {
        self.checked += 1;
        let mut now = BTreeSet::new();
        let all = self
            .listeners
            .iter()
            .map(|(n, r)| ("lds", n, r))
            .chain(self.routes.iter().map(|(n, r)| ("rds", n, r)));
        for (ty, name, refs) in all {
            for c in refs.iter().filter(|c| !clusters(c)) {
                now.insert((format!("{ty}/{name}"), c.clone()));
            }
        }
        for (resource, cluster) in &now {
            self.found.push(DanglingRef {
                proxy: String::new(),
                at,
                push,
                nonce: nonce.to_string(),
                resource: resource.clone(),
                cluster: cluster.clone(),
            });
        }
        let ended: Vec<(String, String)> = self
            .open
            .keys()
            .filter(|k| !now.contains(*k))
            .cloned()
            .collect();
        for k in ended {
            let i = self.open.remove(&k).expect("an open episode");
            self.episodes[i].closed = Some((at, push));
        }
        for k in now {
            match self.open.get(&k) {
                Some(&i) => {
                    let e = &mut self.episodes[i];
                    e.pushes += 1;
                    e.survived_cds |= push == "cds";
                }
                None => {
                    self.open.insert(k.clone(), self.episodes.len());
                    self.episodes.push(Episode {
                        resource: k.0,
                        cluster: k.1,
                        opened_at: at,
                        opened_by: push,
                        opened_nonce: nonce.to_string(),
                        closed: None,
                        survived_cds: false,
                        pushes: 1,
                    });
                }
            }
        }
    }

    /// Every dangling reference found, one per push it was found after.
    pub fn found(&self) -> &[DanglingRef] {
        &self.found
    }

    pub fn episodes(&self) -> &[Episode] {
        &self.episodes
    }

    /// How many pushes were checked.
    pub fn checked(&self) -> u64 {
        self.checked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::listener::v3::{Filter, FilterChain};
    use envoy_types::pb::envoy::config::route::v3::{
        Route, RouteAction, VirtualHost, WeightedCluster,
    };
    use envoy_types::pb::google::protobuf::Any;

    fn any<M: prost::Message>(type_url: &str, m: &M) -> Any {
        Any {
            type_url: type_url.into(),
            value: m.encode_to_vec(),
        }
    }

    fn names(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn to(cluster: &str) -> Route {
        Route {
            action: Some(route::Action::Route(RouteAction {
                cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster.into())),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    fn rc() -> RouteConfiguration {
        let split = Route {
            action: Some(route::Action::Route(RouteAction {
                cluster_specifier: Some(route_action::ClusterSpecifier::WeightedClusters(
                    WeightedCluster {
                        clusters: ["outbound|80|v1|a", "outbound|80|v2|a"]
                            .iter()
                            .map(|n| ClusterWeight {
                                name: n.to_string(),
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    },
                )),
                request_mirror_policies: vec![route_action::RequestMirrorPolicy {
                    cluster: "outbound|80||mirror".into(),
                    ..Default::default()
                }],
                ..Default::default()
            })),
            ..Default::default()
        };
        let by_header = Route {
            action: Some(route::Action::Route(RouteAction {
                cluster_specifier: Some(route_action::ClusterSpecifier::ClusterHeader(
                    "x-cluster".into(),
                )),
                ..Default::default()
            })),
            ..Default::default()
        };
        RouteConfiguration {
            name: "80".into(),
            virtual_hosts: vec![
                VirtualHost {
                    name: "b:80".into(),
                    routes: vec![to("outbound|80||b"), split, by_header],
                    ..Default::default()
                },
                VirtualHost {
                    name: "allow_any".into(),
                    routes: vec![to("PassthroughCluster")],
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn route_actions_weighted_clusters_and_mirrors_are_references() {
        assert_eq!(
            route_clusters(&rc()),
            names(&[
                "PassthroughCluster",
                "outbound|80|v1|a",
                "outbound|80|v2|a",
                "outbound|80||b",
                "outbound|80||mirror"
            ])
        );
        // The cross-check sees the same names in the encoded bytes.
        assert_eq!(mentions(&rc().encode_to_vec()), route_clusters(&rc()));
    }

    #[test]
    fn tcp_proxies_and_inline_route_configs_of_listeners_are_references() {
        let tcp = TcpProxy {
            stat_prefix: "outbound|5432||db".into(),
            cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(
                "outbound|5432||db".into(),
            )),
            ..Default::default()
        };
        let hcm = HttpConnectionManager {
            route_specifier: Some(RouteSpecifier::RouteConfig(rc())),
            ..Default::default()
        };
        let chain = |type_url: &str, bytes: Vec<u8>| FilterChain {
            filters: vec![Filter {
                name: "f".into(),
                config_type: Some(filter::ConfigType::TypedConfig(Any {
                    type_url: type_url.into(),
                    value: bytes,
                })),
            }],
            ..Default::default()
        };
        let l = Listener {
            name: "0.0.0.0_5432".into(),
            filter_chains: vec![chain(TCP_PROXY_TYPE, tcp.encode_to_vec())],
            default_filter_chain: Some(chain(HCM_TYPE, hcm.encode_to_vec())),
            ..Default::default()
        };
        let refs = listener_clusters(&l);
        assert!(refs.contains("outbound|5432||db"));
        assert!(refs.contains("outbound|80||b"));
        assert_eq!(refs.len(), 6);
        assert_eq!(mentions(&any("x", &l).value), refs);
    }

    #[test]
    fn mentions_see_through_any_and_skip_other_strings() {
        let l = Listener {
            name: "outbound|9||not-a-ref-but-a-name".into(),
            ..Default::default()
        };
        assert_eq!(
            mentions(&l.encode_to_vec()),
            names(&["outbound|9||not-a-ref-but-a-name"])
        );
        assert!(listener_clusters(&l).is_empty());
        assert!(mentions(b"\xff\xff").is_empty());
        // istiod's stat prefixes and metadata strings are not cluster names.
        assert!(!is_istiod_cluster_name("inbound|http|0"));
        assert!(!is_istiod_cluster_name("InboundPassthroughCluster;x"));
        assert!(is_istiod_cluster_name("inbound|8080||"));
        assert!(is_istiod_cluster_name(
            "outbound|80|v1|a.ns.svc.cluster.local"
        ));
    }

    #[test]
    fn episodes_are_classified_by_the_pushes_around_them() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut st = RefState::default();
        let r = |refs: &[&str]| vec![("80".to_string(), names(refs), names(refs))];
        st.merge_routes(r(&["outbound|80||a", "outbound|80||b"]));
        let mut cds = names(&["outbound|80||a", "outbound|80||b"]);
        st.check("rds", "n1", at(0), |c| cds.contains(c));
        assert!(st.found().is_empty());

        // A narrowing: CDS drops b, then RDS drops b's route.
        cds.remove("outbound|80||b");
        st.check("cds", "n2", at(10), |c| cds.contains(c));
        assert_eq!(st.found().len(), 1);
        assert_eq!(st.found()[0].resource, "rds/80");
        assert_eq!(st.found()[0].cluster, "outbound|80||b");
        st.check("eds", "n3", at(11), |c| cds.contains(c));
        st.merge_routes(r(&["outbound|80||a"]));
        st.check("rds", "n4", at(13), |c| cds.contains(c));
        let e = &st.episodes()[0];
        assert_eq!(e.cause(), Cause::CdsBeforeListenerOrRoute);
        assert_eq!(e.duration(at(99)), Duration::from_millis(3));
        assert_eq!(e.pushes, 2);

        // A route naming a cluster CDS never had, through a CDS push.
        st.merge_routes(r(&["outbound|80||a", "outbound|80||c"]));
        st.check("rds", "n5", at(20), |c| cds.contains(c));
        assert_eq!(st.episodes()[1].cause(), Cause::Persistent, "still open");
        st.check("cds", "n6", at(30), |c| cds.contains(c));
        cds.insert("outbound|80||c".into());
        st.check("cds", "n7", at(40), |c| cds.contains(c));
        assert!(st.episodes()[1].survived_cds);
        assert_eq!(st.episodes()[1].cause(), Cause::Persistent);

        // Named before the cluster, fixed by the next CDS.
        st.merge_routes(r(&["outbound|80||a", "outbound|80||c", "outbound|80||d"]));
        st.check("rds", "n8", at(50), |c| cds.contains(c));
        cds.insert("outbound|80||d".into());
        st.check("cds", "n9", at(51), |c| cds.contains(c));
        assert_eq!(st.episodes()[2].cause(), Cause::NamedBeforeCluster);
        assert_eq!(st.checked(), 9);

        // Route configs no longer held are forgotten.
        st.retain_routes(|_| false);
        assert!(st.referenced().is_empty());
    }
}
