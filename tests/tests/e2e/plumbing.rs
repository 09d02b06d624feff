//! Live-mode plumbing against the test control plane: `--request-timeout`
//! bounding each request (a whole call, one page of a list), KUBECONFIG lists, the kubeconfig and connection
//! error texts, the one-pass RBAC check and reading with one namespace's
//! permissions, and apply's exit codes.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use clap::Parser;
use kubectl_meshscope::{args::Cli, Outcome};
use meshscope_e2e::cluster::{plugin_binary, Cluster};
use meshscope_e2e::rbac::{deployment, edited, kubeconfig_yaml, namespace_reader};

use meshscope_e2e::run::meshscope_at as meshscope;

fn binary(args: &[&str], env: &[(&str, &str)]) -> Output {
    env.iter()
        .fold(
            meshscope_e2e::run::binary(args).env_remove("KUBECONFIG"),
            |b, (k, v)| b.env(k, v),
        )
        .output()
}

fn set_server(v: &mut serde_yaml::Value, url: &str) {
    for cl in v["clusters"].as_sequence_mut().unwrap() {
        cl["cluster"]["server"] = url.into();
    }
}

/// A TCP server that accepts connections and never answers.
fn hung_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            held.push(s);
        }
    });
    port
}

/// A server that answers every request 503, which kube retries.
fn unavailable_server() -> u16 {
    use std::io::{Read, Write};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"message\":\"unavailable\",\"reason\":\"ServiceUnavailable\",\"code\":503}";
                    let reply = format!("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                    if s.write_all(reply.as_bytes()).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

#[test]
fn a_hung_api_server_fails_within_the_request_timeout_with_one_line() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let dir = tempfile::tempdir().unwrap();
    let hung = hung_server();
    let unavailable = unavailable_server();
    let cases = [
        // TLS handshake never answered.
        (format!("https://127.0.0.1:{hung}"), "2s", 2000),
        // Connected, request sent, no answer.
        (format!("http://127.0.0.1:{hung}"), "1500ms", 1500),
        // Answers 503 forever: kube's retries are bounded too.
        (format!("http://127.0.0.1:{unavailable}"), "2", 2000),
    ];
    for (i, (url, flag, ms)) in cases.iter().enumerate() {
        let kc = edited(c, dir.path(), &format!("hung{i}.kubeconfig"), |v| {
            set_server(v, url)
        });
        for cmd in ["audit", "recommend"] {
            let started = Instant::now();
            let out = binary(
                &[
                    cmd,
                    "-n",
                    "default",
                    "--kubeconfig",
                    &kc,
                    "--request-timeout",
                    flag,
                ],
                &[],
            );
            let took = started.elapsed();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{url} {cmd}: {err}");
            let bound = Duration::from_millis(*ms);
            assert!(
                took >= bound && took < bound + Duration::from_millis(1500),
                "{url} {cmd}: took {took:?} with --request-timeout {flag}: {err}"
            );
            let shown = kubectl_meshscope::live::show_duration(bound);
            assert!(
                err.starts_with(&format!("error: the API server at {url} did not answer "))
                    && err.contains(&format!(" within {shown} (--request-timeout); check that it is up, or raise --request-timeout")),
                "{url} {cmd}: {err}"
            );
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        }
    }
    // On a terminal, what is waited for is said after a few seconds.
    let kc = edited(c, dir.path(), "hung-tty.kubeconfig", |v| {
        set_server(v, &format!("https://127.0.0.1:{hung}"))
    });
    let line = format!(
        "{} audit -n default --kubeconfig {kc} --request-timeout 5s",
        plugin_binary().display()
    );
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .output()
        .unwrap();
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(
        tty.contains(&format!("waiting for the API server at https://127.0.0.1:{hung} to answer the permission check (SelfSubjectAccessReview) (gives up after 5s; see --request-timeout)")),
        "{tty}"
    );
    // 0 means no timeout, as kubectl: still waiting after the default's
    // worth of a short bound.
    let mut child = Command::new(plugin_binary())
        .args([
            "audit",
            "-n",
            "default",
            "--kubeconfig",
            &kc,
            "--request-timeout",
            "0",
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        child.try_wait().unwrap().is_none(),
        "--request-timeout 0 gave up"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// As kubectl's, `--request-timeout` bounds each request, not a whole list:
/// a list whose pages each come well within it succeeds however long all
/// of them take together (20,000 pods are 40 pages).
#[test]
fn request_timeout_bounds_each_page_of_a_list_not_the_whole_list() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("pages", &[]);
    let mut yaml = String::new();
    for i in 0..1_500 {
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: s{i}\n  namespace: {ns}\nspec:\n  clusterIP: None\n  ports:\n  - port: 80\n"
        ));
    }
    let o = c.kubectl(&["create", "-f", "-"], Some(&yaml));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let kc = c.kubeconfig.to_str().unwrap();
    let started = Instant::now();
    // One Service a page: 1,500 pages of the Services alone.
    let out = binary(
        &[
            "audit",
            "-n",
            &ns,
            "--kubeconfig",
            kc,
            "--chunk-size",
            "1",
            "--request-timeout",
            "1s",
            "--fail-on",
            "none",
        ],
        &[],
    );
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "took {took:?}: {err}");
    // The premise: together the pages took longer than one timeout.
    assert!(took > Duration::from_secs(1), "took only {took:?}");
    let _ = c.kubectl(&["delete", "namespace", &ns, "--wait=false"], None);
}

