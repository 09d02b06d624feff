use clap::Parser;

use super::*;
use crate::args::Cli;

fn parse(args: &[&str]) -> Result<Request> {
    let cli = Cli::try_parse_from(std::iter::once("kubectl-meshscope").chain(args.iter().copied()))
        .expect("clap accepts the line");
    Request::parse(cli.command).map(|(r, _)| r)
}

fn error(args: &[&str]) -> String {
    format!("{:#}", parse(args).expect_err("a mistake"))
}

#[test]
fn since_is_checked_everywhere_and_refused_where_nothing_reads_it() {
    // A bad duration is an error wherever it is given...
    for args in [
        &["audit", "--since", "3days"][..],
        &["audit", "--from-pod-logs", "--since", "soon"],
    ] {
        let e = error(args);
        assert!(e.starts_with("invalid duration"), "{args:?}: {e}");
    }
    // ...and a good one where nothing reads it is refused, not ignored.
    for args in [
        &["audit", "--since", "1h"][..],
        &["recommend", "--manifests", "m.yaml", "--since", "1h"],
        &["recommend", "--access-log", "a.log", "--since", "1h"],
    ] {
        let e = error(args);
        assert!(
            e.starts_with("--since sets how far back --from-pod-logs and --prometheus read"),
            "{args:?}: {e}"
        );
    }
    let Request::Audit(a) = parse(&["audit", "--prometheus", "http://p", "--since", "2h"]).unwrap()
    else {
        panic!("an audit request")
    };
    assert_eq!(a.mesh.prometheus_window(), Duration::from_secs(7200));
}

#[test]
fn checks_keep_the_order_the_commands_made_them_in() {
    // recommend checked --istio-version, then --include, then the sources.
    let e = error(&["recommend", "--istio-version", "banana", "--include", "x"]);
    assert!(e.starts_with("--istio-version: "), "{e}");
    let e = error(&[
        "recommend",
        "--include",
        "x",
        "--manifests",
        "m",
        "--from-pod-logs",
    ]);
    assert!(e.starts_with("--include: "), "{e}");
    // audit checked the sources first.
    let e = error(&[
        "audit",
        "--istio-version",
        "banana",
        "--manifests",
        "m",
        "--prometheus",
        "u",
    ]);
    assert!(
        e.starts_with("--from-pod-logs and --prometheus read from a cluster"),
        "{e}"
    );
    // apply: --manifests, then --wait.
    let e = error(&["apply", "--manifests", "m", "--dry-run=client", "--wait"]);
    assert!(e.starts_with("apply changes a cluster"), "{e}");
    let e = error(&["apply", "--dry-run=client", "--wait"]);
    assert!(e.starts_with("--wait waits for istiod"), "{e}");
    // stdin before anything.
    let e = error(&["apply", "--manifests", "-", "--access-log", "-"]);
    assert!(e.starts_with("--manifests - and --access-log -"), "{e}");
}

#[test]
fn planned_objects_are_for_a_cluster_and_stdin_is_read_once() {
    let e = error(&["recommend", "--manifests", "m", "-f", "d.yaml"]);
    assert!(e.starts_with("-f lays objects over a cluster's"), "{e}");
    let e = error(&["apply", "-f", "-", "--access-log", "-"]);
    assert!(e.starts_with("-f - reads stdin"), "{e}");
    let e = error(&["diff", "-f", "-", "--filename", "-"]);
    assert!(e.starts_with("-f - reads stdin"), "{e}");
    let e = error(&["apply", "--watch", "--from-pod-logs", "-f", "d.yaml"]);
    assert!(e.starts_with("--watch follows the cluster"), "{e}");
    let Request::Apply(a) = parse(&["apply", "-f", "a.yaml", "--filename", "b"]).unwrap() else {
        panic!("an apply request")
    };
    assert_eq!(
        a.spec.mesh.planned,
        [PathBuf::from("a.yaml"), PathBuf::from("b")]
    );
}

