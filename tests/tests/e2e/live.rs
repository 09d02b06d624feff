//! The plugin against a real kube-apiserver + etcd + kube-controller-manager
//! (built and started by tests/cluster/up) and a real Prometheus. Each test
//! works in namespaces of its own.

use std::process::Command;

use kubectl_meshscope::Outcome;
use meshscope_e2e::cluster::{bin_dir, plugin_binary, Cluster, Prometheus};
use meshscope_e2e::{sidecar_hosts as sidecars, LogForm};

use meshscope_e2e::run::meshscope_at as meshscope;
use meshscope_e2e::setup::{deploy_scenario, deploy_scenario_with};
use meshscope_test_support::audit_json::codes_and_names as codes;

#[test]
fn audit_live_finds_unscoped_workloads_and_dns_service_entries() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("audit", &[("istio-injection", "enabled")]);
    c.apply(&format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: worker\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: worker}}\n  template:\n    metadata:\n      labels: {{app: worker}}\n    spec:\n      containers: [{{name: c, image: example/worker:1}}]\n---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: payments-api\n  namespace: {ns}\nspec:\n  hosts: [api.payments.example]\n  ports: [{{number: 443, name: tls, protocol: TLS}}]\n  resolution: DNS\n  location: MESH_EXTERNAL\n"
    ));
    let r = meshscope(
        &c.kubeconfig,
        &["audit", "-n", &ns, "-o", "json", "--fail-on", "warning"],
    );
    assert_eq!(r.outcome.unwrap(), Outcome::Findings, "{}", r.stderr);
    let found = codes(&r.stdout);
    assert!(
        found.contains(&("MS0001".into(), "worker".into())),
        "{found:?}"
    );
    assert!(
        found.contains(&("MS0002".into(), "payments-api".into())),
        "{found:?}"
    );
    // A namespace that does not exist is an error (exit 2), not a clean audit.
    for cmd in ["audit", "recommend", "verify"] {
        let r = meshscope(&c.kubeconfig, &[cmd, "-n", &format!("{ns}-typo")]);
        let e = format!("{:#}", r.outcome.unwrap_err());
        assert!(
            e.starts_with(&format!(
                "namespace \"{ns}-typo\" not found in the cluster at https://"
            )),
            "{cmd}: {e}"
        );
    }
}