#[test]
fn request_timeout_takes_kubectls_syntax() {
    for (flag, ok) in [
        ("30s", true),
        ("1m", true),
        ("500ms", true),
        ("45", true),
        ("0", true),
        ("5d", false),
        ("soon", false),
    ] {
        let parsed = Cli::try_parse_from(["kubectl-meshscope", "audit", "--request-timeout", flag]);
        assert_eq!(parsed.is_ok(), ok, "{flag}");
    }
    let e = Cli::try_parse_from(["kubectl-meshscope", "audit", "--request-timeout", "5d"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown unit \"d\" (use ms, s, m or h)"), "{e}");
}

#[test]
fn a_kubeconfig_list_skips_missing_files_and_merges_the_rest() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("kclist", &[]);
    let dir = tempfile::tempdir().unwrap();
    // A second file with only a context of its own, which works only if
    // merged with the admin file's cluster and user.
    let mut v = kubeconfig_yaml(c);
    let mut ctx = v["contexts"][0].clone();
    ctx["name"] = "second".into();
    v["contexts"] = serde_yaml::Value::Sequence(vec![ctx]);
    v["clusters"] = serde_yaml::Value::Sequence(vec![]);
    v["users"] = serde_yaml::Value::Sequence(vec![]);
    v.as_mapping_mut().unwrap().remove("current-context");
    let second = dir.path().join("second.kubeconfig");
    std::fs::write(&second, serde_yaml::to_string(&v).unwrap()).unwrap();
    let list = format!(
        "{}:{}:{}:{}",
        dir.path().join("gone-1").display(),
        c.kubeconfig.display(),
        dir.path().join("gone-2").display(),
        second.display()
    );
    for args in [
        vec!["audit", "-n", &ns],
        vec!["audit", "-n", &ns, "--context", "second"],
    ] {
        let out = binary(&args, &[("KUBECONFIG", &list)]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Only when none exists is it an error.
    let none = format!(
        "{}:{}",
        dir.path().join("gone-1").display(),
        dir.path().join("gone-2").display()
    );
    let out = binary(&["audit", "-n", &ns], &[("KUBECONFIG", &none)]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "error: no file in KUBECONFIG exists ({}, {}); set KUBECONFIG to your kubeconfig, or pass --kubeconfig\n",
            dir.path().join("gone-1").display(),
            dir.path().join("gone-2").display()
        )
    );
}

/// One line (no doubled wrappers or quotes), as main prints it.
fn one_line(e: &str) {
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(!e.contains("'\""), "doubled quotes: {e}");
    for doubled in [
        "invalid kubeconfig",
        "client error (Connect)",
        "ServiceError",
        "failed to read kubeconfig",
    ] {
        assert!(!e.contains(doubled), "wrapper {doubled:?}: {e}");
    }
}

