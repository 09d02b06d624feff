//! The client's protocol on made-up responses, and the simulator against
//! an address nothing listens on.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::{filter, Filter, FilterChain, Listener};
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, HttpConnectionManager, Rds,
};
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use envoy_types::pb::google::protobuf::{value::Kind, Any, Struct};
use prost::Message as _;

use super::refs::HCM_TYPE;
use super::*;

fn spec() -> ProxySpec {
    ProxySpec::new("ns1", "a-0", "10.1.0.5")
        .with_label("app", "a")
        .with_label("version", "v1")
}

fn any<M: prost::Message>(type_url: &str, m: &M) -> Any {
    Any {
        type_url: type_url.into(),
        value: m.encode_to_vec(),
    }
}

fn cluster(name: &str, ty: cluster::DiscoveryType, service: &str) -> Any {
    let c = Cluster {
        name: name.into(),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(ty as i32)),
        eds_cluster_config: (ty == cluster::DiscoveryType::Eds).then(|| {
            cluster::EdsClusterConfig {
                service_name: service.into(),
                ..Default::default()
            }
        }),
        ..Default::default()
    };
    any(CLUSTER_TYPE, &c)
}

fn hcm_filter(route: Option<&str>) -> Filter {
    let hcm = HttpConnectionManager {
        stat_prefix: "x".into(),
        route_specifier: Some(match route {
            Some(r) => RouteSpecifier::Rds(Rds {
                route_config_name: r.into(),
                ..Default::default()
            }),
            None => RouteSpecifier::RouteConfig(RouteConfiguration {
                name: "inline".into(),
                ..Default::default()
            }),
        }),
        ..Default::default()
    };
    Filter {
        name: "envoy.filters.network.http_connection_manager".into(),
        config_type: Some(filter::ConfigType::TypedConfig(any(HCM_TYPE, &hcm))),
    }
}

fn listener(name: &str, routes: &[&str]) -> Any {
    let mut l = Listener {
        name: name.into(),
        ..Default::default()
    };
    for r in routes {
        l.filter_chains.push(FilterChain {
            filters: vec![hcm_filter(Some(r))],
            ..Default::default()
        });
    }
    // An inline route table is not an RDS subscription.
    l.default_filter_chain = Some(FilterChain {
        filters: vec![hcm_filter(None)],
        ..Default::default()
    });
    any(LISTENER_TYPE, &l)
}

fn cla(name: &str, endpoints: usize) -> Any {
    let c = ClusterLoadAssignment {
        cluster_name: name.into(),
        endpoints: vec![Default::default(); endpoints],
        ..Default::default()
    };
    any(ENDPOINT_TYPE, &c)
}

fn route(name: &str) -> Any {
    any(
        ROUTE_TYPE,
        &RouteConfiguration {
            name: name.into(),
            ..Default::default()
        },
    )
}

fn resp(type_url: &str, version: &str, nonce: &str, resources: Vec<Any>) -> DiscoveryResponse {
    DiscoveryResponse {
        version_info: version.into(),
        type_url: type_url.into(),
        nonce: nonce.into(),
        resources,
        ..Default::default()
    }
}

fn names(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn str_field<'a>(s: &'a Struct, k: &str) -> &'a str {
    match &s.fields[k].kind {
        Some(Kind::StringValue(v)) => v,
        other => panic!("{k}: not a string: {other:?}"),
    }
}

