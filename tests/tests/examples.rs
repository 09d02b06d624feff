//! Every `kubectl meshscope` example in the shell blocks of README.md and
//! docs/*.md and in `--help` runs as written: through bash, with kubectl and the built
//! plugin on PATH, from a directory that looks like the repository root, against the test control plane
//! holding `examples/bookinfo` (the mesh the examples name), a real istiod
//! reached through a port-forward, and a real Prometheus.
//!
//! "Runs" means it exits 0 or 1 (1 is findings) and prints no `error:`;
//! `apply --watch` runs for 20 s and must then stop on SIGTERM with 0.
//! Three substitutions keep the run inside this machine, and nothing else
//! is changed:
//! - the in-cluster Prometheus URL the examples show becomes the test
//!   Prometheus's;
//! - `--istiod-url http://localhost:15014` (after a user's own
//!   `kubectl port-forward`) becomes the test istiod's debug address;
//! - `| kubectl apply -f -` becomes `| kubectl apply --dry-run=client -f -`,
//!   so that an example does not install the webhook into the shared test
//!   cluster; kubectl still parses every object, and fails on an empty
//!   input ("no objects passed to apply").

use std::process::Command;

use clap::CommandFactory;
use kubectl_meshscope::args::Cli;
use meshscope_e2e::cluster::{bin_dir, repo_root, Cluster, Prometheus};
use meshscope_e2e::istiod::Istiod;
use meshscope_e2e::kubelet::{Forwards, LogReply, Logs, StandInKubelet};
use meshscope_test_support::docs;