#[test]
fn kubeconfig_errors_name_the_cause_and_the_fix_once() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gone = d.join("gone.kubeconfig");
    let e = meshscope(&gone, &["audit", "-n", "default"]).error();
    assert_eq!(
        e,
        format!("cannot read --kubeconfig {0}: no such file or directory; point --kubeconfig at a kubeconfig file", gone.display())
    );
    let e = meshscope(d, &["audit"]).error();
    assert_eq!(
        e,
        format!(
            "cannot read --kubeconfig {0}: is a directory; point --kubeconfig at a kubeconfig file",
            d.display()
        )
    );
    let bad = d.join("bad.kubeconfig");
    std::fs::write(&bad, "clusters: [\n").unwrap();
    let e = meshscope(&bad, &["audit"]).error();
    assert!(
        e.starts_with(&format!(
            "cannot parse --kubeconfig {}: line ",
            bad.display()
        )) && e.ends_with("; fix its YAML"),
        "{e}"
    );
    one_line(&e);

    let admin = c.kubeconfig.to_str().unwrap();
    let e = meshscope(&c.kubeconfig, &["audit", "--context", "nope"]).error();
    assert_eq!(
        e,
        format!("context \"nope\" is not in --kubeconfig {admin} (it has meshscope-test); pass one of them with --context")
    );
    let kc = edited(c, d, "nocurrent.kubeconfig", |v| {
        v.as_mapping_mut().unwrap().remove("current-context");
    });
    let e = meshscope(Path::new(&kc), &["audit"]).error();
    assert_eq!(
        e,
        format!("--kubeconfig {kc} sets no current-context (it has meshscope-test); pass --context, or run `kubectl config use-context NAME`")
    );
    let kc = edited(c, d, "nocluster.kubeconfig", |v| {
        v["contexts"][0]["context"]["cluster"] = "gone".into();
    });
    let e = meshscope(Path::new(&kc), &["audit"]).error();
    assert_eq!(
        e,
        format!("the context names cluster \"gone\", which --kubeconfig {kc} does not define; fix the context, or pass another --context")
    );
    let kc = edited(c, d, "badurl.kubeconfig", |v| set_server(v, "ht tp://x"));
    let e = meshscope(Path::new(&kc), &["audit"]).error();
    assert!(
        e.starts_with(&format!(
            "the context's cluster in --kubeconfig {kc} has an invalid server URL ("
        )),
        "{e}"
    );
    one_line(&e);
    let kc = edited(c, d, "noca.kubeconfig", |v| {
        let cl = v["clusters"][0]["cluster"].as_mapping_mut().unwrap();
        cl.remove("certificate-authority-data");
        cl.insert("certificate-authority".into(), "/nonexistent/ca.crt".into());
    });
    let e = meshscope(Path::new(&kc), &["audit"]).error();
    assert!(
        e.starts_with(&format!("cannot load the certificate authority named in --kubeconfig {kc} (failed to read file \"/nonexistent/ca.crt\""))
            && e.ends_with("; fix the cluster's certificate-authority(-data)"),
        "{e}"
    );
    one_line(&e);
}

#[test]
fn connection_errors_are_one_line_each() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let kc = edited(c, d, "refused.kubeconfig", |v| {
        set_server(v, "https://127.0.0.1:1")
    });
    let e = meshscope(Path::new(&kc), &["audit", "-n", "default"]).error();
    assert!(
        e.starts_with("cannot reach the API server at https://127.0.0.1:1 (tcp connect error: Connection refused"),
        "{e}"
    );
    one_line(&e);
    // Another CA than the server's.
    let kc = edited(c, d, "untrusted.kubeconfig", |v| {
        let ca = another_certificate();
        v["clusters"][0]["cluster"]["certificate-authority-data"] = ca.into();
    });
    let e = meshscope(Path::new(&kc), &["audit", "-n", "default"]).error();
    assert!(
        e.contains("is not trusted (invalid peer certificate"),
        "{e}"
    );
    one_line(&e);
    let kc = edited(c, d, "token.kubeconfig", |v| {
        v["users"][0]["user"] = serde_yaml::from_str("{token: not-a-token}").unwrap();
    });
    let e = meshscope(Path::new(&kc), &["audit", "-n", "default"]).error();
    assert!(e.ends_with("rejected the kubeconfig's credentials (401 Unauthorized); log in again or renew them, or pick another --context"), "{e}");
    one_line(&e);
}

