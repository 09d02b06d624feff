//! Manifest hints (`--from-manifest-hints`): what a workload's manifests
//! name, the words that are not hosts, and the Sidecars made from them.

use serde_json::{json, Value};

use meshscope_shared::hints::{ManifestHints, Resolver, HINTS_SOURCE};
use meshscope_shared::observe::Observations;
use meshscope_shared::recommend::{
    recommend, Outcome, RecommendOptions, HINTED_ANNOTATION, SOURCES_ANNOTATION,
};
use meshscope_shared::snapshot::{MeshSnapshot, WorkloadKind};
use meshscope_shared::{Inputs, Options};

fn service(ns: &str, name: &str, port: u32, ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
           "spec": {"clusterIP": ip, "selector": {"app": name}, "ports": [{"name": "http", "port": port}]}})
}

fn headless(ns: &str, name: &str, port: u32) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
           "spec": {"clusterIP": "None", "selector": {"app": name}, "ports": [{"name": "tcp", "port": port}]}})
}

fn service_entry(ns: &str, name: &str, host: &str, export: Option<&str>) -> Value {
    let mut spec = json!({"hosts": [host], "location": "MESH_EXTERNAL", "resolution": "NONE",
                          "ports": [{"number": 443, "name": "tls", "protocol": "TLS"}]});
    if let Some(e) = export {
        spec["exportTo"] = json!([e]);
    }
    json!({"apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn namespace(ns: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"istio-injection": "enabled"}}})
}

/// A Deployment `name` in `ns` whose container has these env values and
/// args, and reads these ConfigMaps (envFrom) and mounts `mounted`.
fn deployment(
    ns: &str,
    name: &str,
    env: &[&str],
    args: &[&str],
    env_from: &[&str],
    mounted: &[&str],
) -> Value {
    let env: Vec<Value> = env
        .iter()
        .enumerate()
        .map(|(i, v)| json!({"name": format!("V{i}"), "value": v}))
        .collect();
    let env_from: Vec<Value> = env_from
        .iter()
        .map(|n| json!({"configMapRef": {"name": n}}))
        .collect();
    let volumes: Vec<Value> = mounted
        .iter()
        .map(|n| json!({"name": n, "configMap": {"name": n}}))
        .collect();
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
           "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
               "metadata": {"labels": {"app": name}},
               "spec": {"containers": [{"name": "app", "image": "x", "env": env, "args": args, "envFrom": env_from}],
                        "volumes": volumes}}}})
}

fn config_map(ns: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data,
           "binaryData": {"blob": "aGVsbG8="}})
}

fn world(objects: Vec<Value>) -> (Inputs, MeshSnapshot) {
    let mut inputs = Inputs {
        manifest_hints: true,
        ..Default::default()
    };
    for o in objects {
        inputs.add(o).unwrap();
    }
    let snap = MeshSnapshot::build(&inputs, Options::default()).unwrap();
    (inputs, snap)
}

fn registry() -> Vec<Value> {
    vec![
        namespace("shop"),
        namespace("data"),
        service("shop", "reviews", 9080, "10.96.0.10"),
        service("shop", "info", 80, "10.96.0.11"),
        service("data", "ratings", 9080, "10.96.0.12"),
        headless("data", "kafka", 9092),
        service_entry("shop", "api", "api.example.com", None),
        service_entry("shop", "wild", "*.wild.example.com", None),
    ]
}

fn hosts_of(value: &str) -> Vec<(String, u32)> {
    let (_, snap) = world(registry());
    Resolver::new(&snap).scan("shop", value)
}

fn h(host: &str, port: u32) -> (String, u32) {
    (host.to_string(), port)
}

