//! `--from-manifest-hints` offline: a workload with no traffic gets a
//! Sidecar from the hosts its Deployment and ConfigMaps name.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-meshscope"))
        .args(args)
        .output()
        .expect("binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn service(name: &str, ip: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: bookinfo\nspec:\n  clusterIP: {ip}\n  selector: {{app: {name}}}\n  ports:\n  - {{name: http, port: 9080}}\n"
    )
}

/// bookinfo's productpage before it runs: its env names reviews, a
/// ConfigMap it reads names ratings, another one it does not read names
/// details; `secrets` is a Secret naming details too.
fn manifests() -> String {
    let mut m = String::from(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: bookinfo\n  labels: {istio-injection: enabled}\n",
    );
    for (name, ip) in [
        ("reviews", "10.96.12.12"),
        ("ratings", "10.96.12.13"),
        ("details", "10.96.12.11"),
    ] {
        m += &service(name, ip);
    }
    m += "---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: productpage-v1
  namespace: bookinfo
spec:
  selector:
    matchLabels: {app: productpage, version: v1}
  template:
    metadata:
      labels: {app: productpage, version: v1}
    spec:
      containers:
      - name: productpage
        image: docker.io/istio/examples-bookinfo-productpage-v1:1.20.2
        args: [\"--log-level\", \"info\"]
        env:
        - {name: REVIEWS_HOSTNAME, value: \"reviews:9080\"}
        - {name: DEBUG, value: \"true\"}
        - name: DETAILS_PASSWORD
          valueFrom: {secretKeyRef: {name: secrets, key: details}}
        envFrom:
        - configMapRef: {name: productpage-upstreams}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: productpage-upstreams
  namespace: bookinfo
data:
  RATINGS_URL: http://ratings.bookinfo.svc.cluster.local:9080/ratings
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: unrelated
  namespace: bookinfo
data:
  DETAILS: details:9080
---
apiVersion: v1
kind: Secret
metadata:
  name: secrets
  namespace: bookinfo
stringData:
  details: details:9080
";
    m
}

#[test]
fn recommend_from_manifest_hints_scopes_a_workload_with_no_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("manifests.yaml");
    std::fs::write(&file, manifests()).unwrap();
    let file = file.to_str().unwrap();

    // Without the flag: no evidence, nothing recommended.
    let o = run(&["recommend", "--manifests", file, "-o", "yaml"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "");
    let err = text(&o.stderr);
    assert!(err.contains("warning: no traffic source given"), "{err}");
    assert!(err.contains("no evidence: 1"), "{err}");

    let o = run(&[
        "recommend",
        "--manifests",
        file,
        "--from-manifest-hints",
        "-o",
        "yaml",
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("no traffic source"), "{err}");
    assert!(err.contains("1 Sidecar: 1 to create"), "{err}");
    let sidecar: serde_yaml::Value =
        serde_yaml::from_str(out.trim_start_matches("---\n")).expect("one Sidecar");
    let hosts: Vec<&str> = sidecar["spec"]["egress"][0]["hosts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    // Not details: only the unread ConfigMap and the Secret name it.
    assert_eq!(
        hosts,
        [
            "bookinfo/ratings.bookinfo.svc.cluster.local",
            "bookinfo/reviews.bookinfo.svc.cluster.local"
        ]
    );
    let ann = &sidecar["metadata"]["annotations"];
    assert_eq!(ann["meshscope.io/sources"].as_str(), Some("manifest-hints"));
    assert_eq!(
        ann["meshscope.io/hinted-hosts"].as_str(),
        Some("bookinfo/ratings.bookinfo.svc.cluster.local,bookinfo/reviews.bookinfo.svc.cluster.local")
    );
    assert_eq!(ann["meshscope.io/requests"].as_str(), Some("0"));
    assert_eq!(
        sidecar["spec"]["workloadSelector"]["labels"]["app"].as_str(),
        Some("productpage")
    );
}

#[test]
fn the_flag_is_in_the_help_of_recommend_apply_and_diff() {
    for cmd in ["recommend", "apply", "diff"] {
        let o = run(&[cmd, "--help"]);
        let out = text(&o.stdout);
        assert!(out.contains("--from-manifest-hints"), "{cmd}: {out}");
    }
}
