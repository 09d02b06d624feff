//! The offline CLI on the reference scenario (200 httpbins, 20 sleeps),
//! run in-process through the plugin's `run`, for every log form.

use std::collections::BTreeMap;
use std::path::Path;

use clap::Parser;
use kubectl_meshscope::{args::Cli, Outcome};
use meshscope_e2e::cluster::repo_root;
use meshscope_e2e::{LogForm, Scenario};

use meshscope_e2e::run::meshscope;

fn write_scenario(dir: &Path, s: &Scenario) {
    std::fs::write(dir.join("manifests.yaml"), s.manifests()).unwrap();
    for form in LogForm::ALL {
        std::fs::write(dir.join(form.file_name()), s.logs(form)).unwrap();
    }
}

/// name -> egress hosts, from a multi-document Sidecar YAML stream.
fn sidecars(yaml: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        if v.is_null() {
            continue;
        }
        assert_eq!(v["apiVersion"], "networking.istio.io/v1");
        assert_eq!(v["kind"], "Sidecar");
        assert_eq!(
            v["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "kubectl-meshscope"
        );
        let hosts = v["spec"]["egress"][0]["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap().to_string())
            .collect();
        out.insert(v["metadata"]["name"].as_str().unwrap().to_string(), hosts);
    }
    out
}

fn ms0001(summary_json: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(summary_json).unwrap();
    v["summary"]["by_code"]["MS0001"].as_u64().unwrap_or(0)
}

#[test]
fn reference_scenario_recommends_exact_hosts_and_clears_ms0001_for_every_log_form() {
    let dir = tempfile::tempdir().unwrap();
    let s = Scenario::reference();
    write_scenario(dir.path(), &s);
    let manifests = dir.path().join("manifests.yaml");
    let m = manifests.to_str().unwrap();

    let before = meshscope(&["audit", "--manifests", m, "-o", "json"]);
    assert_eq!(
        before.outcome.unwrap(),
        Outcome::Ok,
        "warnings do not fail by default"
    );
    assert_eq!(ms0001(&before.stdout), 220);

    for form in LogForm::ALL {
        let log = dir.path().join(form.file_name());
        let rec = meshscope(&[
            "recommend",
            "--manifests",
            m,
            "--access-log",
            log.to_str().unwrap(),
        ]);
        assert_eq!(
            rec.outcome.unwrap(),
            Outcome::Ok,
            "{form:?}: {}",
            rec.stderr
        );
        assert!(
            rec.stderr.contains("0 malformed, 0 unattributed"),
            "{form:?}: {}",
            rec.stderr
        );
        let got = sidecars(&rec.stdout);
        assert_eq!(got.len(), 220, "{form:?}");
        for i in 0..s.sleeps {
            assert_eq!(
                got[&format!("sleep-{i}-deployment-meshscope")],
                s.hosts_of_sleep(i),
                "{form:?} sleep-{i}"
            );
            assert_eq!(s.hosts_of_sleep(i).len(), 10);
        }
        for j in 0..s.httpbins {
            assert_eq!(
                got[&format!("httpbin-{j}-deployment-meshscope")],
                vec!["~/*"],
                "{form:?} httpbin-{j}"
            );
        }
        let sidecar_file = dir.path().join(format!("sidecars-{form:?}.yaml"));
        std::fs::write(&sidecar_file, &rec.stdout).unwrap();
        let after = meshscope(&[
            "audit",
            "--manifests",
            m,
            "--manifests",
            sidecar_file.to_str().unwrap(),
            "--access-log",
            log.to_str().unwrap(),
            "-o",
            "json",
            "--fail-on",
            "warning",
        ]);
        assert_eq!(ms0001(&after.stdout), 0, "{form:?}: {}", after.stdout);
        assert_eq!(
            after.outcome.unwrap(),
            Outcome::Ok,
            "{form:?}: no finding at all: {}",
            after.stdout
        );
    }
}

#[test]
fn json_output_is_a_v1_list_of_the_same_sidecars() {
    let dir = tempfile::tempdir().unwrap();
    let s = Scenario {
        httpbins: 20,
        sleeps: 2,
        ..Scenario::reference()
    };
    write_scenario(dir.path(), &s);
    let m = dir.path().join("manifests.yaml");
    let log = dir.path().join("text.log");
    let args = [
        "recommend",
        "--manifests",
        m.to_str().unwrap(),
        "--access-log",
        log.to_str().unwrap(),
    ];
    let yaml = meshscope(&args);
    let mut json_args = args.to_vec();
    json_args.extend(["-o", "json"]);
    let json = meshscope(&json_args);
    let list: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["kind"], "List");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    let from_yaml = sidecars(&yaml.stdout);
    assert_eq!(names.len(), from_yaml.len());
    assert!(names.iter().all(|n| from_yaml.contains_key(*n)));
}

