//! kubectl's ways of reaching a cluster, against the test control plane:
//! the connection flags (`--as`, `--as-group`, `--user`, `--cluster`,
//! `--server`, `--token`, `--certificate-authority`,
//! `--insecure-skip-tls-verify`), flags before the command, `-o
//! jsonpath=`, a namespace's user answered for the context's namespace by
//! every command, diff's permissions checked up front, an X.509 v1 client
//! certificate, and impact's missing targets.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine as _;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::rbac::{
    deployment, edited, kubeconfig_yaml, namespace_reader, namespace_reader_at_home,
};
use meshscope_e2e::run::meshscope_at as meshscope;

/// The plugin binary with `args`, no KUBECONFIG, and `home` as HOME (so
/// no ~/.kube/config either).
fn binary(args: &[&str], home: &Path) -> Output {
    meshscope_e2e::run::binary(args)
        .env_remove("KUBECONFIG")
        .env("HOME", home)
        .output()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The test API server's URL and its CA certificate, written to `dir`.
fn server_and_ca(c: &Cluster, dir: &Path) -> (String, PathBuf) {
    let v = kubeconfig_yaml(c);
    let server = v["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .to_string();
    let data = v["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .unwrap();
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, pem).unwrap();
    (server, ca)
}

/// The limitation a user who may read only `ns` is told of.
fn limited_to(ns: &str) -> String {
    format!("cannot list services, sidecars.networking.istio.io, serviceentries.networking.istio.io, virtualservices.networking.istio.io, destinationrules.networking.istio.io, telemetries.telemetry.istio.io, authorizationpolicies.security.istio.io, httproutes.gateway.networking.k8s.io, grpcroutes.gateway.networking.k8s.io, tcproutes.gateway.networking.k8s.io, tlsroutes.gateway.networking.k8s.io, referencegrants.gateway.networking.k8s.io, gateways.gateway.networking.k8s.io in all namespaces, so only those in namespace \"{ns}\" are read")
}

#[test]
fn a_namespaces_user_gets_answers_for_the_context_namespace_from_every_command() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("home", &[("istio-injection", "enabled")]);
    c.apply(&deployment(&ns, "web"));
    let dir = tempfile::tempdir().unwrap();
    let user = format!("meshscope-home-{ns}");
    let kc = namespace_reader_at_home(c, &ns, &user, dir.path());
    // None of these is given -n: the context names the namespace.
    let runs: [&[&str]; 5] = [
        &["audit"],
        &["recommend", "--allow-idle"],
        &["explain", "deployment/web"],
        &["impact", "service/web"],
        // No istiod listens there: reading the mesh is what is checked,
        // and verify goes on to ask istiod.
        &["verify", "--istiod-url", "http://127.0.0.1:9"],
    ];
    for args in runs {
        let r = meshscope(&kc, args);
        match &r.outcome {
            Err(e) if args[0] == "verify" => {
                let e = format!("{e:#}");
                assert!(
                    e.starts_with("cannot reach istiod http://127.0.0.1:9"),
                    "{e}"
                );
            }
            Err(e) => panic!("{args:?}: {e:#}\n{}", r.stderr),
            Ok(_) => {}
        }
        assert!(
            r.stderr.contains(&limited_to(&ns)),
            "{args:?}: {}",
            r.stderr
        );
    }
    let r = meshscope(&kc, &["impact", "service/web", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["target"], format!("service/web -n {ns}"), "{}", r.stdout);

    // recommend -o json carries the savings beside the items, and kubectl
    // still applies it as it is (the API server checks each item).
    let r = meshscope(
        &c.kubeconfig,
        &["recommend", "-n", &ns, "--allow-idle", "-o", "json"],
    );
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect(&r.stderr);
    assert_eq!(v["items"].as_array().map(Vec::len), Some(1), "{}", r.stdout);
    assert_eq!(v["savings"]["proxies"], 1, "{}", r.stdout);
    let applied = c.kubectl_ok(&["apply", "--dry-run=server", "-f", "-"], Some(&r.stdout));
    assert!(applied.contains("created (server dry run)"), "{applied}");

    // version counts the proxies it may see, and says so.
    let r = meshscope(&kc, &["version"]);
    assert!(r.outcome.is_ok(), "{:#}", r.outcome.unwrap_err());
    assert!(
        r.stderr.contains(&format!("warning: other namespaces' proxies unknown: cannot list pods in all namespaces, so only namespace \"{ns}\"'s are counted")),
        "{}",
        r.stderr
    );
    assert!(
        r.stdout.contains("Semantics applied: Istio"),
        "{}",
        r.stdout
    );
}

#[test]
fn diff_checks_its_dry_run_permissions_before_it_reads() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("diffperm", &[("istio-injection", "enabled")]);
    c.apply(&deployment(&ns, "web"));
    let dir = tempfile::tempdir().unwrap();
    let kc = namespace_reader(
        c,
        &ns,
        &format!("meshscope-diffreader-{ns}"),
        true,
        dir.path(),
    );
    let e = meshscope(&kc, &["diff", "-n", &ns, "--allow-idle"]).error();
    let first = e.lines().next().unwrap();
    // The one-pass check's error, naming diff's dry-run verbs and the
    // file that grants them, not a denied dry run after the reads.
    assert!(first.starts_with("RBAC forbids "), "{e}");
    assert!(
        first.contains(&format!(
            "create, patch on sidecars.networking.istio.io in namespace \"{ns}\""
        )),
        "{e}"
    );
    assert!(first.contains("deploy/rbac/meshscope-applier.yaml"), "{e}");
    // The reads under the reader's name, diff's dry runs under the
    // applier's: two roles, in one stream.
    assert_eq!(e.matches("kind: ").count(), 2, "{e}");
    assert!(
        e.contains("name: meshscope-reader\n") && e.contains("name: meshscope-applier\n"),
        "{e}"
    );
}

#[test]
fn impact_names_the_missing_namespace_or_target_and_where_one_is() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("impactnf", &[("istio-injection", "enabled")]);
    // A name no other test's namespace holds.
    let name = format!("only-{ns}");
    c.apply(&deployment(&ns, &name));
    let server = kubeconfig_yaml(c)["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let at = |e: &str| e.replace(&server, "URL");
    let r = meshscope(&c.kubeconfig, &["impact", "service/nosuch", "-n", &ns]);
    assert_eq!(
        at(&r.error()),
        format!("service/nosuch not found in namespace {ns} in the cluster at URL")
    );
    // Nothing before the error but the reads' own lines.
    let note = meshscope_shared::notes::impact_without_traffic();
    assert!(!r.stderr.contains(&note), "{}", r.stderr);
    let target = format!("service/{name}");
    let r = meshscope(&c.kubeconfig, &["impact", &target, "-n", "default"]);
    assert_eq!(
        at(&r.error()),
        format!("{target} not found in namespace default in the cluster at URL; there is one in namespace {ns} (pass -n {ns})")
    );
    let r = meshscope(
        &c.kubeconfig,
        &["impact", &target, "-n", &format!("{ns}-typo")],
    );
    assert_eq!(
        at(&r.error()),
        format!("namespace \"{ns}-typo\" not found in the cluster at URL")
    );
}

#[test]
fn kubectls_connection_flags_reach_the_cluster_as_kubectl_does() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("connflags", &[("istio-injection", "enabled")]);
    c.apply(&deployment(&ns, "web"));
    let dir = tempfile::tempdir().unwrap();
    let admin = c.kubeconfig.to_str().unwrap();

    // Flags before the command, as kubectl users type them.
    let out = binary(
        &["--kubeconfig", admin, "-n", &ns, "audit", "-o", "name"],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "deployment.apps/web\n");
    // A command that takes no -n says so, as it would after the command.
    let out = binary(&["-n", &ns, "codes"], dir.path());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("unexpected argument '-n'"),
        "{}",
        text(&out.stderr)
    );

    // --as: the admin impersonates a namespace's reader, who is limited.
    let reader = format!("meshscope-asreader-{ns}");
    namespace_reader(c, &ns, &reader, true, dir.path());
    let r = meshscope(&c.kubeconfig, &["audit", "-n", &ns, "--as", &reader]);
    assert!(r.outcome.is_ok(), "{:#}", r.outcome.unwrap_err());
    assert!(r.stderr.contains(&limited_to(&ns)), "{}", r.stderr);
    // --as-group: a group that may read everything lifts the limit.
    let r = meshscope(
        &c.kubeconfig,
        &[
            "audit",
            "-n",
            &ns,
            "--as",
            &reader,
            "--as-group",
            "system:masters",
        ],
    );
    assert!(r.outcome.is_ok(), "{:#}", r.outcome.unwrap_err());
    assert!(!r.stderr.contains("warning:"), "{}", r.stderr);

    // --server, --token and --certificate-authority, with no kubeconfig.
    let (server, ca) = server_and_ca(c, dir.path());
    c.kubectl_ok(&["create", "serviceaccount", "auditor", "-n", &ns], None);
    c.install_reader();
    c.kubectl_ok(
        &[
            "create",
            "clusterrolebinding",
            &format!("meshscope-auditor-{ns}"),
            "--clusterrole=meshscope-reader",
            &format!("--serviceaccount={ns}:auditor"),
        ],
        None,
    );
    c.await_grant(
        &format!("system:serviceaccount:{ns}:auditor"),
        &["list", "pods", "--all-namespaces"],
    );
    let token = c.kubectl_ok(&["create", "token", "auditor", "-n", &ns], None);
    let token = token.trim();
    let ca = ca.to_str().unwrap();
    let flags = ["-s", &server, "--token", token];
    let mut args: Vec<&str> = flags.to_vec();
    args.extend([
        "--certificate-authority",
        ca,
        "audit",
        "-n",
        &ns,
        "-o",
        "name",
    ]);
    let out = binary(&args, dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "deployment.apps/web\n");
    // Without the CA the server's certificate is not trusted; with
    // --insecure-skip-tls-verify it is not checked.
    let mut args: Vec<&str> = flags.to_vec();
    args.extend(["audit", "-n", &ns, "-o", "name"]);
    let out = binary(&args, dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).lines().count(),
        1,
        "{}",
        text(&out.stderr)
    );
    args.push("--insecure-skip-tls-verify");
    let out = binary(&args, dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = binary(
        &[
            "--server",
            &server,
            "--token",
            "not-a-token",
            "--certificate-authority",
            ca,
            "audit",
            "-n",
            &ns,
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("401") || text(&out.stderr).contains("credentials"),
        "{}",
        text(&out.stderr)
    );

    // --user and --cluster pick the kubeconfig's others.
    let kc = edited(c, dir.path(), "two.kubeconfig", |v| {
        let user = v["users"][0].clone();
        let mut bad = user.clone();
        bad["name"] = "bad".into();
        bad["user"] = serde_yaml::from_str("{token: bogus}").unwrap();
        v["users"].as_sequence_mut().unwrap().push(bad);
        let mut wrong = v["clusters"][0].clone();
        wrong["name"] = "wrong".into();
        wrong["cluster"]["server"] = "https://127.0.0.1:9".into();
        v["clusters"].as_sequence_mut().unwrap().push(wrong);
        v["contexts"][0]["context"]["user"] = "bad".into();
        v["contexts"][0]["context"]["cluster"] = "wrong".into();
    });
    let v = kubeconfig_yaml(c);
    let (user, cluster) = (
        v["users"][0]["name"].as_str().unwrap(),
        v["clusters"][0]["name"].as_str().unwrap(),
    );
    let kc = Path::new(&kc);
    let e = meshscope(kc, &["audit", "-n", &ns]).error();
    assert!(e.contains("https://127.0.0.1:9"), "{e}");
    let e = meshscope(kc, &["audit", "-n", &ns, "--cluster", cluster]).error();
    assert!(!e.contains("127.0.0.1:9"), "{e}");
    let r = meshscope(
        kc,
        &["audit", "-n", &ns, "--cluster", cluster, "--user", user],
    );
    assert!(r.outcome.is_ok(), "{:#}", r.outcome.unwrap_err());
}

#[test]
fn jsonpath_output_renders_the_json_as_kubectl_does() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("jsonpath", &[("istio-injection", "enabled")]);
    c.apply(&deployment(&ns, "web"));
    c.apply(&deployment(&ns, "api"));
    let r = meshscope(
        &c.kubeconfig,
        &[
            "audit",
            "-n",
            &ns,
            "-o",
            "jsonpath={range .findings[*]}{.code} {.kind}/{.name}{\"\\n\"}{end}",
        ],
    );
    assert!(r.outcome.is_ok(), "{:#}", r.outcome.unwrap_err());
    let mut lines: Vec<&str> = r.stdout.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        ["MS0001 Deployment/api", "MS0001 Deployment/web"],
        "{}",
        r.stdout
    );
    let r = meshscope(
        &c.kubeconfig,
        &[
            "recommend",
            "-n",
            &ns,
            "--allow-idle",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
    );
    let mut names: Vec<&str> = r.stdout.split(' ').collect();
    names.sort();
    assert_eq!(
        names,
        ["api-deployment-meshscope", "web-deployment-meshscope"],
        "{}",
        r.stderr
    );
    let r = meshscope(
        &c.kubeconfig,
        &["version", "-o", "jsonpath={.cluster_domain}"],
    );
    assert_eq!(r.stdout, "cluster.local", "{}", r.stderr);
    let e = meshscope(
        &c.kubeconfig,
        &["audit", "-n", &ns, "-o", "jsonpath={.findings"],
    )
    .error();
    assert_eq!(e, "-o jsonpath={.findings: unclosed { in \"{.findings\"");
}