#[test]
fn node_id_and_metadata() {
    let s = spec();
    assert_eq!(
        s.node_id(),
        "sidecar~10.1.0.5~a-0.ns1~ns1.svc.cluster.local"
    );
    assert_eq!(s.proxy_id(), "a-0.ns1");
    assert_eq!(s.key(), "ns1/a-0");
    let node = s.node();
    assert_eq!(node.id, s.node_id());
    let md = node.metadata.unwrap();
    let mut keys: Vec<&str> = md.fields.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "CLUSTER_ID",
            "INSTANCE_IPS",
            "ISTIO_VERSION",
            "LABELS",
            "MESH_ID",
            "NAME",
            "NAMESPACE",
            "NODE_NAME",
            "PROXY_CONFIG",
            "SERVICE_ACCOUNT",
            "WORKLOAD_NAME"
        ]
    );
    assert_eq!(str_field(&md, "NAMESPACE"), "ns1");
    assert_eq!(str_field(&md, "NAME"), "a-0");
    assert_eq!(str_field(&md, "INSTANCE_IPS"), "10.1.0.5");
    assert_eq!(str_field(&md, "CLUSTER_ID"), "Kubernetes");
    assert_eq!(str_field(&md, "ISTIO_VERSION"), "1.31-dev");
    assert_eq!(str_field(&md, "SERVICE_ACCOUNT"), "default");
    assert_eq!(str_field(&md, "WORKLOAD_NAME"), "a-0");
    assert_eq!(str_field(&md, "MESH_ID"), "cluster.local");
    assert_eq!(str_field(&md, "NODE_NAME"), "meshscope-sim");
    let Some(Kind::StructValue(labels)) = &md.fields["LABELS"].kind else {
        panic!("LABELS is not a Struct");
    };
    assert_eq!(labels.fields.len(), 2);
    assert_eq!(str_field(labels, "app"), "a");
    assert_eq!(str_field(labels, "version"), "v1");
    let Some(Kind::StructValue(pc)) = &md.fields["PROXY_CONFIG"].kind else {
        panic!("PROXY_CONFIG is not a Struct");
    };
    assert!(pc.fields.is_empty());
    // The same spec gives the same metadata, and the same encoded size.
    assert_eq!(s.metadata(), spec().metadata());
    assert_eq!(s.node().encoded_len(), spec().node().encoded_len());
}

#[test]
fn node_on_first_request_only() {
    let mut st = XdsState::new(spec().node());
    let init = st.initial_requests();
    assert_eq!(init.len(), 2);
    assert_eq!(init[0].type_url, CLUSTER_TYPE);
    assert!(init[0].node.is_some());
    assert_eq!(init[1].type_url, LISTENER_TYPE);
    assert!(init[1].node.is_none());
    assert!(init.iter().all(|r| r.resource_names.is_empty()
        && r.version_info.is_empty()
        && r.response_nonce.is_empty()));
    let out = st.on_response(&resp(CLUSTER_TYPE, "v1", "n1", vec![]), Instant::now());
    assert!(out.iter().all(|r| r.node.is_none()));
}

#[test]
fn cluster_types_and_eds_names() {
    use cluster::DiscoveryType as T;
    let c = |n: &str, t: T, s: &str| Cluster::decode(cluster(n, t, s).value.as_slice()).unwrap();
    let eds = c("outbound|80||a.ns1.svc.cluster.local", T::Eds, "");
    assert_eq!(ClusterType::of(&eds), ClusterType::Eds);
    assert_eq!(
        eds_resource_name(&eds).as_deref(),
        Some("outbound|80||a.ns1.svc.cluster.local")
    );
    let named = c("x", T::Eds, "svc-x");
    assert_eq!(eds_resource_name(&named).as_deref(), Some("svc-x"));
    let dst = c("PassthroughCluster", T::OriginalDst, "");
    assert_eq!(ClusterType::of(&dst), ClusterType::OriginalDst);
    assert_eq!(ClusterType::of(&dst).as_str(), "ORIGINAL_DST");
    assert_eq!(eds_resource_name(&dst), None);
    let unset = Cluster {
        name: "BlackHoleCluster".into(),
        ..Default::default()
    };
    assert_eq!(ClusterType::of(&unset), ClusterType::Static);
    assert_eq!(
        ClusterType::of(&c("zipkin", T::StrictDns, "")).as_str(),
        "STRICT_DNS"
    );
}

#[test]
fn route_names_from_listeners() {
    let l = Listener::decode(listener("0.0.0.0_80", &["80", "8080"]).value.as_slice()).unwrap();
    assert_eq!(route_names(&l), names(&["80", "8080"]));
    let l = Listener::decode(listener("virtualInbound", &[]).value.as_slice()).unwrap();
    assert!(route_names(&l).is_empty());
}