#[test]
fn impact_of_one_httpbin_drops_from_every_proxy_to_its_caller_and_its_own_pods() {
    let dir = tempfile::tempdir().unwrap();
    write_scenario(dir.path(), &Scenario::reference());
    let m = dir.path().join("manifests.yaml");
    let log = dir.path().join("json.log");
    let r = meshscope(&[
        "impact",
        "service/httpbin-0",
        "-n",
        "default",
        "--manifests",
        m.to_str().unwrap(),
        "--access-log",
        log.to_str().unwrap(),
    ]);
    r.outcome.unwrap();
    assert!(
        r.stdout.starts_with(
            // Its one caller, and its own two pods: the Service selects
            // them, and their inbound config comes from it.
            "service/httpbin-0 (namespace default): pushed to 420 proxies now, 3 proxies after (importing it: default/sleep-0; serving it: default/httpbin-0)"
        ),
        "{}",
        r.stdout
    );
    // Importing it is not calling it: now every unscoped proxy imports it,
    // and the traffic shows the one that calls it, apart.
    let now = r.stdout.lines().find(|l| l.starts_with("now ")).unwrap();
    assert!(now.contains("default/httpbin-1"), "{now}");
    assert!(
        r.stdout.contains("\nseen calling it: default/sleep-0 ("),
        "{}",
        r.stdout
    );
    // Without -n, offline: the one namespace that has the service.
    let r = meshscope(&[
        "impact",
        "service/httpbin-0",
        "--manifests",
        m.to_str().unwrap(),
    ]);
    r.outcome.unwrap();
    assert!(
        r.stdout.starts_with(
            "service/httpbin-0 (namespace default): pushed to 420 proxies now, 420 proxies after"
        ),
        "{}",
        r.stdout
    );
    assert!(
        !r.stdout.contains("seen calling it"),
        "no traffic read: {}",
        r.stdout
    );
    let e = format!(
        "{:#}",
        meshscope(&["impact", "service/nope", "--manifests", m.to_str().unwrap()])
            .outcome
            .unwrap_err()
    );
    assert_eq!(e, "service/nope not found in any namespace of the input");
}

#[test]
fn malformed_lines_are_counted_and_shown_and_strict_makes_them_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let s = Scenario {
        httpbins: 10,
        sleeps: 1,
        ..Scenario::reference()
    };
    write_scenario(dir.path(), &s);
    let log = dir.path().join("mixed.log");
    let mut text = s.logs(LogForm::Text);
    text.push_str(
        "[2026-11-21T10:00:00Z] \"GET / HTTP/1.1\" 200 truncated\n{\"upstream_cluster\": \n",
    );
    std::fs::write(&log, text).unwrap();
    let m = dir.path().join("manifests.yaml");
    let args = [
        "recommend",
        "--manifests",
        m.to_str().unwrap(),
        "--access-log",
        log.to_str().unwrap(),
    ];
    let r = meshscope(&args);
    r.outcome.unwrap();
    assert!(r.stderr.contains("2 malformed"), "{}", r.stderr);
    assert!(
        r.stderr.contains("mixed.log:"),
        "file:line is shown: {}",
        r.stderr
    );
    assert_eq!(
        sidecars(&r.stdout)["sleep-0-deployment-meshscope"].len(),
        10,
        "nothing lost"
    );
    let mut strict = args.to_vec();
    strict.push("--strict");
    let e = meshscope(&strict).outcome.unwrap_err().to_string();
    assert!(e.contains("malformed access-log line"), "{e}");
}

#[test]
fn gzip_directories_and_unattributed_lines() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let s = Scenario {
        httpbins: 10,
        sleeps: 1,
        ..Scenario::reference()
    };
    write_scenario(dir.path(), &s);
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(logs.join("a.log.gz")).unwrap(),
        flate2::Compression::fast(),
    );
    gz.write_all(s.logs(LogForm::Json).as_bytes()).unwrap();
    gz.finish().unwrap();
    // A line from an IP no pod has: counted as unattributed, never guessed.
    std::fs::write(logs.join("b.log"), "[2026-11-21T10:00:00.000Z] \"GET / HTTP/1.1\" 200 - via_upstream - \"-\" 0 1 1 1 \"-\" \"x\" \"id\" \"httpbin-1:8000\" \"10.1.0.12:80\" outbound|8000||httpbin-1.default.svc.cluster.local 10.250.0.1:1 10.96.0.11:8000 10.250.0.1:2 - default\n").unwrap();
    let m = dir.path().join("manifests.yaml");
    let r = meshscope(&[
        "recommend",
        "--manifests",
        m.to_str().unwrap(),
        "--access-log",
        logs.to_str().unwrap(),
    ]);
    r.outcome.unwrap();
    assert!(r.stderr.contains("1 unattributed"), "{}", r.stderr);
    assert!(r.stderr.contains("10.250.0.1"), "{}", r.stderr);
    assert_eq!(
        sidecars(&r.stdout)["sleep-0-deployment-meshscope"],
        s.hosts_of_sleep(0)
    );
}