#[test]
fn commands_that_answer_for_one_namespace_read_them_all() {
    let Request::Verify(v) = parse(&["verify", "-n", "shop"]).unwrap() else {
        panic!("a verify request")
    };
    assert!(v.mesh.all_namespaces);
    assert_eq!(v.mesh.pod_logs, PodLogScope::Namespace);
    assert_eq!(
        v.mesh.purpose,
        Purpose::Verify {
            istiod: Some("istio-system".into())
        }
    );
    let Request::Impact(i) = parse(&["impact", "service/web", "-n", "shop"]).unwrap() else {
        panic!("an impact request")
    };
    assert!(i.mesh.all_namespaces);
    assert_eq!(i.mesh.pod_logs, PodLogScope::Listed);
    let Request::Apply(a) = parse(&["apply", "--prune", "--wait=1m"]).unwrap() else {
        panic!("an apply request")
    };
    assert_eq!(
        a.spec.mesh.purpose,
        Purpose::Apply {
            prune: true,
            istiod: Some("istio-system".into())
        }
    );
    assert_eq!(a.wait.map(|w| w.limit), Some(Duration::from_secs(60)));
}

#[test]
fn watch_flags_are_checked_up_front() {
    let e = error(&["apply", "--interval", "5s"]);
    assert!(e.starts_with("--interval is a --watch flag"), "{e}");
    let e = error(&["apply", "--watch"]);
    assert!(e.starts_with("--watch needs a traffic source"), "{e}");
    let e = error(&["apply", "--watch", "--from-pod-logs", "--dry-run=server"]);
    assert!(e.starts_with("--watch writes as traffic changes"), "{e}");
    let e = error(&["apply", "--watch", "--from-pod-logs", "--prune-hosts"]);
    assert!(e.starts_with("--prune-hosts drops every host"), "{e}");
    let e = error(&["apply", "--watch", "--access-log", "-"]);
    assert!(e.contains("stdin (-) cannot be read again"), "{e}");
    let e = error(&[
        "apply",
        "--watch",
        "--from-pod-logs",
        "--interval",
        "1m",
        "--prune-after",
        "30s",
    ]);
    assert!(
        e.starts_with("--prune-after is shorter than --interval"),
        "{e}"
    );
    let e = error(&["apply", "--from-pod-logs", "--heartbeat", "1m"]);
    assert!(e.starts_with("--heartbeat is a --watch flag"), "{e}");
    let e = error(&[
        "apply",
        "--watch",
        "--from-pod-logs",
        "--heartbeat",
        "often",
    ]);
    assert!(e.starts_with("--heartbeat: invalid duration"), "{e}");
    let Request::Apply(a) =
        parse(&["apply", "--watch", "--from-pod-logs", "--heartbeat", "0"]).unwrap()
    else {
        panic!("an apply request")
    };
    assert_eq!(a.watch.unwrap().heartbeat, None, "0: never");
    let e = error(&["apply", "--watch", "--from-pod-logs", "--lease", "nope"]);
    assert!(
        e.starts_with("--lease \"nope\": expected NAMESPACE/NAME"),
        "{e}"
    );
    let Request::Apply(a) = parse(&[
        "apply",
        "--watch",
        "--from-pod-logs",
        "--prune-after",
        "1h",
        "--metrics-addr",
        ":9090",
        "--lease",
        "meshscope-system/watch",
    ])
    .unwrap() else {
        panic!("an apply request")
    };
    let w = a.watch.expect("a watch request");
    assert_eq!(w.interval, Duration::from_secs(30));
    assert_eq!(w.prune_after, Some(Duration::from_secs(3600)));
    assert_eq!(w.metrics_addr.unwrap().port(), 9090);
    assert_eq!(
        w.heartbeat,
        Some(Duration::from_secs(600)),
        "every 10m by default"
    );
    // --watch confirms on istiod, so the RBAC check includes istiod's.
    assert_eq!(a.wait.map(|w| w.limit), Some(Duration::from_secs(120)));
    assert_eq!(
        a.spec.mesh.purpose,
        Purpose::Watch {
            prune: false,
            istiod: Some("istio-system".into()),
            lease: Some(("meshscope-system".into(), "watch".into())),
        }
    );
}

