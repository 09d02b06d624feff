//! Detection from a live cluster: the Istio version istiod runs (its pod's
//! `discovery` image) and the cluster domain (its `--domain` argument).
//! Its own test binary: the istiod pod it creates would change what every
//! other live test detects.

use kubectl_meshscope::Outcome;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::run::meshscope_at;

fn meshscope(c: &Cluster, args: &[&str]) -> (Outcome, String, String) {
    let r = meshscope_at(&c.kubeconfig, args);
    (r.ok(), r.stdout, r.stderr)
}

#[test]
fn version_and_cluster_domain_come_from_istiod_and_the_proxies() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("detect", &[("istio-injection", "enabled")]);
    let pod = format!("istiod-{ns}");
    c.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\n  namespace: istio-system\n  labels: {{app: istiod}}\nspec:\n  containers:\n  - name: discovery\n    image: docker.io/istio/pilot:1.32.1\n    args: [discovery, --monitoringAddr=:15014, --domain, corp.example]\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: web-0\n  namespace: {ns}\n  labels: {{app: web}}\nspec:\n  containers:\n  - name: istio-proxy\n    image: docker.io/istio/proxyv2:1.31.4\n    args: [proxy, sidecar, --domain, $(POD_NAMESPACE).svc.corp.example]\n  - name: app\n    image: example/web:1\n"
    ));
    let result = std::panic::catch_unwind(|| {
        let (o, out, _) = meshscope(c, &["version", "-o", "json"]);
        assert_eq!(o, Outcome::Ok);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["istiod"]["1.32"], 1, "{v}");
        assert!(v["proxies"]["1.31"].as_u64().unwrap() >= 1, "{v}");
        assert_eq!(v["semantics"], "1.32", "{v}");
        assert_eq!(v["cluster_domain"], "corp.example", "{v}");
        assert_eq!(v["cluster_domain_source"], "cluster", "{v}");
        assert!(
            v["notes"][0]
                .as_str()
                .unwrap()
                .contains("while istiod runs 1.32; istiod's semantics apply"),
            "{v}"
        );
        // Other commands use the detected domain: web-0's own Service
        // hostname is in corp.example.
        c.apply(&format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  selector: {{app: web}}\n  ports: [{{name: http, port: 80}}]\n"
        ));
        let (_, out, err) = meshscope(c, &["explain", "pod", "web-0", "-n", &ns, "-o", "json"]);
        let e: serde_json::Value = serde_json::from_str(&out).unwrap();
        let clusters = e["outbound_clusters"].to_string();
        assert!(
            clusters.contains(&format!("outbound|80||web.{ns}.svc.corp.example")),
            "{clusters}\n{err}"
        );
        // The flag wins, and says it differs.
        let (_, out, err) = meshscope(
            c,
            &[
                "version",
                "--cluster-domain",
                "cluster.local",
                "--istio-version",
                "1.31",
            ],
        );
        assert!(out.contains("Semantics applied: Istio 1.31"), "{out}");
        assert!(
            err.contains("--istio-version 1.31 differs from the Istio 1.32 the cluster runs"),
            "{err}"
        );
    });
    // Leave no 1.31/1.32 pods behind for the other live tests to detect.
    c.force_delete_pod(&ns, "web-0");
    let _ = c.kubectl(&["delete", "namespace", &ns, "--wait=false"], None);
    c.force_delete_pod("istio-system", &pod);
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}