#[test]
fn verify_and_apply_wait_refuse_what_cannot_work() {
    let e = format!(
        "{:#}",
        meshscope(&["verify", "--manifests", "x.yaml"])
            .outcome
            .unwrap_err()
    );
    assert_eq!(e, "verify asks the cluster's istiod: drop --manifests");
    let e = format!(
        "{:#}",
        meshscope(&[
            "apply",
            "--wait",
            "--dry-run=server",
            "--kubeconfig",
            "/nonexistent"
        ])
        .outcome
        .unwrap_err()
    );
    assert_eq!(
        e,
        "--wait waits for istiod to push what was written; a dry run writes nothing"
    );
    let e = format!(
        "{:#}",
        meshscope(&["apply", "--wait=soon", "--kubeconfig", "/nonexistent"])
            .outcome
            .unwrap_err()
    );
    assert!(e.starts_with("--wait: invalid duration \"soon\""), "{e}");
    // --wait alone means 5 minutes; a bare --wait does not eat the next argument.
    let cli = Cli::try_parse_from(["kubectl-meshscope", "apply", "--wait", "-n", "shop"]).unwrap();
    match cli.command {
        kubectl_meshscope::args::Command::Apply(a) => {
            assert_eq!(a.wait.as_deref(), Some("5m"));
            assert_eq!(a.selection.namespace.as_deref(), Some("shop"));
            assert_eq!(a.istiod.istio_namespace, "istio-system");
        }
        _ => unreachable!(),
    }
    let e = format!(
        "{:#}",
        meshscope(&["verify", "web", "--kubeconfig", "/nonexistent"])
            .outcome
            .unwrap_err()
    );
    assert_eq!(
        e,
        "expected pod/NAME or KIND/NAME (e.g. deployment/reviews-v1), got \"web\""
    );
}

#[test]
fn recommend_for_one_workload_that_yields_nothing_is_an_error() {
    let m = repo_root().join("examples/bookinfo/manifests.yaml");
    let m = m.to_str().unwrap();
    let r = meshscope(&[
        "recommend",
        "--manifests",
        m,
        "-n",
        "bookinfo",
        "--workload",
        "deployment/productpage-v1",
    ]);
    let e = format!("{:#}", r.outcome.unwrap_err());
    assert!(
        e.starts_with("no Sidecar recommended for deployment/productpage-v1: no evidence")
            && e.ends_with("give a traffic source (--access-log, --from-pod-logs or --prometheus), or --allow-idle for a closed scope"),
        "{e}"
    );
    let r = meshscope(&[
        "recommend",
        "--manifests",
        m,
        "-n",
        "bookinfo",
        "--workload",
        "deployment/productpage-v1",
        "--allow-idle",
    ]);
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
    assert!(r.stdout.contains("kind: Sidecar"), "{}", r.stdout);
}

#[test]
fn explain_of_a_pod_without_a_sidecar_stops_at_the_injection_line() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.yaml");
    std::fs::write(
        &m,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: plain}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: job-1, namespace: plain}\nspec: {containers: [{name: c, image: x}]}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: amb, labels: {istio.io/dataplane-mode: ambient}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: web-1, namespace: amb}\nspec: {containers: [{name: c, image: x}]}\n",
    )
    .unwrap();
    for (ns, pod, injection) in [
        ("plain", "job-1", "Injection:        none (no sidecar)"),
        (
            "amb",
            "web-1",
            "Injection:        ambient (no sidecar; Sidecar resources do not apply)",
        ),
    ] {
        let r = meshscope(&[
            "explain",
            "pod",
            pod,
            "-n",
            ns,
            "--manifests",
            m.to_str().unwrap(),
        ]);
        r.outcome.unwrap();
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert!(lines[2].starts_with(injection), "{}", r.stdout);
        assert_eq!(
            lines[3..],
            ["Proxy:            none, so no Sidecar scope, xDS size or pushes apply"],
            "{}",
            r.stdout
        );
    }
}

