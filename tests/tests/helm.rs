//! The Helm chart `deploy/helm/meshscope`, with the real helm
//! (`tests/tools/build`): lint-clean; one source of truth with the kustomize
//! bases (rendered with the defaults it is the same objects as
//! `deploy/base` and `deploy/watch`, but for the differences listed in
//! [`IGNORED`]); and installed, upgraded and uninstalled on the test control
//! plane, where the webhook's objects, their certificates and the watch
//! Deployment's RBAC (exactly what watch mode asks for) are checked through
//! the API server.

use std::process::Command;
use std::time::{Duration, Instant};

use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::helm::{chart, differences, kustomize, Helm, Installed};
use meshscope_e2e::watch_rbac::{assert_grants_exactly_watch_needs, one};
use serde_json::Value;

/// What the comparison with the kustomize bases leaves out, and why:
///
/// - the Namespace `meshscope-system` (both bases ship it): a chart
///   installs into the release's namespace (`--create-namespace`) and does
///   not own it;
/// - the Secret `meshscope-webhook-tls`: the chart's generated CA and
///   serving certificate (the base leaves the Secret to
///   `kubectl meshscope webhook manifests` or the cert-manager overlay).
///
/// Besides these objects, [`meshscope_e2e::helm::without_helm_additions`]
/// takes Helm's standard labels off every object's `metadata.labels` and
/// the `caBundle` out of the webhook configurations. Anything else that
/// differs fails the test.
const IGNORED: [(&str, &str, &str); 2] = [
    ("Namespace", "", "meshscope-system"),
    ("Secret", "meshscope-system", "meshscope-webhook-tls"),
];

/// The kustomize bases' objects: the webhook's and watch mode's.
fn bases() -> Vec<Value> {
    let mut docs = kustomize("deploy/base");
    docs.extend(kustomize("deploy/watch"));
    docs
}

#[test]
fn the_chart_lints_clean() {
    let helm = Helm::build();
    let chart = chart();
    let chart = chart.to_str().unwrap();
    for strict in [false, true] {
        let mut args = vec!["lint", chart];
        if strict {
            args.push("--strict");
        }
        let out = helm.ok(&args, None);
        assert!(
            out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{out}"
        );
        // The one message: the project has no icon to point Chart.yaml at.
        let messages: Vec<&str> = out.lines().filter(|l| l.starts_with('[')).collect();
        assert_eq!(
            messages,
            ["[INFO] Chart.yaml: icon is recommended"],
            "helm {args:?}:\n{out}"
        );
    }
    // Each mode, watch on, renders.
    for mode in ["self-signed", "cert-manager"] {
        let set = format!("certificates.mode={mode}");
        helm.ok(
            &[
                "lint",
                chart,
                "--strict",
                "--set",
                &set,
                "--set",
                "watch.enabled=true",
            ],
            None,
        );
    }
    // Values the chart does not know are refused at render time
    // (values.schema.json): a policy the webhook does not know, a typo.
    for (set, says) in [
        ("webhook.policy=block", "/webhook/policy"),
        ("webhook.replica=3", "'replica' not allowed"),
        ("certificates.mode=vault", "/certificates/mode"),
    ] {
        let o = helm.run(&["template", chart, "--set", set], None);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(says), "{set}: {err}");
    }
}

#[test]
fn the_docs_helm_installs_render() {
    let helm = Helm::build();
    let chart = chart();
    let installs: Vec<String> = meshscope_test_support::docs::sh_commands()
        .into_iter()
        .filter(|c| c.starts_with("helm install "))
        .collect();
    assert!(installs.len() >= 3, "{installs:?}");
    for line in &installs {
        // The command as written (no quoting in them), rendered instead of
        // installed, from the repository's chart.
        let mut args: Vec<&str> = line.split_whitespace().skip(1).collect();
        args[0] = "template";
        assert_eq!(args[2], "deploy/helm/meshscope", "{line}");
        args[2] = chart.to_str().unwrap();
        let docs: Vec<Value> = meshscope_test_support::fixtures::yaml_docs(&helm.ok(&args, None));
        assert!(docs.iter().any(|d| d["kind"] == "Deployment"), "{line}");
        for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
            let image = d["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap();
            assert!(
                image.starts_with("registry.example.com/"),
                "{line}: {image}"
            );
        }
    }
}