#[test]
fn recommend_apply_reapply_audit_and_explain_against_the_api_server() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let s = deploy_scenario(c, "flow");
    let ns = s.namespace.clone();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    std::fs::write(&log, s.logs(LogForm::Text)).unwrap();
    let log = log.to_str().unwrap();

    // Recommend from access-log files, live snapshot.
    let r = meshscope(
        &c.kubeconfig,
        &["recommend", "-n", &ns, "--access-log", log],
    );
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
    let from_logs = sidecars(&r.stdout);
    for i in 0..s.sleeps {
        assert_eq!(
            from_logs[&format!("sleep-{i}-deployment-meshscope")],
            s.hosts_of_sleep(i)
        );
    }
    for j in 0..s.httpbins {
        assert_eq!(
            from_logs[&format!("httpbin-{j}-deployment-meshscope")],
            vec!["~/*"]
        );
    }

    // Recommend from a real Prometheus with the same traffic backfilled.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // `recommend` from a real Prometheus loaded with `openmetrics`.
    let from_prometheus = |openmetrics: &str, since: &str| {
        let prom = Prometheus::start(openmetrics).unwrap();
        let r = meshscope(
            &c.kubeconfig,
            &[
                "recommend",
                "-n",
                &ns,
                "--prometheus",
                &prom.url,
                "--since",
                since,
            ],
        );
        assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
        assert_eq!(sidecars(&r.stdout), from_logs, "{}", r.stderr);
        r.stdout
    };
    let out = from_prometheus(&s.openmetrics(now), "7d");
    assert!(out.contains("meshscope.io/sources: prometheus"));

    // Every series with one sample, as a dependency called only in a burst
    // that one scrape saw (Istio creates a series on its first request, so
    // it never starts at 0): increase() alone sees nothing, and the edges
    // must still be found.
    let last = format!(" {}", now - 120);
    let once: String = s
        .openmetrics(now)
        .lines()
        .filter(|l| l.starts_with('#') || l.ends_with(&last))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(once.matches("istio_requests_total{").count() >= s.sleeps);
    from_prometheus(&once, "1h");

    // A user-owned Sidecar for sleep-0: never replaced.
    c.apply(&format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: mine\n  namespace: {ns}\nspec:\n  workloadSelector:\n    labels: {{app: sleep-0}}\n  egress:\n  - hosts: [\"./*\"]\n"
    ));
    let mine_before = c.sidecar_resource_version(&ns, "mine");

    // Apply: everything but sleep-0 is created.
    let r = meshscope(&c.kubeconfig, &["apply", "-n", &ns, "--access-log", log]);
    assert_eq!(
        r.outcome.unwrap(),
        Outcome::Ok,
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(
        r.stdout.matches(" created ").count(),
        s.httpbins + s.sleeps - 1,
        "{}",
        r.stdout
    );
    assert!(
        r.stderr.contains("is scoped by user-owned Sidecar"),
        "{}",
        r.stderr
    );
    // The plan printed before writing and the result after agree.
    let n = s.httpbins + s.sleeps - 1;
    assert!(
        r.stderr.contains(&format!(
            "{n} Sidecars: {n} to create, 0 to update, 0 unchanged"
        )) && r.stderr.contains(&format!("apply: {n} created")),
        "{}",
        r.stderr
    );
    assert_eq!(
        c.sidecar_resource_version(&ns, "mine"),
        mine_before,
        "user-owned Sidecar untouched"
    );
    let managed_by = c.sidecar_jsonpath(
        &ns,
        "sleep-1-deployment-meshscope",
        "{.metadata.managedFields[*].manager}",
    );
    assert!(managed_by.contains("kubectl-meshscope"), "{managed_by}");

    // Audit: no unscoped workload left.
    let r = meshscope(&c.kubeconfig, &["audit", "-n", &ns, "-o", "json"]);
    let found = codes(&r.stdout);
    assert!(found.iter().all(|(code, _)| code != "MS0001"), "{found:?}");

    // A second apply changes nothing, and says so before and after.
    let r = meshscope(&c.kubeconfig, &["apply", "-n", &ns, "--access-log", log]);
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "{n} Sidecars: 0 to create, 0 to update, {n} unchanged"
        )) && r.stderr.contains(&format!("apply: {n} unchanged")),
        "{}",
        r.stderr
    );
    assert_eq!(
        r.stdout.matches(" unchanged ").count(),
        s.httpbins + s.sleeps - 1,
        "{}",
        r.stdout
    );
    assert!(
        !r.stdout.contains(" created ") && !r.stdout.contains(" configured "),
        "{}",
        r.stdout
    );
    // -q: the per-object lines stay on stdout, the summaries go.
    let r = meshscope(
        &c.kubeconfig,
        &["apply", "-n", &ns, "--access-log", log, "-q"],
    );
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
    assert_eq!(r.stdout.matches(" unchanged ").count(), n, "{}", r.stdout);
    assert!(
        !r.stderr.contains("apply: ") && !r.stderr.contains(" Sidecars: "),
        "{}",
        r.stderr
    );

    // Explain names the Sidecar istiod would pick, through kubectl's plugin discovery.
    let pod = c.wait_pods(&ns, "sleep-1", 1).unwrap().remove(0);
    let _ = plugin_binary();
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("kubectl")
        .args(["meshscope", "explain", "pod", &pod, "-n", &ns])
        .env("PATH", path)
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!(
            "Scope:            Sidecar {ns}/sleep-1-deployment-meshscope"
        )),
        "{text}"
    );
    let r = meshscope(
        &c.kubeconfig,
        &[
            "explain",
            "pod",
            &c.wait_pods(&ns, "sleep-0", 1).unwrap()[0],
            "-n",
            &ns,
            "-o",
            "json",
        ],
    );
    let e: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(e["sidecar"], format!("{ns}/mine"));

    // --prune deletes the managed Sidecar of a deleted workload, and only it.
    c.delete_deployment(&ns, "httpbin-3");
    let r = meshscope(
        &c.kubeconfig,
        &["apply", "-n", &ns, "--access-log", log, "--prune"],
    );
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
    assert_eq!(r.stdout.matches(" pruned ").count(), 1, "{}", r.stdout);
    assert!(
        r.stdout
            .contains("sidecar.networking.istio.io/httpbin-3-deployment-meshscope pruned"),
        "{}",
        r.stdout
    );
    let left = c.sidecar_names(&ns);
    assert!(
        !left.contains("httpbin-3-deployment-meshscope") && left.contains("/mine"),
        "{left}"
    );
}