#[test]
fn the_istio_version_comes_from_the_input_unless_the_flag_says_otherwise() {
    let m = repo_root().join("examples/bookinfo/manifests.yaml");
    let m = m.to_str().unwrap();
    // bookinfo's pods run istio/proxyv2:1.30.0.
    let r = meshscope(&["version", "--manifests", m]);
    r.outcome.unwrap();
    assert_eq!(
        r.stdout,
        format!(
            "Client Version: {} (commit {})\nIstio control plane (istiod): not found\nIstio data plane (istio-proxy): 1.30 (6 proxies)\nSemantics applied: Istio 1.30\nCluster domain: cluster.local (the default: neither istiod nor the proxies name one)\n",
            kubectl_meshscope::VERSION,
            kubectl_meshscope::COMMIT
        )
    );
    let r = meshscope(&[
        "version",
        "--manifests",
        m,
        "--istio-version",
        "1.31",
        "-o",
        "json",
    ]);
    r.outcome.unwrap();
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["semantics"], "1.31");
    assert_eq!(v["proxies"]["1.30"], 6);
    // The cluster domain is always there, with where it comes from.
    assert_eq!(v["cluster_domain"], "cluster.local");
    assert_eq!(v["cluster_domain_source"], "default");
    assert_eq!(
        v["notes"][0],
        "--istio-version 1.31 differs from the Istio 1.30 the cluster runs; using 1.31"
    );
    // Every command says it once, on stderr.
    let r = meshscope(&["audit", "--manifests", m, "--istio-version", "1.31"]);
    let notes: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("note: --istio-version"))
        .collect();
    assert_eq!(notes.len(), 1, "{}", r.stderr);
    let e = format!(
        "{:#}",
        meshscope(&["audit", "--manifests", m, "--istio-version", "1.27"])
            .outcome
            .unwrap_err()
    );
    assert_eq!(
        e,
        "--istio-version: unknown Istio version 1.27; meshscope knows 1.28, 1.29, 1.30, 1.31, 1.32"
    );
    let r = meshscope(&["version", "--client"]);
    assert_eq!(
        r.stdout,
        format!(
            "Client Version: {} (commit {})\n",
            kubectl_meshscope::VERSION,
            kubectl_meshscope::COMMIT
        )
    );
}

#[test]
fn summaries_count_objects_and_removed_hosts_and_skip_names_that_are_taken() {
    let base =
        std::fs::read_to_string(repo_root().join("examples/bookinfo/manifests.yaml")).unwrap();
    let log = repo_root().join("examples/bookinfo/access.log");
    let log = log.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.yaml");
    // productpage's managed Sidecar imports one host more than it calls;
    // a user's Sidecar already has the name meshscope would give reviews-v1's.
    std::fs::write(
        &m,
        format!(
            "{base}\n---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: productpage-v1-deployment-meshscope\n  namespace: bookinfo\n  labels: {{app.kubernetes.io/managed-by: kubectl-meshscope}}\nspec:\n  workloadSelector: {{labels: {{app: productpage}}}}\n  egress:\n  - hosts: [bookinfo/api.github.com, bookinfo/details.bookinfo.svc.cluster.local, bookinfo/reviews.bookinfo.svc.cluster.local, bookinfo/ratings.bookinfo.svc.cluster.local]\n---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: reviews-v1-deployment-meshscope\n  namespace: bookinfo\nspec:\n  workloadSelector: {{labels: {{app: nothing}}}}\n  egress: [{{hosts: ['./*']}}]\n"
        ),
    )
    .unwrap();
    let m = m.to_str().unwrap();
    let r = meshscope(&[
        "recommend",
        "--manifests",
        m,
        "--access-log",
        log,
        "-n",
        "bookinfo",
        "--prune-hosts",
        "-o",
        "table",
    ]);
    r.outcome.unwrap();
    assert!(r.stdout.contains("update (+0 -1)"), "{}", r.stdout);
    let summary = r
        .stderr
        .lines()
        .find(|l| l.contains(" to create, "))
        .unwrap();
    assert!(summary.contains("1 to update (+0 -1 host)"), "{summary}");
    assert!(
        r.stderr.contains("skipped Deployment/bookinfo/reviews-v1: a Sidecar named bookinfo/reviews-v1-deployment-meshscope exists and is not labelled app.kubernetes.io/managed-by=kubectl-meshscope; it belongs to its owner"),
        "{}",
        r.stderr
    );
    // The YAML holds exactly the Sidecars the summary counts.
    let r = meshscope(&[
        "recommend",
        "--manifests",
        m,
        "--access-log",
        log,
        "-n",
        "bookinfo",
        "--prune-hosts",
    ]);
    let objects = r.stdout.matches("\nkind: Sidecar\n").count();
    let summary = r
        .stderr
        .lines()
        .find(|l| l.contains(" to create, "))
        .unwrap();
    assert!(
        summary.starts_with(&format!("{objects} Sidecars: ")),
        "{summary}\n{}",
        r.stdout
    );
    // One namespace-wide Sidecar for many workloads is one object.
    let r = meshscope(&[
        "recommend",
        "--manifests",
        m,
        "--access-log",
        log,
        "-n",
        "bookinfo",
        "--per-namespace",
    ]);
    let summary = r
        .stderr
        .lines()
        .find(|l| l.contains(" to create, "))
        .unwrap();
    assert!(summary.starts_with("1 Sidecar: 1 to create"), "{summary}");
    assert!(r.stderr.contains("(1 request)"), "{}", r.stderr);
}

