//! Shell completion through the real kubectl: `kubectl __complete meshscope
//! WORDS...` finds `kubectl-meshscope` and `kubectl_complete-meshscope` on
//! PATH and relays the completer's answer, which names objects of the real
//! test control plane (tests/cluster/up).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use clap::{CommandFactory, ValueEnum};
use kubectl_meshscope::args::{Cli, DryRun, RecommendOutput, ReportOutput};
use meshscope_e2e::cluster::{bin_dir, plugin_binary, repo_root, Cluster};
use meshscope_shared::admission::Policy;
use meshscope_shared::audit::CODES;

const COMPLETER: &str = "kubectl_complete-meshscope";

/// The directory holding `kubectl-meshscope` and `kubectl_complete-meshscope`,
/// built (or found up to date) for this test binary's profile.
fn plugin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = bin_dir();
        let target = dir.parent().expect("target/<profile> has a parent");
        let profile = match dir.file_name().and_then(|p| p.to_str()) {
            Some("debug") | None => "dev".to_string(),
            Some(p) => p.to_string(),
        };
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "-p", "kubectl-meshscope", "--bins"])
            .args(["--profile", &profile])
            .env("CARGO_TARGET_DIR", target)
            .current_dir(repo_root())
            .status()
            .expect("cargo runs");
        assert!(status.success(), "cannot build the plugin's binaries");
        plugin_binary();
        assert!(dir.join(COMPLETER).exists(), "{COMPLETER} was not built");
        dir
    })
}

/// What `kubectl __complete` printed.
#[derive(Debug)]
struct Answer {
    /// Candidate lines, `value` or `value\tdescription`.
    lines: Vec<String>,
    directive: u32,
    stderr: String,
}

impl Answer {
    fn values(&self) -> Vec<&str> {
        self.lines
            .iter()
            .map(|l| l.split('\t').next().unwrap_or(""))
            .collect()
    }

    fn has(&self, value: &str) -> bool {
        self.values().contains(&value)
    }

    fn help(&self, value: &str) -> Option<&str> {
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix(value)?.strip_prefix('\t'))
    }
}

/// `kubectl __complete meshscope WORDS...` with the plugin's binaries first
/// on PATH and KUBECONFIG set to `kubeconfig` (unset when `None`).
fn kubectl_complete(kubeconfig: Option<&Path>, words: &[&str]) -> Answer {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![plugin_dir().to_path_buf()];
    dirs.extend(std::env::split_paths(&path));
    let mut cmd = Command::new("kubectl");
    cmd.arg("__complete")
        .arg("meshscope")
        .args(words)
        .env("PATH", std::env::join_paths(dirs).expect("PATH joins"))
        .env_remove("KUBECTL_COMPLETION_DESCRIPTIONS");
    match kubeconfig {
        Some(k) => cmd.env("KUBECONFIG", k),
        None => cmd.env_remove("KUBECONFIG"),
    };
    let o = cmd.output().expect("kubectl runs");
    let stdout = String::from_utf8(o.stdout).expect("utf-8");
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "kubectl __complete failed: {stderr}");
    assert!(
        stderr.contains(COMPLETER),
        "kubectl did not call {COMPLETER}: {stderr}"
    );
    let mut lines: Vec<String> = stdout.lines().map(String::from).collect();
    let last = lines.pop().unwrap_or_default();
    let directive = last
        .strip_prefix(':')
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no :<directive> last line in {stdout:?}"));
    Answer {
        lines,
        directive,
        stderr,
    }
}

fn complete(c: &Cluster, words: &[&str]) -> Answer {
    kubectl_complete(Some(&c.kubeconfig), words)
}

const NO_SPACE: u32 = 2;
const NO_FILE_COMP: u32 = 4;

fn variants<T: ValueEnum>() -> Vec<String> {
    T::value_variants()
        .iter()
        .filter_map(|v| v.to_possible_value())
        .map(|v| v.get_name().to_string())
        .collect()
}

/// `-o`'s completions: `T`'s formats, then `jsonpath=`.
fn formats<T: ValueEnum>() -> Vec<String> {
    let mut v = variants::<T>();
    v.push("jsonpath=".into());
    v
}

