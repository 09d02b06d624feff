//! deploy/ against the code: paths, ports, admission versions, rules,
//! flags, probes and RBAC. No cluster needed; `kubectl kustomize` renders
//! the cert-manager overlay.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use clap::{CommandFactory, Parser};
use meshscope_shared::admission::{Config, MUTATED, VALIDATED};
use meshscope_shared::{Inputs, MeshConfig, MeshSnapshot, Options};
use meshscope_test_support::fixtures::yaml_docs as docs;
use meshscope_webhook::{admin, Args, State, MUTATE_PATH, VALIDATE_PATH};
use serde_json::Value;
use tower::ServiceExt;

fn deploy() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// deploy/base, file by file in kustomization order.
fn base() -> Vec<Value> {
    let dir = deploy().join("base");
    let k = &docs(&std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap())[0];
    let mut out = Vec::new();
    for r in k["resources"].as_array().unwrap() {
        let text = std::fs::read_to_string(dir.join(r.as_str().unwrap())).unwrap();
        out.extend(docs(&text));
    }
    out
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "exactly one {kind}");
    found[0]
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

fn container(docs: &[Value]) -> &Value {
    &one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

fn env<'a>(docs: &'a [Value], name: &str) -> &'a str {
    container(docs)["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no env {name}"))["value"]
        .as_str()
        .unwrap()
}

fn container_port(docs: &[Value], name: &str) -> u64 {
    container(docs)["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no container port {name}"))["containerPort"]
        .as_u64()
        .unwrap()
}

const EXCLUDED: [&str; 5] = [
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "istio-system",
    "meshscope-system",
];

#[test]
fn every_resource_file_is_in_the_kustomization() {
    let dir = deploy().join("base");
    let listed: BTreeSet<String> =
        docs(&std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap())[0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().to_string())
            .collect();
    let files: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    assert_eq!(listed, files);
}

#[test]
fn webhook_configurations_match_the_router_and_the_rules() {
    let docs = base();
    let service = one(&docs, "Service");
    let https = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "https")
        .unwrap();
    for (kind, path, rules_expected) in [
        ("ValidatingWebhookConfiguration", VALIDATE_PATH, VALIDATED),
        ("MutatingWebhookConfiguration", MUTATE_PATH, MUTATED),
    ] {
        let config = one(&docs, kind);
        let hooks = config["webhooks"].as_array().unwrap();
        let mut registered: BTreeSet<(String, String)> = BTreeSet::new();
        for hook in hooks {
            let name = hook["name"].as_str().unwrap();
            assert!(name.ends_with(".meshscope.io"), "{name}");
            assert_eq!(strs(&hook["admissionReviewVersions"]), ["v1"], "{name}");
            assert_eq!(hook["sideEffects"], "None", "{name}");
            assert_eq!(hook["failurePolicy"], "Ignore", "{name}");
            assert_eq!(hook["timeoutSeconds"], 3, "{name}");
            let svc = &hook["clientConfig"]["service"];
            assert_eq!(svc["path"], path, "{name}");
            assert_eq!(svc["name"], service["metadata"]["name"], "{name}");
            assert_eq!(svc["namespace"], service["metadata"]["namespace"], "{name}");
            assert_eq!(svc["port"], https["port"], "{name}");
            assert!(hook["clientConfig"].get("caBundle").is_none(), "{name}");
            for rule in hook["rules"].as_array().unwrap() {
                assert_eq!(strs(&rule["operations"]), ["CREATE", "UPDATE"], "{name}");
                assert_eq!(rule["scope"], "Namespaced", "{name}");
                for g in strs(&rule["apiGroups"]) {
                    for r in strs(&rule["resources"]) {
                        registered.insert((g.to_string(), r.to_string()));
                    }
                }
            }
            let sel = &hook["namespaceSelector"]["matchExpressions"][0];
            assert_eq!(sel["key"], "kubernetes.io/metadata.name", "{name}");
            match sel["operator"].as_str().unwrap() {
                "NotIn" => assert_eq!(strs(&sel["values"]), EXCLUDED, "{name}"),
                // The root namespace's own entry: its Sidecars only (MS0008).
                "In" => {
                    assert_eq!(strs(&sel["values"]), ["istio-system"], "{name}");
                    assert_eq!(hook["rules"].as_array().unwrap().len(), 1);
                    assert_eq!(strs(&hook["rules"][0]["resources"]), ["sidecars"]);
                }
                other => panic!("{name}: unexpected operator {other}"),
            }
        }
        let expected: BTreeSet<(String, String)> = rules_expected
            .iter()
            .map(|(g, r, _)| (g.to_string(), r.to_string()))
            .collect();
        assert_eq!(registered, expected, "{kind}");
    }
}