#[test]
fn wrong_input_is_never_a_silent_success() {
    let dir = tempfile::tempdir().unwrap();
    let root = repo_root().join("examples/bookinfo");
    let manifests = root.join("manifests.yaml");
    let m = manifests.to_str().unwrap();
    // An application's log (kubectl logs without -c istio-proxy).
    let app = dir.path().join("reviews.log");
    std::fs::write(
        &app,
        "Started ReviewsApplication in 2.1 seconds\nGET /reviews/0 200\n",
    )
    .unwrap();
    let a = app.to_str().unwrap();
    // It is said why, and (issue #35 item 12) it is an error: nothing can
    // be recommended from it, and "0 Sidecars" would pass a pipeline.
    let r = meshscope(&["recommend", "--manifests", m, "--access-log", a]);
    assert!(
        r.error()
            .starts_with("the access logs given held 2 lines and not one access-log line"),
        "{}",
        r.error()
    );
    assert!(
        r.stderr.contains(&format!("warning: {a}: no access-log lines in 2 lines (not istio-proxy's log: an application's own log? With kubectl logs, name the container: -c istio-proxy)")),
        "{}",
        r.stderr
    );
    let r = meshscope(&["recommend", "--manifests", m, "--access-log", a, "--strict"]);
    assert!(
        r.error()
            .starts_with(&format!("{a}: no access-log lines in 2 lines (")),
        "{}",
        r.error()
    );
    assert!(
        r.error().ends_with("; remove --strict to go on without it"),
        "{}",
        r.error()
    );

    // A truncated .gz keeps the lines before the break.
    let log = std::fs::read(root.join("access.log")).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &log).unwrap();
    let gz = gz.finish().unwrap();
    let cut = dir.path().join("access.log.gz");
    std::fs::write(&cut, &gz[..gz.len() * 2 / 3]).unwrap();
    let c = cut.to_str().unwrap();
    let r = meshscope(&[
        "recommend",
        "--manifests",
        m,
        "--access-log",
        c,
        "-o",
        "json",
    ]);
    r.ok();
    assert!(
        r.stderr.contains(&format!(
            "warning: {c}: compressed data ends or breaks at byte {}",
            gz.len() * 2 / 3
        )),
        "{}",
        r.stderr
    );
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(
        !v["items"].as_array().unwrap().is_empty(),
        "what was read still recommends"
    );
    let r = meshscope(&["recommend", "--manifests", m, "--access-log", c, "--strict"]);
    assert!(
        r.error().contains("remove --strict to go on with them"),
        "{}",
        r.error()
    );

    // A kind misspelt in the manifests is named, not silently dropped.
    let typo = dir.path().join("typo.yaml");
    std::fs::write(
        &typo,
        "apiVersion: apps/v1\nkind: Deploymnet\nmetadata: {name: ratings-v2, namespace: bookinfo}\n",
    )
    .unwrap();
    let r = meshscope(&[
        "audit",
        "--manifests",
        m,
        "--manifests",
        typo.to_str().unwrap(),
    ]);
    r.ok();
    assert!(
        r.stderr.contains("warning: 1 object of kinds meshscope does not read skipped: Deploymnet (did you mean Deployment?): 1"),
        "{}",
        r.stderr
    );
}