#[test]
fn apply_never_takes_over_a_sidecar_it_does_not_own_and_dry_runs_persist_nothing() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("owner", &[("istio-injection", "enabled")]);
    c.apply(&format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers: [{{name: c, image: example/web:1}}]\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: api}}\n  template:\n    metadata:\n      labels: {{app: api}}\n    spec:\n      containers: [{{name: c, image: example/api:1}}]\n---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: web-deployment-meshscope\n  namespace: {ns}\nspec:\n  workloadSelector:\n    labels: {{app: somebody-else}}\n  egress:\n  - hosts: [\"./*\"]\n"
    ));
    let before = c.sidecar_resource_version(&ns, "web-deployment-meshscope");
    // Dry runs create nothing.
    for dry in ["--dry-run=server", "--dry-run=client"] {
        let r = meshscope(
            &c.kubeconfig,
            &["apply", "-n", &ns, "--allow-idle", dry, "--diff"],
        );
        assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
        assert!(
            r.stdout
                .contains("sidecar.networking.istio.io/api-deployment-meshscope created"),
            "{}",
            r.stdout
        );
        assert!(
            r.stdout.contains("+++ meshscope/"),
            "--diff shows a diff: {}",
            r.stdout
        );
    }
    let listed = c.sidecar_names(&ns);
    assert!(!listed.contains("api-deployment-meshscope"), "{listed}");
    let r = meshscope(&c.kubeconfig, &["apply", "-n", &ns, "--allow-idle"]);
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
    // The name is taken by the user's Sidecar: web is skipped before any
    // write, and the plan says why.
    assert!(
        !r.stdout.contains("web-deployment-meshscope"),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr.contains(&format!(
            "skipped Deployment/{ns}/web: a Sidecar named {ns}/web-deployment-meshscope exists and is not labelled app.kubernetes.io/managed-by=kubectl-meshscope; it belongs to its owner"
        )),
        "{}",
        r.stderr
    );
    assert_eq!(
        c.sidecar_resource_version(&ns, "web-deployment-meshscope"),
        before
    );
}

#[test]
fn rbac_denials_name_the_verb_resource_and_minimal_role_and_the_reader_role_suffices() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("rbac", &[("istio-injection", "enabled")]);
    let dir = tempfile::tempdir().unwrap();
    let nobody = c.impersonating("meshscope-nobody", dir.path()).unwrap();
    let r = meshscope(&nobody, &["audit", "-n", &ns]);
    let e = format!("{:#}", r.outcome.unwrap_err());
    assert!(e.contains("RBAC forbids list on"), "{e}");
    assert!(
        e.contains("kind: ClusterRole") || e.contains("kind: Role"),
        "{e}"
    );
    assert!(!e.contains('\u{1b}'));

    // The shipped read-only ClusterRole is enough for audit.
    let user = format!("meshscope-reader-{ns}");
    c.bind_reader(&user);
    let reader_kc = c.impersonating(&user, dir.path()).unwrap();
    let r = meshscope(&reader_kc, &["audit", "-n", &ns]);
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
    // ...but not for apply.
    c.apply(&format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers: [{{name: c, image: example/web:1}}]\n"
    ));
    // Checked before anything is written: one error (exit 2) naming the
    // applier role.
    let r = meshscope(&reader_kc, &["apply", "-n", &ns, "--allow-idle"]);
    let e = format!("{:#}", r.outcome.unwrap_err());
    assert!(
        e.contains("RBAC forbids create, patch on sidecars.networking.istio.io")
            && e.contains("deploy/rbac/meshscope-applier.yaml"),
        "{e}"
    );
    c.kubectl_ok(&["delete", "clusterrolebinding", &user], None);
}