#[test]
fn host_references_in_every_written_form_resolve_to_registered_hostnames() {
    let reviews = h("reviews.shop.svc.cluster.local", 9080);
    let ratings = h("ratings.data.svc.cluster.local", 9080);
    for v in [
        "reviews:9080",
        "http://reviews:9080/api/v1?x=y",
        "grpc://reviews:9080",
        "--upstream=reviews:9080",
        "URL=https://user@reviews:9080/",
    ] {
        assert_eq!(hosts_of(v), std::slice::from_ref(&reviews), "{v}");
    }
    for v in [
        "ratings.data",
        "ratings.data.svc",
        "ratings.data.svc.cluster.local",
        "ratings.data.svc.cluster.local.:9080",
        "RATINGS.DATA:9080",
    ] {
        assert_eq!(hosts_of(v), std::slice::from_ref(&ratings), "{v}");
    }
    // A bare name is a Service of the workload's namespace when it is the
    // whole value; its first port when none is named.
    assert_eq!(
        hosts_of("reviews"),
        [h("reviews.shop.svc.cluster.local", 9080)]
    );
    assert_eq!(
        hosts_of("reviews:1234"),
        [h("reviews.shop.svc.cluster.local", 9080)]
    );
    // ServiceEntry hosts, a wildcard host's matches (as the wildcard), a
    // ClusterIP, a pod of a headless Service.
    assert_eq!(
        hosts_of("https://api.example.com/v2"),
        [h("api.example.com", 443)]
    );
    assert_eq!(
        hosts_of("eu.wild.example.com:443"),
        [h("*.wild.example.com", 443)]
    );
    assert_eq!(hosts_of("10.96.0.12:9080"), std::slice::from_ref(&ratings));
    assert_eq!(
        hosts_of("kafka-0.kafka.data:9092"),
        [h("kafka.data.svc.cluster.local", 9092)]
    );
    // Several in one value.
    assert_eq!(
        hosts_of("peers=reviews:9080,ratings.data.svc:9080 fallback api.example.com"),
        [h("api.example.com", 443), ratings, reviews]
    );
}

#[test]
fn words_are_not_hosts_unless_a_registered_service_is_the_whole_value() {
    // No Service `true` or `debug`; `info` exists, but only a value that
    // is just `info` names it.
    for v in [
        "true",
        "debug",
        "log level info",
        "--level=info",
        "LOG=info",
        "redis:latest",
        "info.json",
        "8080",
        "ratings",
        "ratings:9080",
        "http://unknown:80/",
        "wild.example.com",
        "api.example.com.evil.org",
    ] {
        assert_eq!(hosts_of(v), [], "{v}");
    }
    assert_eq!(hosts_of("info"), [h("info.shop.svc.cluster.local", 80)]);
    assert_eq!(hosts_of(" info "), [h("info.shop.svc.cluster.local", 80)]);
    assert_eq!(hosts_of("info:80"), [h("info.shop.svc.cluster.local", 80)]);
}

#[test]
fn hints_come_from_env_args_and_the_config_maps_a_template_reads() {
    let mut objects = registry();
    objects.extend([
        deployment(
            "shop",
            "web",
            &["reviews:9080", "true"],
            &["--peer", "ratings.data:9080"],
            &["web-env"],
            &["web-files"],
        ),
        config_map(
            "shop",
            "web-env",
            json!({"API": "https://api.example.com", "LEVEL": "debug"}),
        ),
        config_map(
            "shop",
            "web-files",
            json!({"app.yaml": "upstream: kafka-0.kafka.data:9092\n"}),
        ),
        // Not read by the workload: names nothing for it.
        config_map("shop", "other", json!({"X": "eu.wild.example.com:443"})),
    ]);
    let (inputs, snap) = world(objects);
    assert!(inputs.config_maps.iter().all(|c| c.binary_data.is_none()));
    let hints = ManifestHints::collect(&inputs, &snap);
    let w = snap
        .find_workload(&WorkloadKind::Deployment, "shop", "web")
        .unwrap();
    let got: Vec<(&str, &str)> = hints
        .of(w)
        .iter()
        .map(|h| (h.hostname.as_str(), h.found_in.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("api.example.com", "ConfigMap shop/web-env key API"),
            (
                "kafka.data.svc.cluster.local",
                "ConfigMap shop/web-files key app.yaml"
            ),
            ("ratings.data.svc.cluster.local", "container app"),
            ("reviews.shop.svc.cluster.local", "container app"),
        ]
    );
    // Without manifest_hints, ConfigMaps are read and dropped, as before.
    let mut plain = Inputs::default();
    assert_eq!(
        plain.add(config_map("shop", "web-env", json!({}))).unwrap(),
        0
    );
    assert!(plain.config_maps.is_empty());
}