#[test]
fn the_cluster_domain_comes_from_the_traffic_when_nothing_else_says() {
    let dir = tempfile::tempdir().unwrap();
    let root = repo_root().join("examples/bookinfo");
    let m = root.join("manifests.yaml");
    let m = m.to_str().unwrap();
    let log = std::fs::read_to_string(root.join("access.log"))
        .unwrap()
        .replace("svc.cluster.local", "svc.corp.local");
    let path = dir.path().join("access.log");
    std::fs::write(&path, log).unwrap();
    let l = path.to_str().unwrap();
    let r = meshscope(&["recommend", "--manifests", m, "--access-log", l]);
    assert_eq!(r.ok(), Outcome::Ok);
    assert!(
        r.stderr
            .contains("note: cluster domain corp.local, from the traffic's service names"),
        "{}",
        r.stderr
    );
    let got = sidecars(&r.stdout);
    assert!(
        got["productpage-v1-deployment-meshscope"]
            .contains(&"bookinfo/details.bookinfo.svc.corp.local".to_string()),
        "{got:?}"
    );
    // A flag that disagrees is kept, said, and nothing is written as `*/`.
    let r = meshscope(&[
        "recommend",
        "--manifests",
        m,
        "--access-log",
        l,
        "--cluster-domain",
        "cluster.local",
    ]);
    assert_eq!(r.ok(), Outcome::Ok);
    assert!(
        r.stderr
            .contains("warning: the traffic's services are under svc.corp.local")
            && r.stderr.contains("pass --cluster-domain corp.local"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("warning: Deployment/bookinfo/productpage-v1: called details.bookinfo.svc.corp.local:9080: no Service or ServiceEntry defines it: its cluster domain is corp.local, not cluster.local"),
        "{}",
        r.stderr
    );
    assert!(!r.stdout.contains("*/"), "{}", r.stdout);
}

/// Bookinfo under REGISTRY_ONLY with DNS capture, a namespace Sidecar that
/// imports only details, and a user-owned one for productpage: audit,
/// explain and `recommend -o table` say what each observed edge meets.
#[test]
fn each_observed_edge_says_what_it_meets_outside_the_scope() {
    let dir = tempfile::tempdir().unwrap();
    let root = repo_root().join("examples/bookinfo");
    let manifests = std::fs::read_to_string(root.join("manifests.yaml"))
        .unwrap()
        .replace(
            "    outboundTrafficPolicy:\n      mode: ALLOW_ANY\n",
            "    outboundTrafficPolicy:\n      mode: REGISTRY_ONLY\n    defaultConfig:\n      proxyMetadata:\n        ISTIO_META_DNS_CAPTURE: \"true\"\n",
        )
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: bookinfo}\nspec:\n  egress:\n  - hosts: [\"./details.bookinfo.svc.cluster.local\"]\n"
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: mine, namespace: bookinfo}\nspec:\n  workloadSelector:\n    labels: {app: productpage}\n  outboundTrafficPolicy: {mode: ALLOW_ANY}\n  egress:\n  - hosts: [\"./details.bookinfo.svc.cluster.local\"]\n";
    assert!(manifests.contains("REGISTRY_ONLY"));
    let m = dir.path().join("manifests.yaml");
    std::fs::write(&m, manifests).unwrap();
    let m = m.to_str().unwrap();
    let l = root.join("access.log");
    let l = l.to_str().unwrap();

    // audit: productpage's own Sidecar lets reviews through; reviews'
    // calls to ratings meet the mesh's REGISTRY_ONLY.
    let r = meshscope(&["audit", "--manifests", m, "--access-log", l, "-o", "json"]);
    assert_eq!(r.ok(), Outcome::Findings, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let ms0011: BTreeMap<String, String> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "MS0011")
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let pp = &ms0011["productpage-v1"];
    assert!(
        pp.contains("passthrough: api.github.com:443, reviews.bookinfo.svc.cluster.local:9080.")
            && pp.contains(
                "Under outbound policy ALLOW_ANY (from Sidecar bookinfo/mine) with DNS capture on"
            )
            && pp.contains("fails against a STRICT peer"),
        "{pp}"
    );
    let rv = &ms0011["reviews-v2"];
    assert!(
        rv.contains("blackholed: ratings.bookinfo.svc.cluster.local:9080")
            && rv.contains("REGISTRY_ONLY (from mesh config) with DNS capture on")
            && rv.contains("a 502 for HTTP"),
        "{rv}"
    );

    // explain: every observed destination with what it meets.
    let r = meshscope(&[
        "explain",
        "deployment",
        "productpage-v1",
        "-n",
        "bookinfo",
        "--manifests",
        m,
        "--access-log",
        l,
    ]);
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    for want in [
        "Outside the scope: outbound policy ALLOW_ANY (from Sidecar bookinfo/mine), catch-all cluster PassthroughCluster, DNS capture on",
        "  in-scope               details.bookinfo.svc.cluster.local:9080",
        "  passthrough            reviews.bookinfo.svc.cluster.local:9080",
        "  passthrough: it leaves through PassthroughCluster",
    ] {
        assert!(r.stdout.contains(want), "{want:?} in\n{}", r.stdout);
    }
    let r = meshscope(&[
        "explain",
        "deployment",
        "productpage-v1",
        "-n",
        "bookinfo",
        "--manifests",
        m,
        "--access-log",
        l,
        "-o",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["fallthrough"]["policy"]["mode"], "ALLOW_ANY");
    assert_eq!(v["fallthrough"]["dns_capture"], true);

    // recommend -o table: the user-owned Sidecar stays, with what its
    // edges meet; generated ones import every edge, so they say nothing.
    let r = meshscope(&[
        "recommend",
        "--manifests",
        m,
        "--access-log",
        l,
        "-o",
        "table",
    ]);
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    let row = r
        .stdout
        .lines()
        .find(|l| l.contains("productpage-v1"))
        .unwrap_or_default();
    assert!(
        row.contains(
            "edges outside the scope meet passthrough: api.github.com:443, reviews.bookinfo.svc.cluster.local:9080"
        ),
        "{}",
        r.stdout
    );
    let row = r
        .stdout
        .lines()
        .find(|l| l.contains("reviews-v2"))
        .unwrap_or_default();
    assert!(!row.contains("edges outside the scope"), "{}", r.stdout);
}

/// `--access-log DIR` where DIR holds more than logs (here: a kubeconfig,
/// a private key and a Secret's YAML, as a home or a support bundle
/// does): each of them is skipped in one line that names it and what it
/// looks like, and no byte of theirs reaches stderr; the log is read, and
/// its own malformed lines are still shown, unless one may hold a
/// credential.
#[test]
fn an_access_log_directory_skips_what_is_not_a_log_and_never_echoes_it() {
    const SECRET: &str = "c3VwZXItc2VjcmV0LWJ5dGVz";
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    let root = repo_root().join("examples/bookinfo");
    let mut log = std::fs::read_to_string(root.join("access.log")).unwrap();
    log.push_str("[2026-11-28T09:00:09Z] \"GET / HTTP/1.1\" 200 truncated\n");
    log.push_str(&format!("    token: {SECRET}\n"));
    log.push_str(&format!("Authorization: Bearer {SECRET}\n"));
    std::fs::write(logs.join("access.log"), &log).unwrap();
    let kubeconfig = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {SECRET}\n    server: https://10.0.0.1:6443\n  name: prod\ncontexts:\n- context:\n    cluster: prod\n    user: admin\n  name: prod\ncurrent-context: prod\nkind: Config\nusers:\n- name: admin\n  user:\n    client-certificate-data: {SECRET}\n    client-key-data: {SECRET}\n    token: {SECRET}\n"
    );
    std::fs::write(logs.join("config"), kubeconfig).unwrap();
    std::fs::write(
        logs.join("client.key"),
        format!(
            "-----BEGIN RSA PRIVATE KEY-----\n{SECRET}\n{SECRET}\n-----END RSA PRIVATE KEY-----\n"
        ),
    )
    .unwrap();
    std::fs::write(
        logs.join("secret.yaml"),
        format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: shop\ndata:\n  password: {SECRET}\nstringData:\n  url: postgres://admin:{SECRET}@db:5432\n"),
    )
    .unwrap();
    let m = root.join("manifests.yaml");
    let m = m.to_str().unwrap();
    let r = meshscope(&[
        "recommend",
        "--manifests",
        m,
        "--access-log",
        logs.to_str().unwrap(),
    ]);
    r.ok();
    let err = &r.stderr;
    assert!(!err.contains(SECRET), "a secret reached stderr:\n{err}");
    let at = |name: &str| logs.join(name).display().to_string();
    for (name, like) in [
        ("config", "looks like a kubeconfig"),
        ("client.key", "looks like a PEM private key"),
        ("secret.yaml", "looks like YAML (Kubernetes objects)"),
    ] {
        let want = format!(
            "warning: {}: not an access log: {like}; skipped\n",
            at(name)
        );
        assert!(err.contains(&want), "{want:?} missing from:\n{err}");
    }
    // The log is read: its malformed line shows, with its text; the lines
    // that may hold a credential show only where they are.
    assert!(
        err.contains(&format!("warning: {}:29: malformed access-log line (fewer than four fields after the upstream host): [2026-11-28T09:00:09Z] \"GET / HTTP/1.1\" 200 truncated", at("access.log"))),
        "{err}"
    );
    // (Line 30, indented, reads as the proxy's own YAML output: counted,
    // never shown.)
    assert!(!err.contains(&format!("{}:30:", at("access.log"))), "{err}");
    let want = format!(
        "warning: {}:31: malformed access-log line (",
        at("access.log")
    );
    let shown = err.lines().find(|l| l.starts_with(&want));
    assert!(
        shown.is_some_and(|l| l.ends_with("; not shown: it may hold a credential")),
        "{shown:?} in:\n{err}"
    );
    // The same Sidecars as from the log alone: nothing was read from the rest.
    let alone = meshscope(&[
        "recommend",
        "--manifests",
        m,
        "--access-log",
        logs.join("access.log").to_str().unwrap(),
    ]);
    assert_eq!(sidecars(&r.stdout), sidecars(&alone.stdout));
    assert_eq!(sidecars(&r.stdout).len(), 6, "{}", r.stdout);
    // The summary counts the log's lines only.
    let summary = err
        .lines()
        .find(|l| l.starts_with("access logs: "))
        .unwrap();
    assert!(
        summary.starts_with("access logs: 31 lines, 26 access-log lines"),
        "{summary}"
    );
}

/// `recommend -o dot` is what Graphviz draws (the real `dot`, which
/// scripts/setup installs), and `-o mermaid` the same graph: a node per
/// workload recommended for and per host called, an edge per observed
/// `host:port`, on the Bookinfo example.
#[test]
fn recommend_draws_the_dependency_graph_for_graphviz_and_mermaid() {
    let root = repo_root();
    let m = root.join("examples/bookinfo/manifests.yaml");
    let log = root.join("examples/bookinfo/access.log");
    let args = |o: &'static str| {
        vec![
            "recommend".to_string(),
            "-n".into(),
            "bookinfo".into(),
            "--manifests".into(),
            m.to_str().unwrap().into(),
            "--access-log".into(),
            log.to_str().unwrap().into(),
            "-o".into(),
            o.into(),
        ]
    };
    let run = |o: &'static str| {
        let a = args(o);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let r = meshscope(&a);
        assert_eq!(r.outcome.as_ref().ok(), Some(&Outcome::Ok), "{}", r.stderr);
        r.stdout
    };
    let dot = run("dot");
    let edges = [
        ("productpage-v1", "details", 9080),
        ("productpage-v1", "reviews", 9080),
        ("productpage-v1", "api.github.com", 443),
        ("reviews-v2", "ratings", 9080),
        ("reviews-v3", "ratings", 9080),
    ];
    assert_eq!(dot.matches(" -> ").count(), edges.len(), "{dot}");
    let Some(graphviz) = meshscope_test_support::outside::program(module_path!(), "dot") else {
        return;
    };
    let mut child = std::process::Command::new(graphviz)
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("dot runs");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), dot.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    // Graphviz writes '-' in text as an entity.
    let svg = String::from_utf8_lossy(&out.stdout).replace("&#45;", "-");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "dot -Tsvg: {}\n{dot}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Graphviz drew every edge and every node, with their text.
    assert_eq!(svg.matches("class=\"edge\"").count(), edges.len(), "{svg}");
    assert_eq!(svg.matches("class=\"node\"").count(), 10, "{svg}");
    for (from, to, port) in edges {
        assert!(svg.contains(&format!("deployment/{from}")), "{from}");
        assert!(svg.contains(&format!(">{to}</text>")), "{to}");
        assert!(svg.contains(&format!(":{port} · ")), "{port}");
    }
    assert!(
        svg.contains("new Sidecar: 3 hosts, 12 → 10 clusters"),
        "{svg}"
    );

    let mermaid = run("mermaid");
    assert!(mermaid.starts_with("flowchart LR\n"), "{mermaid}");
    assert_eq!(mermaid.matches(" -->|").count(), edges.len(), "{mermaid}");
    assert_eq!(mermaid.matches("  subgraph ").count(), 2, "{mermaid}");

    let mut a = args("dot");
    a.push("--exports".into());
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let e = meshscope(&a).outcome.unwrap_err();
    assert!(
        e.to_string().starts_with("-o dot and -o mermaid draw the Sidecar recommendations' dependency graph; --exports prints exportTo"),
        "{e}"
    );
}