/// A value a user could give for an argument named `value_name`.
fn plausible(value_name: &str) -> &'static str {
    match value_name {
        "NAMESPACE" | "ISTIO_NAMESPACE" => "shop",
        "SELECTOR" => "app=web",
        "CONTEXT" => "prod",
        "KUBECONFIG" => "/etc/kubeconfig",
        "PATH" => "mesh.yaml",
        "FILE" => "mesh-config.yaml",
        "VERSION" => "1.29",
        "DOMAIN" => "example.local",
        "URL" => "http://localhost:9090",
        "DURATION" | "TIMEOUT" => "5m",
        "N" => "100",
        "NAME" => "web",
        "HOST" => "shop/web.shop.svc.cluster.local",
        "ADDR" => ":9090",
        "NAMESPACE/NAME" => "meshscope-system/watch",
        "REVISION" => "canary",
        "CODE" => "MS0006",
        "CODE[=KIND/NS/NAME]" => "MS0006=Sidecar/shop/*",
        "IMAGE" => "registry.example/meshscope-webhook:1",
        "VALIDITY_DAYS" => "30",
        "TYPE[/NAME]" => "pod/web",
        "KIND/NAME" => "service/web",
        "TOKEN" => "secret-token",
        "USER" => "jane",
        "GROUP" => "developers",
        "UID" => "06f6ce97",
        other => panic!("no plausible value for {other}: add one"),
    }
}

fn value_name(a: &clap::Arg) -> String {
    a.get_value_names()
        .and_then(|v| v.first())
        .map_or_else(|| a.get_id().as_str().to_uppercase(), |v| v.to_string())
}

/// `--flag` or `--flag=VALUE` for each value worth trying: every
/// possible value of an enum, else one plausible value.
fn spellings(a: &clap::Arg) -> Vec<String> {
    let long = a.get_long().expect("every flag has a long name");
    if !a.get_action().takes_values() {
        return vec![format!("--{long}")];
    }
    let possible = a.get_possible_values();
    if possible.is_empty() {
        return vec![format!("--{long}={}", plausible(&value_name(a)))];
    }
    possible
        .iter()
        .map(|v| match v.get_name() {
            // `-o jsonpath=` takes a template after the `=`.
            "jsonpath=" => format!("--{long}=jsonpath={{.kind}}"),
            name => format!("--{long}={name}"),
        })
        .collect()
}

/// The flags a flag is documented to need: `--since` reads pod logs
/// or Prometheus, the watch-mode flags need `--watch` (and a source),
/// `--exports` a traffic source and `--force-exports` both.
fn companions(a: &clap::Arg) -> Vec<&'static str> {
    let watch = a.get_help_heading() == Some("Watch mode");
    match a.get_id().as_str() {
        "since" => vec!["--from-pod-logs"],
        "watch" => vec!["--from-pod-logs"],
        "exports" => vec!["--from-pod-logs"],
        "force_exports" => vec!["--exports", "--from-pod-logs"],
        "impersonate_groups" | "impersonate_uid" => vec!["--as=jane"],
        _ if watch => vec!["--watch", "--from-pod-logs"],
        _ => vec![],
    }
}

/// What the request layer makes of `argv`: the request and the style,
/// as text to compare, or its error.
fn outcome(argv: &[String]) -> Result<String> {
    let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("clap refuses {argv:?}: {e}"));
    Request::parse(cli.command).map(|r| format!("{r:?}"))
}

/// Each leaf (sub)command: its path of names, and the command.
fn leaves(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<(Vec<String>, clap::Command)>) {
    if !cmd.has_subcommands() {
        out.push((path, cmd.clone()));
        return;
    }
    for sub in cmd.get_subcommands() {
        let mut p = path.clone();
        p.push(sub.get_name().to_string());
        leaves(sub, p, out);
    }
}

/// The command line up to the flags: the names and the required
/// positionals, each with a plausible (or its first possible) value.
fn base(path: &[String], cmd: &clap::Command) -> Vec<String> {
    let mut argv = vec!["kubectl-meshscope".to_string()];
    argv.extend(path.iter().cloned());
    for p in cmd.get_positionals().filter(|p| p.is_required_set()) {
        argv.push(match p.get_possible_values().first() {
            Some(v) => v.get_name().to_string(),
            None => plausible(&value_name(p)).to_string(),
        });
    }
    argv
}