/// A namespace holding a bare pod, a Deployment, a StatefulSet, a Service
/// and Istio routing objects.
fn objects(c: &Cluster, prefix: &str) -> String {
    let ns = c.namespace(prefix, &[]);
    let template = |app: &str| {
        format!(
            "  selector:\n    matchLabels:\n      app: {app}\n  template:\n    metadata:\n      labels:\n        app: {app}\n    spec:\n      containers:\n      - name: app\n        image: app\n"
        )
    };
    c.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: solo\n  namespace: {ns}\nspec:\n  containers:\n  - name: app\n    image: app\n\
         ---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  replicas: 0\n{web}\
         ---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\n  namespace: {ns}\nspec:\n  replicas: 0\n  serviceName: db\n{db}\
         ---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  selector:\n    app: web\n  ports:\n  - port: 80\n\
         ---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: web-routes\n  namespace: {ns}\nspec:\n  hosts: [web]\n  http:\n  - route:\n    - destination:\n        host: web\n\
         ---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: web-policy\n  namespace: {ns}\nspec:\n  host: web\n",
        web = template("web"),
        db = template("db"),
    ));
    ns
}

#[test]
fn subcommands_complete_with_their_descriptions() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let a = complete(c, &[""]);
    for sub in [
        "recommend",
        "apply",
        "audit",
        "explain",
        "impact",
        "verify",
        "codes",
    ] {
        assert!(a.has(sub), "{sub} missing from {a:?}");
    }
    assert!(a.help("audit").unwrap().starts_with("Audit namespaces"));
    assert_eq!(a.directive, NO_FILE_COMP);
    assert_eq!(complete(c, &["ex"]).values(), ["explain"]);
}

#[test]
fn flags_of_the_current_subcommand_complete_long_and_short() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let a = complete(c, &["audit", "-"]);
    for flag in [
        "--output",
        "-o",
        "--namespace",
        "-n",
        "-A",
        "--fail-on",
        "--kubeconfig",
    ] {
        assert!(a.has(flag), "{flag} missing from {a:?}");
    }
    assert!(!a.has("--prune"), "recommend's --prune offered for audit");
    let fail_on = Cli::command()
        .find_subcommand("audit")
        .and_then(|s| s.get_arguments().find(|a| a.get_long() == Some("fail-on")))
        .and_then(|a| a.get_help())
        .map(|h| h.to_string())
        .expect("audit --fail-on has help");
    assert_eq!(a.help("--fail-on"), Some(fail_on.as_str()));
    assert_eq!(a.directive, NO_FILE_COMP);
    let a = complete(c, &["recommend", "--pr"]);
    assert_eq!(a.values(), ["--prometheus", "--prune-hosts"]);
    let a = complete(c, &["audit", "-o", "json", "--o"]);
    assert!(!a.has("--output"), "a flag given once is offered again");
}

#[test]
fn enum_flag_values_complete() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let a = complete(c, &["audit", "-o", ""]);
    assert_eq!(a.values(), formats::<ReportOutput>());
    assert_eq!(a.directive, NO_FILE_COMP);
    let a = complete(c, &["recommend", "--output="]);
    assert_eq!(a.values(), formats::<RecommendOutput>());
    assert_eq!(
        complete(c, &["audit", "--fail-on", "w"]).values(),
        ["warning"]
    );
    assert_eq!(complete(c, &["apply", "--dry-run=s"]).values(), ["server"]);
    // --dry-run's value may also follow a space (a flag there is not it).
    assert_eq!(
        complete(c, &["apply", "--dry-run", ""]).values(),
        variants::<DryRun>()
    );
    assert!(complete(c, &["apply", "--dry-run", "--di"]).has("--diff"));
    // --default-policy's values, with what each does.
    let a = complete(c, &["webhook", "manifests", "--default-policy", ""]);
    let policies: Vec<&str> = Policy::ALL.iter().map(|p| p.as_str()).collect();
    assert_eq!(a.values(), policies);
    assert_eq!(a.help("enforce"), Some(Policy::Enforce.summary()));
    // Path flags leave the shell to complete file names.
    let a = complete(c, &["audit", "--manifests", ""]);
    assert!(a.lines.is_empty());
    assert_eq!(a.directive, 0);
}

#[test]
fn namespaces_complete_from_the_cluster() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("cmpl-ns", &[]);
    let prefix = &ns[..ns.len() - 1];
    let a = complete(c, &["audit", "-n", prefix]);
    assert!(a.has(&ns), "{ns} missing from {a:?}");
    assert!(a.values().iter().all(|v| v.starts_with(prefix)));
    assert_eq!(a.directive, NO_FILE_COMP);
    assert!(complete(c, &["verify", "--istio-namespace", "istio-"]).has("istio-system"));
    assert!(complete(c, &["audit", "--namespace", ""]).has("kube-system"));
}