/// A certificate (base64 PEM) that did not sign the server's: the admin
/// kubeconfig's client certificate.
fn another_certificate() -> String {
    let c = Cluster::shared();
    let v = kubeconfig_yaml(c);
    v["users"][0]["user"]["client-certificate-data"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_user_who_may_read_one_namespace_gets_a_result_limited_to_it() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("nsread", &[("istio-injection", "enabled")]);
    c.apply(&deployment(&ns, "web"));
    let dir = tempfile::tempdir().unwrap();
    let user = format!("meshscope-nsreader-{ns}");
    let kc = namespace_reader(c, &ns, &user, true, dir.path());
    let limitation = format!("warning: cross-namespace dependencies unknown: cannot list services, sidecars.networking.istio.io, serviceentries.networking.istio.io, virtualservices.networking.istio.io, destinationrules.networking.istio.io, telemetries.telemetry.istio.io, authorizationpolicies.security.istio.io, httproutes.gateway.networking.k8s.io, grpcroutes.gateway.networking.k8s.io, tcproutes.gateway.networking.k8s.io, tlsroutes.gateway.networking.k8s.io, referencegrants.gateway.networking.k8s.io, gateways.gateway.networking.k8s.io in all namespaces, so only those in namespace \"{ns}\" are read; grant deploy/rbac/meshscope-reader.yaml for the rest\n");
    let runs = [
        vec!["audit", "-n", &ns],
        vec!["recommend", "-n", &ns, "--allow-idle"],
        vec!["explain", "workload", "deployment/web", "-n", &ns],
    ];
    for args in &runs {
        let r = meshscope(&kc, args);
        assert!(r.outcome.is_ok(), "{args:?}: {:#}", r.outcome.unwrap_err());
        assert!(r.stderr.contains(&limitation), "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("warning: mesh config unknown: cannot get configmaps/istio in namespace \"istio-system\""), "{}", r.stderr);
        assert!(!r.stderr.contains("injection in namespace"), "{}", r.stderr);
    }
    // The namespace's labels were read with get: web is injected, so it
    // gets a Sidecar.
    let r = meshscope(&kc, &runs[1]);
    assert!(
        r.stdout.contains("kind: Sidecar") && r.stdout.contains("name: web"),
        "{}",
        r.stdout
    );

    // Without get on its Namespace, its labels are unknown, and said.
    let user = format!("meshscope-nslabels-{ns}");
    let kc = namespace_reader(c, &ns, &user, false, dir.path());
    let r = meshscope(&kc, &["audit", "-n", &ns]);
    assert!(r.outcome.is_ok(), "{:#}", r.outcome.unwrap_err());
    assert!(
        r.stderr.contains(&format!("warning: injection in namespace \"{ns}\" unknown: cannot get namespaces/{ns} (nor list namespaces), so its istio-injection and istio.io/rev labels are not known and it is taken as unlabeled")),
        "{}",
        r.stderr
    );
}