#[test]
fn the_chart_renders_what_the_kustomize_bases_do() {
    let helm = Helm::build();
    let rendered = helm.template("meshscope-system", &["--set", "watch.enabled=true"]);
    let bases = bases();
    let diffs = differences(&rendered, &bases, &IGNORED);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    // The comparison sees a change: one verb more in the watch ClusterRole.
    let mut changed = rendered.clone();
    let role = changed
        .iter_mut()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "meshscope-watch")
        .unwrap();
    role["rules"][0]["verbs"]
        .as_array_mut()
        .unwrap()
        .push("watch".into());
    assert_eq!(differences(&changed, &bases, &IGNORED).len(), 1);

    // Without watch mode: the webhook alone.
    let webhook_only = helm.template("meshscope-system", &[]);
    assert!(webhook_only
        .iter()
        .all(|d| !d["metadata"]["name"].as_str().unwrap().contains("watch")));
    // Watch mode alone: deploy/watch.
    let watch_only = helm.template(
        "meshscope-system",
        &[
            "--set",
            "watch.enabled=true",
            "--set",
            "webhook.enabled=false",
        ],
    );
    let diffs = differences(&watch_only, &kustomize("deploy/watch"), &IGNORED);
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    // cert-manager: the overlay's Issuer chain and injection, no Secret.
    let cm = helm.template(
        "meshscope-system",
        &["--set", "certificates.mode=cert-manager"],
    );
    assert!(!cm.iter().any(|d| d["kind"] == "Secret"));
    let overlay = kustomize("deploy/overlays/cert-manager");
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let c = cm.iter().find(|d| d["kind"] == kind).unwrap();
        let o = overlay.iter().find(|d| d["kind"] == kind).unwrap();
        assert_eq!(
            c["metadata"]["annotations"], o["metadata"]["annotations"],
            "{kind}"
        );
        assert!(c["webhooks"][0]["clientConfig"]["caBundle"].is_null());
    }
    let cert = |docs: &[Value]| -> Value {
        docs.iter()
            .find(|d| d["kind"] == "Certificate" && d["metadata"]["name"] == "meshscope-webhook")
            .unwrap()["spec"]
            .clone()
    };
    let (mut c, mut o) = (cert(&cm), cert(&overlay));
    // The chart names its Issuers after the webhook (meshscope-webhook-ca,
    // not the overlay's meshscope-ca).
    c["issuerRef"]["name"] = Value::Null;
    o["issuerRef"]["name"] = Value::Null;
    assert_eq!(c, o);
}

fn jsonpath(c: &Cluster, args: &[&str], path: &str) -> String {
    let mut a = args.to_vec();
    let p = format!("jsonpath={path}");
    a.extend_from_slice(&["-o", &p]);
    c.kubectl_ok(&a, None)
}

fn base64_decode(s: &str) -> Vec<u8> {
    let mut child = Command::new("base64")
        .arg("-d")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    o.stdout
}