/// Not circular: the flags come from clap's tree (what `--help`
/// prints), the verdict from the request layer, which knows nothing
/// of help. A flag listed in a command's help must be taken there (no
/// refusal whatever its value, given the flags its help says it
/// needs) and must change the request (a flag the command ignores
/// would be listed for nothing).
#[test]
fn every_flag_a_commands_help_lists_is_taken_and_used_by_its_request() {
    use clap::CommandFactory;
    let mut all = Vec::new();
    leaves(&Cli::command(), Vec::new(), &mut all);
    assert!(all.len() >= 11, "{}", all.len());
    let mut checked = 0;
    let mut unused = Vec::new();
    for (path, mut cmd) in all {
        cmd.build();
        let base = base(&path, &cmd);
        for a in cmd.get_arguments() {
            let id = a.get_id().as_str();
            if a.is_positional() || a.is_hide_set() || id == "help" || id == "version" {
                continue;
            }
            let mut before = base.clone();
            before.extend(companions(a).iter().map(|c| c.to_string()));
            let without =
                outcome(&before).unwrap_or_else(|e| panic!("{before:?} is refused: {e:#}"));
            let mut changed = false;
            for flag in spellings(a) {
                let mut argv = before.clone();
                argv.push(flag.clone());
                let with = outcome(&argv).unwrap_or_else(|e| {
                    panic!("{path:?}: {flag} is in the help, yet refused: {e:#}")
                });
                changed |= with != without;
                checked += 1;
            }
            if !changed {
                unused.push(format!("{} --{id}", path.join(" ")));
            }
        }
    }
    assert!(
        unused.is_empty(),
        "in the help, yet changing nothing: {unused:#?}"
    );
    assert!(checked > 150, "{checked} flags checked");
}

#[test]
fn dry_run_takes_its_value_after_a_space_or_an_equals_sign_or_none() {
    for (args, want) in [
        (&["apply", "--dry-run", "server"][..], DryRun::Server),
        (&["apply", "--dry-run=server"], DryRun::Server),
        (&["apply", "--dry-run"], DryRun::Client),
        (&["apply", "--dry-run", "--diff"], DryRun::Client),
        (&["apply"], DryRun::None),
    ] {
        let Request::Apply(a) = parse(args).unwrap() else {
            panic!("an apply request")
        };
        assert_eq!(a.dry_run, want, "{args:?}");
    }
}

#[test]
fn prune_means_deleting_sidecars_in_every_command() {
    let e = error(&["recommend", "--prune"]);
    assert!(
        e.starts_with("recommend --prune is now --prune-hosts"),
        "{e}"
    );
    let Request::Recommend(r) = parse(&["recommend", "--prune-hosts"]).unwrap() else {
        panic!("a recommend request")
    };
    assert!(r.spec.prune_hosts);
}

/// `args` as the binary reads them: kubectl's global flags hoisted.
fn hoisted(args: &[&str]) -> Vec<String> {
    let line: Vec<String> = std::iter::once("kubectl-meshscope")
        .chain(args.iter().copied())
        .map(String::from)
        .collect();
    crate::hoist::hoist_words(&line)[1..].to_vec()
}

#[test]
fn kubectls_global_flags_before_the_command_are_taken_after_it() {
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &["-n", "shop", "audit", "-o", "json"],
            &["audit", "-n", "shop", "-o", "json"],
        ),
        (
            &[
                "--context=prod",
                "-s",
                "https://k:6443",
                "--insecure-skip-tls-verify",
                "verify",
                "pod/web",
            ],
            &[
                "verify",
                "--context=prod",
                "-s",
                "https://k:6443",
                "--insecure-skip-tls-verify",
                "pod/web",
            ],
        ),
        (
            &[
                "-nshop",
                "--as",
                "jane",
                "--as-group",
                "dev",
                "explain",
                "pod",
                "web",
            ],
            &[
                "explain",
                "-nshop",
                "--as",
                "jane",
                "--as-group",
                "dev",
                "pod",
                "web",
            ],
        ),
        // Nested commands: after the last name.
        (
            &["-n", "tools", "webhook", "manifests"],
            &["webhook", "manifests", "-n", "tools"],
        ),
        // Not kubectl's global flags, or no command: left as typed.
        (&["-A", "audit"], &["-A", "audit"]),
        (&["--help"], &["--help"]),
    ];
    for (typed, read) in cases {
        assert_eq!(hoisted(typed), read, "{typed:?}");
    }
    // Hoisted, the line means what it means written after the command.
    let argv = |a: &[&str]| {
        let line = hoisted(a);
        let cli = Cli::try_parse_from(std::iter::once("kubectl-meshscope".to_string()).chain(line))
            .expect("clap accepts the line");
        format!("{:?}", Request::parse(cli.command).unwrap())
    };
    assert_eq!(
        argv(&[
            "-n",
            "shop",
            "--request-timeout",
            "5s",
            "--token",
            "t",
            "audit"
        ]),
        argv(&[
            "audit",
            "-n",
            "shop",
            "--request-timeout",
            "5s",
            "--token",
            "t"
        ])
    );
}