#[test]
fn an_unreachable_api_server_is_one_line_naming_the_url() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let text = std::fs::read_to_string(&c.kubeconfig).unwrap();
    let mut v: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    for cl in v["clusters"].as_sequence_mut().unwrap() {
        cl["cluster"]["server"] = "https://127.0.0.1:1".into();
    }
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("dead.kubeconfig");
    std::fs::write(&kc, serde_yaml::to_string(&v).unwrap()).unwrap();
    let out = meshscope_e2e::run::binary([
        "audit",
        "-n",
        "default",
        "--kubeconfig",
        kc.to_str().unwrap(),
    ])
    .output();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach the API server at https://127.0.0.1:1"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// The IP of the proxy that wrote an access-log line: the server's for
/// inbound lines, the client's otherwise.
fn proxy_ip(line: &str) -> Option<String> {
    use meshscope_shared::accesslog::{
        classify_cluster, parse_line, split_host_port, Cluster, Line,
    };
    let Line::Access(rec) = parse_line(line) else {
        return None;
    };
    let inbound = matches!(classify_cluster(&rec.upstream_cluster), Cluster::Inbound);
    let addr = if inbound {
        rec.downstream_local
    } else {
        rec.downstream_remote
    }?;
    split_host_port(&addr).map(|(h, _)| h.to_string())
}

