use std::cell::RefCell;

use clap::ValueEnum;

use super::*;
use crate::args::ReportOutput;

/// Answers from fixed names and records what it was asked.
#[derive(Default)]
struct Fake {
    asked: RefCell<Vec<(Option<Kind>, ClusterFlags)>>,
    fail: bool,
}

impl Fake {
    fn answer(&self, kind: Option<Kind>, cluster: &ClusterFlags) -> anyhow::Result<Vec<String>> {
        self.asked.borrow_mut().push((kind, cluster.clone()));
        if self.fail {
            anyhow::bail!("cannot reach the API server");
        }
        let ns = cluster.namespace.as_deref().unwrap_or("default");
        Ok(match kind {
            None => vec!["shop".into(), "default".into(), "istio-system".into()],
            Some(Kind::Pod) => vec![format!("web-1-{ns}"), format!("db-0-{ns}")],
            Some(Kind::Deployment) => vec!["web".into()],
            Some(Kind::StatefulSet) => vec!["db".into()],
            Some(Kind::Service) => vec!["web".into(), "db".into()],
            Some(_) => vec![],
        })
    }
}

impl Lookup for Fake {
    fn namespaces(&self, cluster: &ClusterFlags) -> anyhow::Result<Vec<String>> {
        self.answer(None, cluster)
    }
    fn names(&self, cluster: &ClusterFlags, kind: Kind) -> anyhow::Result<Vec<String>> {
        self.answer(Some(kind), cluster)
    }
    fn contexts(&self, _: &ClusterFlags) -> anyhow::Result<Vec<String>> {
        Ok(vec!["prod".into(), "dev".into()])
    }
}

fn words(line: &str) -> Vec<String> {
    let mut w: Vec<String> = line.split_whitespace().map(String::from).collect();
    if line.ends_with(' ') || line.is_empty() {
        w.push(String::new());
    }
    w
}

fn run(line: &str) -> Completions {
    complete(&words(line), &Fake::default())
}

#[test]
fn subcommands_come_from_the_clap_definition() {
    let c = run("");
    let mut expected: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    expected.push("help".into());
    assert_eq!(c.values(), expected);
    assert_eq!(c.directive, Directive::NO_FILE_COMP);
    let audit = &c.candidates[c.values().iter().position(|v| *v == "audit").unwrap()];
    assert!(audit
        .help
        .as_deref()
        .unwrap()
        .starts_with("Audit namespaces"));
    assert_eq!(run("rec").values(), ["recommend"]);
    assert_eq!(run("re").values(), ["recommend", "report"]);
}

#[test]
fn flags_before_the_command_complete_as_after_it() {
    assert_eq!(run("-n shop audit -o j").values(), ["json", "jsonpath="]);
    let fake = Fake::default();
    complete(&words("-n shop --context prod explain pod "), &fake);
    let asked = fake.asked.borrow();
    let (_, cluster) = asked.last().expect("the cluster is asked");
    assert_eq!(cluster.namespace.as_deref(), Some("shop"));
    assert_eq!(cluster.context.as_deref(), Some("prod"));
}

#[test]
fn flags_already_given_are_not_offered_again_unless_repeatable() {
    let c = run("audit -o json --");
    assert!(!c.values().contains(&"--output"));
    assert!(c.values().contains(&"--fail-on"));
    let c = run("audit --manifests a.yaml --");
    assert!(c.values().contains(&"--manifests"), "--manifests repeats");
    let c = run("audit -");
    assert!(c.values().contains(&"-o") && c.values().contains(&"-n"));
}

#[test]
fn enum_values_complete_after_a_space_an_equals_sign_or_glued_to_a_short_flag() {
    let report: Vec<String> = ReportOutput::value_variants()
        .iter()
        .filter_map(|v| v.to_possible_value())
        .map(|v| v.get_name().to_string())
        .chain(["jsonpath=".to_string()])
        .collect();
    assert!(report.len() >= 4);
    assert_eq!(run("audit -o ").values(), report);
    assert_eq!(run("audit --output=j").values(), ["json", "jsonpath="]);
    assert_eq!(run("audit --output=w").values(), ["wide"]);
    assert_eq!(run("audit --fail-on w").values(), ["warning"]);
    assert_eq!(run("apply --dry-run=s").values(), ["server"]);
    // `--dry-run`'s value may follow a space; a flag there is not it.
    assert_eq!(
        run("apply --dry-run ").values(),
        ["none", "server", "client"]
    );
    assert_eq!(run("apply --dry-run s").values(), ["server"]);
    assert!(run("apply --dry-run --d").values().contains(&"--diff"));
    assert!(run("apply --dry-run --diff -")
        .values()
        .contains(&"--prune"));
    // `--wait` takes its value only after `=`: the next word is not it.
    assert!(run("apply --wait ").candidates.is_empty());
    assert_eq!(
        run("webhook manifests --default-policy ").values(),
        ["enforce", "warn", "off"]
    );
    // A value glued to a short flag is consumed with it.
    assert!(!run("audit -ojson --").values().contains(&"--output"));
    assert!(run("audit -ojson --").values().contains(&"--fail-on"));
    assert_eq!(
        run("completion ").values(),
        ["bash", "elvish", "fish", "powershell", "zsh"]
    );
}

