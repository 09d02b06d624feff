//! Hosts written the way istiod resolves them, through the CLI: calls to a
//! StatefulSet's pods map back to its headless Service, a hostname defined
//! in several namespaces is written from the namespace each proxy gets it
//! from (and audited), and the mesh's serviceEntryVisibility caps what
//! MS0002 reports.

use std::path::Path;

use kubectl_meshscope::Outcome;
use meshscope_e2e::run::meshscope;
use meshscope_test_support::access_log;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// Every egress host of every Sidecar in a multi-document YAML stream.
fn egress_hosts(yaml: &str) -> Vec<String> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        for e in v["spec"]["egress"].as_array().into_iter().flatten() {
            for h in e["hosts"].as_array().into_iter().flatten() {
                out.push(h.as_str().unwrap().to_string());
            }
        }
    }
    out
}

fn line(src: &str, cluster: &str, dst: &str, authority: &str) -> String {
    access_log::line(src, authority, cluster, dst)
}

const NAMESPACES: &str = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: data\n  labels: {istio-injection: enabled}\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {istio-injection: enabled}\n";

fn client(ns: &str, name: &str, ip: &str) -> String {
    format!("---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{app: {name}}}\nspec:\n  containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]\nstatus:\n  podIP: {ip}\n")
}

#[test]
fn calls_to_statefulset_pods_are_written_as_their_headless_service() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = NAMESPACES.to_string();
    m += "---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\n  namespace: data\nspec:\n  serviceName: db\n  selector:\n    matchLabels: {app: db}\n  template:\n    metadata:\n      labels: {app: db}\n    spec:\n      containers: [{name: c, image: x}]\n";
    m += "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: db-0\n  namespace: data\n  labels: {app: db}\n  ownerReferences:\n  - {apiVersion: apps/v1, kind: StatefulSet, name: db, uid: u, controller: true}\nspec:\n  containers: [{name: c, image: x}, {name: istio-proxy, image: proxyv2}]\nstatus:\n  podIP: 10.1.0.10\n";
    m += "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: db\n  namespace: data\nspec:\n  clusterIP: None\n  selector: {app: db}\n  ports:\n  - {name: tcp-pg, port: 5432}\n";
    m += &client("shop", "web", "10.0.0.1");
    m += &client("shop", "cart", "10.0.0.2");
    let manifests = write(dir.path(), "manifests.yaml", &m);
    // web calls the pod by IP; cart by its DNS name (db-1 is not running).
    let log = line("10.0.0.1", "PassthroughCluster", "10.1.0.10:5432", "-")
        + &line(
            "10.0.0.2",
            "PassthroughCluster",
            "10.1.0.11:5432",
            "db-1.db.data.svc.cluster.local:5432",
        );
    let log = write(dir.path(), "access.log", &log);
    let r = meshscope(&["recommend", "--manifests", &manifests, "--access-log", &log]);
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    let hosts = egress_hosts(&r.stdout);
    assert_eq!(
        hosts
            .iter()
            .filter(|h| *h == "data/db.data.svc.cluster.local")
            .count(),
        2,
        "{}",
        r.stdout
    );
    assert!(!r.stderr.contains("unregistered"), "{}", r.stderr);
    assert!(!r.stdout.contains("*/"), "{}", r.stdout);
}