#[test]
fn recommend_from_pod_logs_reads_each_istio_proxy_log_through_the_api_server() {
    meshscope_e2e::needs_cluster!();
    use meshscope_e2e::kubelet::{LogReply, Logs, StandInKubelet};
    let c = Cluster::shared();
    // Injected pods carry an istio-proxy container; the API server refuses
    // log requests for containers a pod does not have.
    let s = deploy_scenario_with(c, "podlogs", |m| {
        m.replace(
            "      containers:\n      - name: app\n",
            "      containers:\n      - name: istio-proxy\n        image: istio/proxyv2:1.30.0\n      - name: app\n",
        )
    });
    let ns = s.namespace.clone();
    let pods: Vec<(String, String)> = c
        .kubectl_ok(
            &[
                "get",
                "pods",
                "-n",
                &ns,
                "-o",
                "jsonpath={range .items[*]}{.metadata.name} {.status.podIP}{\"\\n\"}{end}",
            ],
            None,
        )
        .lines()
        .filter_map(|l| {
            l.split_once(' ')
                .map(|(n, ip)| (n.to_string(), ip.to_string()))
        })
        .collect();
    let pod_at = |ip: &str| pods.iter().find(|(_, i)| i == ip).map(|(n, _)| n.clone());
    let sleep0 = pod_at(&s.sleep_ip(0).to_string()).expect("sleep-0 has a pod");
    let failing = pod_at(&s.httpbin_ip(0, 1).to_string()).expect("httpbin-0 has two pods");

    // Each proxy's own log: the lines it wrote. sleep-0's proxy restarted,
    // and its calls to its first httpbin are only in the previous log.
    let first_host = s.httpbin_host(s.calls().find(|c| c.sleep == 0).unwrap().httpbin);
    let mut own: std::collections::BTreeMap<String, String> = Default::default();
    let mut previous = String::new();
    for line in s.logs(LogForm::Text).lines() {
        let Some(pod) = proxy_ip(line).and_then(|ip| pod_at(&ip)) else {
            // istio-proxy's own output goes to sleep-0's log too.
            own.entry(sleep0.clone())
                .or_default()
                .push_str(&format!("{line}\n"));
            continue;
        };
        if pod == sleep0 && line.contains(&format!("||{first_host} ")) {
            previous.push_str(&format!("{line}\n"));
        } else {
            own.entry(pod).or_default().push_str(&format!("{line}\n"));
        }
    }
    assert!(!previous.is_empty());
    let mut logs = Logs::new();
    for (pod, text) in &own {
        logs.insert(
            format!("{ns}/{pod}/istio-proxy"),
            LogReply::Text(text.clone()),
        );
    }
    logs.insert(
        format!("{ns}/{sleep0}/istio-proxy#previous"),
        LogReply::Text(previous),
    );
    // One kubelet fails: its pod's lines are lost, with a warning.
    logs.insert(
        format!("{ns}/{failing}/istio-proxy"),
        LogReply::Fail(
            500,
            "failed to open the log file: no such file or directory".into(),
        ),
    );
    let kubelet = StandInKubelet::start(logs).unwrap();
    let node = c.stand_in_node("node", kubelet.port).unwrap();
    for (pod, _) in &pods {
        c.bind_pod(&ns, pod, &node).unwrap();
    }
    c.set_restarted(&ns, &sleep0, "istio-proxy").unwrap();

    let r = meshscope(
        &c.kubeconfig,
        &["recommend", "-n", &ns, "--from-pod-logs", "--since", "2h"],
    );
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
    let got = sidecars(&r.stdout);
    for i in 0..s.sleeps {
        assert_eq!(
            got[&format!("sleep-{i}-deployment-meshscope")],
            s.hosts_of_sleep(i),
            "{}",
            r.stderr
        );
    }
    for j in 0..s.httpbins {
        assert_eq!(
            got[&format!("httpbin-{j}-deployment-meshscope")],
            vec!["~/*"],
            "{}",
            r.stderr
        );
    }
    // The failed log: one warning naming the pod, and the run goes on
    // (httpbin-0's other replica still shows it serving).
    let warnings: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("cannot read the istio-proxy log"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}\n{:?}", r.stderr, kubelet.requests());
    assert!(
        warnings[0].contains(&format!("{ns}/{failing}"))
            && warnings[0]
                .ends_with("failed to open the log file: no such file or directory (500)"),
        "{}",
        r.stderr
    );
    // What the kubelet was asked: every pod's istio-proxy log since 2h, and
    // sleep-0's previous instance.
    let asked = kubelet.requests();
    assert_eq!(asked.len(), pods.len() + 1, "{asked:?}");
    assert!(
        asked
            .iter()
            .all(|p| p.contains("/istio-proxy?") && p.contains("sinceSeconds=7200")),
        "{asked:?}"
    );
    let prev: Vec<&String> = asked
        .iter()
        .filter(|p| p.contains("previous=true"))
        .collect();
    assert_eq!(prev.len(), 1, "{asked:?}");
    assert!(prev[0].contains(&format!("/{ns}/{sleep0}/")), "{asked:?}");
}

#[test]
fn impact_counts_proxies_in_every_namespace_and_n_only_locates_the_target() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let a = c.namespace("impa", &[("istio-injection", "enabled")]);
    let b = c.namespace("impb", &[("istio-injection", "enabled")]);
    let deploy = |ns: &str, name: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}, impact-test: {a}}}\n    spec:\n      containers: [{{name: c, image: example/{name}:1}}]\n"
        )
    };
    c.apply(&format!(
        "{}---\n{}---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: {a}\nspec:\n  selector: {{app: web}}\n  ports: [{{name: http, port: 80}}]\n",
        deploy(&a, "web"),
        deploy(&b, "client")
    ));
    let sel = format!("impact-test={a}");
    let r = meshscope(
        &c.kubeconfig,
        &["impact", "service/web", "-n", &a, "-l", &sel, "-o", "json"],
    );
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    // Both proxies, in both namespaces, see the service: both are counted.
    assert_eq!(v["total_proxies"], 2, "{v}");
    assert_eq!(v["now"]["proxies"], 2, "{v}");
    let who: Vec<&str> = v["now"]["workloads"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        who,
        vec![
            format!("Deployment/{a}/web").as_str(),
            format!("Deployment/{b}/client").as_str()
        ]
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    let r = meshscope(
        &c.kubeconfig,
        &["impact", "service/web", "-n", &a, "-l", &sel],
    );
    assert!(
        r.stdout.contains(&format!("{b}/client")) && r.stdout.contains(&format!("{a}/web")),
        "{}",
        r.stdout
    );
    // -n names the target's namespace: the service is not in b.
    let r = meshscope(&c.kubeconfig, &["impact", "service/web", "-n", &b]);
    let e = format!("{:#}", r.outcome.unwrap_err());
    assert!(
        e.starts_with(&format!(
            "service/web not found in namespace {b} in the cluster at"
        )),
        "{e}"
    );
}