#[test]
fn pod_names_complete_for_explain_and_verify_in_the_typed_namespace() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = objects(c, "cmpl-pods");
    let other = c.namespace("cmpl-other", &[]);
    c.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: elsewhere\n  namespace: {other}\nspec:\n  containers:\n  - name: app\n    image: app\n"
    ));
    let a = complete(c, &["explain", "-n", &ns, "pod", ""]);
    assert_eq!(a.values(), ["solo"]);
    assert_eq!(a.directive, NO_FILE_COMP);
    assert_eq!(
        complete(c, &["explain", "-n", &other, "pod", ""]).values(),
        ["elsewhere"]
    );
    let a = complete(c, &["verify", "-n", &ns, "pod/"]);
    assert_eq!(a.values(), ["pod/solo"]);
    assert_eq!(
        complete(c, &["verify", "--namespace", &ns, "po/s"]).values(),
        ["po/solo"]
    );
    // The completer honours --kubeconfig without KUBECONFIG.
    let kubeconfig = c.kubeconfig.to_str().unwrap();
    let a = kubectl_complete(
        None,
        &["explain", "--kubeconfig", kubeconfig, "-n", &ns, "po", "s"],
    );
    assert_eq!(a.values(), ["solo"]);
}

#[test]
fn workload_and_impact_targets_complete_as_kind_slash_name() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = objects(c, "cmpl-targets");
    let a = complete(c, &["verify", "-n", &ns, ""]);
    assert_eq!(
        a.values(),
        ["pod/", "deployment/", "statefulset/", "daemonset/"]
    );
    assert_eq!(a.directive, NO_SPACE | NO_FILE_COMP);
    assert_eq!(
        complete(c, &["verify", "-n", &ns, "deployment/"]).values(),
        ["deployment/web"]
    );
    assert_eq!(
        complete(c, &["verify", "-n", &ns, "sts/d"]).values(),
        ["sts/db"]
    );
    assert_eq!(
        complete(c, &["explain", "-n", &ns, "workload", "statefulset/"]).values(),
        ["statefulset/db"]
    );
    assert_eq!(
        complete(c, &["explain", "-n", &ns, "deployment", ""]).values(),
        ["web"]
    );
    let a = complete(c, &["impact", "-n", &ns, ""]);
    assert_eq!(
        a.values(),
        [
            "service/",
            "serviceentry/",
            "virtualservice/",
            "destinationrule/",
            "httproute/",
            "grpcroute/",
            "tcproute/",
            "tlsroute/",
            "gateway/"
        ]
    );
    assert_eq!(
        complete(c, &["impact", "-n", &ns, "service/"]).values(),
        ["service/web"]
    );
    assert_eq!(
        complete(c, &["impact", "-n", &ns, "vs/"]).values(),
        ["vs/web-routes"]
    );
    assert_eq!(
        complete(c, &["impact", "-n", &ns, "destinationrule/w"]).values(),
        ["destinationrule/web-policy"]
    );
    assert!(complete(c, &["impact", "-n", &ns, "serviceentry/"])
        .values()
        .is_empty());
}

#[test]
fn the_context_flag_chooses_the_cluster_and_its_default_namespace() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = objects(c, "cmpl-ctx");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::copy(&c.kubeconfig, &kubeconfig).unwrap();
    let k = kubeconfig.to_str().unwrap();
    let field = |path: &str| {
        c.kubectl_ok(
            &[
                "config",
                "view",
                "--kubeconfig",
                k,
                "-o",
                &format!("jsonpath={path}"),
            ],
            None,
        )
    };
    let (cluster, user) = (
        field("{.contexts[0].context.cluster}"),
        field("{.contexts[0].context.user}"),
    );
    c.kubectl_ok(
        &[
            "config",
            "set-context",
            "cmpl",
            "--kubeconfig",
            k,
            "--cluster",
            &cluster,
            "--user",
            &user,
            "--namespace",
            &ns,
        ],
        None,
    );
    let a = kubectl_complete(None, &["audit", "--kubeconfig", k, "--context", ""]);
    assert!(a.has("cmpl") && a.values().len() == 2, "{a:?}");
    let a = kubectl_complete(
        None,
        &["explain", "--kubeconfig", k, "--context", "cmpl", "pod", ""],
    );
    assert_eq!(a.values(), ["solo"]);
    let a = kubectl_complete(
        None,
        &["verify", "--context=cmpl", "--kubeconfig", k, "deploy/"],
    );
    assert_eq!(a.values(), ["deploy/web"]);
}