/// A working directory that looks like the repository's root (each of its
/// entries linked), so that an example that writes a file (`> report.html`)
/// writes it there, not into the checkout.
fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(repo_root()).unwrap() {
        let e = e.unwrap();
        std::os::unix::fs::symlink(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    dir
}

/// The commands of the ```sh blocks of README.md and docs/*.md that run
/// kubectl meshscope (a command left running in the background, `... &`,
/// only prepares another).
fn doc_commands() -> Vec<String> {
    docs::sh_commands()
        .into_iter()
        .filter(|c| c.contains("kubectl meshscope") && !c.ends_with('&'))
        .collect()
}

/// The example lines of every command's help that run kubectl meshscope
/// (`source <(kubectl meshscope completion bash)` too), from the
/// `Examples:` block each help opens its closing text with.
fn help_commands() -> Vec<String> {
    fn walk(cmd: &clap::Command, out: &mut Vec<String>) {
        for text in [cmd.get_after_help(), cmd.get_after_long_help()]
            .into_iter()
            .flatten()
        {
            let text = text.to_string();
            let Some(block) = text.strip_prefix("Examples:\n") else {
                continue;
            };
            for line in block.split("\n\n").next().unwrap_or_default().lines() {
                let line = line.trim();
                if line.contains("kubectl meshscope") && !line.ends_with('&') {
                    out.push(line.to_string());
                }
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), &mut out);
    out
}

/// Deletes the bookinfo namespace and waits until it is gone. Its pods are
/// bound to a stand-in node whose kubelet never confirms a deletion, so
/// they are deleted with no grace period first.
fn remove_bookinfo(c: &Cluster) {
    let _ = c.kubectl(
        &[
            "delete",
            "pods",
            "--all",
            "-n",
            "bookinfo",
            "--grace-period=0",
            "--force",
        ],
        None,
    );
    let _ = c.kubectl(
        &[
            "delete",
            "namespace",
            "bookinfo",
            "--ignore-not-found",
            "--timeout=60s",
        ],
        None,
    );
}

/// The tests here each load namespace bookinfo: one at a time.
static BOOKINFO: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn bookinfo_lock() -> std::sync::MutexGuard<'static, ()> {
    BOOKINFO.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn every_example_in_the_docs_and_the_help_runs_as_written() {
    meshscope_e2e::needs_cluster!();
    let _bookinfo = bookinfo_lock();
    let c = Cluster::shared();
    remove_bookinfo(c);
    // The example mesh, without its istio-system objects (the shared mesh
    // config stays as the other tests expect it).
    let manifests =
        std::fs::read_to_string(repo_root().join("examples/bookinfo/manifests.yaml")).unwrap();
    // Its pods carry the injected istio-proxy container, and keep their
    // names: without owner references (their ReplicaSets' uids differ
    // here, and the garbage collector would delete them), and with the
    // Deployments scaled to zero (the controllers' own pods would be more
    // pods, under other names than the examples use).
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&manifests) {
        let mut v: serde_yaml::Value = serde::Deserialize::deserialize(doc).unwrap();
        let ns = v["metadata"]["namespace"].as_str().unwrap_or("");
        let name = v["metadata"]["name"].as_str().unwrap_or("");
        if v.is_null() || ns == "istio-system" || name == "istio-system" {
            continue;
        }
        if let Some(m) = v["metadata"].as_mapping_mut() {
            m.remove("ownerReferences");
        }
        if v["kind"] == "Deployment" {
            v["spec"]["replicas"] = 0.into();
        }
        docs.push(serde_yaml::to_string(&v).unwrap());
    }
    c.kubectl_ok(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&docs.join("---\n")),
    );
    let pods: Vec<String> = c
        .kubectl_ok(
            &[
                "get",
                "pods",
                "-n",
                "bookinfo",
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ],
            None,
        )
        .split_whitespace()
        .map(String::from)
        .collect();
    assert!(!pods.is_empty(), "bookinfo has pods");

    // istiod behind a port-forward, as in a cluster; the proxies' logs are
    // empty but productpage's, which shows one call to details (the
    // examples need them readable, and `--exports` some traffic).
    let istiod = Istiod::start(c).expect("istiod starts");
    let istiod_pod = "istiod-examples";
    // An interrupted earlier run may have left it bound to its node.
    c.force_delete_pod("istio-system", istiod_pod);
    let mut forwards = Forwards::new();
    forwards.insert(
        format!("istio-system/{istiod_pod}:15014"),
        istiod.monitoring.parse().unwrap(),
    );
    let mut logs = Logs::new();
    for p in &pods {
        logs.insert(
            format!("bookinfo/{p}/istio-proxy"),
            LogReply::Text(product_page_calls(c, p)),
        );
    }
    let kubelet = StandInKubelet::start_with(logs, forwards).unwrap();
    let node = c.stand_in_node("examples", kubelet.port).unwrap();
    c.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {istiod_pod}\n  namespace: istio-system\n  labels: {{app: istiod}}\n  annotations: {{prometheus.io/port: \"15014\"}}\nspec:\n  containers: [{{name: discovery, image: docker.io/istio/pilot:1.30.0}}]\n"
    ));
    c.bind_pod("istio-system", istiod_pod, &node).unwrap();
    c.set_pod_ip("istio-system", istiod_pod, "10.254.0.3")
        .unwrap();
    for p in &pods {
        // Pods the manifests bound elsewhere keep their node.
        let _ = c.bind_pod("bookinfo", p, &node);
    }
    // Istio metrics of another mesh: bookinfo's workloads find none of
    // theirs, as in a Prometheus that has not scraped them yet.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let other = meshscope_e2e::Scenario {
        httpbins: 1,
        sleeps: 1,
        ..meshscope_e2e::Scenario::reference()
    };
    let prometheus = Prometheus::start(&other.openmetrics(now)).expect("prometheus starts");

    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut commands = doc_commands();
    // As many as README held before its reference moved to docs/ (40):
    // moving a command must not lose it.
    assert!(commands.len() >= 40, "examples in the docs: {commands:#?}");
    commands.extend(help_commands());
    assert!(commands.len() > 20, "examples found: {commands:#?}");
    let mut failures = Vec::new();
    let work = workdir();
    for cmd in &commands {
        let run = cmd
            .replace("http://prometheus.istio-system:9090", &prometheus.url)
            .replace(
                "--istiod-url http://localhost:15014",
                &format!("--istiod-url http://{}", istiod.monitoring),
            )
            .replace(
                "| kubectl apply -f -",
                "| kubectl apply --dry-run=client -f -",
            );
        // `apply --watch` runs until stopped: it gets 20 s, then SIGTERM,
        // which it answers by finishing its write and exiting 0.
        let (limit, script) = if run.contains("--watch") {
            ("20", format!("exec {run}"))
        } else {
            ("120", format!("set -o pipefail; {run}"))
        };
        // --foreground: the signal goes to the command alone. Without it
        // timeout also signals its process group, and a loaded machine can
        // deliver the two apart: the second is the one that ends a
        // watcher at once (exit 143) instead of letting it finish.
        let out = Command::new("timeout")
            .args([
                "--foreground",
                "-s",
                "TERM",
                "--preserve-status",
                limit,
                "bash",
                "-c",
                &script,
            ])
            .current_dir(work.path())
            .env("PATH", &path)
            .env("KUBECONFIG", &c.kubeconfig)
            .output()
            .unwrap();
        let code = out.status.code().unwrap_or(-1);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !(code == 0 || code == 1) || stderr.lines().any(|l| l.starts_with("error")) {
            failures.push(format!(
                "{cmd}\n  exit {code}\n  {}",
                stderr.trim().replace('\n', "\n  ")
            ));
        }
    }
    c.force_delete_pod("istio-system", istiod_pod);
    remove_bookinfo(c);
    let _ = c.kubectl(&["delete", "node", &node], None);
    drop(istiod);
    assert!(
        failures.is_empty(),
        "{} of {} examples do not run as written:\n{}",
        failures.len(),
        commands.len(),
        failures.join("\n")
    );
    eprintln!("{} examples ran", commands.len());
}

