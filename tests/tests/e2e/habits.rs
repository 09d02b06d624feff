//! kubectl's habits in the plugin's output and inputs: `-o name`,
//! `--no-headers`, `-o wide`, set-based `-l`, `--manifests -`, `-q`, audit's
//! `--code`/`--suppress`, and `diff` with `kubectl diff`'s exit codes.
//! Offline on examples/bookinfo, and live against the test control plane.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kubectl_meshscope::Outcome;
use meshscope_e2e::cluster::{repo_root, Cluster};
use meshscope_e2e::{LogForm, Scenario};

use meshscope_e2e::run::{meshscope, meshscope_at as live, Run};
use meshscope_e2e::setup::deploy_scenario;
use meshscope_test_support::audit_json;

fn bookinfo(file: &str) -> String {
    repo_root()
        .join("examples/bookinfo")
        .join(file)
        .to_str()
        .unwrap()
        .to_string()
}

/// `cmd` on bookinfo's manifests and access log, plus `extra`.
fn offline(cmd: &[&str], extra: &[&str]) -> Run {
    let (m, l) = (bookinfo("manifests.yaml"), bookinfo("access.log"));
    let mut args: Vec<&str> = cmd.to_vec();
    args.extend(["--manifests", &m, "--access-log", &l]);
    args.extend_from_slice(extra);
    meshscope(&args)
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

/// The binary, with `stdin` piped in: (exit code, stdout, stderr).
fn binary(args: &[&str], stdin: &str, kubeconfig: Option<&Path>) -> (i32, String, String) {
    let b = meshscope_e2e::run::binary(args).stdin(stdin);
    match kubeconfig {
        Some(k) => b.env("KUBECONFIG", k),
        None => b,
    }
    .run()
}

// === -o name ===

#[test]
fn name_output_lists_each_object_as_kind_group_slash_name() {
    // audit: the objects that have findings, once each.
    let findings = json(&offline(&["audit", "-o", "json"], &[]).stdout);
    let mut expected = Vec::new();
    for f in findings["findings"].as_array().unwrap() {
        let group = match f["kind"].as_str().unwrap() {
            "Deployment" => "deployment.apps",
            "ServiceEntry" => "serviceentry.networking.istio.io",
            other => panic!("bookinfo has no {other} findings"),
        };
        let line = format!("{group}/{}", f["name"].as_str().unwrap());
        if !expected.contains(&line) {
            expected.push(line);
        }
    }
    let r = offline(&["audit", "-o", "name"], &[]);
    assert_eq!(r.ok(), Outcome::Ok);
    assert_eq!(lines(&r.stdout), expected);
    assert!(
        expected.contains(&"deployment.apps/productpage-v1".to_string())
            && expected.contains(&"serviceentry.networking.istio.io/github-api".to_string()),
        "{expected:?}"
    );

    // recommend: the Sidecars -o yaml would print.
    let list = json(&offline(&["recommend", "-o", "json"], &[]).stdout);
    let sidecars: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!(
                "sidecar.networking.istio.io/{}",
                i["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert!(!sidecars.is_empty());
    let r = offline(&["recommend", "-o", "name"], &[]);
    assert_eq!(lines(&r.stdout), sidecars, "{}", r.stderr);

    // impact: the workloads the change is pushed to now.
    let imp = json(
        &offline(
            &["impact", "service/ratings", "-n", "bookinfo", "-o", "json"],
            &[],
        )
        .stdout,
    );
    let now: Vec<String> = imp["now"]["workloads"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| {
            let name = k.rsplit('/').next().unwrap();
            assert!(k.starts_with("Deployment/"), "{k}");
            format!("deployment.apps/{name}")
        })
        .collect();
    assert!(!now.is_empty());
    let r = offline(
        &["impact", "service/ratings", "-n", "bookinfo", "-o", "name"],
        &[],
    );
    assert_eq!(lines(&r.stdout), now, "{}", r.stderr);

    // explain: the object explained.
    let r = offline(
        &[
            "explain",
            "workload",
            "deployment/reviews-v2",
            "-n",
            "bookinfo",
            "-o",
            "name",
        ],
        &[],
    );
    assert_eq!(r.stdout, "deployment.apps/reviews-v2\n", "{}", r.stderr);
}

#[test]
fn name_output_is_what_each_commands_help_says_it_prints() {
    use meshscope_e2e::help::{is_of_form, name_forms};
    let explain = |what: &[&str]| {
        let mut cmd = vec!["explain"];
        cmd.extend_from_slice(what);
        cmd.extend(["-n", "bookinfo", "-o", "name"]);
        offline(&cmd, &[])
    };
    let runs = [
        ("audit", offline(&["audit", "-o", "name"], &[])),
        ("recommend", offline(&["recommend", "-o", "name"], &[])),
        (
            "impact",
            offline(&["impact", "service/ratings", "-o", "name"], &[]),
        ),
        (
            "explain",
            explain(&["pod", "productpage-v1-6b746f74dc-x7k2p"]),
        ),
        ("explain", explain(&["deployment/reviews-v2"])),
        ("codes", meshscope(&["codes", "-o", "name"])),
    ];
    for (cmd, r) in runs {
        r.ok();
        let forms = name_forms(cmd);
        assert!(!r.stdout.is_empty(), "{cmd}: {}", r.stderr);
        for line in r.stdout.lines() {
            assert!(
                is_of_form(line, &forms),
                "{cmd} -o name printed {line:?}; its help says {forms:?}"
            );
        }
    }
}

// === --no-headers ===

#[test]
fn no_headers_drops_the_header_row_of_every_table() {
    let cases: Vec<(Vec<&str>, usize)> = vec![
        (vec!["audit"], 1),
        (vec!["recommend", "-o", "table"], 1),
        (vec!["recommend", "-o", "wide"], 1),
        (vec!["audit", "-o", "wide"], 1),
        // impact's headline belongs to its table.
        (vec!["impact", "service/reviews", "-n", "bookinfo"], 2),
    ];
    for (cmd, heading) in cases {
        let with = offline(&cmd, &[]);
        let without = offline(&cmd, &["--no-headers"]);
        assert_eq!(with.ok(), without.ok());
        let with = lines(&with.stdout);
        assert!(
            with[0].contains("NAMESPACE") || with[0].contains("service/reviews"),
            "{cmd:?}: {with:?}"
        );
        assert_eq!(lines(&without.stdout), with[heading..].to_vec(), "{cmd:?}");
    }
    let with = meshscope(&["codes"]);
    let without = meshscope(&["codes", "--no-headers"]);
    assert!(with.stdout.starts_with("CODE "), "{}", with.stdout);
    assert_eq!(lines(&without.stdout), lines(&with.stdout)[1..].to_vec());
    // -o name prints the codes, for scripts.
    let names = meshscope(&["codes", "-o", "name"]);
    assert_eq!(
        lines(&names.stdout),
        lines(&without.stdout)
            .iter()
            .map(|l| l.split_whitespace().next().unwrap())
            .collect::<Vec<_>>()
    );
}

// === audit --code and --suppress ===

fn codes_and_names(r: &Run) -> Vec<(String, String)> {
    audit_json::codes_and_names(&r.stdout)
}

#[test]
fn audit_code_filters_and_suppress_silences_objects_with_globs_and_counts_them() {
    let all = codes_and_names(&offline(&["audit", "-o", "json"], &[]));
    assert!(all.iter().any(|(c, _)| c == "MS0001") && all.iter().any(|(c, _)| c == "MS0002"));

    let only = offline(&["audit", "-o", "json", "--code", "ms0002"], &[]);
    let found = codes_and_names(&only);
    assert_eq!(
        found,
        all.iter()
            .filter(|(c, _)| c == "MS0002")
            .cloned()
            .collect::<Vec<_>>()
    );
    // Comma-separated and repeated are the same.
    let a = codes_and_names(&offline(
        &["audit", "-o", "json", "--code", "MS0001,MS0002"],
        &[],
    ));
    let b = codes_and_names(&offline(
        &[
            "audit", "-o", "json", "--code", "MS0001", "--code", "MS0002",
        ],
        &[],
    ));
    assert_eq!(a, b);
    assert_eq!(a, all);

    // A glob silences the three reviews Deployments, and the summary counts them.
    let r = offline(
        &[
            "audit",
            "--suppress",
            "MS0001=Deployment/bookinfo/reviews-*",
        ],
        &[],
    );
    assert_eq!(r.ok(), Outcome::Ok);
    assert!(!r.stdout.contains("reviews-v"), "{}", r.stdout);
    assert!(r.stdout.contains("productpage-v1"), "{}", r.stdout);
    let left = all.len() - 3;
    assert!(
        r.stderr.contains(&format!(
            "{left} findings: 0 errors, {left} warnings, 0 info (3 suppressed)"
        )),
        "{}",
        r.stderr
    );
    let j = json(
        &offline(
            &[
                "audit",
                "-o",
                "json",
                "--suppress",
                "MS0001=deploy/*/reviews-*",
            ],
            &[],
        )
        .stdout,
    );
    assert_eq!(j["suppressed"], 3);
    assert_eq!(j["findings"].as_array().unwrap().len(), left);

    // --fail-on looks at what is left after suppression.
    let r = offline(&["audit", "--fail-on", "warning"], &[]);
    assert_eq!(r.ok(), Outcome::Findings);
    let r = offline(
        &[
            "audit",
            "--fail-on",
            "warning",
            "--suppress",
            "MS0001",
            "--suppress",
            "MS0002=ServiceEntry/bookinfo/github-api",
        ],
        &[],
    );
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stdout);
    assert!(
        r.stderr
            .contains(&format!("no findings ({} suppressed)", all.len())),
        "{}",
        r.stderr
    );

    // Unknown codes point at `codes`; a malformed object says the form.
    for flag in ["--code", "--suppress"] {
        let e = offline(&["audit", flag, "MS0999"], &[]).error();
        assert_eq!(
            e,
            format!("{flag}: unknown code \"MS0999\"; `kubectl meshscope codes` lists them")
        );
    }
    let e = offline(&["audit", "--suppress", "MS0001=worker"], &[]).error();
    assert!(e.contains("expected CODE=KIND/NAMESPACE/NAME"), "{e}");
}

// === -l ===

fn audited(selector: &str) -> BTreeSet<String> {
    let r = offline(&["audit", "-o", "name", "-l", selector], &[]);
    r.ok();
    r.stdout.lines().map(String::from).collect()
}

#[test]
fn set_based_selectors_choose_workloads_and_bad_ones_name_the_position() {
    let set = |names: &[&str]| -> BTreeSet<String> {
        names
            .iter()
            .map(|n| format!("deployment.apps/{n}"))
            .collect()
    };
    assert_eq!(
        audited("app in (reviews, details)"),
        set(&["details-v1", "reviews-v1", "reviews-v2", "reviews-v3"])
    );
    assert_eq!(
        audited("app notin (reviews,details),app"),
        set(&["productpage-v1", "ratings-v1"])
    );
    assert_eq!(
        audited("app=reviews,version!=v1"),
        set(&["reviews-v2", "reviews-v3"])
    );
    assert_eq!(audited("app==ratings"), set(&["ratings-v1"]));
    assert_eq!(audited("!app"), set(&[]));
    let e = offline(&["audit", "-l", "app in (reviews"], &[]).error();
    assert!(
        e.starts_with("-l \"app in (reviews\": at position 16: expected ',' or ')'"),
        "{e}"
    );
}

#[test]
fn warnings_speak_only_of_the_selected_workloads() {
    // bookinfo's log has productpage-v1 call an address nothing registers.
    const WARNING: &str =
        "unregistered destination: 203.0.113.7:443 from Deployment/bookinfo/productpage-v1";
    let all = offline(&["recommend"], &[]);
    all.ok();
    assert!(all.stderr.contains(WARNING), "{}", all.stderr);
    for (flag, value) in [
        ("-l", "app in (reviews)"),
        ("-l", "app!=productpage"),
        ("--workload", "reviews-v2"),
        ("--workload", "deployment/details-v1"),
    ] {
        let r = offline(&["recommend", flag, value], &[]);
        r.ok();
        assert!(
            !r.stderr.contains("unregistered destination") && !r.stderr.contains("productpage"),
            "{flag} {value:?} filtered productpage out, yet:\n{}",
            r.stderr
        );
    }
    for (flag, value) in [
        ("-l", "app in (productpage, reviews)"),
        ("--workload", "productpage-v1"),
    ] {
        let r = offline(&["recommend", flag, value], &[]);
        r.ok();
        assert!(
            r.stderr.contains(WARNING),
            "{flag} {value:?}:\n{}",
            r.stderr
        );
    }
}

// === --manifests - ===

#[test]
fn manifests_from_stdin_take_yaml_json_and_lists_and_do_not_share_stdin() {
    let yaml = std::fs::read_to_string(bookinfo("manifests.yaml")).unwrap();
    let from_file = offline(&["audit", "-o", "json"], &[]).stdout;
    let l = bookinfo("access.log");
    let args = [
        "audit",
        "--manifests",
        "-",
        "--access-log",
        l.as_str(),
        "-o",
        "json",
    ];
    let (code, out, err) = binary(&args, &yaml, None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out), json(&from_file));

    // The same objects as one JSON List.
    let items: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_json::Value| !v.is_null())
        .collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    let (code, out, err) = binary(&args, &list.to_string(), None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out), json(&from_file));

    // Both from stdin: an error before anything is read.
    let (code, out, err) = binary(
        &["audit", "--manifests", "-", "--access-log", "-"],
        &yaml,
        None,
    );
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert_eq!(
        err.trim_end(),
        "error: --manifests - and --access-log - cannot both read stdin; write one of them to a file and pass its path"
    );
    let e = meshscope(&["audit", "--manifests", "-", "--manifests", "-"]).error();
    assert!(e.contains("given more than once"), "{e}");
    // Nothing on stdin is said as such.
    let (code, _, err) = binary(&["audit", "--manifests", "-"], "", None);
    assert_eq!(code, 2);
    assert!(err.contains("no Kubernetes or Istio objects"), "{err}");
}

