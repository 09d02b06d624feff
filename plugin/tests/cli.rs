//! The built binary: help text, exit codes, stdout/stderr discipline.

use std::path::PathBuf;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubectl-meshscope"))
}

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo")
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn help_speaks_of_kubectl_meshscope() {
    let o = run(&["--help"]);
    assert!(o.status.success());
    let out = text(&o.stdout);
    assert!(out.contains("Usage: kubectl meshscope"), "{out}");
    for sub in [
        "recommend",
        "audit",
        "explain",
        "impact",
        "codes",
        "version",
        "completion",
    ] {
        assert!(out.contains(sub), "{sub} missing from help");
    }
    let o = run(&["audit", "--help"]);
    assert!(text(&o.stdout).contains("--fail-on"));
}

/// A command that refuses --manifests does not offer its default in -n's
/// help (issue #35 item 16: apply and diff; verify too); one that takes it
/// does.
#[test]
fn namespace_help_names_manifests_only_where_they_are_taken() {
    for cmd in ["apply", "diff", "verify"] {
        let refused = text(&run(&[cmd, "--manifests", "m"]).stderr);
        assert!(refused.contains("drop --manifests"), "{cmd}: {refused}");
        // -h: the one-line form of each flag's help.
        let help = text(&run(&[cmd, "-h"]).stdout);
        let line = help
            .lines()
            .find(|l| l.contains("--namespace <NAMESPACE>"))
            .unwrap_or_else(|| panic!("{cmd}: no -n in {help}"));
        assert!(
            line.ends_with("Namespace to look at (default: the context's namespace)"),
            "{cmd}: {line}"
        );
        let help = text(&run(&[cmd, "--help"]).stdout);
        assert!(
            !help.contains("with --manifests, all namespaces"),
            "{cmd}: {help}"
        );
    }
    let help = text(&run(&["recommend", "--help"]).stdout);
    assert!(help.contains("with --manifests, all namespaces"), "{help}");
}