#[test]
fn eds_merge_is_incremental_and_subscribed_only() {
    let mut m = BTreeMap::new();
    let sub = names(&["a", "b", "c"]);
    merge_subscribed(
        &mut m,
        [("a".into(), 10), ("b".into(), 20), ("c".into(), 30)],
        &sub,
    );
    assert_eq!(m.values().sum::<u64>(), 60);
    // Only b changed: a and c keep their sizes.
    merge_subscribed(&mut m, [("b".into(), 25)], &sub);
    assert_eq!(m["a"], 10);
    assert_eq!(m["b"], 25);
    assert_eq!(m["c"], 30);
    // c is no longer subscribed; a reply that still names it is ignored.
    let sub = names(&["a", "b"]);
    merge_subscribed(&mut m, [("c".into(), 31)], &sub);
    assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "b"]);
    // A wildcard response replaces everything.
    replace_all(&mut m, [("z".into(), 1)]);
    assert_eq!(m.keys().collect::<Vec<_>>(), ["z"]);
    let (added, removed) = subscription_delta(&names(&["a", "b"]), &names(&["b", "c"]));
    assert_eq!(added, names(&["c"]));
    assert_eq!(removed, names(&["a"]));
}

#[test]
fn protocol_subscribes_acks_and_follows_changes() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let mut st = XdsState::new(spec().node());
    st.initial_requests();
    assert!(!st.ready());
    let b_size = first_config(&mut st, &at);
    endpoints_change_and_clusters_shrink(&mut st, &at, b_size);
    routes_move_and_clusters_repeat(&mut st, &at);

    let snap = ProxyConfig::from_state("ns1/a-0", &st);
    assert_eq!(snap.names("cds"), ["outbound|80||a"]);
    assert_eq!(snap.total("eds").count, 1);
    assert_eq!(
        snap.total_bytes,
        snap.totals.values().map(|t| t.bytes).sum::<u64>()
    );
    let j = snap.to_json();
    assert_eq!(j["proxy"], "ns1/a-0");
    assert_eq!(j["types"]["cds"]["count"], 1);
    assert!(
        j["types"]["cds"]["resources"]["outbound|80||a"]
            .as_u64()
            .unwrap()
            > 0
    );

    let pushes: Vec<&str> = st.pushes().iter().map(|p| p.ty).collect();
    assert_eq!(
        pushes,
        ["cds", "lds", "eds", "rds", "eds", "cds", "lds", "rds", "rds", "cds"]
    );
}

/// The first pushes of [`protocol_subscribes_acks_and_follows_changes`]:
/// CDS and LDS, then the EDS and RDS they subscribe to; returns the size
/// of EDS resource `outbound|80||b`.
fn first_config(st: &mut XdsState, at: &impl Fn(u64) -> Instant) -> u64 {
    use cluster::DiscoveryType as T;
    // CDS: two EDS clusters and a passthrough one.
    let out = st.on_response(
        &resp(
            CLUSTER_TYPE,
            "c1",
            "n1",
            vec![
                cluster("outbound|80||a", T::Eds, ""),
                cluster("outbound|80||b", T::Eds, ""),
                cluster("PassthroughCluster", T::OriginalDst, ""),
            ],
        ),
        at(1),
    );
    assert_eq!(out.len(), 2);
    assert_eq!(
        (
            out[0].type_url.as_str(),
            out[0].version_info.as_str(),
            out[0].response_nonce.as_str()
        ),
        (CLUSTER_TYPE, "c1", "n1")
    );
    assert!(out[0].resource_names.is_empty());
    assert_eq!(out[1].type_url, ENDPOINT_TYPE);
    assert_eq!(out[1].resource_names, ["outbound|80||a", "outbound|80||b"]);
    assert_eq!(
        (out[1].version_info.as_str(), out[1].response_nonce.as_str()),
        ("", "")
    );
    assert_eq!(
        st.cluster_types()["PassthroughCluster"],
        ClusterType::OriginalDst
    );
    st.mark_acked(at(2));
    assert_eq!(st.pushes()[0].acked_at, Some(at(2)));

    // LDS: one listener with route 80.
    let out = st.on_response(
        &resp(
            LISTENER_TYPE,
            "l1",
            "n2",
            vec![listener("0.0.0.0_80", &["80"])],
        ),
        at(3),
    );
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].type_url, ROUTE_TYPE);
    assert_eq!(out[1].resource_names, ["80"]);
    assert!(!st.ready(), "EDS and RDS not answered yet");

    // EDS answers both; RDS answers.
    let out = st.on_response(
        &resp(
            ENDPOINT_TYPE,
            "e1",
            "n3",
            vec![cla("outbound|80||a", 1), cla("outbound|80||b", 2)],
        ),
        at(4),
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].resource_names, ["outbound|80||a", "outbound|80||b"]);
    assert_eq!(
        (out[0].version_info.as_str(), out[0].response_nonce.as_str()),
        ("e1", "n3")
    );
    st.on_response(&resp(ROUTE_TYPE, "r1", "n4", vec![route("80")]), at(5));
    assert!(st.ready());
    st.resources("eds").unwrap()["outbound|80||b"]
}