#[test]
fn a_pod_keeps_only_the_strings_that_could_name_a_host() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "shop"},
        "spec": {"containers": [
            {"name": "app", "command": ["/bin/app"], "args": ["--port", "8080", "--to=reviews:9080"],
             "env": [{"name": "A", "value": "42"}, {"name": "B", "value": "reviews"},
                     {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "url"}}},
                     {"name": "D", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
             "envFrom": [{"configMapRef": {"name": "all"}}, {"secretRef": {"name": "s"}}]},
            {"name": "istio-proxy", "args": ["proxy", "--domain", "shop.svc.cluster.local"],
             "env": [{"name": "X", "value": "istiod.istio-system.svc:15012"}]}],
         "volumes": [{"name": "a", "configMap": {"name": "files"}}, {"name": "b", "secret": {"secretName": "s"}},
                     {"name": "c", "projected": {"sources": [{"configMap": {"name": "proj"}}, {"secret": {"name": "s"}}]}}]}});
    let mut plain = Inputs::default();
    plain.add(pod.clone()).unwrap();
    let spec = plain.pods[0].spec.as_ref().unwrap();
    assert!(spec.containers[0].hint_values.is_empty() && spec.config_map_volumes.is_empty());
    let mut inputs = Inputs {
        manifest_hints: true,
        ..Default::default()
    };
    inputs.add(pod).unwrap();
    let spec = inputs.pods[0].spec.as_ref().unwrap();
    let app = &spec.containers[0];
    assert_eq!(
        app.hint_values,
        ["/bin/app", "--port", "--to=reviews:9080", "reviews"]
    );
    let maps: Vec<(&str, Option<&str>)> = app
        .config_maps
        .iter()
        .map(|r| (r.name.as_str(), r.key.as_deref()))
        .collect();
    assert_eq!(maps, [("cfg", Some("url")), ("all", None)]);
    assert_eq!(spec.config_map_volumes, ["files", "proj"]);
    // The proxy keeps its --domain and nothing for hints.
    let proxy = &spec.containers[1];
    assert_eq!(proxy.domain.as_deref(), Some("shop.svc.cluster.local"));
    assert!(proxy.hint_values.is_empty());
}

#[test]
fn a_workload_without_traffic_gets_a_sidecar_from_its_hints_and_hidden_hosts_are_not_written() {
    let mut objects = registry();
    objects.extend([
        namespace("other"),
        // Exported to its own namespace only: not visible from shop.
        service_entry("other", "hidden", "hidden.example.com", Some(".")),
        deployment(
            "shop",
            "web",
            &["reviews:9080", "https://hidden.example.com"],
            &[],
            &[],
            &[],
        ),
        deployment("shop", "idle", &["log level info"], &[], &[], &[]),
    ]);
    let (inputs, snap) = world(objects);
    let web = snap
        .find_workload(&WorkloadKind::Deployment, "shop", "web")
        .unwrap();
    let idle = snap
        .find_workload(&WorkloadKind::Deployment, "shop", "idle")
        .unwrap();
    let obs = Observations::default();
    // Without hints: no evidence, as before.
    let plain = recommend(&snap, &obs, &[web, idle], &RecommendOptions::default());
    assert!(plain.iter().all(|r| r.outcome.is_no_evidence()));
    let opts = RecommendOptions {
        manifest_hints: Some(ManifestHints::collect(&inputs, &snap)),
        ..Default::default()
    };
    let recs = recommend(&snap, &obs, &[web, idle], &opts);
    let sc = recs[0].sidecar().expect("a Sidecar from hints");
    assert_eq!(
        sc.spec.egress[0].hosts,
        ["shop/reviews.shop.svc.cluster.local"]
    );
    assert_eq!(recs[0].hinted, ["shop/reviews.shop.svc.cluster.local"]);
    assert!(recs[0].dependencies.is_empty());
    assert_eq!(recs[0].not_visible, ["hidden.example.com"]);
    assert!(recs[0].unknown.is_empty());
    let ann = sc.metadata.annotations.as_ref().unwrap();
    assert_eq!(ann[SOURCES_ANNOTATION], HINTS_SOURCE);
    assert_eq!(
        ann[HINTED_ANNOTATION],
        "shop/reviews.shop.svc.cluster.local"
    );
    // Neither traffic nor hints: still no evidence.
    assert!(matches!(&recs[1].outcome, Outcome::Skipped(why)
        if why.starts_with("no evidence") && why.contains("its manifests name no registered host")));
    // A hinted host that is not exported is no evidence on its own.
    let (inputs, snap) = world(vec![
        namespace("shop"),
        namespace("other"),
        service_entry("other", "hidden", "hidden.example.com", Some(".")),
        deployment("shop", "web", &["hidden.example.com:443"], &[], &[], &[]),
    ]);
    let opts = RecommendOptions {
        manifest_hints: Some(ManifestHints::collect(&inputs, &snap)),
        ..Default::default()
    };
    let recs = recommend(&snap, &obs, &[0], &opts);
    assert_eq!(recs[0].not_visible, ["hidden.example.com"]);
    assert!(
        matches!(&recs[0].outcome, Outcome::Skipped(why) if why.contains("exported to its namespace")),
        "{:?}",
        recs[0].outcome
    );
}