#[test]
fn path_flags_fall_back_to_file_names() {
    let c = run("audit --manifests ");
    assert!(c.candidates.is_empty());
    assert_eq!(c.directive, Directive::DEFAULT);
    assert_eq!(run("audit --kubeconfig ").directive, Directive::DEFAULT);
}

#[test]
fn namespaces_and_contexts_complete_with_the_typed_cluster_flags() {
    let fake = Fake::default();
    let c = complete(&words("audit --kubeconfig /k --context=prod -n s"), &fake);
    assert_eq!(c.values(), ["shop"]);
    let asked = fake.asked.borrow();
    assert_eq!(
        asked[0].1,
        ClusterFlags {
            kubeconfig: Some("/k".into()),
            context: Some("prod".into()),
            namespace: None,
            connection: Default::default(),
        }
    );
    assert_eq!(run("verify --istio-namespace i").values(), ["istio-system"]);
    assert_eq!(run("audit --context ").values(), ["dev", "prod"]);
}

#[test]
fn explain_completes_the_type_then_names_in_the_typed_namespace() {
    assert_eq!(
        run("explain ").values(),
        ["pod", "workload", "deployment", "statefulset", "daemonset"]
    );
    assert_eq!(
        run("explain -n shop pod ").values(),
        ["db-0-shop", "web-1-shop"]
    );
    assert_eq!(run("explain po w -n shop").values(), ["shop"]);
    assert_eq!(run("explain -nshop po w").values(), ["web-1-shop"]);
    assert_eq!(run("explain deploy ").values(), ["web"]);
    assert_eq!(
        run("explain workload deployment/").values(),
        ["deployment/web"]
    );
}

#[test]
fn targets_offer_kinds_without_a_space_then_kind_slash_name() {
    let c = run("verify ");
    assert_eq!(
        c.values(),
        ["pod/", "deployment/", "statefulset/", "daemonset/"]
    );
    assert_eq!(c.directive, Directive(6));
    assert_eq!(run("verify pod/w").values(), ["pod/web-1-default"]);
    assert_eq!(run("verify sts/").values(), ["sts/db"]);
    assert_eq!(
        run("impact ").values(),
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
    assert_eq!(run("impact svc/").values(), ["svc/db", "svc/web"]);
    // impact does not take workloads.
    assert!(run("impact deployment/").candidates.is_empty());
}

#[test]
fn codes_complete_with_their_titles() {
    let c = run("codes MS000");
    let expected: Vec<&str> = CODES
        .iter()
        .map(|d| d.code.as_str())
        .filter(|c| c.starts_with("MS000"))
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(c.values(), expected);
    assert_eq!(c.candidates[0].help.as_deref(), Some(CODES[0].title));
}

#[test]
fn audit_code_and_suppress_complete_codes_after_the_last_comma() {
    let all: Vec<&str> = CODES.iter().map(|d| d.code.as_str()).collect();
    for line in ["audit --code ", "audit --suppress ", "audit --code="] {
        let c = run(line);
        assert_eq!(c.values(), all, "{line}");
        assert_eq!(c.candidates[0].help.as_deref(), Some(CODES[0].title));
    }
    let c = run(&format!("audit --code {},", CODES[0].code));
    assert_eq!(c.values().len(), CODES.len() - 1);
    assert_eq!(
        c.values()[0],
        format!("{},{}", CODES[0].code, CODES[1].code)
    );
    // After `=` comes an object, which is not completed.
    assert!(run("audit --suppress MS0006=Sid").candidates.is_empty());
}

#[test]
fn workload_completes_as_kind_slash_name() {
    assert_eq!(
        run("recommend --workload ").values(),
        ["deployment/", "statefulset/", "daemonset/"]
    );
    assert_eq!(
        run("apply -n shop --workload deploy/").values(),
        ["deploy/web"]
    );
    assert_eq!(run("diff --workload=sts/").values(), ["sts/db"]);
}

#[test]
fn a_cluster_error_yields_no_candidates_and_a_note_for_stderr() {
    let fake = Fake {
        fail: true,
        ..Fake::default()
    };
    let c = complete(&words("audit -n "), &fake);
    assert!(c.candidates.is_empty());
    assert_eq!(c.directive, Directive::NO_FILE_COMP);
    assert_eq!(c.note.as_deref(), Some("cannot reach the API server"));
    let mut out = Vec::new();
    c.write(&mut out).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), ":4\n");
}

#[test]
fn the_answer_is_cobras_format() {
    let mut out = Vec::new();
    run("codes MS0001").write(&mut out).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!("MS0001\t{}\n:4\n", CODES[0].title)
    );
}