/// An incremental EDS push, then a CDS push that drops a cluster (a
/// Sidecar).
fn endpoints_change_and_clusters_shrink(
    st: &mut XdsState,
    at: &impl Fn(u64) -> Instant,
    b_size: u64,
) {
    use cluster::DiscoveryType as T;
    // Incremental EDS: only a changed.
    st.on_response(
        &resp(ENDPOINT_TYPE, "e2", "n5", vec![cla("outbound|80||a", 3)]),
        at(6),
    );
    let eds = st.resources("eds").unwrap();
    assert_eq!(eds.len(), 2);
    assert_eq!(eds["outbound|80||b"], b_size);

    // CDS shrinks (a Sidecar): b goes; EDS is re-subscribed with the last
    // EDS version and nonce, and b is dropped at once.
    let out = st.on_response(
        &resp(
            CLUSTER_TYPE,
            "c2",
            "n6",
            vec![cluster("outbound|80||a", T::Eds, "")],
        ),
        at(7),
    );
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].resource_names, ["outbound|80||a"]);
    assert_eq!(
        (out[1].version_info.as_str(), out[1].response_nonce.as_str()),
        ("e2", "n5")
    );
    assert_eq!(st.resources("eds").unwrap().len(), 1);
    assert_eq!(st.resources("cds").unwrap().len(), 1);
    assert!(st.ready(), "a removal needs no answer");
}

/// LDS moves to another route, RDS answers late, and CDS repeats itself.
fn routes_move_and_clusters_repeat(st: &mut XdsState, at: &impl Fn(u64) -> Instant) {
    use cluster::DiscoveryType as T;
    // LDS moves to route 8080; an RDS reply that still answers 80 is
    // not kept.
    let out = st.on_response(
        &resp(
            LISTENER_TYPE,
            "l2",
            "n7",
            vec![listener("0.0.0.0_8080", &["8080"])],
        ),
        at(8),
    );
    assert_eq!(out[1].resource_names, ["8080"]);
    assert_eq!(
        (out[1].version_info.as_str(), out[1].response_nonce.as_str()),
        ("r1", "n4")
    );
    assert!(!st.ready(), "8080 was added");
    let out = st.on_response(&resp(ROUTE_TYPE, "r2", "n8", vec![route("80")]), at(9));
    assert_eq!(
        out[0].resource_names,
        ["8080"],
        "the ACK keeps the new names"
    );
    assert!(st.resources("rds").unwrap().is_empty());
    st.on_response(&resp(ROUTE_TYPE, "r3", "n9", vec![route("8080")]), at(10));
    assert_eq!(
        st.resources("rds").unwrap().keys().collect::<Vec<_>>(),
        ["8080"]
    );

    // The same CDS again: no EDS request.
    let out = st.on_response(
        &resp(
            CLUSTER_TYPE,
            "c3",
            "n10",
            vec![cluster("outbound|80||a", T::Eds, "")],
        ),
        at(11),
    );
    assert_eq!(out.len(), 1);
}