#[test]
fn connection_flags_that_need_another_say_which() {
    assert_eq!(
        error(&["audit", "--as-group", "dev"]),
        "--as-group and --as-uid impersonate a user's groups and UID: give the user with --as too"
    );
    assert!(error(&[
        "audit",
        "--insecure-skip-tls-verify",
        "--certificate-authority",
        "ca.crt"
    ])
    .starts_with("--insecure-skip-tls-verify skips the check"));
    let r = parse(&[
        "audit",
        "--as",
        "jane",
        "--as-group",
        "a",
        "--as-group",
        "b",
        "-s",
        "k:6443",
    ])
    .unwrap();
    let Request::Audit(a) = r else {
        panic!("audit")
    };
    assert_eq!(a.mesh.connect.impersonate.as_deref(), Some("jane"));
    assert_eq!(a.mesh.connect.impersonate_groups, ["a", "b"]);
    assert_eq!(a.mesh.connect.server.as_deref(), Some("k:6443"));
}

#[test]
fn jsonpath_templates_are_checked_up_front_and_json_is_printed_through_them() {
    let cli =
        Cli::try_parse_from(["kubectl-meshscope", "codes", "-o", "jsonpath={[*].code}"]).unwrap();
    let (r, style) = Request::parse(cli.command).unwrap();
    assert!(
        matches!(
            r,
            Request::Codes(CodesRequest {
                output: ReportOutput::Json,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(style.jsonpath.is_some());
    assert_eq!(
        error(&["audit", "-o", "jsonpath={range .findings[*]}{.code}"]),
        "-o jsonpath={range .findings[*]}{.code}: {range} without {end}"
    );
}

// === --exports ===

fn exports_of(args: &[&str]) -> Result<Option<crate::request::ExportsSpec>> {
    Ok(match parse(args)? {
        Request::Recommend(r) => r.spec.exports.map(|e| *e),
        Request::Apply(a) => a.spec.exports.map(|e| *e),
        Request::Diff(d) => d.spec.exports.map(|e| *e),
        other => panic!("not a recommend request: {other:?}"),
    })
}

#[test]
fn exports_reads_every_namespace_but_recommends_for_the_one_asked() {
    for cmd in ["recommend", "apply", "diff"] {
        let e = exports_of(&[cmd, "--exports", "-n", "shop", "--from-pod-logs"])
            .unwrap()
            .unwrap();
        assert_eq!(e.namespace.as_deref(), Some("shop"), "{cmd}");
        assert!(!e.all_namespaces && !e.force, "{cmd}");
        let Request::Recommend(r) = parse(&[
            "recommend",
            "--exports",
            "-n",
            "shop",
            "--access-log",
            "x.log",
        ])
        .unwrap() else {
            panic!("a recommend request")
        };
        assert!(r.spec.mesh.all_namespaces && r.spec.mesh.gateways == GatewayRead::Needed);
    }
    let e = exports_of(&[
        "recommend",
        "--exports",
        "-A",
        "--force-exports",
        "--access-log",
        "x",
    ])
    .unwrap()
    .unwrap();
    assert!(e.all_namespaces && e.force && e.namespace.is_none());
    assert_eq!(
        exports_of(&["recommend", "--access-log", "x"]).unwrap(),
        None
    );
}

#[test]
fn exports_needs_a_traffic_source() {
    let e = exports_of(&["recommend", "--exports", "-n", "shop"]).unwrap_err();
    assert!(
        e.to_string().starts_with(
            "--exports keeps the namespaces observed calling each object: give a traffic source"
        ),
        "{e}"
    );
}

#[test]
fn exports_refuses_the_flags_that_shape_sidecars() {
    for (extra, flag) in [
        (&["--workload", "web"][..], "--workload"),
        (&["--include", "a/b.c"], "--include"),
        (&["--allow-idle"], "--allow-idle"),
        (&["--per-namespace"], "--per-namespace"),
        (&["--from-manifest-hints"], "--from-manifest-hints"),
    ] {
        let mut args = vec!["recommend", "--exports", "--from-pod-logs"];
        args.extend_from_slice(extra);
        let e = exports_of(&args).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("{flag} shapes Sidecars; --exports recommends exportTo and does not take it")
        );
    }
    for (extra, flag) in [
        (&["--prune"][..], "--prune"),
        (&["--watch"], "--watch"),
        (&["--diff"], "--diff"),
    ] {
        let mut args = vec!["apply", "--exports", "--from-pod-logs"];
        args.extend_from_slice(extra);
        let e = exports_of(&args).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{flag} is for Sidecars; apply --exports writes exportTo only"
            )),
            "{e}"
        );
    }
    let e = exports_of(&["diff", "--exports", "--prune", "--from-pod-logs"]).unwrap_err();
    assert!(e.to_string().starts_with("--prune deletes Sidecars"), "{e}");
}