// === tables that fit, and -o wide ===

#[test]
fn default_tables_fit_a_terminal_and_wide_shows_the_long_columns() {
    let r = offline(&["audit"], &[]);
    assert!(
        r.stdout
            .contains("   details-v1       has no Sidecar scope;"),
        "{}",
        r.stdout
    );
    assert!(
        !r.stdout.contains("Deployment bookinfo/details-v1 has"),
        "{}",
        r.stdout
    );
    let wide = offline(&["audit", "-o", "wide"], &[]);
    assert!(
        wide.stdout
            .contains("Deployment bookinfo/details-v1 has no Sidecar scope;"),
        "{}",
        wide.stdout
    );

    // A client with five dependencies.
    let dir = tempfile::tempdir().unwrap();
    let s = Scenario {
        httpbins: 5,
        sleeps: 1,
        fanout: 5,
        ..Scenario::reference()
    };
    let m = dir.path().join("manifests.yaml");
    let l = dir.path().join("access.log");
    std::fs::write(&m, s.manifests()).unwrap();
    std::fs::write(&l, s.logs(LogForm::Text)).unwrap();
    let rec = |o: &str| {
        let r = meshscope(&[
            "recommend",
            "--manifests",
            m.to_str().unwrap(),
            "--access-log",
            l.to_str().unwrap(),
            "-o",
            o,
        ]);
        r.ok();
        r.stdout
            .lines()
            .find(|l| l.contains("deployment/sleep-0"))
            .expect("sleep-0 is listed")
            .to_string()
    };
    let hosts = s.hosts_of_sleep(0);
    assert_eq!(hosts.len(), 5);
    // The table names them as short as they read from sleep-0's namespace
    // (`default/httpbin-0.default.svc.cluster.local` is `httpbin-0`).
    let short: Vec<&str> = hosts
        .iter()
        .map(|h| h.split_once('/').unwrap().1.split('.').next().unwrap())
        .collect();
    let table = rec("table");
    assert!(
        table.contains(&format!("{},+2 more", short[..3].join(","))),
        "{table}"
    );
    assert!(!table.contains(&hosts[0]), "{table}");
    assert!(!table.contains(short[4]), "{table}");
    let wide = rec("wide");
    assert!(wide.contains(&hosts.join(",")), "{wide}");
}