/// MS0002 findings of `audit -o json` as (namespace, message).
fn ms0002(json: &str) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "MS0002")
        .map(|f| {
            (
                f["namespace"].as_str().unwrap().to_string(),
                f["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn audit_reads_the_mesh_service_entry_visibility_from_istio_1_31() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: sandbox\n  labels: {tier: sandbox}\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: partners\n".to_string();
    for (ns, host) in [
        ("sandbox", "toy.example.com"),
        ("partners", "api.partner.example"),
    ] {
        m += &format!("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: ext\n  namespace: {ns}\nspec:\n  hosts: [{host}]\n  location: MESH_EXTERNAL\n  resolution: DNS\n  ports:\n  - {{number: 443, name: tls, protocol: TLS}}\n");
    }
    let manifests = write(dir.path(), "manifests.yaml", &m);
    let mesh = write(
        dir.path(),
        "mesh.yaml",
        "serviceEntryVisibility:\n  applyToSidecars: true\n  policies:\n  - visibility: NAMESPACE\n    matchingRules:\n    - namespaceSelector:\n        matchLabels: {tier: sandbox}\n",
    );
    let audit = |version: &str| {
        let r = meshscope(&[
            "audit",
            "--manifests",
            &manifests,
            "--mesh-config",
            &mesh,
            "--istio-version",
            version,
            "-o",
            "json",
        ]);
        assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
        ms0002(&r.stdout)
    };
    let f = audit("1.31");
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].0, "partners");
    assert!(
        f[0].1.contains("kubectl meshscope apply --exports -n partners --from-pod-logs writes it, or have meshConfig.serviceEntryVisibility give namespace partners visibility NAMESPACE"),
        "{}",
        f[0].1
    );
    // Istio 1.30 has no such setting: both are exported everywhere.
    let f = audit("1.30");
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(f.iter().all(|(_, m)| !m.contains("serviceEntryVisibility")));
    // The finding code's documentation names the setting.
    let r = meshscope(&["codes", "MS0002"]);
    assert_eq!(r.ok(), Outcome::Ok);
    assert!(r.stdout.contains("serviceEntryVisibility"), "{}", r.stdout);
}

#[test]
fn a_hostname_in_several_namespaces_is_written_from_the_one_each_proxy_gets_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = String::new();
    for ns in ["aaa", "bbb", "shop", "web", "other"] {
        m += &format!("---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{istio-injection: enabled}}\n");
    }
    for (ns, created, port, protocol, export) in [
        ("aaa", "2026-01-01T00:00:00Z", 443, "TLS", ""),
        (
            "bbb",
            "2026-02-01T00:00:00Z",
            8443,
            "HTTP",
            "  exportTo: [web]\n",
        ),
        ("shop", "2026-03-01T00:00:00Z", 9443, "TLS", ""),
    ] {
        m += &format!("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: api\n  namespace: {ns}\n  creationTimestamp: \"{created}\"\nspec:\n  hosts: [api.example.com]\n  location: MESH_EXTERNAL\n  resolution: DNS\n  ports:\n  - {{number: {port}, name: p, protocol: {protocol}}}\n{export}");
    }
    m += &client("web", "web", "10.0.0.1");
    m += &client("shop", "cart", "10.0.0.2");
    m += &client("other", "job", "10.0.0.3");
    let manifests = write(dir.path(), "manifests.yaml", &m);
    let log = line(
        "10.0.0.1",
        "outbound|8443||api.example.com",
        "203.0.113.1:8443",
        "-",
    ) + &line(
        "10.0.0.2",
        "outbound|9443||api.example.com",
        "203.0.113.1:9443",
        "-",
    ) + &line(
        "10.0.0.3",
        "outbound|443||api.example.com",
        "203.0.113.1:443",
        "-",
    );
    let log = write(dir.path(), "access.log", &log);
    for (ns, want) in [
        ("web", "bbb/api.example.com"),
        ("shop", "shop/api.example.com"),
        ("other", "aaa/api.example.com"),
    ] {
        let r = meshscope(&[
            "recommend",
            "--manifests",
            &manifests,
            "--access-log",
            &log,
            "-n",
            ns,
        ]);
        assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
        assert_eq!(egress_hosts(&r.stdout), vec![want.to_string()], "{ns}");
    }
    // explain says which copy each proxy gets, and where the others are.
    for (ns, pod, want) in [
        (
            "web",
            "web",
            "  api.example.com: gets bbb's (8443/HTTP); also in aaa (443/TCP), shop (9443/TCP)",
        ),
        (
            "other",
            "job",
            "  api.example.com: gets aaa's (443/TCP); also in bbb (8443/HTTP; not exported here), shop (9443/TCP)",
        ),
    ] {
        let r = meshscope(&["explain", "pod", pod, "-n", ns, "--manifests", &manifests]);
        assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
        assert!(
            r.stdout.contains("Defined in several namespaces") && r.stdout.contains(want),
            "{want:?} in\n{}",
            r.stdout
        );
    }
    let r = meshscope(&["audit", "--manifests", &manifests, "-o", "json"]);
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let f: Vec<&serde_json::Value> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "MS0014")
        .collect();
    assert_eq!(f.len(), 1, "{}", r.stdout);
    let msg = f[0]["message"].as_str().unwrap();
    assert!(
        msg.contains(
            "proxies in other get aaa's; proxies in web get bbb's; proxies in shop get shop's"
        ),
        "{msg}"
    );
    let r = meshscope(&["codes"]);
    assert!(
        r.stdout.contains("MS0014") && r.stdout.contains("Hostname defined in several namespaces"),
        "{}",
        r.stdout
    );
}