#[test]
fn the_deployment_env_uses_real_flags_and_the_ports_match() {
    let docs = base();
    let cmd = Args::command();
    let mut argv = vec!["meshscope-webhook".to_string()];
    for e in container(&docs)["env"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap();
        let value = e["value"].as_str().unwrap();
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|v| v == name))
            .unwrap_or_else(|| panic!("env {name} is no flag's"));
        let flag = format!("--{}", arg.get_long().unwrap());
        match value {
            "true" => argv.push(flag),
            "false" => {}
            v => argv.extend([flag, v.to_string()]),
        }
    }
    let args = Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let listen: SocketAddr = env(&docs, "MESHSCOPE_LISTEN").parse().unwrap();
    assert_eq!(args.listen, listen);
    assert_eq!(container_port(&docs, "https"), u64::from(listen.port()));
    let admin: SocketAddr = env(&docs, "MESHSCOPE_ADMIN_LISTEN").parse().unwrap();
    assert_eq!(container_port(&docs, "admin"), u64::from(admin.port()));
    // The defaults are the manifests' values, so either works alone.
    let defaults = Args::try_parse_from(["meshscope-webhook"]).unwrap();
    assert_eq!(defaults.listen, args.listen);
    assert_eq!(defaults.admin_listen, args.admin_listen);
    assert_eq!(defaults.tls_cert, args.tls_cert);
    assert_eq!(defaults.tls_key, args.tls_key);
    // The certificate is read from the mounted Secret.
    let pod = &one(&docs, "Deployment")["spec"]["template"]["spec"];
    let mount = &container(&docs)["volumeMounts"][0];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(volume["secret"]["secretName"], "meshscope-webhook-tls");
    let dir = PathBuf::from(mount["mountPath"].as_str().unwrap());
    assert_eq!(args.tls_cert, dir.join("tls.crt"));
    assert_eq!(args.tls_key, dir.join("tls.key"));
    // The Service reaches the named ports.
    for p in one(&docs, "Service")["spec"]["ports"].as_array().unwrap() {
        container_port(&docs, p["targetPort"].as_str().unwrap());
    }
}

#[tokio::test]
async fn probes_hit_admin_routes_on_the_admin_port() {
    let docs = base();
    let snap = MeshSnapshot::build_with_mesh(
        &Inputs::default(),
        Options::default(),
        MeshConfig::default(),
    );
    let state = Arc::new(State::with_snapshot(Config::default(), snap));
    for probe in ["readinessProbe", "livenessProbe"] {
        let get = &container(&docs)[probe]["httpGet"];
        assert_eq!(get["port"], "admin", "{probe}");
        let path = get["path"].as_str().unwrap();
        let req = Request::builder().uri(path).body(Body::empty()).unwrap();
        let res = admin::router(state.clone()).oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{probe} {path}");
    }
    let ann = &one(&docs, "Deployment")["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(ann["prometheus.io/path"], "/metrics");
    assert_eq!(
        ann["prometheus.io/port"].as_str().unwrap(),
        container_port(&docs, "admin").to_string()
    );
}

#[test]
fn the_deployment_is_hardened_and_highly_available() {
    let docs = base();
    let dep = one(&docs, "Deployment");
    assert_eq!(dep["spec"]["replicas"], 2);
    let pod = &dep["spec"]["template"]["spec"];
    let labels = &dep["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["sidecar.istio.io/inject"], "false");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let anti = &pod["affinity"]["podAntiAffinity"]
        ["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"];
    assert_eq!(anti["topologyKey"], "kubernetes.io/hostname");
    let c = container(&docs);
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(strs(&sc["capabilities"]["drop"]), ["ALL"]);
    for k in ["requests", "limits"] {
        for r in ["cpu", "memory"] {
            assert!(c["resources"][k][r].is_string(), "{k}.{r}");
        }
    }
    let pdb = one(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    for (k, v) in pdb["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&labels[k], v, "the PDB selects the pods");
    }
    for (k, v) in one(&docs, "Service")["spec"]["selector"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&labels[k], v, "the Service selects the pods");
    }
}

#[test]
fn rbac_only_reads_namespaces_sidecars_and_the_mesh_config() {
    let docs = base();
    let role = one(&docs, "ClusterRole");
    let mut seen = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        assert_eq!(strs(&rule["verbs"]), ["get", "list", "watch"]);
        for g in strs(&rule["apiGroups"]) {
            for r in strs(&rule["resources"]) {
                if r == "configmaps" {
                    assert_eq!(strs(&rule["resourceNames"]), ["istio"]);
                }
                seen.insert(format!("{g}/{r}"));
            }
        }
    }
    let expected: BTreeSet<String> = ["/namespaces", "networking.istio.io/sidecars", "/configmaps"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(seen, expected);
    let binding = one(&docs, "ClusterRoleBinding");
    let sa = one(&docs, "ServiceAccount");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["name"], sa["metadata"]["name"]);
    assert_eq!(
        binding["subjects"][0]["namespace"],
        sa["metadata"]["namespace"]
    );
    assert_eq!(
        one(&docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"],
        sa["metadata"]["name"]
    );
}

#[test]
fn the_cert_manager_overlay_injects_the_ca_and_issues_the_mounted_secret() {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(deploy().join("overlays/cert-manager"))
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = docs(&String::from_utf8(out.stdout).unwrap());
    let cert = docs
        .iter()
        .find(|d| d["kind"] == "Certificate" && d["metadata"]["name"] == "meshscope-webhook")
        .unwrap();
    assert_eq!(cert["spec"]["secretName"], "meshscope-webhook-tls");
    assert_eq!(
        strs(&cert["spec"]["dnsNames"]),
        [
            "meshscope-webhook.meshscope-system.svc",
            "meshscope-webhook.meshscope-system.svc.cluster.local"
        ]
    );
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let c = one(&docs, kind);
        assert_eq!(
            c["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!(
                "meshscope-system/{}",
                cert["metadata"]["name"].as_str().unwrap()
            ),
            "{kind}"
        );
        assert!(!c["webhooks"].as_array().unwrap().is_empty());
    }
    // Everything from the base is still there.
    assert_eq!(
        docs.iter()
            .filter(|d| d["kind"] != "Certificate" && d["kind"] != "Issuer")
            .count(),
        base().len()
    );
}