#[test]
fn an_x509_v1_client_certificate_gets_the_reason_and_a_reissue_that_works() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("v1cert", &[("istio-injection", "enabled")]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = c.kubeconfig.parent().unwrap().join("pki");
    let user = format!("meshscope-v1-{ns}");
    c.bind_reader(&user);
    let sh = |script: &str| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(d)
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {}", text(&out.stderr));
    };
    // The common way: a key, a CSR, `openssl x509 -req` (v1 in OpenSSL 3).
    sh(&format!(
        "openssl req -newkey rsa:2048 -nodes -keyout USER.key -out USER.csr -subj /CN={user} 2>/dev/null && openssl x509 -req -in USER.csr -CA {ca}.crt -CAkey {ca}.key -days 1 -out USER.crt 2>/dev/null && openssl x509 -in USER.crt -noout -text | grep -q 'Version: 1 (0x0)'",
        ca = pki.join("ca").display()
    ));
    let kc = |name: &str| {
        let cert = std::fs::read(d.join("USER.crt")).unwrap();
        let key = std::fs::read(d.join("USER.key")).unwrap();
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        PathBuf::from(edited(c, d, name, |v| {
            v["users"][0]["user"]["client-certificate-data"] = b64(&cert).into();
            v["users"][0]["user"]["client-key-data"] = b64(&key).into();
        }))
    };
    let v1 = kc("v1.kubeconfig");
    // kubectl takes it.
    let out = Command::new("kubectl")
        .args([
            "--kubeconfig",
            v1.to_str().unwrap(),
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ])
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout), user, "{}", text(&out.stderr));
    let e = meshscope(&v1, &["audit", "-n", &ns]).error();
    assert!(
        e.contains(
            "is an X.509 v1 certificate, which meshscope's TLS library (rustls) does not accept"
        ),
        "{e}"
    );
    assert!(!e.contains("private key"), "{e}");
    // The reissue it prints, run as printed (with the paths filled in).
    let fix = e.split('`').nth(1).expect("the fix is quoted");
    sh(&fix
        .replace("ca.crt", &format!("{}.crt", pki.join("ca").display()))
        .replace("ca.key", &format!("{}.key", pki.join("ca").display())));
    let v3 = kc("v3.kubeconfig");
    let r = meshscope(&v3, &["audit", "-n", &ns]);
    assert!(r.outcome.is_ok(), "{:#}", r.outcome.unwrap_err());
}