#[test]
fn force_exports_without_exports_is_a_usage_error() {
    assert!(Cli::try_parse_from(["kubectl-meshscope", "recommend", "--force-exports"]).is_err());
}

#[test]
fn apply_exports_checks_get_and_patch_on_the_four_kinds_of_the_namespace() {
    let Request::Apply(a) =
        parse(&["apply", "--exports", "-n", "shop", "--from-pod-logs"]).unwrap()
    else {
        panic!("an apply request")
    };
    assert_eq!(
        a.spec.mesh.purpose,
        Purpose::Exports {
            namespace: Some("shop".into()),
            all: false,
            istiod: None,
        }
    );
    // Without -n: the context's namespace, once the kubeconfig is read.
    let Request::Apply(a) = parse(&["apply", "--exports", "--from-pod-logs"]).unwrap() else {
        panic!("an apply request")
    };
    assert_eq!(
        a.spec.mesh.purpose.in_context("home"),
        Purpose::Exports {
            namespace: Some("home".into()),
            all: false,
            istiod: None,
        }
    );
    let Request::Apply(a) = parse(&["apply", "--exports", "-A", "--from-pod-logs"]).unwrap() else {
        panic!("an apply request")
    };
    let all = Purpose::Exports {
        namespace: None,
        all: true,
        istiod: None,
    };
    assert_eq!(a.spec.mesh.purpose.in_context("home"), all);
    let Request::Apply(a) = parse(&["apply", "--exports", "--dry-run", "--from-pod-logs"]).unwrap()
    else {
        panic!("an apply request")
    };
    assert_eq!(a.spec.mesh.purpose, Purpose::Read);
    // --wait port-forwards to istiod: checked with the rest.
    let Request::Apply(a) = parse(&[
        "apply",
        "--exports",
        "-n",
        "shop",
        "--from-pod-logs",
        "--wait",
    ])
    .unwrap() else {
        panic!("an apply request")
    };
    assert_eq!(
        a.spec.mesh.purpose,
        Purpose::Exports {
            namespace: Some("shop".into()),
            all: false,
            istiod: Some("istio-system".into()),
        }
    );
}

#[test]
fn audit_reads_gateways_if_allowed_for_gateway_readiness_and_the_discovery_advice() {
    let gateways = |args: &[&str]| match parse(args).unwrap() {
        Request::Audit(a) => a.mesh.gateways,
        other => panic!("not an audit request: {other:?}"),
    };
    assert_eq!(gateways(&["audit"]), GatewayRead::IfAllowed);
    let Request::Impact(i) = parse(&["impact", "service/reviews", "-n", "bookinfo"]).unwrap()
    else {
        panic!("an impact request")
    };
    assert_eq!(i.mesh.gateways, GatewayRead::IfAllowed);
    assert_eq!(
        gateways(&["audit", "--access-log", "x"]),
        GatewayRead::IfAllowed
    );
    assert_eq!(
        gateways(&["audit", "--from-pod-logs"]),
        GatewayRead::IfAllowed
    );
    let Request::Recommend(r) = parse(&["recommend", "--exports", "--from-pod-logs"]).unwrap()
    else {
        panic!("a recommend request")
    };
    assert_eq!(r.spec.mesh.gateways, GatewayRead::Needed);
}