/// The fix MS0001 prints (in audit, `codes` and the webhook's denial) is a
/// command that works: run as printed, it scopes the workload, and for a
/// workload that is not running yet (and whose manifests name no host) a
/// closed scope of its own does.
#[test]
fn the_ms0001_fix_commands_work_as_printed() {
    meshscope_e2e::needs_cluster!();
    use meshscope_e2e::kubelet::{LogReply, Logs, StandInKubelet};
    use meshscope_e2e::outbound_text_line;

    let c = Cluster::shared();
    let ns = c.namespace("fixcmd", &[("istio-injection", "enabled")]);
    let deployment = |name: &str, replicas: u32| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - {{name: istio-proxy, image: istio/proxyv2:1.31.0}}\n      - {{name: app, image: example/{name}:1}}\n"
        )
    };
    c.apply(&format!(
        "{}---\n{}---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  selector: {{app: web}}\n  ports: [{{name: http, port: 80}}]\n",
        deployment("client", 1),
        deployment("later", 0)
    ));
    let pod = c.wait_pods(&ns, "client", 1).unwrap().remove(0);
    c.set_pod_ip(&ns, &pod, "10.77.0.5").unwrap();
    let web = format!("web.{ns}.svc.cluster.local");
    let log: String = (0..3)
        .map(|n| outbound_text_line(n, "10.77.0.5", &web, 80, "10.77.0.9:80"))
        .collect();
    let mut logs = Logs::new();
    logs.insert(format!("{ns}/{pod}/istio-proxy"), LogReply::Text(log));
    let kubelet = StandInKubelet::start(logs).unwrap();
    let node = c.stand_in_node("fixcmd", kubelet.port).unwrap();
    c.bind_pod(&ns, &pod, &node).unwrap();

    let audit = |c: &Cluster| -> serde_json::Value {
        let r = meshscope(
            &c.kubeconfig,
            &["audit", "-n", &ns, "-o", "json", "--fail-on", "none"],
        );
        assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
        serde_json::from_str(&r.stdout).unwrap()
    };
    let message = |v: &serde_json::Value, name: &str| -> Option<String> {
        v["findings"].as_array().unwrap().iter().find_map(|f| {
            (f["code"] == "MS0001" && f["name"] == name)
                .then(|| f["message"].as_str().unwrap().to_string())
        })
    };
    // `run: kubectl meshscope ARGS (not running yet: kubectl meshscope ARGS)`
    let commands = |msg: &str| -> (Vec<String>, Vec<String>) {
        let (_, rest) = msg.split_once("run: kubectl meshscope ").expect(msg);
        let (first, rest) = rest
            .split_once(" (not running yet: kubectl meshscope ")
            .expect(msg);
        let second = rest.strip_suffix(')').expect(msg);
        let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        (words(first), words(second))
    };
    let v = audit(c);
    let (for_client, _) = commands(&message(&v, "client").expect("client is unscoped"));
    let (_, for_later) = commands(&message(&v, "later").expect("later is unscoped"));

    // Two unscoped workloads: audit also prints the one command for the
    // namespace, which scopes every workload with traffic (client).
    let fixes = v["namespace_fixes"].as_array().unwrap();
    assert_eq!(fixes.len(), 1, "{v}");
    let fix = fixes[0].as_str().unwrap();
    let (head, command) = fix
        .split_once(": scope them at once with kubectl meshscope ")
        .expect(fix);
    assert_eq!(head, format!("2 unscoped workloads in namespace {ns}"));
    let args: Vec<&str> = command.split_whitespace().collect();
    let r = meshscope(&c.kubeconfig, &args);
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{args:?}: {}", r.stderr);
    assert!(
        r.stdout
            .contains("sidecar.networking.istio.io/client-deployment-meshscope created"),
        "{}",
        r.stdout
    );
    // The workload's own fix, run as printed after it, has nothing left to do.
    let args: Vec<&str> = for_client.iter().map(String::as_str).collect();
    let r = meshscope(&c.kubeconfig, &args);
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{args:?}: {}", r.stderr);
    assert!(
        r.stdout
            .contains("sidecar.networking.istio.io/client-deployment-meshscope unchanged"),
        "{}",
        r.stdout
    );
    let v = audit(c);
    assert_eq!(message(&v, "client"), None, "{v}");
    assert!(message(&v, "later").is_some());

    let args: Vec<&str> = for_later.iter().map(String::as_str).collect();
    let r = meshscope(&c.kubeconfig, &args);
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{args:?}: {}", r.stderr);
    let v = audit(c);
    assert_eq!(message(&v, "later"), None, "{v}");
    let hosts = c.sidecar_jsonpath(&ns, "later-deployment-meshscope", "{.spec.egress[0].hosts}");
    assert_eq!(hosts, r#"["~/*"]"#);
    let _ = c.kubectl(&["delete", "node", &node], None);
}