#[test]
fn tracked_references_follow_lds_and_rds_and_find_what_cds_lacks() {
    use cluster::DiscoveryType as T;
    use envoy_types::pb::envoy::config::route::v3::{
        route, route_action, Route, RouteAction, VirtualHost,
    };
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let routes_to = |name: &str, clusters: &[&str]| {
        let routes = clusters
            .iter()
            .map(|c| Route {
                action: Some(route::Action::Route(RouteAction {
                    cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(c.to_string())),
                    ..Default::default()
                })),
                ..Default::default()
            })
            .collect();
        any(
            ROUTE_TYPE,
            &RouteConfiguration {
                name: name.into(),
                virtual_hosts: vec![VirtualHost {
                    name: "vh".into(),
                    routes,
                    ..Default::default()
                }],
                ..Default::default()
            },
        )
    };
    let mut st = XdsState::new(spec().node());
    st.track_references();
    st.initial_requests();
    let both = vec![
        cluster("outbound|80||a", T::Static, ""),
        cluster("outbound|80||b", T::Static, ""),
    ];
    st.on_response(&resp(CLUSTER_TYPE, "c1", "n1", both), at(1));
    st.on_response(
        &resp(
            LISTENER_TYPE,
            "l1",
            "n2",
            vec![listener("0.0.0.0_80", &["80"])],
        ),
        at(2),
    );
    let r1 = routes_to("80", &["outbound|80||a", "outbound|80||b"]);
    st.on_response(&resp(ROUTE_TYPE, "r1", "n3", vec![r1]), at(3));
    assert_eq!(
        st.references().referenced()["rds/80"],
        names(&["outbound|80||a", "outbound|80||b"])
    );
    assert!(st.dangling().is_empty());

    // A narrowing: CDS without b, then RDS without b's route.
    let only_a = vec![cluster("outbound|80||a", T::Static, "")];
    st.on_response(&resp(CLUSTER_TYPE, "c2", "n4", only_a), at(4));
    assert_eq!(st.dangling().len(), 1);
    assert_eq!(
        (st.dangling()[0].push, st.dangling()[0].nonce.as_str()),
        ("cds", "n4")
    );
    let r2 = routes_to("80", &["outbound|80||a"]);
    st.on_response(&resp(ROUTE_TYPE, "r2", "n5", vec![r2]), at(6));
    assert_eq!(st.dangling().len(), 1, "resolved by the RDS push");
    let e = &st.references().episodes()[0];
    assert_eq!(e.cause(), refs::Cause::CdsBeforeListenerOrRoute);
    assert_eq!(e.duration(at(99)), Duration::from_millis(2));

    // The listener goes: its route configuration is dropped with it.
    st.on_response(&resp(LISTENER_TYPE, "l2", "n6", vec![]), at(7));
    assert!(st.references().referenced().is_empty());
    assert_eq!(st.references().checked(), 6);
    assert!(st.references().undecoded().is_empty());
}

#[test]
fn empty_subscriptions_are_not_sent_and_count_as_ready() {
    let mut st = XdsState::new(spec().node());
    st.initial_requests();
    let out = st.on_response(&resp(CLUSTER_TYPE, "c1", "n1", vec![]), Instant::now());
    assert_eq!(out.len(), 1, "no EDS request for no EDS cluster");
    st.on_response(&resp(LISTENER_TYPE, "l1", "n2", vec![]), Instant::now());
    assert!(st.ready());
}

#[test]
fn unreachable_istiod_is_an_error() {
    // A port nothing listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = Sim::connect(&format!("127.0.0.1:{port}"), spec()).unwrap_err();
    assert!(
        format!("{err:#}").contains("connecting to istiod"),
        "{err:#}"
    );
}

/// With reference tracking, each CDS push that adds or drops clusters
/// is kept with its ACK; one that changes nothing is not.
#[test]
fn cluster_changes_keep_what_each_cds_push_added_and_dropped() {
    use cluster::DiscoveryType as T;
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    let mut st = XdsState::new(spec().node());
    st.track_references();
    st.initial_requests();
    let a = || cluster("outbound|80||a", T::Static, "");
    let b = || cluster("outbound|80||b", T::Static, "");
    st.on_response(&resp(CLUSTER_TYPE, "c1", "n1", vec![a(), b()]), at(1));
    st.mark_acked(at(2));
    st.on_response(&resp(CLUSTER_TYPE, "c2", "n2", vec![a(), b()]), at(3));
    st.on_response(&resp(CLUSTER_TYPE, "c3", "n3", vec![a()]), at(4));
    let ch = st.cluster_changes();
    assert_eq!(ch.len(), 2, "{ch:#?}");
    assert_eq!(
        (ch[0].at, ch[0].acked_at, &ch[0].added, &ch[0].removed),
        (
            at(1),
            Some(at(2)),
            &set(&["outbound|80||a", "outbound|80||b"]),
            &set(&[])
        )
    );
    assert_eq!(
        (ch[1].nonce.as_str(), ch[1].acked_at, &ch[1].removed),
        ("n3", None, &set(&["outbound|80||b"]))
    );
    st.mark_acked(at(5));
    assert_eq!(st.cluster_changes()[1].acked_at, Some(at(5)));
}