/// docs/fidelity.md's "Held to a real istiod" block, run as printed through bash
/// from the repository root: it starts (or finds) the test control plane,
/// loads the example mesh with `tests/cluster/load-example`, starts istiod
/// and prints what it sends each of the example's pods (issue #19, item
/// 22). Only where istiod keeps its state differs (its own directory, so
/// that it cannot meet another test's istiod).
#[test]
fn the_real_istiod_recipe_in_the_docs_runs_as_written() {
    meshscope_e2e::needs_cluster!();
    let _bookinfo = bookinfo_lock();
    let c = Cluster::shared();
    remove_bookinfo(c);
    let block = docs::first_sh_block(&docs::section("Held to a real istiod"));
    assert!(block.contains("tests/cluster/load-example"), "{block}");
    let state = tempfile::tempdir().unwrap();
    let istiod_dir = state.path().join("istiod");
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &block])
        .current_dir(repo_root())
        .env_remove("KUBECONFIG")
        .env("MESHSCOPE_ISTIOD_DIR", &istiod_dir)
        .output()
        .unwrap();
    // Stopped even when the block failed half-way.
    let _ = Command::new(repo_root().join("tests/istiod/down"))
        .env("MESHSCOPE_ISTIOD_DIR", &istiod_dir)
        .output();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let result = std::panic::catch_unwind(|| check_recipe(c, &stdout));
    remove_bookinfo(c);
    assert!(out.status.success(), "the block failed:\n{block}\n{stderr}");
    if let Err(p) = result {
        eprintln!("{stderr}");
        std::panic::resume_unwind(p);
    }
}