/// Pod logs that are all empty: the warning names the pods and the likely
/// causes, instead of a bare "0 lines".
#[test]
fn empty_pod_logs_are_named_with_their_likely_cause() {
    meshscope_e2e::needs_cluster!();
    use meshscope_e2e::kubelet::{LogReply, Logs, StandInKubelet};

    let c = Cluster::shared();
    let ns = c.namespace("emptylog", &[("istio-injection", "enabled")]);
    c.apply(&format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: quiet\n  namespace: {ns}\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: quiet}}\n  template:\n    metadata:\n      labels: {{app: quiet}}\n    spec:\n      containers:\n      - {{name: istio-proxy, image: istio/proxyv2:1.31.0}}\n      - {{name: app, image: example/quiet:1}}\n"
    ));
    let pods = c.wait_pods(&ns, "quiet", 2).unwrap();
    let mut logs = Logs::new();
    for p in &pods {
        logs.insert(
            format!("{ns}/{p}/istio-proxy"),
            LogReply::Text(String::new()),
        );
    }
    let kubelet = StandInKubelet::start(logs).unwrap();
    let node = c.stand_in_node("emptylog", kubelet.port).unwrap();
    for p in &pods {
        c.bind_pod(&ns, p, &node).unwrap();
    }
    let r = meshscope(&c.kubeconfig, &["recommend", "-n", &ns, "--from-pod-logs"]);
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
    let warning = r
        .stderr
        .lines()
        .find(|l| l.contains("istio-proxy logs of"))
        .unwrap_or_else(|| panic!("no empty-log warning: {}", r.stderr));
    assert!(
        warning.starts_with("warning: the istio-proxy logs of 2 of 2 pods were empty ("),
        "{warning}"
    );
    for p in &pods {
        assert!(warning.contains(&format!("{ns}/{p}")), "{warning}");
    }
    // The test control plane's mesh config sets no accessLogFile, and no
    // Telemetry turns logging on: the warning says so, not "likely".
    assert!(
        warning.contains("access logging is off: the mesh config sets no accessLogFile"),
        "{warning}"
    );
    for p in &pods {
        c.force_delete_pod(&ns, p);
    }
}