/// The caBundle of both webhook configurations is the Secret's CA, and it
/// verifies the serving certificate for the Service's name; the CA.
fn check_certificates(c: &Cluster, ns: &str, name: &str) -> String {
    let secret = format!("{name}-tls");
    let ca = jsonpath(c, &["get", "secret", &secret, "-n", ns], "{.data.ca\\.crt}");
    let crt = jsonpath(
        c,
        &["get", "secret", &secret, "-n", ns],
        "{.data.tls\\.crt}",
    );
    assert!(!ca.is_empty() && !crt.is_empty());
    for kind in [
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ] {
        let bundles = jsonpath(
            c,
            &["get", kind, name],
            "{range .webhooks[*]}{.clientConfig.caBundle}{\"\\n\"}{end}",
        );
        for b in bundles.lines() {
            assert_eq!(b, ca, "{kind} {name}: caBundle is not the Secret's CA");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), base64_decode(&ca)).unwrap();
    std::fs::write(dir.path().join("tls.pem"), base64_decode(&crt)).unwrap();
    let host = format!("{name}.{ns}.svc");
    let o = Command::new("openssl")
        .args([
            "verify",
            "-purpose",
            "sslserver",
            "-verify_hostname",
            &host,
            "-CAfile",
        ])
        .arg(dir.path().join("ca.pem"))
        .arg(dir.path().join("tls.pem"))
        .output()
        .expect("openssl runs");
    assert!(
        o.status.success(),
        "the serving certificate does not verify against the caBundle for {host}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    ca
}

/// The objects of one install, as the API server has them.
fn installed(c: &Cluster, ns: &str, objects: &[(&str, &str, &str)]) -> Vec<Value> {
    objects
        .iter()
        .map(|(kind, ons, name)| {
            let mut a = vec!["get", kind, name, "-o", "json"];
            if !ons.is_empty() {
                a.extend_from_slice(&["-n", ons]);
            }
            let v: Value = serde_json::from_str(&c.kubectl_ok(&a, None))
                .unwrap_or_else(|e| panic!("{kind} {ons}/{name} in {ns}: {e}"));
            v
        })
        .collect()
}

#[test]
fn the_chart_installs_upgrades_and_uninstalls_on_the_test_control_plane() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let helm = Helm::build();
    let kubeconfig = c.kubeconfig.as_path();
    let ns = Cluster::unique_ns("helm");
    let webhook = format!("{ns}-webhook");
    let watch = format!("{ns}-watch");
    // Names of its own (cluster-scoped objects included), and webhooks that
    // select no namespace of another test's.
    let selector = format!("{{\"matchLabels\":{{\"meshscope.io/helm-test\":\"{ns}\"}}}}");
    let chart = chart();
    let chart = chart.to_str().unwrap();
    let sets = [
        format!("names.webhook={webhook}"),
        format!("names.watch={watch}"),
        "watch.enabled=true".to_string(),
        "image.repository=registry.example/meshscope".to_string(),
    ];
    let mut args = vec![
        "install",
        "meshscope",
        chart,
        "-n",
        &ns,
        "--create-namespace",
    ];
    for s in &sets {
        args.extend_from_slice(&["--set", s]);
    }
    let ns_sel = format!("webhook.namespaceSelector={selector}");
    let root_sel = format!("webhook.rootNamespaceSelector={selector}");
    args.extend_from_slice(&["--set-json", &ns_sel, "--set-json", &root_sel]);
    helm.ok(&args, Some(kubeconfig));
    let _installed = Installed {
        helm: &helm,
        kubeconfig,
        release: "meshscope".into(),
        namespace: ns.clone(),
    };

    let secret = format!("{webhook}-tls");
    let objects: Vec<(&str, &str, &str)> = vec![
        ("serviceaccount", &ns, &webhook),
        ("clusterrole", "", &webhook),
        ("clusterrolebinding", "", &webhook),
        ("service", &ns, &webhook),
        ("deployment", &ns, &webhook),
        ("poddisruptionbudget", &ns, &webhook),
        ("secret", &ns, &secret),
        ("validatingwebhookconfiguration", "", &webhook),
        ("mutatingwebhookconfiguration", "", &webhook),
        ("serviceaccount", &ns, &watch),
        ("clusterrole", "", &watch),
        ("clusterrolebinding", "", &watch),
        ("role", "istio-system", &watch),
        ("rolebinding", "istio-system", &watch),
        ("role", &ns, &watch),
        ("rolebinding", &ns, &watch),
        ("lease", &ns, &watch),
        ("service", &ns, &watch),
        ("deployment", &ns, &watch),
        ("poddisruptionbudget", &ns, &watch),
    ];
    let docs = installed(c, &ns, &objects);
    let ca = check_certificates(c, &ns, &webhook);

    // The webhook: its Deployment runs as its ServiceAccount, from the
    // image asked for, mounting the Secret; the webhooks select only the
    // test's label.
    let d = &docs[4];
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(pod["serviceAccountName"], webhook.as_str());
    assert_eq!(
        pod["containers"][0]["image"],
        "registry.example/meshscope/meshscope-webhook:0.1.0"
    );
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], secret.as_str());
    for (i, kind) in [(7, "Validating"), (8, "Mutating")] {
        for h in docs[i]["webhooks"].as_array().unwrap() {
            assert_eq!(
                h["namespaceSelector"]["matchLabels"]["meshscope.io/helm-test"],
                ns.as_str(),
                "{kind}"
            );
            assert_eq!(h["clientConfig"]["service"]["name"], webhook.as_str());
            assert_eq!(h["clientConfig"]["service"]["namespace"], ns.as_str());
        }
    }
    // Watch mode: what its ServiceAccount is granted is exactly what its
    // Deployment's arguments ask for.
    let wd = one(&docs[18..19], "Deployment");
    assert_eq!(
        wd["spec"]["template"]["spec"]["serviceAccountName"],
        watch.as_str()
    );
    assert_grants_exactly_watch_needs(&docs, (&ns, &watch), wd, "the chart's watch RBAC");

    // Upgrade: the Deployment changes, the CA stays.
    let mut up = vec![
        "upgrade",
        "meshscope",
        chart,
        "-n",
        &ns,
        "--reuse-values",
        "--set",
        "webhook.replicas=3",
    ];
    up.push("--set");
    up.push("watch.replicas=1");
    helm.ok(&up, Some(kubeconfig));
    let replicas = |name: &str| {
        jsonpath(
            c,
            &["get", "deployment", name, "-n", &ns],
            "{.spec.replicas}",
        )
    };
    assert_eq!(replicas(&webhook), "3");
    assert_eq!(replicas(&watch), "1");
    assert_eq!(
        check_certificates(c, &ns, &webhook),
        ca,
        "the upgrade changed the CA"
    );
    let history = helm.ok(&["history", "meshscope", "-n", &ns], Some(kubeconfig));
    assert_eq!(history.lines().count(), 3, "{history}");

    // Uninstall: every object goes, the cluster-scoped ones too.
    helm.ok(&["uninstall", "meshscope", "-n", &ns], Some(kubeconfig));
    let deadline = Instant::now() + Duration::from_secs(30);
    for (kind, ons, name) in &objects {
        loop {
            let mut a = vec!["get", kind, name, "--ignore-not-found", "-o", "name"];
            if !ons.is_empty() {
                a.extend_from_slice(&["-n", ons]);
            }
            if c.kubectl_ok(&a, None).trim().is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{kind} {ons}/{name} outlived helm uninstall"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let left = helm.ok(&["list", "-n", &ns, "-q"], Some(kubeconfig));
    assert!(left.trim().is_empty(), "{left}");
}