// === -q ===

#[test]
fn quiet_silences_summaries_but_not_warnings_or_errors() {
    let loud = offline(&["recommend"], &[]);
    assert!(loud.stderr.contains("access logs: "), "{}", loud.stderr);
    assert!(loud.stderr.contains(" Sidecars: "), "{}", loud.stderr);
    let quiet = offline(&["recommend"], &["-q"]);
    assert_eq!(quiet.stdout, loud.stdout);
    assert!(!quiet.stderr.contains("access logs: "), "{}", quiet.stderr);
    assert!(!quiet.stderr.contains(" Sidecars: "), "{}", quiet.stderr);

    let loud = offline(&["audit"], &[]);
    assert!(loud.stderr.contains(" findings: "), "{}", loud.stderr);
    let quiet = offline(&["audit"], &["--quiet"]);
    assert_eq!(quiet.stdout, loud.stdout);
    assert_eq!(quiet.stderr, "");

    // Warnings stay.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("bad.log");
    let mut text = std::fs::read_to_string(bookinfo("access.log")).unwrap();
    text.push_str("[2026-11-21T10:00:00Z] \"GET / HTTP/1.1\" 200 truncated\n");
    std::fs::write(&log, text).unwrap();
    let r = meshscope(&[
        "audit",
        "-q",
        "--manifests",
        &bookinfo("manifests.yaml"),
        "--access-log",
        log.to_str().unwrap(),
    ]);
    r.ok();
    assert!(
        r.stderr.contains("warning: ") && r.stderr.contains("malformed access-log line"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains(" findings: "), "{}", r.stderr);
    // Errors stay.
    let e = offline(&["audit", "-q", "--code", "nope"], &[]).error();
    assert!(e.contains("unknown code"), "{e}");
}

// === diff (live) ===

/// Later traffic on the same edges, twice as much of it: only the evidence
/// annotations would change, so diff finds no difference (exit 0) and apply
/// writes nothing (issue #35 item 5: a CI drift gate must not see drift).
fn evidence_alone_is_no_drift(c: &Cluster, s: &Scenario, ns: &str, dir: &Path) {
    let later = dir.join("later.log");
    let text = s.logs(LogForm::Text).replace("2026-11-2", "2026-12-0");
    std::fs::write(&later, format!("{text}{text}")).unwrap();
    let later = later.to_str().unwrap();
    let sleep0 = "sleep-0-deployment-meshscope";
    let rv = c.sidecar_resource_version(ns, sleep0);
    let r = live(&c.kubeconfig, &["diff", "-n", ns, "--access-log", later]);
    assert_eq!(r.ok(), Outcome::Ok, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains(" 0 to change"), "{}", r.stderr);
    let r = live(&c.kubeconfig, &["apply", "-n", ns, "--access-log", later]);
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    assert!(r.stdout.contains("unchanged"), "{}", r.stdout);
    assert!(!r.stdout.contains("configured"), "{}", r.stdout);
    assert_eq!(
        c.sidecar_resource_version(ns, sleep0),
        rv,
        "apply wrote a Sidecar whose scope is the same"
    );
}

#[test]
fn diff_shows_what_apply_would_change_with_kubectl_diffs_exit_codes() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let s = deploy_scenario(c, "diff");
    let ns = s.namespace.clone();
    let dir = tempfile::tempdir().unwrap();
    let log: PathBuf = dir.path().join("access.log");
    std::fs::write(&log, s.logs(LogForm::Text)).unwrap();
    let log = log.to_str().unwrap();
    // sleep-1's Sidecar name is taken by a Sidecar its owner wrote (for
    // another workload).
    c.apply(&format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: sleep-1-deployment-meshscope\n  namespace: {ns}\nspec:\n  workloadSelector:\n    labels: {{app: somebody-else}}\n  egress:\n  - hosts: [\"./*\"]\n"
    ));

    // Nothing applied yet: every Sidecar is new, and nothing is written.
    let r = live(&c.kubeconfig, &["diff", "-n", &ns, "--access-log", log]);
    assert_eq!(r.ok(), Outcome::Findings, "{}", r.stderr);
    let created = s.httpbins + s.sleeps - 1;
    assert_eq!(
        r.stdout.matches("--- live/").count(),
        created,
        "{}",
        r.stdout
    );
    let sleep0 = format!("+++ meshscope/{ns}/sleep-0-deployment-meshscope");
    assert!(r.stdout.contains(&sleep0), "{}", r.stdout);
    for host in s.hosts_of_sleep(0) {
        assert!(
            r.stdout.contains(&format!("+    - {host}")),
            "{host}: {}",
            r.stdout
        );
    }
    // sleep-1's Sidecar name is taken: recommend skips it, so there is
    // nothing to diff, and it says why.
    assert!(
        !r.stdout
            .contains(&format!("+++ meshscope/{ns}/sleep-1-deployment-meshscope")),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr.contains(&format!(
            "skipped Deployment/{ns}/sleep-1: a Sidecar named {ns}/sleep-1-deployment-meshscope exists and is not labelled app.kubernetes.io/managed-by=kubectl-meshscope; it belongs to its owner"
        )),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(&format!(
            "diff: {created} to create, 0 to change, 0 unchanged"
        )),
        "{}",
        r.stderr
    );
    assert_eq!(
        c.sidecar_names(&ns).trim(),
        "sidecar.networking.istio.io/sleep-1-deployment-meshscope",
        "diff writes nothing"
    );

    // After apply: no difference to what apply would do (exit 0).
    let r = live(&c.kubeconfig, &["apply", "-n", &ns, "--access-log", log]);
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    let r = live(
        &c.kubeconfig,
        &["diff", "-n", &ns, "--access-log", log, "-q"],
    );
    assert_eq!(r.ok(), Outcome::Ok, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.stdout.matches("--- live/").count(), 0, "{}", r.stdout);
    assert!(
        !r.stderr.contains("diff: "),
        "-q drops the summary: {}",
        r.stderr
    );
    assert!(
        r.stderr.contains("skipped Deployment/"),
        "-q keeps the notes: {}",
        r.stderr
    );
    evidence_alone_is_no_drift(c, &s, &ns, dir.path());

    // Someone narrows a managed Sidecar: the diff shows the hosts coming back.
    c.kubectl_ok(
        &[
            "patch",
            "sidecars.networking.istio.io",
            "sleep-0-deployment-meshscope",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            "{\"spec\":{\"egress\":[{\"hosts\":[\"./nothing.example\"]}]}}",
        ],
        None,
    );
    let k = c.kubeconfig.clone();
    // kubectl patch now owns the hosts, so apply would skip the Sidecar
    // with a conflict: diff says so, and that the scope would stay
    // different from the recommendation (exit 1).
    let (code, out, err) = binary(&["diff", "-n", &ns, "--access-log", log], "", Some(&k));
    assert_eq!(code, 1, "{err}");
    assert!(!out.contains("sleep-0-deployment-meshscope"), "{out}");
    assert!(
        err.contains(&format!(
            "skipped: {ns}/sleep-0-deployment-meshscope: conflict: "
        )) && err.contains("(--force-conflicts takes those fields over)"),
        "{err}"
    );
    assert!(
        err.contains("1 Sidecar would stay different from the recommendation"),
        "{err}"
    );
    // apply skips it too, and says so with exit 1, not 0.
    let (code, _, err) = binary(&["apply", "-n", &ns, "--access-log", log], "", Some(&k));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("1 Sidecar left different from the recommendation"),
        "{err}"
    );
    let (code, out, err) = binary(
        &["diff", "-n", &ns, "--access-log", log, "--force-conflicts"],
        "",
        Some(&k),
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        out.contains(&format!("--- live/{ns}/sleep-0-deployment-meshscope")),
        "{out}"
    );
    // The observed hosts come back; the patched one stays (apply adds).
    for host in s.hosts_of_sleep(0) {
        assert!(out.contains(&format!("+    - {host}")), "{host}: {out}");
    }
    assert!(out.contains("     - ./nothing.example"), "{out}");
    assert!(err.contains("1 to change"), "{err}");
    // ... unless --prune-hosts drops what was not observed.
    let r = live(
        &c.kubeconfig,
        &[
            "diff",
            "-n",
            &ns,
            "--access-log",
            log,
            "--force-conflicts",
            "--prune-hosts",
        ],
    );
    assert_eq!(r.ok(), Outcome::Findings, "{}", r.stderr);
    assert!(
        r.stdout.contains("-    - ./nothing.example"),
        "{}",
        r.stdout
    );

    // --prune shows the deletion of a Sidecar whose workload is gone.
    c.delete_deployment(&ns, "httpbin-3");
    let r = live(
        &c.kubeconfig,
        &["diff", "-n", &ns, "--access-log", log, "--prune"],
    );
    assert_eq!(r.ok(), Outcome::Findings);
    assert!(
        r.stdout
            .contains(&format!("--- live/{ns}/httpbin-3-deployment-meshscope")),
        "{}",
        r.stdout
    );
    assert!(r.stderr.contains("1 to prune"), "{}", r.stderr);
    assert!(
        c.sidecar_names(&ns)
            .contains("httpbin-3-deployment-meshscope"),
        "diff deletes nothing"
    );

    // Errors exit 2.
    let (code, out, err) = binary(&["diff", "-n", &format!("{ns}-typo")], "", Some(&k));
    assert_eq!(code, 2, "{out}");
    assert!(err.contains("not found in the cluster"), "{err}");

    // Live -o name and --no-headers too.
    let r = live(
        &c.kubeconfig,
        &["recommend", "-n", &ns, "--access-log", log, "-o", "name"],
    );
    assert!(
        r.stdout
            .lines()
            .any(|l| l == "sidecar.networking.istio.io/sleep-0-deployment-meshscope"),
        "{}",
        r.stdout
    );
    let r = live(
        &c.kubeconfig,
        &["audit", "-n", &ns, "--no-headers", "-o", "wide"],
    );
    assert!(!r.stdout.contains("SEVERITY"), "{}", r.stdout);
}