/// `apply --watch -o json` whose first pass fails (istiod cannot be
/// reached to confirm the first writes): the error is an event on stdout,
/// where the events go, as well as the error on stderr, exit 2, and the
/// advice is watch mode's (it cannot drop --wait), not apply's (issue #34
/// item 13).
/// A namespace `prefix-…` with Deployment `client` (one injected pod at
/// `{net}.5`) and Service `web`, and a directory holding `access.log`:
/// three calls from client to web.
fn client_calling_web(prefix: &str, net: &str) -> (&'static Cluster, String, tempfile::TempDir) {
    use meshscope_e2e::outbound_text_line;
    let c = Cluster::shared();
    let ns = c.namespace(prefix, &[("istio-injection", "enabled")]);
    c.apply(&format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: client\n  namespace: {ns}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: client}}\n  template:\n    metadata:\n      labels: {{app: client}}\n    spec:\n      containers:\n      - {{name: istio-proxy, image: istio/proxyv2:1.31.0}}\n      - {{name: app, image: example/client:1}}\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  selector: {{app: web}}\n  ports: [{{name: http, port: 80}}]\n"
    ));
    let pod = c.wait_pods(&ns, "client", 1).unwrap().remove(0);
    c.set_pod_ip(&ns, &pod, &format!("{net}.5")).unwrap();
    let web = format!("web.{ns}.svc.cluster.local");
    let dir = tempfile::tempdir().unwrap();
    let lines: String = (0..3)
        .map(|n| outbound_text_line(n, &format!("{net}.5"), &web, 80, &format!("{net}.9:80")))
        .collect();
    std::fs::write(dir.path().join("access.log"), lines).unwrap();
    (c, ns, dir)
}

#[test]
fn a_first_watch_pass_that_fails_says_so_on_the_event_stream_with_watchs_own_fix() {
    meshscope_e2e::needs_cluster!();

    let (c, ns, dir) = client_calling_web("wfirst", "10.78.0");
    let log = dir.path().join("access.log");
    // Nothing listens there.
    let dead = format!(
        "http://127.0.0.1:{}",
        meshscope_test_support::net::free_port()
    );
    let r = meshscope(
        &c.kubeconfig,
        &[
            "apply",
            "--watch",
            "-n",
            &ns,
            "--access-log",
            log.to_str().unwrap(),
            "--istiod-url",
            &dead,
            "--interval",
            "1s",
            "-o",
            "json",
        ],
    );
    let err = r.outcome.expect_err("a first pass that fails is an error");
    let events: Vec<serde_json::Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect(l))
        .collect();
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(names, ["started", "pass-error"], "{}", r.stdout);
    let message = events[1]["message"].as_str().unwrap();
    assert!(
        message.contains("cannot --wait, so nothing was applied")
            && message.ends_with("the first pass failed, so the watcher stops"),
        "{message}"
    );
    let text = format!("{err:#}");
    assert!(
        text.contains("apply --watch confirms each write on istiod"),
        "{text}"
    );
    assert!(!text.contains("drop --wait"), "{text}");
    let sidecars = c.kubectl_ok(&["get", "sidecars", "-n", &ns, "-o", "name"], None);
    assert_eq!(sidecars.trim(), "", "nothing was written");
}

/// `recommend` with neither -n nor -A reads the context's namespace; when
/// every line came from pods elsewhere it says which namespace it read and
/// how to read the right one, instead of only "0 Sidecars" (issue #35
/// item 6).
#[test]
fn recommend_without_n_names_the_namespace_it_read_when_no_line_came_from_it() {
    meshscope_e2e::needs_cluster!();

    let (c, ns, dir) = client_calling_web("ctxns", "10.79.0");
    let log = dir.path().join("access.log");
    let log = log.to_str().unwrap();
    // The admin kubeconfig's context names no namespace: `default`.
    let r = meshscope(&c.kubeconfig, &["recommend", "--access-log", log]);
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
    assert!(
        r.stderr.contains("warning: no -n or -A, so namespace default (the context's) was read, and none of the 3 observed calls")
            && r.stderr.contains("-n NAMESPACE")
            && r.stderr.contains("-A"),
        "{}",
        r.stderr
    );
    // With -n, no such warning, and a Sidecar.
    let r = meshscope(
        &c.kubeconfig,
        &["recommend", "--access-log", log, "-n", &ns],
    );
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
    assert!(!r.stderr.contains("no -n or -A"), "{}", r.stderr);
    assert!(r.stdout.contains("kind: Sidecar"), "{}", r.stdout);
}