/// Live, under `-n`: the pods of other namespaces are not read, so a call
/// to a StatefulSet pod's IP in another namespace maps back to its headless
/// Service through the Service's EndpointSlice (which the test control
/// plane's endpointslice controller writes from the pod's IP).
#[test]
fn live_under_n_a_headless_pod_ip_in_another_namespace_maps_back_through_its_endpoint_slice() {
    meshscope_e2e::needs_cluster!();
    use meshscope_e2e::cluster::Cluster;
    use meshscope_e2e::run::meshscope_at;

    let c = Cluster::shared();
    let data = c.namespace("hl-data", &[("istio-injection", "enabled")]);
    let shop = c.namespace("hl-shop", &[("istio-injection", "enabled")]);
    // The controller lists only pods on a Node it knows.
    let node = c.stand_in_node("hl-node", 10250).unwrap();
    c.apply(&format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: db\n  namespace: {data}\nspec:\n  clusterIP: None\n  selector: {{app: db}}\n  ports:\n  - {{name: tcp-pg, port: 5432}}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: db-0\n  namespace: {data}\n  labels: {{app: db}}\nspec:\n  nodeName: {node}\n  containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: {shop}\n  labels: {{app: web}}\nspec:\n  containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]\n"));
    c.set_pod_ip(&data, "db-0", "10.77.0.10").unwrap();
    c.set_pod_ip(&shop, "web", "10.77.1.10").unwrap();
    // The controller lists the pod's IP in the Service's slice.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let got = c.kubectl_ok(
            &[
                "get",
                "endpointslices",
                "-n",
                &data,
                "-l",
                "kubernetes.io/service-name=db",
                "-o",
                "jsonpath={.items[*].endpoints[*].addresses[*]}",
            ],
            None,
        );
        if got.contains("10.77.0.10") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no EndpointSlice lists db-0's IP: {got:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let dir = tempfile::tempdir().unwrap();
    let log = write(
        dir.path(),
        "access.log",
        &line("10.77.1.10", "PassthroughCluster", "10.77.0.10:5432", "-"),
    );
    let r = meshscope_at(
        &c.kubeconfig,
        &["recommend", "-n", &shop, "--access-log", &log],
    );
    // The same call in a real Prometheus's Istio metrics: an HTTP call by
    // the pod's DNS name through PassthroughCluster (Istio reports the
    // Host as destination_service).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let labels = format!("reporter=\"source\",source_workload=\"web\",source_workload_namespace=\"{shop}\",destination_service=\"db-0.db.{data}.svc.cluster.local:5432\",destination_service_name=\"PassthroughCluster\",destination_service_namespace=\"unknown\",destination_workload=\"unknown\",destination_workload_namespace=\"unknown\",response_code=\"200\"");
    let mut om = "# TYPE istio_requests counter\n".to_string();
    for k in 0..13u64 {
        om += &format!(
            "istio_requests_total{{{labels}}} {} {}\n",
            (k + 1) * 5,
            now - 120 - (12 - k) * 300
        );
    }
    om += "# EOF\n";
    let prom = meshscope_e2e::cluster::Prometheus::start(&om).unwrap();
    let p = meshscope_at(
        &c.kubeconfig,
        &[
            "recommend",
            "-n",
            &shop,
            "--prometheus",
            &prom.url,
            "--since",
            "7d",
        ],
    );
    // With no kubelet, a pod bound to a node stays Terminating until forced;
    // the namespaces must be gone before other tests read the cluster.
    c.force_delete_pod(&data, "db-0");
    let _ = c.kubectl(
        &[
            "delete",
            "namespace",
            &data,
            &shop,
            "--wait=true",
            "--timeout=120s",
        ],
        None,
    );
    let _ = c.kubectl(&["delete", "node", &node], None);
    for r in [&r, &p] {
        assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
        assert_eq!(
            egress_hosts(&r.stdout),
            vec![format!("{data}/db.{data}.svc.cluster.local")],
            "{}\n{}",
            r.stdout,
            r.stderr
        );
        assert!(!r.stderr.contains("unregistered"), "{}", r.stderr);
    }
}
