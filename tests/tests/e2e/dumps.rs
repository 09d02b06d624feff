//! `--manifests` dumps of a cluster: an input that lacks kinds the
//! findings depend on is warned of, kind by kind, with the `kubectl get`
//! that dumps them all; and the dump command the docs give (docs/usage.md,
//! "From files") holds every kind, so that its audit has no false MS0007.
//! Offline on manifests written here, and live: the docs' own command line
//! against the test control plane.

use std::process::Command;

use kubectl_meshscope::Outcome;
use meshscope_e2e::cluster::{bin_dir, Cluster};
use meshscope_e2e::run::meshscope;
use meshscope_shared::inputs::DUMP_KINDS;
use meshscope_test_support::audit_json::codes_and_names;
use meshscope_test_support::docs;

/// A mesh whose Sidecar's egress hosts are a Service's and a
/// ServiceEntry's, with its Namespace and the mesh config: each kind
/// tagged with the `kubectl get` resource that dumps it. The Deployment
/// has no replicas (no injector runs in the test control plane, so its
/// pods would run without a proxy).
fn mesh(ns: &str) -> Vec<(&'static str, String)> {
    vec![
        ("namespaces", format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{istio-injection: enabled}}\n")),
        ("configmaps", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: istio\n  namespace: istio-system\ndata:\n  mesh: |\n    rootNamespace: istio-system\n".to_string()),
        ("deployments", format!("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers: [{{name: app, image: example/web:1}}]\n")),
        ("services", format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  selector: {{app: web}}\n  ports: [{{name: http, port: 80}}]\n")),
        ("serviceentries", format!("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: payments\n  namespace: {ns}\nspec:\n  hosts: [api.payments.example]\n  exportTo: [\".\"]\n  ports: [{{number: 443, name: tls, protocol: TLS}}]\n  resolution: DNS\n  location: MESH_EXTERNAL\n")),
        ("sidecars", format!("apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  workloadSelector:\n    labels: {{app: web}}\n  egress:\n  - hosts: [./web.{ns}.svc.cluster.local, ./api.payments.example]\n")),
    ]
}

fn write(dir: &std::path::Path, name: &str, docs: &[String]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, docs.join("---\n")).unwrap();
    path.to_str().unwrap().to_string()
}

/// The `-o json` audit's MS0007 findings.
fn ms0007(json: &str) -> Vec<String> {
    codes_and_names(json)
        .into_iter()
        .filter(|(c, _)| c == "MS0007")
        .map(|(_, n)| n)
        .collect()
}

#[test]
fn an_input_without_the_kinds_findings_depend_on_is_warned_of_with_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let all = mesh("shop");
    let full: Vec<String> = all.iter().map(|(_, d)| d.clone()).collect();
    // What `kubectl get -A -o yaml pods,deployments,services,sidecars`
    // dumps of it.
    let partial: Vec<String> = all
        .iter()
        .filter(|(k, _)| ["pods", "deployments", "services", "sidecars"].contains(k))
        .map(|(_, d)| d.clone())
        .collect();
    let full = write(dir.path(), "full.yaml", &full);
    let partial = write(dir.path(), "partial.yaml", &partial);

    let r = meshscope(&["audit", "--manifests", &partial, "-o", "json"]);
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    // The ServiceEntry's host matches nothing without it: a false MS0007,
    // which the warnings explain.
    assert_eq!(ms0007(&r.stdout), ["web"]);
    let warnings: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning: the input holds no"))
        .collect();
    let starts = [
        "warning: the input holds no Namespaces: namespace injection labels unknown",
        "warning: the input holds no mesh config (ConfigMap istio with key mesh)",
        "warning: the input holds no ServiceEntries:",
        "warning: the input holds no VirtualServices:",
    ];
    assert_eq!(warnings.len(), starts.len(), "{}", r.stderr);
    for (w, start) in warnings.iter().zip(starts) {
        assert!(w.starts_with(start), "{w}");
    }
    assert!(warnings[0].ends_with("add namespaces to the kubectl get list"));
    assert!(warnings[2].ends_with("add serviceentries to the kubectl get list"));
    let command =
        format!("kubectl get -A -o yaml {DUMP_KINDS} | kubectl meshscope audit --manifests -");
    assert!(
        r.stderr
            .contains(&format!("note: every kind the results read: {command}")),
        "{}",
        r.stderr
    );

    // recommend and explain warn of the kinds every cluster has.
    for (cmd, args) in [
        ("recommend", vec!["recommend", "--allow-idle"]),
        ("explain", vec!["explain", "deployment/web", "-n", "shop"]),
    ] {
        let mut args = args;
        args.extend(["--manifests", &partial]);
        let r = meshscope(&args);
        assert_eq!(r.ok(), Outcome::Ok, "{cmd}: {}", r.stderr);
        assert!(
            r.stderr.contains(
                "warning: the input holds no Namespaces: namespace injection labels unknown"
            ),
            "{cmd}: {}",
            r.stderr
        );
        assert!(
            r.stderr.contains(&format!(
                "kubectl get -A -o yaml {DUMP_KINDS} | kubectl meshscope {cmd} --manifests -"
            )),
            "{cmd}: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("ServiceEntries"), "{cmd}: {}", r.stderr);
    }

    // The docs give the same command.
    assert_eq!(docs_dump_line(), command);

    // Every kind: no warning, and the egress hosts match.
    let r = meshscope(&["audit", "--manifests", &full, "-o", "json"]);
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    assert_eq!(ms0007(&r.stdout), Vec::<String>::new(), "{}", r.stdout);
    assert!(!r.stderr.contains("the input holds no"), "{}", r.stderr);
}

/// The `kubectl get ... | kubectl meshscope audit --manifests -` command
/// of the ```sh blocks of README.md and docs/*.md.
fn docs_dump_line() -> String {
    docs::sh_commands()
        .into_iter()
        .find(|c| {
            c.starts_with("kubectl get -A -o yaml ") && c.contains("| kubectl meshscope audit")
        })
        .expect("the docs have a kubectl get | audit command")
}

#[test]
fn the_docs_dump_of_a_real_cluster_gives_audit_every_kind_and_no_false_ms0007() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = Cluster::unique_ns("dump");
    let docs: Vec<String> = mesh(&ns)
        .into_iter()
        .filter(|(k, _)| *k != "configmaps") // the cluster has its own
        .map(|(_, d)| d)
        .collect();
    c.apply(&docs.join("---\n"));
    let line = docs_dump_line();
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |line: &str| {
        let script = format!("set -o pipefail; {line} -n {ns} -o json");
        let out = Command::new("bash")
            .args(["-c", &script])
            .env("PATH", &path)
            .env("KUBECONFIG", &c.kubeconfig)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = run(&line);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(ms0007(&stdout), Vec::<String>::new(), "{stdout}");
    // The Sidecar selects web and scopes it: the dump holds both.
    assert_eq!(codes_and_names(&stdout), Vec::new(), "{stdout}");
    assert!(!stderr.contains("the input holds no"), "{stderr}");

    // The command the README used to give dumps no ServiceEntries, Namespaces
    // or mesh config: a false MS0007, and the warnings that say why.
    let (code, stdout, stderr) = run(
        "kubectl get -A -o yaml pods,deployments,services,sidecars | kubectl meshscope audit --manifests -",
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(ms0007(&stdout), ["web"], "{stdout}");
    for kind in ["Namespaces", "mesh config", "ServiceEntries"] {
        assert!(
            stderr.contains(&format!("warning: the input holds no {kind}")),
            "{kind}: {stderr}"
        );
    }
    let _ = c.kubectl(&["delete", "namespace", &ns, "--wait=false"], None);
}