/// What the recipe printed: load-example's pods, then meshscope-xds-sim's
/// JSON, and what the cluster holds after it.
fn check_recipe(c: &Cluster, stdout: &str) {
    let (loaded, json) = stdout
        .split_once("\n{\n")
        .expect("load-example's lines, then the JSON document");
    // Six pods, each owned by its Deployment.
    let pods: Vec<(&str, &str)> = loaded
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "NAMESPACE/NAME IP OWNER: {l}");
            assert!(f[2].starts_with("Deployment/"), "{l}");
            (
                f[0].strip_prefix("bookinfo/").expect("a bookinfo pod"),
                f[1],
            )
        })
        .collect();
    assert_eq!(pods.len(), 6, "{loaded}");
    let doc: serde_json::Value = serde_json::from_str(&format!("{{\n{json}")).unwrap();
    let proxies = doc["proxies"].as_array().expect("proxies");
    assert_eq!(proxies.len(), 6, "one simulated sidecar per pod: {doc:#}");
    let reviews = "outbound|9080||reviews.bookinfo.svc.cluster.local";
    let ratings = "outbound|9080||ratings.bookinfo.svc.cluster.local";
    for p in proxies {
        let name = p["proxy"].as_str().unwrap();
        let cds = &p["types"]["cds"]["resources"];
        // istiod found the pod: its Service gives it an inbound cluster.
        assert!(cds.get("inbound|9080||").is_some(), "{name}: {cds:#}");
        assert!(cds.get(reviews).is_some(), "{name}: {cds:#}");
        // EDS carries the pods' addresses: three for reviews, one for
        // ratings.
        let eds = &p["types"]["eds"]["resources"];
        let size = |c: &str| eds[c].as_u64().unwrap_or(0);
        assert!(
            size(reviews) > size(ratings) && size(ratings) > 0,
            "{name}: {eds:#}"
        );
    }
    // Running, ready, owned: and still there after the recipe (the garbage
    // collector had deleted the file's pods within seconds).
    let got = c.kubectl_ok(
        &[
            "get", "pods", "-n", "bookinfo", "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.status.phase} {.status.conditions[?(@.type==\"Ready\")].status} {.metadata.ownerReferences[0].kind}{\"\\n\"}{end}",
        ],
        None,
    );
    let mut want: Vec<String> = pods
        .iter()
        .map(|(pod, ip)| format!("{pod} {ip} Running True ReplicaSet"))
        .collect();
    want.sort();
    let mut have: Vec<String> = got.lines().map(String::from).collect();
    have.sort();
    assert_eq!(have, want);
    let ready = c.kubectl_ok(
        &[
            "get", "deployments", "-n", "bookinfo", "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.readyReplicas}/{.spec.replicas} {end}",
        ],
        None,
    );
    assert_eq!(
        ready
            .split_whitespace()
            .filter(|d| d.ends_with("=1/1"))
            .count(),
        6,
        "{ready}"
    );
}

/// The istio-proxy log of bookinfo pod `pod`: productpage's shows one
/// call to details, the others nothing.
fn product_page_calls(c: &Cluster, pod: &str) -> String {
    if !pod.starts_with("productpage") {
        return String::new();
    }
    let ip = c.kubectl_ok(
        &[
            "get",
            "pod",
            pod,
            "-n",
            "bookinfo",
            "-o",
            "jsonpath={.status.podIP}",
        ],
        None,
    );
    let host = "details.bookinfo.svc.cluster.local";
    meshscope_e2e::outbound_text_line(0, ip.trim(), host, 9080, "10.255.7.1:9080")
}