#[test]
fn finding_codes_complete_with_their_titles() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let a = complete(c, &["codes", ""]);
    let codes: Vec<&str> = CODES.iter().map(|d| d.code.as_str()).collect();
    assert_eq!(a.values(), codes);
    assert_eq!(a.help(CODES[0].code.as_str()), Some(CODES[0].title));
    assert_eq!(complete(c, &["codes", "MS0001"]).values(), ["MS0001"]);
}

#[test]
fn audit_code_and_suppress_complete_finding_codes_with_their_titles() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let codes: Vec<&str> = CODES.iter().map(|d| d.code.as_str()).collect();
    for flag in ["--code", "--suppress"] {
        let a = complete(c, &["audit", flag, ""]);
        assert_eq!(a.values(), codes, "{flag}");
        assert_eq!(
            a.help(CODES[0].code.as_str()),
            Some(CODES[0].title),
            "{flag}"
        );
        assert_eq!(a.directive, NO_FILE_COMP);
    }
    // A list completes its next code, without those it holds.
    let first = CODES[0].code;
    let a = complete(c, &["audit", "--code", &format!("{first},")]);
    assert_eq!(a.values().len(), CODES.len() - 1);
    assert!(a
        .values()
        .iter()
        .all(|v| v.starts_with(&format!("{first},"))));
    assert!(!a.has(&format!("{first},{first}")));
}

#[test]
fn workload_completes_as_kind_slash_name_from_the_cluster() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = objects(c, "cmpl-workload");
    let a = complete(c, &["recommend", "-n", &ns, "--workload", ""]);
    assert_eq!(a.values(), ["deployment/", "statefulset/", "daemonset/"]);
    assert_eq!(a.directive, NO_SPACE | NO_FILE_COMP);
    for cmd in ["recommend", "apply", "diff"] {
        assert_eq!(
            complete(c, &[cmd, "-n", &ns, "--workload", "deployment/"]).values(),
            ["deployment/web"],
            "{cmd}"
        );
    }
    assert_eq!(
        complete(c, &["apply", "-n", &ns, "--workload=sts/"]).values(),
        ["sts/db"]
    );
}

#[test]
fn an_unreachable_cluster_yields_no_candidates_and_nothing_but_the_directive() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    // A server that accepts connections and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::copy(&c.kubeconfig, &kubeconfig).unwrap();
    let k = kubeconfig.to_str().unwrap();
    let cluster = c.kubectl_ok(
        &[
            "config",
            "view",
            "--kubeconfig",
            k,
            "-o",
            "jsonpath={.contexts[0].context.cluster}",
        ],
        None,
    );
    let server = format!("https://{}", silent.local_addr().unwrap());
    c.kubectl_ok(
        &[
            "config",
            "set-cluster",
            &cluster,
            "--kubeconfig",
            k,
            "--server",
            &server,
        ],
        None,
    );
    // The completer gives up on its own, long before --request-timeout's 30s.
    let completer = plugin_dir().join(COMPLETER);
    let started = Instant::now();
    let o = Command::new(completer)
        .args(["audit", "-n", ""])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(8),
        "the completer waited {waited:?} for a silent server"
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), ":4\n");
    let a = kubectl_complete(Some(&kubeconfig), &["audit", "-n", ""]);
    assert!(a.lines.is_empty(), "{a:?}");
    assert_eq!(a.directive, NO_FILE_COMP);
    assert!(a.stderr.contains("meshscope completion:"), "{}", a.stderr);
    // A kubeconfig that does not exist: no candidates either.
    let missing = dir.path().join("missing");
    let a = kubectl_complete(
        None,
        &["verify", "--kubeconfig", missing.to_str().unwrap(), "pod/"],
    );
    assert!(a.lines.is_empty(), "{a:?}");
    // Static candidates do not need the cluster.
    assert_eq!(
        kubectl_complete(Some(&kubeconfig), &["codes", "MS0001"]).values(),
        ["MS0001"]
    );
    drop(silent);
}

#[test]
fn completion_scripts_still_generate_for_the_plugin_binary() {
    for shell in ["bash", "zsh", "fish"] {
        let o = Command::new(plugin_dir().join("kubectl-meshscope"))
            .args(["completion", shell])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "completion {shell}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let script = String::from_utf8(o.stdout).unwrap();
        assert!(
            script.contains("kubectl-meshscope"),
            "{shell} script does not name the binary"
        );
        assert!(
            script.contains("recommend") && script.contains("fail-on"),
            "{shell} script lacks the commands"
        );
    }
}
