//! Hosts written the way istiod resolves them: headless Services behind
//! pod IPs and pod names, hostnames defined in several namespaces, and the
//! mesh's serviceEntryVisibility.

use meshscope_shared::observe::{LogIngest, Observations};
use meshscope_shared::recommend::{self, RecommendOptions};
use meshscope_shared::snapshot::{MeshSnapshot, WorkloadId, WorkloadKind};
use meshscope_shared::{Inputs, Options};

fn snap_with(yaml: &str, options: Options) -> MeshSnapshot {
    let mut inputs = Inputs::default();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        if !v.is_null() {
            inputs.add(v).unwrap();
        }
    }
    MeshSnapshot::build(&inputs, options).unwrap()
}

fn snap(yaml: &str) -> MeshSnapshot {
    snap_with(yaml, Options::default())
}

/// An injected bare pod `name` in `ns` at `ip`, labelled `app: <app>`.
fn pod(ns: &str, name: &str, app: &str, ip: &str) -> String {
    format!("---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{app: {app}}}\nspec:\n  containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]\nstatus:\n  podIP: {ip}\n")
}

fn namespace(ns: &str) -> String {
    format!("---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{istio-injection: enabled}}\n")
}

/// A StatefulSet `db` in `data` with two pods behind the headless Service
/// `db` (port 5432, and 8080 targeting 9090).
fn statefulset() -> String {
    let mut y = namespace("data") + &namespace("shop");
    y += "---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\n  namespace: data\nspec:\n  serviceName: db\n  selector:\n    matchLabels: {app: db}\n  template:\n    metadata:\n      labels: {app: db}\n    spec:\n      containers: [{name: c, image: x}]\n";
    for (i, ip) in [(0, "10.1.0.10"), (1, "10.1.0.11")] {
        y += &format!("---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: db-{i}\n  namespace: data\n  labels: {{app: db}}\n  ownerReferences:\n  - {{apiVersion: apps/v1, kind: StatefulSet, name: db, uid: u, controller: true}}\nspec:\n  containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]\nstatus:\n  podIP: {ip}\n");
    }
    y += "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: db\n  namespace: data\nspec:\n  clusterIP: None\n  selector: {app: db}\n  ports:\n  - {name: tcp-pg, port: 5432}\n  - {name: http-admin, port: 8080, targetPort: 9090}\n";
    y + &pod("shop", "web", "web", "10.0.0.1")
}

fn line(src: &str, cluster: &str, dst: &str, authority: &str) -> String {
    format!("[2026-01-01T00:00:00.000Z] \"GET / HTTP/1.1\" 200 - via_upstream - \"-\" 0 1 1 1 \"-\" \"x\" \"id\" \"{authority}\" \"{dst}\" {cluster} {src}:1 {dst} {src}:2 - default\n")
}

fn observe(s: &MeshSnapshot, logs: &str) -> Observations {
    let mut ing = LogIngest::new(s, "access-log");
    for l in logs.lines() {
        ing.line(l);
    }
    ing.finish()
}

fn pod_workload(s: &MeshSnapshot, ns: &str, name: &str) -> WorkloadId {
    s.find_workload(&WorkloadKind::Pod, ns, name).unwrap()
}

fn hosts(r: &recommend::Recommendation) -> Vec<String> {
    r.sidecar().expect("a Sidecar").spec.egress[0].hosts.clone()
}

fn outbound(obs: &Observations, w: WorkloadId) -> Vec<(String, u32)> {
    obs.of(w)
        .map(|t| t.outbound.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn pod_ips_of_a_headless_service_map_back_to_it() {
    let s = snap(&statefulset());
    let web = pod_workload(&s, "shop", "web");
    // A TCP call to one pod, and an HTTP call to the other's target port.
    let logs = line("10.0.0.1", "PassthroughCluster", "10.1.0.10:5432", "-")
        + &line("10.0.0.1", "PassthroughCluster", "10.1.0.11:9090", "-");
    let obs = observe(&s, &logs);
    assert_eq!(
        outbound(&obs, web),
        vec![
            ("db.data.svc.cluster.local".to_string(), 5432),
            ("db.data.svc.cluster.local".to_string(), 8080)
        ]
    );
    assert!(obs.unregistered.is_empty(), "{:?}", obs.unregistered);
    let r = recommend::recommend(&s, &obs, &[web], &RecommendOptions::default());
    assert_eq!(hosts(&r[0]), vec!["data/db.data.svc.cluster.local"]);
}

#[test]
fn a_port_the_headless_service_lacks_stays_unregistered() {
    let s = snap(&statefulset());
    let obs = observe(
        &s,
        &line("10.0.0.1", "PassthroughCluster", "10.1.0.10:6000", "-"),
    );
    assert_eq!(obs.unregistered.len(), 1);
    assert_eq!(obs.unregistered[0].address, "10.1.0.10:6000");
}

#[test]
fn pod_names_under_a_headless_service_map_back_to_it() {
    let s = snap(&statefulset());
    let web = pod_workload(&s, "shop", "web");
    // The pod is not in the input (its IP is unknown): the authority says.
    for auth in [
        "db-1.db.data.svc.cluster.local:8080",
        "db-1.db.data:8080",
        "db-1.db.data.svc:8080",
    ] {
        let obs = observe(
            &s,
            &line("10.0.0.1", "PassthroughCluster", "10.9.9.9:9090", auth),
        );
        assert_eq!(
            outbound(&obs, web),
            vec![("db.data.svc.cluster.local".to_string(), 8080)],
            "{auth}"
        );
    }
    // The same from inside the namespace, by the short form.
    let yaml = statefulset() + &pod("data", "job", "job", "10.1.0.50");
    let s = snap(&yaml);
    let job = pod_workload(&s, "data", "job");
    let obs = observe(
        &s,
        &line(
            "10.1.0.50",
            "PassthroughCluster",
            "10.9.9.9:5432",
            "db-0.db:5432",
        ),
    );
    assert_eq!(
        outbound(&obs, job),
        vec![("db.data.svc.cluster.local".to_string(), 5432)]
    );
}

#[test]
fn a_pod_name_under_a_cluster_ip_service_is_not_a_service_name() {
    let yaml = statefulset()
        + "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: api\n  namespace: data\nspec:\n  clusterIP: 10.96.5.5\n  selector: {app: api}\n  ports:\n  - {name: http, port: 80}\n";
    let s = snap(&yaml);
    let obs = observe(
        &s,
        &line(
            "10.0.0.1",
            "PassthroughCluster",
            "10.9.9.9:80",
            "x-0.api.data.svc.cluster.local",
        ),
    );
    assert_eq!(obs.unregistered.len(), 1);
}