#[test]
fn a_user_without_permissions_gets_one_role_for_everything_missing() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("noperm", &[("istio-injection", "enabled")]);
    let dir = tempfile::tempdir().unwrap();
    let nobody = c
        .impersonating("meshscope-nobody-plumbing", dir.path())
        .unwrap();
    let out = binary(
        &["audit", "-n", &ns, "--kubeconfig", nobody.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().next().unwrap();
    assert_eq!(
        first,
        format!("error: RBAC forbids list on namespaces, services, sidecars.networking.istio.io, serviceentries.networking.istio.io, virtualservices.networking.istio.io, destinationrules.networking.istio.io, telemetries.telemetry.istio.io, authorizationpolicies.security.istio.io, httproutes.gateway.networking.k8s.io, grpcroutes.gateway.networking.k8s.io, tcproutes.gateway.networking.k8s.io, tlsroutes.gateway.networking.k8s.io, referencegrants.gateway.networking.k8s.io, gateways.gateway.networking.k8s.io, endpointslices.discovery.k8s.io, gatewayclasses.gateway.networking.k8s.io in all namespaces, and list on pods, deployments.apps, replicasets.apps, statefulsets.apps, daemonsets.apps, jobs.batch, cronjobs.batch, services, sidecars.networking.istio.io, serviceentries.networking.istio.io, virtualservices.networking.istio.io, destinationrules.networking.istio.io, telemetries.telemetry.istio.io, authorizationpolicies.security.istio.io, httproutes.gateway.networking.k8s.io, grpcroutes.gateway.networking.k8s.io, tcproutes.gateway.networking.k8s.io, tlsroutes.gateway.networking.k8s.io, referencegrants.gateway.networking.k8s.io, gateways.gateway.networking.k8s.io in namespace \"{ns}\"; grant deploy/rbac/meshscope-reader.yaml, or at least:")
    );
    assert_eq!(
        err.matches("apiVersion: rbac.authorization.k8s.io/v1")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains("kind: ClusterRole\nmetadata:\n  name: meshscope-reader\nrules:\n- apiGroups: [\"\"]\n  resources: [\"namespaces\", \"services\", \"pods\"]\n  verbs: [\"list\"]\n"), "{err}");
    // The printed role is enough: bound, audit runs.
    let role: String = err.lines().skip(1).collect::<Vec<_>>().join("\n");
    let role = role.replace(
        "name: meshscope-reader",
        &format!("name: meshscope-printed-{ns}"),
    );
    c.apply(&role);
    c.kubectl_ok(
        &[
            "create",
            "clusterrolebinding",
            &format!("meshscope-printed-{ns}"),
            &format!("--clusterrole=meshscope-printed-{ns}"),
            "--user=meshscope-nobody-plumbing",
        ],
        None,
    );
    c.await_grant("meshscope-nobody-plumbing", &["list", "pods", "-n", &ns]);
    let r = meshscope(&nobody, &["audit", "-n", &ns]);
    let ok = r.outcome.is_ok();
    c.kubectl_ok(
        &[
            "delete",
            "clusterrolebinding",
            &format!("meshscope-printed-{ns}"),
        ],
        None,
    );
    assert!(ok, "{}", r.stderr);

    // apply: naming both files; the reads under the reader's name, the
    // writes under the applier's (never the reader's rules under
    // meshscope-applier), in one stream kubectl applies.
    c.apply(&deployment(&ns, "web"));
    let reader = format!("meshscope-applyreader-{ns}");
    let kc = namespace_reader(c, &ns, &reader, true, dir.path());
    let e = meshscope(&kc, &["apply", "-n", &ns, "--allow-idle", "--prune"]).error();
    assert!(
        e.contains(&format!("and create, patch, delete on sidecars.networking.istio.io in namespace \"{ns}\"; grant deploy/rbac/meshscope-reader.yaml and deploy/rbac/meshscope-applier.yaml, or at least:\n")),
        "{e}"
    );
    let docs: Vec<&str> = e.split("\n---\n").collect();
    assert_eq!(docs.len(), 2, "{e}");
    assert!(
        docs[0].contains("name: meshscope-reader\n")
            && !docs[0].contains("sidecars\"]\n  verbs: [\"create"),
        "{e}"
    );
    assert!(
        docs[1].contains("metadata:\n  name: meshscope-applier\n")
            && docs[1].contains("\"create\", \"patch\", \"delete\"]"),
        "{e}"
    );
}

fn quota(c: &Cluster, ns: &str, n: u32) {
    c.apply(&format!(
        "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: sidecars\n  namespace: {ns}\nspec:\n  hard:\n    count/sidecars.networking.istio.io: \"{n}\"\n"
    ));
    // Admission counts against the quota once the controller has.
    let until = Instant::now() + Duration::from_secs(60);
    while c
        .kubectl_ok(
            &[
                "get",
                "resourcequota",
                "sidecars",
                "-n",
                ns,
                "-o",
                "jsonpath={.status.used}",
            ],
            None,
        )
        .trim()
        .is_empty()
    {
        assert!(Instant::now() < until, "the quota controller never counted");
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn apply_exits_2_when_every_object_fails_alike_and_1_when_some_do() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    // Every Sidecar refused the same way: an error, said once.
    let ns = c.namespace("applyall", &[("istio-injection", "enabled")]);
    c.apply(&format!(
        "{}---\n{}",
        deployment(&ns, "a"),
        deployment(&ns, "b")
    ));
    quota(c, &ns, 0);
    let r = meshscope(&c.kubeconfig, &["apply", "-n", &ns, "--allow-idle"]);
    let e = r.error();
    assert!(
        e.starts_with(
            "apply: 2 of 2 objects failed: patch sidecars.networking.istio.io in namespace"
        ),
        "{e}"
    );
    assert!(e.contains("exceeded quota"), "{e}");
    assert!(!r.stderr.contains("failed: "), "said once: {}", r.stderr);
    let out = binary(
        &[
            "apply",
            "-n",
            &ns,
            "--allow-idle",
            "--kubeconfig",
            c.kubeconfig.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));

    // One of two refused: a finding.
    let ns = c.namespace("applysome", &[("istio-injection", "enabled")]);
    c.apply(&format!(
        "{}---\n{}",
        deployment(&ns, "a"),
        deployment(&ns, "b")
    ));
    quota(c, &ns, 1);
    let r = meshscope(&c.kubeconfig, &["apply", "-n", &ns, "--allow-idle"]);
    assert_eq!(
        r.outcome.as_ref().unwrap(),
        &Outcome::Findings,
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("apply: 1 created, 1 failed"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("exceeded quota"), "{}", r.stderr);
}

#[test]
fn the_help_says_the_timeout_default_and_applys_exit_codes() {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let audit = cmd
        .find_subcommand_mut("audit")
        .unwrap()
        .render_long_help()
        .to_string();
    assert!(
        audit.contains("--request-timeout <DURATION>")
            && audit.contains("[default: 30s]")
            && audit.contains("0 waits forever"),
        "{audit}"
    );
    // Help is wrapped to the terminal's width: compare words.
    let apply = cmd
        .find_subcommand_mut("apply")
        .unwrap()
        .render_long_help()
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        apply.contains("Exit codes: 0 every object applied (or unchanged, pruned, or skipped as user-owned), 1 some objects failed or were skipped on a conflict, 2 error, including every object failing for the same cause"),
        "{apply}"
    );
}

/// The plugin and the tools beside it say an error alike: one line on
/// stderr starting `error: `, exit code 2 (issue #35 item 15).
#[test]
fn every_binary_says_an_error_as_kubectl_meshscope_does() {
    let dir = meshscope_e2e::cluster::bin_dir();
    for (tool, args) in [
        (
            "kubectl-meshscope",
            &["recommend", "--manifests", "/nonexistent"][..],
        ),
        ("meshscope-scenario", &["--bogus"][..]),
        ("meshscope-xds-sim", &["--bogus"][..]),
        ("meshscope-load", &["/nonexistent"][..]),
        ("meshscope-benchgen", &["nope"][..]),
        ("meshscope-bench-baseline-webhook", &["--bogus"][..]),
        ("meshscope-bench-exports", &["--bogus"][..]),
        ("meshscope-bench-istiod", &["--bogus"][..]),
        ("meshscope-bench-sidecars", &["--bogus"][..]),
        ("meshscope-bench-watch", &["--bogus"][..]),
    ] {
        let path = dir.join(tool);
        assert!(
            path.exists(),
            "{} is missing: build the workspace first",
            path.display()
        );
        let out = Command::new(&path).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{tool}: {err}");
        assert!(err.starts_with("error: "), "{tool}: {err}");
        assert_eq!(err.lines().count(), 1, "{tool}: {err}");
    }
}
