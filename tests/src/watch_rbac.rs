//! What watch mode (`kubectl meshscope apply --watch`) asks of the API
//! server (`plugin/src/live/permissions.rs`, `read.rs`), against what an
//! install grants its ServiceAccount: `deploy/watch/` (tests/tests/e2e/lease.rs)
//! and the Helm chart (tests/tests/helm.rs) are both held to exactly it.

use kubectl_meshscope::live::{everything_needed, Need, Purpose};
use serde_json::Value;

/// The one object of `kind` in `docs`.
pub fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "exactly one {kind}");
    found[0]
}

/// A YAML/JSON list of strings (empty when absent).
pub fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// The watch Deployment's arguments, and the watch Purpose and pod-log
/// reading they give (`deployment`: the Deployment object).
pub fn deployment_purpose(deployment: &Value) -> (Vec<String>, Purpose, bool, bool) {
    use clap::Parser;
    let args = strs(&deployment["spec"]["template"]["spec"]["containers"][0]["args"]);
    // The arguments as the binary parses them: the request says what it needs.
    let cli = kubectl_meshscope::args::Cli::try_parse_from(
        std::iter::once("kubectl-meshscope".to_string()).chain(args.iter().cloned()),
    )
    .expect("the Deployment's arguments parse");
    let (request, _) = kubectl_meshscope::request::Request::parse(cli.command)
        .expect("the Deployment's arguments make a valid request");
    let kubectl_meshscope::request::Request::Apply(a) = request else {
        panic!("the Deployment runs apply: {args:?}")
    };
    assert!(
        a.watch.is_some(),
        "the Deployment runs apply --watch: {args:?}"
    );
    let m = &a.spec.mesh;
    (
        args.clone(),
        m.purpose.clone(),
        m.reads_pod_logs(),
        m.manifest_hints,
    )
}

/// One permission as RBAC grants or a command needs it: verb, group,
/// resource, namespace (`None`: all), object (`None`: all).
pub type Grant = (String, String, String, Option<String>, Option<String>);

pub fn need_grant(n: &Need) -> Grant {
    (
        n.verb.into(),
        n.group.into(),
        n.resource.into(),
        n.namespace.clone(),
        n.name.clone(),
    )
}

/// The rules of one Role or ClusterRole, one grant per verb, group,
/// resource and name, in `ns` (`None`: cluster-wide).
fn rule_grants(role: &Value, ns: Option<String>, out: &mut Vec<Grant>) {
    for rule in role["rules"].as_array().unwrap() {
        let names: Vec<Option<String>> = match strs(&rule["resourceNames"]) {
            n if n.is_empty() => vec![None],
            n => n.into_iter().map(Some).collect(),
        };
        for g in strs(&rule["apiGroups"]) {
            for res in strs(&rule["resources"]) {
                for v in strs(&rule["verbs"]) {
                    for name in &names {
                        out.push((v.clone(), g.clone(), res.clone(), ns.clone(), name.clone()));
                    }
                }
            }
        }
    }
}

/// Everything the install's RBAC grants `subject` (namespace/name of a
/// ServiceAccount), rule by rule.
pub fn granted(docs: &[Value], subject: (&str, &str)) -> Vec<Grant> {
    let binds = |b: &Value| {
        b["subjects"].as_array().unwrap().iter().any(|s| {
            s["kind"] == "ServiceAccount" && s["namespace"] == subject.0 && s["name"] == subject.1
        })
    };
    let mut out = Vec::new();
    for (binding, role, cluster_wide) in [
        ("ClusterRoleBinding", "ClusterRole", true),
        ("RoleBinding", "Role", false),
    ] {
        for b in docs.iter().filter(|d| d["kind"] == binding && binds(d)) {
            let ns =
                (!cluster_wide).then(|| b["metadata"]["namespace"].as_str().unwrap().to_string());
            assert_eq!(b["roleRef"]["kind"], role, "{b}");
            let r = docs
                .iter()
                .find(|d| {
                    d["kind"] == role
                        && d["metadata"]["name"] == b["roleRef"]["name"]
                        && (cluster_wide
                            || d["metadata"]["namespace"] == b["metadata"]["namespace"])
                })
                .unwrap_or_else(|| panic!("{binding} binds a {role} the install lacks: {b}"));
            rule_grants(r, ns, &mut out);
        }
    }
    out
}

/// Whether `grant` allows `need` (a grant in all namespaces or on all
/// objects covers one).
pub fn covers(grant: &Grant, need: &Grant) -> bool {
    grant.0 == need.0
        && grant.1 == need.1
        && grant.2 == need.2
        && (grant.3.is_none() || grant.3 == need.3)
        && (grant.4.is_none() || grant.4 == need.4)
}

/// Asserts that `docs` (an install's objects) grant the ServiceAccount
/// `subject` everything the watch Deployment's arguments ask for, and
/// nothing more; `what` names the install in messages.
pub fn assert_grants_exactly_watch_needs(
    docs: &[Value],
    subject: (&str, &str),
    deployment: &Value,
    what: &str,
) {
    let (_, purpose, pod_logs, hints) = deployment_purpose(deployment);
    let needs: Vec<Grant> = everything_needed(&purpose, pod_logs, hints)
        .iter()
        .map(need_grant)
        .collect();
    let grants = granted(docs, subject);
    let missing: Vec<&Grant> = needs
        .iter()
        .filter(|n| !grants.iter().any(|g| covers(g, n)))
        .collect();
    assert!(missing.is_empty(), "{what} lacks {missing:#?}");
    // Nothing more: every grant is one watch mode asks for, no wider.
    let extra: Vec<&Grant> = grants.iter().filter(|g| !needs.contains(g)).collect();
    assert!(
        extra.is_empty(),
        "{what} grants more than watch mode asks for: {extra:#?}"
    );
    let mut unique = grants.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), grants.len(), "{what}: a grant said twice");
}