#[test]
fn traffic_adds_what_the_hints_missed_and_each_stays_identifiable() {
    let mut objects = registry();
    objects.push(deployment("shop", "web", &["reviews:9080"], &[], &[], &[]));
    objects.push(deployment(
        "shop",
        "cli",
        &["https://api.example.com/"],
        &[],
        &[],
        &[],
    ));
    let (inputs, snap) = world(objects);
    let web = snap
        .find_workload(&WorkloadKind::Deployment, "shop", "web")
        .unwrap();
    let cli = snap
        .find_workload(&WorkloadKind::Deployment, "shop", "cli")
        .unwrap();
    let mut obs = Observations::default();
    obs.add_edge(web, "ratings.data.svc.cluster.local", 9080, 5, "pod-logs");
    obs.add_edge(web, "reviews.shop.svc.cluster.local", 9080, 2, "pod-logs");
    let opts = RecommendOptions {
        manifest_hints: Some(ManifestHints::collect(&inputs, &snap)),
        ..Default::default()
    };
    let recs = recommend(&snap, &obs, &[web], &opts);
    let r = &recs[0];
    let sc = r.sidecar().unwrap();
    assert_eq!(
        sc.spec.egress[0].hosts,
        [
            "data/ratings.data.svc.cluster.local",
            "shop/reviews.shop.svc.cluster.local"
        ]
    );
    assert_eq!(r.dependencies, sc.spec.egress[0].hosts);
    assert_eq!(r.hinted, ["shop/reviews.shop.svc.cluster.local"]);
    let ann = sc.metadata.annotations.as_ref().unwrap();
    assert_eq!(ann[SOURCES_ANNOTATION], "manifest-hints,pod-logs");
    assert_eq!(ann["meshscope.io/requests"], "7");
    // Without the flag the same traffic gives the same hosts, and no hint
    // marks.
    let plain = recommend(&snap, &obs, &[web], &RecommendOptions::default());
    let ann = plain[0]
        .sidecar()
        .unwrap()
        .metadata
        .annotations
        .clone()
        .unwrap();
    assert_eq!(ann[SOURCES_ANNOTATION], "pod-logs");
    assert!(!ann.contains_key(HINTED_ANNOTATION));
    assert!(plain[0].hinted.is_empty());

    // Per namespace: the hints of every workload in it.
    let opts = RecommendOptions {
        per_namespace: true,
        ..opts
    };
    let recs = recommend(&snap, &Observations::default(), &[web, cli], &opts);
    assert_eq!(
        recs[0]
            .sidecar()
            .expect("a namespace default from hints")
            .spec
            .egress[0]
            .hosts,
        [
            "shop/api.example.com",
            "shop/reviews.shop.svc.cluster.local"
        ]
    );
}
