//! The generators' properties, and their YAML as the API server reads it.

use std::collections::{BTreeMap, BTreeSet};

use super::realistic::TEAMS;
use super::*;
use crate::world::{labels, Pod, World};

#[test]
fn realistic_is_a_function_of_its_seed() {
    assert_eq!(realistic(1, 7), realistic(1, 7));
    assert_eq!(realistic(1, 7).access_log(), realistic(1, 7).access_log());
    assert_ne!(realistic(1, 7).edges, realistic(1, 8).edges);
    assert_eq!(social_network(1, 3), social_network(1, 3));
    assert_ne!(
        social_network(1, 3).access_log(),
        social_network(1, 4).access_log()
    );
}

#[test]
fn realistic_hubs_are_called_by_most_callers_and_the_tail_by_one_or_two() {
    for seed in 1..=20 {
        let t = realistic(1, seed);
        let callers = t.callers().len();
        assert!(callers >= 2 * TEAMS, "seed {seed}: {callers} callers");
        // auth by more than two thirds of the callers, config by most.
        for (hub, share) in [("auth", 2.0 / 3.0), ("config", 0.5)] {
            let w = t.find("rl-platform", hub).unwrap();
            let n = t.fan_in(w).len();
            assert!(
                n as f64 > share * callers as f64,
                "seed {seed}: {hub} called by {n} of {callers}"
            );
            assert_eq!(t.role(w), "hub");
        }
        let probe = t.hub_probe().unwrap();
        let most = (0..t.workloads.len()).map(|w| t.fan_in(w).len()).max();
        assert_eq!(Some(t.fan_in(probe).len()), most, "seed {seed}");
        assert_eq!(t.workloads[probe].namespace, "rl-platform", "seed {seed}");
        // The tail: every service called, most by one or two.
        let tail: Vec<usize> = (0..t.workloads.len())
            .filter(|w| t.workloads[*w].name.starts_with("svc-"))
            .collect();
        assert_eq!(tail.len(), 4 * TEAMS);
        let mut fan: Vec<usize> = tail.iter().map(|w| t.fan_in(*w).len()).collect();
        fan.sort_unstable();
        assert!(fan[0] >= 1, "seed {seed}: an uncalled tail service");
        assert!(
            fan[fan.len() / 2] <= 2,
            "seed {seed}: median fan-in {fan:?}"
        );
        assert!(
            *fan.last().unwrap() < t.fan_in(t.find("rl-platform", "auth").unwrap()).len(),
            "seed {seed}: a tail service as called as auth"
        );
        let leaf = t.leaf_probe().expect("a leaf called once");
        assert_eq!(t.fan_in(leaf).len(), 1);
        assert_eq!(t.role(leaf), "leaf");
    }
}

#[test]
fn realistic_has_every_shape_the_issue_asks_for() {
    let t = realistic(1, 1);
    assert!(t.namespaces.len() >= 10);
    // Cross-namespace calls.
    assert!(t
        .edges
        .iter()
        .any(|e| matches!(e.to, Target::Service { workload, .. }
        if t.workloads[workload].namespace != t.workloads[e.from].namespace
            && t.workloads[workload].namespace.starts_with("rl-team"))));
    // StatefulSets behind headless Services, called.
    let sts: Vec<usize> = (0..t.workloads.len())
        .filter(|w| t.workloads[*w].kind == Kind::StatefulSet)
        .collect();
    assert_eq!(sts.len(), 3);
    assert!(sts
        .iter()
        .all(|w| t.workloads[*w].headless && !t.fan_in(*w).is_empty()));
    // DNS ServiceEntries with and without exportTo, an egress route.
    assert!(t.externals.iter().any(|e| e.export.is_none()));
    assert!(t.externals.iter().any(|e| e.export.is_some()));
    assert!(t.edges.iter().any(|e| t.edge_routed(e)));
    assert!(t.mesh.contains("extensionProviders"));
    assert!(t
        .workloads
        .iter()
        .filter(|w| w.injected)
        .any(|w| w.replicas >= 3));
    // Every caller's log lines name its cluster.
    let log = t.access_log();
    for e in &t.edges {
        assert!(log.contains(&t.edge_cluster(e)), "{:?}", e);
    }
    assert!(log.contains("outbound|80||istio-egressgateway.rl-egress.svc.cluster.local"));
    // Every called pod with a sidecar logs its inbound side: no
    // called workload looks idle.
    let inbound: String = log.lines().filter(|l| l.contains(" inbound|")).collect();
    for w in 0..t.workloads.len() {
        if t.workloads[w].injected && !t.fan_in(w).is_empty() {
            for ip in t.pod_ips(w) {
                let port = t.workloads[w].ports[0].number;
                assert!(inbound.contains(&format!(" {ip}:{port} ")), "{ip}");
            }
        }
    }
    assert!(!inbound.contains("rl-egress") && !inbound.contains(":9411 "));
}

#[test]
fn social_network_is_deathstarbenchs_graph() {
    let t = social_network(1, 1);
    assert_eq!(t.workloads.len(), 26);
    let edges: usize = SOCIAL_NETWORK_CALLS.iter().map(|(_, v)| v.len()).sum();
    assert_eq!(t.edges.len(), edges);
    assert_eq!(t.callers().len(), 11);
    let user = t.find("social-network", "user-service").unwrap();
    let callers: BTreeSet<&str> = t
        .fan_in(user)
        .iter()
        .map(|w| t.workloads[*w].name.as_str())
        .collect();
    let want: BTreeSet<&str> = [
        "compose-post-service",
        "nginx-thrift",
        "social-graph-service",
    ]
    .into_iter()
    .collect();
    assert_eq!(callers, want);
    assert_eq!(t.role(user), "hub");
    let unique = t.find("social-network", "unique-id-service").unwrap();
    assert_eq!(t.role(unique), "leaf");
    assert!(t.hub_probe().is_some() && t.leaf_probe().is_some());
    assert_eq!(social_network(2, 1).workloads[0].replicas, 4);
}