/// `meshscope-load` of a second file into a namespace an earlier load
/// filled (issue #35 item 14): it waits for its own Deployment and pods
/// only, not the earlier file's.
#[test]
fn a_second_load_adds_a_deployment_to_a_namespace_already_loaded() {
    meshscope_e2e::needs_cluster!();
    let _bookinfo = bookinfo_lock();
    let c = Cluster::shared();
    remove_bookinfo(c);
    let manifests =
        std::fs::read_to_string(repo_root().join("examples/bookinfo/manifests.yaml")).unwrap();
    let first = meshscope_e2e::load::load(c, &manifests).expect("bookinfo loads");
    assert!(first.pods.iter().any(|p| p.namespace == "bookinfo"));
    let second = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: extra\n  namespace: bookinfo\n  labels: {app: extra}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: extra}\n  template:\n    metadata:\n      labels: {app: extra}\n    spec:\n      containers:\n      - {name: extra, image: example/extra:1}\n      - {name: istio-proxy, image: istio/proxyv2:1.31.0}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: extra-5d8c7f9b6-abcde\n  namespace: bookinfo\n  labels: {app: extra, pod-template-hash: 5d8c7f9b6}\n  ownerReferences:\n  - {apiVersion: apps/v1, kind: ReplicaSet, name: extra-5d8c7f9b6, uid: 00000000-0000-0000-0000-000000000001, controller: true}\nspec:\n  containers:\n  - {name: extra, image: example/extra:1}\n  - {name: istio-proxy, image: istio/proxyv2:1.31.0}\nstatus:\n  podIP: 10.244.9.9\n";
    let t = std::time::Instant::now();
    let loaded = meshscope_e2e::load::load(c, second).expect("the second file loads");
    let names: Vec<&str> = loaded.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["extra-5d8c7f9b6-abcde"]);
    assert_eq!(loaded.pods[0].owner, "Deployment/extra");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        t.elapsed()
    );
    remove_bookinfo(c);
}

/// `meshscope-xds-sim --stay` (issue #35 item 13): after printing, its
/// proxies stay connected and ACK istiod's pushes, so that `verify`
/// checks them (without it they are "not connected").
#[test]
fn the_simulated_sidecars_can_stay_connected_for_verify() {
    meshscope_e2e::needs_cluster!();
    use std::io::BufRead as _;
    let _bookinfo = bookinfo_lock();
    let c = Cluster::shared();
    remove_bookinfo(c);
    let manifests =
        std::fs::read_to_string(repo_root().join("examples/bookinfo/manifests.yaml")).unwrap();
    meshscope_e2e::load::load(c, &manifests).expect("bookinfo loads");
    let istiod = Istiod::start(c).expect("istiod starts");
    let mut sim = Command::new(bin_dir().join("meshscope-xds-sim"))
        .args([
            "--istiod",
            &istiod.grpc,
            "--all-pods",
            "-n",
            "bookinfo",
            "--stay",
        ])
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("meshscope-xds-sim starts");
    // The document ends with its closing brace at the start of a line.
    let mut doc = String::new();
    let mut lines = std::io::BufReader::new(sim.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let end = line == "}";
        doc += &line;
        if end {
            break;
        }
    }
    let printed: serde_json::Value =
        serde_json::from_str(&doc).expect("the document, printed first");
    assert_eq!(printed["proxies"].as_array().map(Vec::len), Some(6));
    // As docs/fidelity.md says: the debug endpoints at MESHSCOPE_ISTIOD_HTTP.
    let url = format!("http://{}", istiod.http);
    let r = meshscope_e2e::run::meshscope_at(
        &c.kubeconfig,
        &[
            "verify",
            "-n",
            "bookinfo",
            "--istiod-url",
            &url,
            "--istio-version",
            meshscope_e2e::istiod::ENGINE_VERSION,
        ],
    );
    let still_running = sim.try_wait().unwrap().is_none();
    let _ = sim.kill();
    let _ = sim.wait();
    remove_bookinfo(c);
    assert!(still_running, "--stay exited");
    assert!(
        r.stderr.contains("6 proxies: ") && r.stderr.contains(", 0 not connected"),
        "{}",
        r.stderr
    );
    // The measured total, beside the engine's: what scoping saves, as
    // istiod sends it.
    let total = r
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("istiod sends the connected proxies "))
        .unwrap_or_else(|| panic!("{}", r.stderr));
    let (sent, predicted) = total
        .split_once(" clusters in all (the engine predicts ")
        .unwrap();
    assert_eq!(Some(sent), predicted.strip_suffix(')'), "{total}");
    assert!(sent.parse::<u64>().unwrap() > 6 * 3, "{total}");
}