/// `report` writes one self-contained page that a real browser (headless
/// Chromium, which scripts/setup installs) opens and draws: the mesh's
/// total, a section per namespace with its scopes, the graph as SVG (a box
/// per workload and per host called, an arrow per observed edge) and the
/// findings; nothing in it is fetched.
#[test]
fn report_is_one_page_a_headless_browser_draws() {
    let root = repo_root();
    let m = root.join("examples/bookinfo/manifests.yaml");
    let log = root.join("examples/bookinfo/access.log");
    let r = meshscope(&[
        "report",
        "--manifests",
        m.to_str().unwrap(),
        "--access-log",
        log.to_str().unwrap(),
    ]);
    assert_eq!(r.outcome.as_ref().ok(), Some(&Outcome::Ok), "{}", r.stderr);
    assert!(r.stderr.contains("report: 6 workloads, "), "{}", r.stderr);
    let page = &r.stdout;
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    for fetched in ["<script", "<link", "src=", "@import", "url(http"] {
        assert!(
            !page.contains(fetched),
            "the page fetches or runs something: {fetched}"
        );
    }
    let Some(chromium) = meshscope_test_support::outside::program(module_path!(), "chromium")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.html");
    std::fs::write(&file, page).unwrap();
    let url = format!("file://{}", file.display());
    let browser = |extra: &[&str]| {
        let out = std::process::Command::new(&chromium)
            .args(["--headless", "--no-sandbox", "--disable-gpu"])
            .arg(format!(
                "--user-data-dir={}",
                dir.path().join("profile").display()
            ))
            .args(extra)
            .arg(&url)
            .output()
            .expect("chromium runs");
        assert!(
            out.status.success(),
            "chromium {extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    // The DOM as the browser parsed it: the inline SVG is SVG to it.
    let dom = browser(&["--dump-dom"]);
    assert!(dom.contains("<section id=\"ns-bookinfo\">"), "{dom}");
    assert!(
        dom.contains("Mesh: 6 proxies, 72 → 32 clusters, 173 KB → 101 KB of xDS"),
        "{dom}"
    );
    assert_eq!(dom.matches("<svg class=\"graph\"").count(), 1, "{dom}");
    assert_eq!(
        dom.matches("<g class=\"node workload\">").count(),
        6,
        "{dom}"
    );
    assert_eq!(dom.matches("<g class=\"node host\">").count(), 4, "{dom}");
    assert_eq!(dom.matches("<g class=\"edge\">").count(), 5, "{dom}");
    assert!(dom.contains(">deployment/productpage-v1</td>"), "{dom}");
    assert!(dom.contains("<td>MS0001</td>"), "{dom}");
    // And it draws it.
    let png = dir.path().join("report.png");
    browser(&[
        &format!("--screenshot={}", png.display()),
        "--window-size=1000,1400",
    ]);
    let shot = std::fs::read(&png).expect("a screenshot");
    assert!(
        shot.starts_with(b"\x89PNG") && shot.len() > 20_000,
        "{} bytes",
        shot.len()
    );
}