/// Logs with lines but not one access-log line (an nginx log) are an
/// error, not "0 Sidecars" and exit 0 (issue #35 item 12); an empty log
/// is a quiet mesh, warned about only.
#[test]
fn logs_without_one_access_log_line_are_refused_and_an_empty_log_is_not() {
    let dir = std::env::temp_dir().join(format!("meshscope-cli-nginx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let nginx = dir.join("nginx.log");
    std::fs::write(
        &nginx,
        "127.0.0.1 - - [04/Dec/2026:10:00:00 +0000] \"GET / HTTP/1.1\" 200 612 \"-\" \"curl/8.0\"\n",
    )
    .unwrap();
    let manifests = examples();
    let o = run(&[
        "recommend",
        "--manifests",
        manifests.to_str().unwrap(),
        "--access-log",
        nginx.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty());
    assert!(
        text(&o.stderr)
            .contains("error: the access logs given held 1 line and not one access-log line"),
        "{}",
        text(&o.stderr)
    );
    let empty = dir.join("empty.log");
    std::fs::write(&empty, "").unwrap();
    let o = run(&[
        "recommend",
        "--manifests",
        manifests.to_str().unwrap(),
        "--access-log",
        empty.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_errors_and_runtime_errors_exit_2_with_one_line_on_stderr() {
    let o = run(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["audit", "--manifests", "/nonexistent/dir"]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(
        err.starts_with("error: cannot read /nonexistent/dir"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
    let o = run(&[
        "audit",
        "--manifests",
        examples().to_str().unwrap(),
        "--istio-version",
        "banana",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--istio-version"));
}

#[test]
fn audit_exit_code_follows_fail_on() {
    let m = examples();
    let m = m.to_str().unwrap();
    // The example has warnings (MS0001, MS0002) and no errors.
    assert_eq!(run(&["audit", "--manifests", m]).status.code(), Some(0));
    assert_eq!(
        run(&["audit", "--manifests", m, "--fail-on", "warning"])
            .status
            .code(),
        Some(1)
    );
    assert_eq!(
        run(&["audit", "--manifests", m, "--fail-on", "none"])
            .status
            .code(),
        Some(0)
    );
    let o = run(&["audit", "--manifests", m, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is only JSON");
    let f = &v["findings"][0];
    for key in ["code", "severity", "kind", "namespace", "name", "message"] {
        assert!(f.get(key).is_some(), "{key} missing in {f}");
    }
    assert!(v["summary"]["warnings"].as_u64().unwrap() >= 7);
    assert!(
        text(&o.stderr).contains("findings:"),
        "summary goes to stderr"
    );
}

#[test]
fn the_example_run_from_the_readme_works() {
    let m = examples();
    let log = m.join("access.log");
    let o = run(&[
        "recommend",
        "--manifests",
        m.to_str().unwrap(),
        "--access-log",
        log.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert_eq!(out.matches("kind: Sidecar").count(), 6);
    assert!(out.contains("- bookinfo/ratings.bookinfo.svc.cluster.local"));
    assert!(text(&o.stderr).contains("unregistered destination: 203.0.113.7:443"));
    // The savings in one line: the 6 workloads' proxies, before and after.
    let err = text(&o.stderr);
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("xDS for the 6 proxies of these workloads: "))
        .unwrap_or_else(|| panic!("{err}"));
    let (clusters, rest) = line.split_once(" clusters, ").unwrap();
    let (now, after) = clusters.split_once(" → ").unwrap();
    let (now, after): (u64, u64) = (now.parse().unwrap(), after.parse().unwrap());
    assert!(after < now, "{line}");
    assert!(
        rest.ends_with("of config (estimated; verify measures it on istiod)"),
        "{line}"
    );
    // The same total in -o json, beside the List's items.
    let o = run(&[
        "recommend",
        "--manifests",
        m.to_str().unwrap(),
        "--access-log",
        log.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let list: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(list["items"].as_array().map(Vec::len), Some(6));
    let s = &list["savings"];
    assert_eq!(s["proxies"], 6, "{s}");
    assert_eq!(
        (s["clusters_now"].as_u64(), s["clusters_after"].as_u64()),
        (Some(now), Some(after)),
        "{s}"
    );
    assert!(s["bytes_after"].as_u64() < s["bytes_now"].as_u64(), "{s}");
    let o = run(&[
        "explain",
        "pod",
        "productpage-v1-6b746f74dc-x7k2p",
        "-n",
        "bookinfo",
        "--manifests",
        m.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("Scope:            none"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn codes_are_documented() {
    let o = run(&["codes"]);
    let out = text(&o.stdout);
    for d in meshscope_shared::audit::CODES {
        let row = |l: &str| {
            let cells: Vec<&str> = l
                .split("   ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect();
            cells == [d.code.as_str(), d.severity.as_str(), d.title]
        };
        assert!(out.lines().any(row), "{}\n{out}", d.code);
    }
    let o = run(&["codes", "ms0006"]);
    assert!(text(&o.stdout).contains("does not inherit"));
    assert_eq!(run(&["codes", "MS9999"]).status.code(), Some(2));
}

/// The "Finding codes" table of the docs (docs/finding-codes.md) lists
/// every code, in order, with its severity, and no other: the codes are
/// numbered without gaps.
#[test]
fn the_docs_list_every_finding_code_with_its_severity() {
    let section = meshscope_test_support::docs::section("Finding codes");
    let listed: Vec<(String, String)> = section
        .lines()
        .filter_map(|l| {
            let mut cells = l.strip_prefix("| MS")?.split('|');
            let code = format!("MS{}", cells.next()?.trim());
            Some((code, cells.next()?.trim().to_string()))
        })
        .collect();
    let codes: Vec<(String, String)> = meshscope_shared::audit::CODES
        .iter()
        .map(|d| (d.code.to_string(), d.severity.to_string()))
        .collect();
    assert_eq!(listed, codes);
    for (i, (code, _)) in codes.iter().enumerate() {
        assert_eq!(*code, format!("MS{:04}", i + 1));
    }
}

#[test]
fn version_and_completion() {
    assert_eq!(
        text(&run(&["version", "--client"]).stdout),
        format!(
            "Client Version: {} (commit {})\n",
            env!("CARGO_PKG_VERSION"),
            meshscope_test_support::build_info::commit(
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).as_path()
            )
        )
    );
    let o = run(&["completion", "bash"]);
    assert!(o.status.success());
    assert!(text(&o.stdout).contains("kubectl-meshscope"));
}

/// The lines of the `Examples:` block a command's `after_help` opens
/// with, as written (`None`: it has none).
fn example_lines(cmd: &clap::Command) -> Option<Vec<String>> {
    let after = cmd.get_after_help()?.to_string();
    let block = after.strip_prefix("Examples:\n")?;
    let block = block.split("\n\n").next().unwrap_or_default();
    Some(block.lines().map(|l| l.trim().to_string()).collect())
}

/// Every command of the tree (the root first), with the names that lead
/// to it.
fn commands(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<(Vec<String>, clap::Command)>) {
    out.push((path.clone(), cmd.clone()));
    for sub in cmd.get_subcommands() {
        let mut p = path.clone();
        p.push(sub.get_name().to_string());
        commands(sub, p, out);
    }
}

/// The words of the `kubectl meshscope …` command in a shell line, as the
/// shell splits them (quotes removed), up to the first `|`, `>`, `;`,
/// `&` or `)` outside quotes. `None` when the line runs no meshscope.
fn meshscope_words(line: &str) -> Option<Vec<String>> {
    let start = line.find("kubectl meshscope")?;
    let mut words = Vec::new();
    let (mut word, mut quote, mut any) = (String::new(), None, false);
    for c in line[start..].chars() {
        match (c, quote) {
            (q, Some(open)) if q == open => quote = None,
            (_, Some(_)) => word.push(c),
            ('\'' | '"', None) => {
                quote = Some(c);
                any = true;
            }
            ('|' | '>' | ';' | '&' | ')', None) => break,
            (' ', None) => {
                if any || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            _ => word.push(c),
        }
    }
    if any || !word.is_empty() {
        words.push(word);
    }
    Some(words)
}

#[test]
fn every_command_has_examples_that_parse_and_print_on_one_line_at_any_width() {
    use clap::{CommandFactory, Parser};
    let mut all = Vec::new();
    commands(
        &kubectl_meshscope::args::Cli::command(),
        Vec::new(),
        &mut all,
    );
    assert!(all.len() >= 13, "{} commands", all.len());
    for (path, cmd) in &all {
        let examples = example_lines(cmd)
            .unwrap_or_else(|| panic!("{path:?}: --help has no Examples: section"));
        let mut runs = 0;
        for line in &examples {
            let Some(words) = meshscope_words(line) else {
                continue;
            };
            runs += 1;
            // `kubectl meshscope` is the binary, as kubectl runs it.
            let argv =
                std::iter::once("kubectl-meshscope".to_string()).chain(words[2..].iter().cloned());
            let cli = kubectl_meshscope::args::Cli::try_parse_from(argv)
                .unwrap_or_else(|e| panic!("{path:?}: the example {line:?} does not parse:\n{e}"));
            // ...and its flags are checked as a run would check them.
            if let Err(e) = kubectl_meshscope::request::Request::parse(cli.command) {
                panic!("{path:?}: the example {line:?} is refused: {e:#}");
            }
            // An example of a subcommand runs that subcommand.
            assert!(
                words[2..].starts_with(path),
                "{path:?}: the example {line:?} runs another command"
            );
        }
        assert!(
            runs > 0,
            "{path:?}: no example runs kubectl meshscope: {examples:?}"
        );
        for columns in ["60", "40"] {
            for flag in ["--help", "-h"] {
                let o = bin()
                    .args(path.iter().map(String::as_str).chain([flag]))
                    .env("COLUMNS", columns)
                    .output()
                    .expect("binary runs");
                assert!(o.status.success());
                let help = text(&o.stdout);
                let lines: Vec<&str> = help.lines().map(str::trim).collect();
                for example in &examples {
                    assert!(
                        lines.contains(&example.as_str()),
                        "{path:?} {flag} at {columns} columns: {example:?} is not one line of:\n{help}"
                    );
                }
            }
        }
    }
}

#[test]
fn help_text_besides_the_examples_is_wrapped_to_the_width() {
    use clap::CommandFactory;
    let mut all = Vec::new();
    commands(
        &kubectl_meshscope::args::Cli::command(),
        Vec::new(),
        &mut all,
    );
    for (path, cmd) in &all {
        let examples = example_lines(cmd).unwrap_or_default();
        for flag in ["--help", "-h"] {
            let o = bin()
                .args(path.iter().map(String::as_str).chain([flag]))
                .env("COLUMNS", "80")
                .output()
                .expect("binary runs");
            for line in text(&o.stdout).lines() {
                let example = examples.iter().any(|e| e == line.trim());
                assert!(
                    example || line.chars().count() <= 80,
                    "{path:?} {flag}: wider than 80 columns: {line:?}"
                );
            }
        }
    }
}

#[test]
fn the_no_traffic_warning_says_what_allow_idle_does() {
    let manifests = examples().join("manifests.yaml");
    let m = manifests.to_str().unwrap();
    let o = run(&["recommend", "--manifests", m, "-n", "bookinfo"]);
    let err = text(&o.stderr);
    assert!(
        err.contains("every workload is \"no evidence\" unless --allow-idle closes it"),
        "{err}"
    );
    let o = run(&[
        "recommend",
        "--manifests",
        m,
        "-n",
        "bookinfo",
        "--allow-idle",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(!err.contains("unless --allow-idle"), "{err}");
    assert!(
        err.contains("with --allow-idle every workload gets a closed scope (~/*)"),
        "{err}"
    );
}

#[test]
fn counts_agree_with_their_nouns() {
    let manifests = examples().join("manifests.yaml");
    let m = manifests.to_str().unwrap();
    // One finding, in one namespace with one ServiceEntry, and none at all.
    let o = run(&["audit", "--manifests", m, "--code", "MS0002"]);
    let err = text(&o.stderr);
    let summary = err.lines().last().unwrap_or_default();
    assert!(
        !summary.starts_with("1 findings") && !summary.contains(" 1 warnings"),
        "{err}"
    );
    let o = run(&["audit", "--manifests", m, "-n", "nosuch"]);
    let err = text(&o.stderr);
    assert!(err.contains("no findings"), "{err}");
    assert!(!err.contains("0 findings"), "{err}");
    // explain: "1 route", never "1 routes".
    let o = run(&[
        "explain",
        "workload",
        "details-v1",
        "-n",
        "bookinfo",
        "--manifests",
        m,
    ]);
    let out = text(&o.stdout);
    assert!(out.contains("Estimated xDS:"), "{out}{}", text(&o.stderr));
    for bad in [
        " 1 routes",
        " 1 clusters",
        " 1 listeners",
        "(1 requests)",
        " 1 imported services",
    ] {
        assert!(!out.contains(bad), "{bad}: {out}");
    }
}

#[test]
fn explain_takes_kubectls_forms_and_all_namespaces() {
    let manifests = examples().join("manifests.yaml");
    let m = manifests.to_str().unwrap();
    let pod = "productpage-v1-6b746f74dc-x7k2p";
    let first = |args: &[&str]| {
        let o = run(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        text(&o.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let want = format!("Pod:              bookinfo/{pod}");
    assert_eq!(
        first(&["explain", "pod", pod, "-n", "bookinfo", "--manifests", m]),
        want
    );
    assert_eq!(
        first(&[
            "explain",
            &format!("pod/{pod}"),
            "-n",
            "bookinfo",
            "--manifests",
            m
        ]),
        want
    );
    // -A looks in every namespace, whatever -n (or the context) says.
    assert_eq!(
        first(&[
            "explain",
            "pod",
            pod,
            "-n",
            "default",
            "-A",
            "--manifests",
            m
        ]),
        want
    );
    assert_eq!(
        first(&[
            "explain",
            "deployment/details-v1",
            "-n",
            "bookinfo",
            "--manifests",
            m
        ]),
        "Workload:         Deployment/details-v1 (namespace bookinfo)"
    );
    // Mistakes are one line, exit 2, naming what is wrong.
    for (args, want) in [
        (
            vec!["explain", "pod", "x", "-n", "nosuch"],
            "error: namespace \"nosuch\" not found in the input",
        ),
        (
            vec!["explain", "pod"],
            "error: explain pod: name what to explain",
        ),
        (
            vec!["explain", "pod/x", "y"],
            "error: explain pod/x y: give TYPE NAME or TYPE/NAME, not both",
        ),
    ] {
        let mut args = args.clone();
        args.extend(["--manifests", m]);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = text(&o.stderr);
        assert!(
            err.lines().last().unwrap_or_default().starts_with(want),
            "{args:?}: {err}"
        );
    }
}