#[test]
fn yaml_prints_and_parses() {
    for t in [realistic(1, 5), social_network(1, 5)] {
        let y = t.yaml();
        let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
        for doc in serde_yaml::Deserializer::from_str(&y) {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc).expect("valid YAML");
            if v.is_null() {
                continue;
            }
            let kind = v["kind"].as_str().expect("a kind").to_string();
            assert!(v["metadata"]["name"].is_string(), "{v}");
            *kinds.entry(kind).or_default() += 1;
        }
        let with_svc = t.workloads.iter().filter(|w| !w.ports.is_empty()).count();
        assert_eq!(kinds["Service"], with_svc, "{}", t.name);
        assert_eq!(kinds["Namespace"], t.namespaces.len());
        let sts = t
            .workloads
            .iter()
            .filter(|w| w.kind == Kind::StatefulSet)
            .count();
        assert_eq!(kinds.get("StatefulSet").copied().unwrap_or(0), sts);
        assert_eq!(
            kinds.get("ServiceEntry").copied().unwrap_or(0),
            t.externals.len()
        );
        assert_eq!(kinds["ConfigMap"], 1);
        // The mesh config inside parses too.
        let cm = serde_yaml::Deserializer::from_str(&y).next().unwrap();
        let v: serde_json::Value = serde::Deserialize::deserialize(cm).unwrap();
        let mesh: serde_json::Value =
            serde_yaml::from_str(v["data"]["mesh"].as_str().unwrap()).unwrap();
        assert_eq!(mesh["rootNamespace"], "istio-system");
    }
    // Ports named by number are quoted strings.
    assert!(social_network(1, 1).yaml().contains("name: \"9090\""));
}

#[test]
fn endpoint_slices_of_ports_named_by_number_parse() {
    let t = social_network(1, 1);
    let mut world = World {
        services: t.services(),
        ..World::default()
    };
    for w in 0..t.workloads.len() {
        for (r, ip) in t.pod_ips(w).into_iter().enumerate() {
            let wl = &t.workloads[w];
            world.pods.push(Pod {
                namespace: wl.namespace.clone(),
                name: format!("{}-{r}", wl.name),
                labels: labels(&[("app", &wl.name)]),
                ip,
                service_account: "default".into(),
                ready: true,
                terminating: false,
                proxied: true,
                gateway: None,
            });
        }
    }
    // Services, pods and the EndpointSlices.
    let y = world.spec_yaml();
    let mut slices = 0;
    for doc in serde_yaml::Deserializer::from_str(&y) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        if v["kind"] == "EndpointSlice" || v["kind"] == "Service" {
            let ports = if v["kind"] == "Service" {
                &v["spec"]["ports"]
            } else {
                slices += 1;
                &v["ports"]
            };
            assert!(ports[0]["name"].is_string(), "{v}");
        }
    }
    assert_eq!(slices, 26);
}

#[test]
fn realistic_sized_has_the_services_and_exactly_the_sidecars() {
    let t = realistic_sized(300, 5_000, 22);
    let services = t.services().len() + t.externals.len();
    assert!(services >= 300, "{services} services");
    assert!(realistic(t.scale - 1, 22).services().len() < 300);
    let injected: usize = t
        .workloads
        .iter()
        .filter(|w| w.injected)
        .map(|w| w.replicas)
        .sum();
    assert_eq!(injected, 5_000);
    assert!(t.workloads.iter().all(|w| w.replicas >= 1));
    // Not injected (gateways, tracing) keep their replicas.
    let base = realistic(t.scale, 22);
    for (a, b) in t.workloads.iter().zip(&base.workloads) {
        if !a.injected {
            assert_eq!(a.replicas, b.replicas, "{}", a.name);
        }
    }
}

#[test]
fn pod_ips_are_unique() {
    let t = realistic(2, 3);
    let mut all = BTreeSet::new();
    for w in 0..t.workloads.len() {
        for ip in t.pod_ips(w) {
            assert!(all.insert(ip.clone()), "{ip} twice");
        }
    }
}

#[test]
fn router_workloads_run_proxy_router_with_their_labels() {
    let plain = realistic(1, 5);
    assert!(plain.workloads.iter().all(|w| w.router.is_none()));
    assert!(!plain.yaml().contains("proxy, router"));
    let mut t = plain.clone();
    let egress = t.find("rl-egress", "istio-egressgateway").unwrap();
    t.make_router(egress, labels(&[("istio", "egressgateway")]));
    let ingress = t.add_router(
        "istio-ingress",
        "istio-ingressgateway",
        2,
        vec![port("http2", 80)],
        labels(&[("istio", "ingressgateway")]),
    );
    assert_eq!(t.namespaces.last(), Some(&("istio-ingress".into(), false)));
    assert!(!t.workloads[ingress].injected);
    // The workloads before keep their IPs.
    assert_eq!(t.pod_ips(egress), plain.pod_ips(egress));
    let mut routers = 0;
    for doc in serde_yaml::Deserializer::from_str(&t.yaml()) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        if v["kind"] != "Deployment" {
            continue;
        }
        let pod = &v["spec"]["template"];
        let proxy = pod["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "istio-proxy");
        let Some(proxy) = proxy else { continue };
        routers += 1;
        assert_eq!(proxy["args"], serde_json::json!(["proxy", "router"]));
        assert!(pod["metadata"]["labels"]["istio"]
            .as_str()
            .unwrap()
            .ends_with("gateway"));
    }
    assert_eq!(routers, 2);
}
