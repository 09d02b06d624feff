//! Shell completion through kubectl.
//!
//! kubectl (>= 1.26) completes a plugin's arguments by running
//! `kubectl_complete-<plugin>` from PATH with the words typed after the
//! plugin's name, the last one being the word under the cursor (empty when
//! the cursor follows a space). The executable answers like a Cobra program's
//! `__complete` command: one candidate per line, optionally `value\tdescription`,
//! then a last line `:<directive>` (kubernetes/kubernetes
//! `staging/src/k8s.io/kubectl/pkg/cmd/plugin/plugin_completion.go`, 1.26;
//! spf13/cobra `completions.go`, 1.8).
//!
//! ```text
//! words ──> walk the clap Cli ──> Want ──> candidates (static, or via Lookup) ──> stdout
//! ```
//!
//! Subcommands, flags and enum values come from the clap definition in
//! `args.rs`, so new subcommands and flags are completed without touching
//! this module. Names (namespaces, pods, workloads, services, Istio objects)
//! come from the current kubeconfig context through [`ClusterLookup`]; a
//! cluster that cannot be reached yields no candidates, never an error on
//! stdout.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::ops::BitOr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::ValueHint;
use clap::{Arg, ArgAction, CommandFactory};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::config::Kubeconfig;
use meshscope_shared::audit::CODES;
use meshscope_shared::explain::Target;
use meshscope_shared::snapshot::WorkloadKind;

use crate::args::{Cli, Common};
use crate::live::{self, Live};

/// How long completion may wait for the API server, connect included.
/// A TAB that hangs is worse than a TAB that offers nothing.
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(3);

// === Completions ===

/// Cobra's `ShellCompDirective`: tells the shell what to do with the
/// candidates (a bit set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Directive(pub u32);

impl Directive {
    /// The shell may fall back to file names when there are no candidates.
    pub const DEFAULT: Self = Self(0);
    /// No space after the completed word (e.g. after `deployment/`).
    pub const NO_SPACE: Self = Self(2);
    /// Never fall back to file names.
    pub const NO_FILE_COMP: Self = Self(4);
}

impl BitOr for Directive {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub value: String,
    /// Shown next to the value by shells that support descriptions.
    pub help: Option<String>,
}

impl Candidate {
    fn new(value: impl Into<String>, help: Option<String>) -> Self {
        Self {
            value: value.into(),
            help,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub struct Completions {
    pub candidates: Vec<Candidate>,
    pub directive: Directive,
    /// Why dynamic candidates are missing (a cluster error), for stderr.
    pub note: Option<String>,
}

impl Completions {
    /// The candidate values, in order.
    pub fn values(&self) -> Vec<&str> {
        self.candidates.iter().map(|c| c.value.as_str()).collect()
    }

    /// Writes the `__complete` answer: one candidate per line, then
    /// `:<directive>`.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        for c in &self.candidates {
            match &c.help {
                Some(h) if !h.is_empty() => writeln!(out, "{}\t{h}", c.value)?,
                _ => writeln!(out, "{}", c.value)?,
            }
        }
        writeln!(out, ":{}", self.directive.0)
    }
}

// === what the words ask for ===

/// The kinds of object whose names are completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Pod,
    Deployment,
    StatefulSet,
    DaemonSet,
    Service,
    ServiceEntry,
    VirtualService,
    DestinationRule,
}

/// Workload kinds offered for `explain` and `verify` targets.
const WORKLOAD_KINDS: [Kind; 3] = [Kind::Deployment, Kind::StatefulSet, Kind::DaemonSet];
/// Kinds offered for `impact` targets.
const IMPACT_KINDS: [Kind; 4] = [
    Kind::Service,
    Kind::ServiceEntry,
    Kind::VirtualService,
    Kind::DestinationRule,
];

impl Kind {
    /// The spelling offered before the `/`.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Pod => "pod",
            Kind::Deployment => "deployment",
            Kind::StatefulSet => "statefulset",
            Kind::DaemonSet => "daemonset",
            Kind::Service => "service",
            Kind::ServiceEntry => "serviceentry",
            Kind::VirtualService => "virtualservice",
            Kind::DestinationRule => "destinationrule",
        }
    }

    /// A workload kind as the commands parse it (`deploy`, `sts`, `po`, ...).
    fn workload(word: &str) -> Option<Kind> {
        match WorkloadKind::parse(word)? {
            WorkloadKind::Pod => Some(Kind::Pod),
            WorkloadKind::Deployment => Some(Kind::Deployment),
            WorkloadKind::StatefulSet => Some(Kind::StatefulSet),
            WorkloadKind::DaemonSet => Some(Kind::DaemonSet),
            _ => None,
        }
    }

    /// An `impact` target kind as `impact` parses it (`svc`, `se`, `vs`, `dr`, ...).
    fn impact(word: &str) -> Option<Kind> {
        Some(match Target::parse(&format!("{word}/"), "")? {
            Target::Service { .. } => Kind::Service,
            Target::ServiceEntry { .. } => Kind::ServiceEntry,
            Target::VirtualService { .. } => Kind::VirtualService,
            Target::DestinationRule { .. } => Kind::DestinationRule,
        })
    }
}

/// Where completion gets names from, given the cluster flags typed so far.
pub trait Lookup {
    fn namespaces(&self, cluster: &ClusterFlags) -> anyhow::Result<Vec<String>>;
    /// Names of `kind` in `-n` (or the context's namespace).
    fn names(&self, cluster: &ClusterFlags, kind: Kind) -> anyhow::Result<Vec<String>>;
    fn contexts(&self, cluster: &ClusterFlags) -> anyhow::Result<Vec<String>>;
}

/// The flags that choose the cluster, as typed so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterFlags {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub namespace: Option<String>,
}

/// Where the cursor is, after walking the typed words.
struct Walk {
    /// The (sub)command the cursor is in.
    cmd: clap::Command,
    /// Names of the enclosing subcommands, outermost first.
    path: Vec<String>,
    positionals: Vec<String>,
    /// Ids of the flags already given.
    seen: BTreeSet<String>,
    /// A flag whose value the cursor is on.
    pending: Option<Arg>,
    after_dashes: bool,
    cluster: ClusterFlags,
}

fn takes_value(a: &Arg) -> bool {
    a.get_action().takes_values()
}

/// Whether the word after the flag is its value (not so for
/// `require_equals` flags, which need `--flag=value`).
fn value_follows(a: &Arg) -> bool {
    takes_value(a) && !a.is_require_equals_set()
}

/// Whether the flag's value may be left out (`num_args = 0..=1`, such as
/// `apply --dry-run`): then the next word is its value only when it is not
/// a flag, as clap reads it.
fn value_optional(a: &Arg) -> bool {
    a.get_num_args().is_some_and(|r| r.min_values() == 0)
}

impl Walk {
    fn new(words: &[String]) -> Walk {
        let mut cmd = Cli::command();
        cmd.build();
        let mut w = Walk {
            cmd,
            path: Vec::new(),
            positionals: Vec::new(),
            seen: BTreeSet::new(),
            pending: None,
            after_dashes: false,
            cluster: ClusterFlags::default(),
        };
        for word in words {
            w.word(word);
        }
        w
    }

    fn record(&mut self, a: &Arg, value: &str) {
        match a.get_id().as_str() {
            "namespace" => self.cluster.namespace = Some(value.to_string()),
            "context" => self.cluster.context = Some(value.to_string()),
            "kubeconfig" => self.cluster.kubeconfig = Some(PathBuf::from(value)),
            _ => {}
        }
    }

    fn long(&self, name: &str) -> Option<Arg> {
        self.cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(name))
            .cloned()
    }

    fn short(&self, c: char) -> Option<Arg> {
        self.cmd
            .get_arguments()
            .find(|a| a.get_short() == Some(c))
            .cloned()
    }

    fn word(&mut self, word: &str) {
        if let Some(a) = self.pending.take() {
            if !(value_optional(&a) && word.starts_with('-')) {
                self.record(&a, word);
                return;
            }
        }
        if self.after_dashes {
            self.positionals.push(word.to_string());
            return;
        }
        if word == "--" {
            self.after_dashes = true;
        } else if let Some(flag) = word.strip_prefix("--") {
            let (name, inline) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (flag, None),
            };
            if let Some(a) = self.long(name) {
                self.seen.insert(a.get_id().to_string());
                match inline {
                    Some(v) => self.record(&a, v),
                    None if value_follows(&a) => self.pending = Some(a),
                    None => {}
                }
            }
        } else if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            // `-A`, `-An ns`, `-nns`, `-n=ns`.
            for (i, c) in shorts.char_indices() {
                let Some(a) = self.short(c) else { break };
                self.seen.insert(a.get_id().to_string());
                if takes_value(&a) {
                    let rest = &shorts[i + c.len_utf8()..];
                    let rest = rest.strip_prefix('=').unwrap_or(rest);
                    if rest.is_empty() {
                        if value_follows(&a) {
                            self.pending = Some(a);
                        }
                    } else {
                        self.record(&a, rest);
                    }
                    break;
                }
            }
        } else if self.positionals.is_empty() && self.cmd.has_subcommands() {
            if let Some(sub) = self.cmd.find_subcommand(word).cloned() {
                self.path.push(sub.get_name().to_string());
                self.cmd = sub;
                self.seen.clear();
            } else {
                self.positionals.push(word.to_string());
            }
        } else {
            self.positionals.push(word.to_string());
        }
    }
}

// === completing ===

fn first_line(s: Option<&clap::builder::StyledStr>) -> Option<String> {
    s.map(|s| {
        s.to_string()
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string()
    })
}

fn filtered(values: impl IntoIterator<Item = Candidate>, prefix: &str) -> Vec<Candidate> {
    values
        .into_iter()
        .filter(|c| c.value.starts_with(prefix))
        .collect()
}

fn names(values: Vec<String>, prefix: &str) -> Vec<Candidate> {
    let mut values = values;
    values.sort();
    values.dedup();
    filtered(values.into_iter().map(|v| Candidate::new(v, None)), prefix)
}

/// Completes `words` (the words after `meshscope`, the last one under the
/// cursor) with names from `lookup`.
pub fn complete(words: &[String], lookup: &dyn Lookup) -> Completions {
    let (typed, current) = match words.split_last() {
        Some((last, typed)) => (typed, last.as_str()),
        None => (&[][..], ""),
    };
    let walk = Walk::new(typed);
    Completer {
        walk: &walk,
        lookup,
        note: None,
    }
    .current(current)
}

struct Completer<'a> {
    walk: &'a Walk,
    lookup: &'a dyn Lookup,
    note: Option<String>,
}

impl Completer<'_> {
    /// Dynamic names; a failure is remembered for stderr and yields none.
    fn ask(&mut self, r: anyhow::Result<Vec<String>>) -> Vec<String> {
        r.unwrap_or_else(|e| {
            self.note = Some(format!("{e:#}"));
            Vec::new()
        })
    }

    fn done(self, candidates: Vec<Candidate>, directive: Directive) -> Completions {
        Completions {
            candidates,
            directive,
            note: self.note,
        }
    }

    fn current(self, current: &str) -> Completions {
        let walk = self.walk;
        if let Some(a) = &walk.pending {
            if !(value_optional(a) && current.starts_with('-')) {
                return self.value(a, current);
            }
        }
        if !walk.after_dashes {
            if let Some(flag) = current.strip_prefix("--") {
                if let Some((name, value)) = flag.split_once('=') {
                    return match walk.long(name) {
                        Some(a) if takes_value(&a) => self.value(&a, value),
                        _ => self.done(Vec::new(), Directive::NO_FILE_COMP),
                    };
                }
            }
            if current.starts_with('-') {
                let flags = self.flags(current);
                return self.done(flags, Directive::NO_FILE_COMP);
            }
            if walk.positionals.is_empty() && walk.cmd.has_subcommands() {
                let subs = walk
                    .cmd
                    .get_subcommands()
                    .filter(|s| !s.is_hide_set())
                    .map(|s| Candidate::new(s.get_name(), first_line(s.get_about())));
                return self.done(filtered(subs, current), Directive::NO_FILE_COMP);
            }
        }
        self.positional(current)
    }

    /// Flag names of the current command: long and short, without those
    /// already given (unless repeatable).
    fn flags(&self, current: &str) -> Vec<Candidate> {
        let walk = self.walk;
        let mut out = Vec::new();
        for a in walk.cmd.get_arguments() {
            if a.is_positional() || a.is_hide_set() {
                continue;
            }
            let repeatable = matches!(a.get_action(), ArgAction::Append | ArgAction::Count);
            if walk.seen.contains(a.get_id().as_str()) && !repeatable {
                continue;
            }
            let help = first_line(a.get_help());
            if let Some(l) = a.get_long() {
                out.push(Candidate::new(format!("--{l}"), help.clone()));
            }
            if let Some(s) = a.get_short() {
                out.push(Candidate::new(format!("-{s}"), help));
            }
        }
        filtered(out, current)
    }

    /// Values of a flag (or positional) from its definition: enum values,
    /// namespaces, contexts, or file names.
    fn value(mut self, a: &Arg, current: &str) -> Completions {
        let possible: Vec<Candidate> = a
            .get_possible_values()
            .iter()
            .filter(|p| !p.is_hide_set())
            .map(|p| Candidate::new(p.get_name(), first_line(p.get_help())))
            .collect();
        if !possible.is_empty() {
            return self.done(filtered(possible, current), Directive::NO_FILE_COMP);
        }
        // As help shows it: a positional without a value name by its id.
        let value_name = a
            .get_value_names()
            .and_then(|v| v.first())
            .map_or_else(|| a.get_id().as_str().to_uppercase(), |n| n.to_string());
        if value_name.starts_with("CODE") {
            return self.codes(a, current);
        }
        if a.get_id() == "workload" {
            return self.targets(&WORKLOAD_KINDS, Kind::workload, current);
        }
        let is_namespace = a.get_id() == "namespace"
            || a.get_value_names()
                .is_some_and(|v| v.iter().any(|n| n.as_str() == "NAMESPACE"));
        if is_namespace {
            let ns = self.ask(self.lookup.namespaces(&self.walk.cluster));
            return self.done(names(ns, current), Directive::NO_FILE_COMP);
        }
        if a.get_id() == "context" {
            let ctx = self.ask(self.lookup.contexts(&self.walk.cluster));
            return self.done(names(ctx, current), Directive::NO_FILE_COMP);
        }
        match a.get_value_hint() {
            ValueHint::AnyPath | ValueHint::FilePath | ValueHint::DirPath => {
                self.done(Vec::new(), Directive::DEFAULT)
            }
            _ => self.done(Vec::new(), Directive::NO_FILE_COMP),
        }
    }

    fn positional(mut self, current: &str) -> Completions {
        let walk = self.walk;
        let index = walk.positionals.len();
        let command = walk.path.first().map(String::as_str).unwrap_or("");
        match (command, index) {
            ("explain", 0) => {
                let kinds = [
                    Candidate::new("pod", Some("a pod by name".into())),
                    Candidate::new("workload", Some("a workload as KIND/NAME".into())),
                ]
                .into_iter()
                .chain(WORKLOAD_KINDS.map(|k| Candidate::new(k.word(), None)));
                self.done(filtered(kinds, current), Directive::NO_FILE_COMP)
            }
            ("explain", 1) => {
                let what = walk.positionals[0].as_str();
                if what == "workload" {
                    return self.targets(&WORKLOAD_KINDS, Kind::workload, current);
                }
                match Kind::workload(what) {
                    Some(kind) => {
                        let found = self.ask(self.lookup.names(&self.walk.cluster, kind));
                        self.done(names(found, current), Directive::NO_FILE_COMP)
                    }
                    None => self.done(Vec::new(), Directive::NO_FILE_COMP),
                }
            }
            ("verify", 0) => {
                let kinds = [
                    Kind::Pod,
                    WORKLOAD_KINDS[0],
                    WORKLOAD_KINDS[1],
                    WORKLOAD_KINDS[2],
                ];
                self.targets(&kinds, Kind::workload, current)
            }
            ("impact", 0) => self.targets(&IMPACT_KINDS, Kind::impact, current),
            _ => match walk.cmd.get_positionals().nth(index).cloned() {
                Some(a) => self.value(&a, current),
                None => self.done(Vec::new(), Directive::NO_FILE_COMP),
            },
        }
    }

    /// Finding codes, with their titles: `codes CODE`, `audit --code` and
    /// `--suppress` (the code before its `=`). A flag that takes a list
    /// (`--code MS0001,MS0006`) completes the code after the last comma,
    /// without the codes the list already holds.
    fn codes(self, a: &Arg, current: &str) -> Completions {
        let list = a.get_value_delimiter().is_some();
        let (head, tail) = match current.rsplit_once(',') {
            Some((h, t)) if list => (format!("{h},"), t),
            _ => (String::new(), current),
        };
        if tail.contains('=') {
            return self.done(Vec::new(), Directive::NO_FILE_COMP);
        }
        let given: Vec<&str> = head
            .split(',')
            .map(|c| c.split('=').next().unwrap_or(c))
            .collect();
        let codes = CODES
            .iter()
            .filter(|d| !given.iter().any(|g| g.eq_ignore_ascii_case(d.code)))
            .map(|d| Candidate::new(format!("{head}{}", d.code), Some(d.title.to_string())));
        self.done(filtered(codes, current), Directive::NO_FILE_COMP)
    }

    /// `KIND/NAME`: the kinds (followed by no space) until a `/` is typed,
    /// then the names of that kind, spelled with the kind as typed.
    fn targets(
        mut self,
        kinds: &[Kind],
        parse: fn(&str) -> Option<Kind>,
        current: &str,
    ) -> Completions {
        let Some((typed_kind, _)) = current.split_once('/') else {
            let offered = kinds
                .iter()
                .map(|k| Candidate::new(format!("{}/", k.word()), None));
            return self.done(
                filtered(offered, current),
                Directive::NO_SPACE | Directive::NO_FILE_COMP,
            );
        };
        let kind = parse(typed_kind).filter(|k| kinds.contains(k));
        let Some(kind) = kind else {
            return self.done(Vec::new(), Directive::NO_FILE_COMP);
        };
        let found = self.ask(self.lookup.names(&self.walk.cluster, kind));
        let spelled = found
            .into_iter()
            .map(|n| format!("{typed_kind}/{n}"))
            .collect();
        self.done(names(spelled, current), Directive::NO_FILE_COMP)
    }
}

// === impl ClusterLookup ===

/// Names from the cluster of the typed `--kubeconfig`/`--context` (or
/// KUBECONFIG and the current context), through [`Live::connect`].
pub struct ClusterLookup;

impl ClusterLookup {
    fn common(cluster: &ClusterFlags) -> Common {
        Common {
            namespace: cluster.namespace.clone(),
            context: cluster.context.clone(),
            kubeconfig: cluster.kubeconfig.clone(),
            request_timeout: live::RequestTimeout(Some(CLUSTER_TIMEOUT)),
            chunk_size: 500,
            ..Common::default()
        }
    }

    /// Connects and runs `f`, all within [`CLUSTER_TIMEOUT`].
    fn with_live<F>(cluster: &ClusterFlags, f: F) -> anyhow::Result<Vec<String>>
    where
        F: AsyncFnOnce(&Live) -> anyhow::Result<Vec<String>>,
    {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let common = Self::common(cluster);
        rt.block_on(async {
            let work = async {
                // CLUSTER_TIMEOUT bounds the whole; each call is bounded by
                // it too, without the note a slow call leaves on a terminal.
                let live = Live::connect(&common.connect_options()).await?.quiet();
                f(&live).await
            };
            tokio::time::timeout(CLUSTER_TIMEOUT, work)
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "the API server did not answer within {}s",
                        CLUSTER_TIMEOUT.as_secs()
                    )
                })?
        })
    }
}

/// The names of `kind` in `ns`, from metadata-only lists.
async fn list_names(live: &Live, kind: Kind, ns: &str) -> Result<Vec<String>, live::ApiFailure> {
    let ar = match kind {
        Kind::Pod => live::resource_of::<Pod>(),
        Kind::Deployment => live::resource_of::<Deployment>(),
        Kind::StatefulSet => live::resource_of::<StatefulSet>(),
        Kind::DaemonSet => live::resource_of::<DaemonSet>(),
        Kind::Service => live::resource_of::<Service>(),
        Kind::ServiceEntry => live::istio("ServiceEntry", "serviceentries"),
        Kind::VirtualService => live::istio("VirtualService", "virtualservices"),
        Kind::DestinationRule => live::istio("DestinationRule", "destinationrules"),
    };
    live.names(&ar, Some(ns)).await
}

impl Lookup for ClusterLookup {
    fn namespaces(&self, cluster: &ClusterFlags) -> anyhow::Result<Vec<String>> {
        Self::with_live(cluster, async |live: &Live| {
            Ok(live.names(&live::resource_of::<Namespace>(), None).await?)
        })
    }

    fn names(&self, cluster: &ClusterFlags, kind: Kind) -> anyhow::Result<Vec<String>> {
        Self::with_live(cluster, async |live: &Live| {
            let ns = cluster
                .namespace
                .clone()
                .unwrap_or_else(|| live.default_namespace.clone());
            Ok(list_names(live, kind, &ns).await?)
        })
    }

    fn contexts(&self, cluster: &ClusterFlags) -> anyhow::Result<Vec<String>> {
        let config = match &cluster.kubeconfig {
            Some(p) => Kubeconfig::read_from(p)?,
            None => Kubeconfig::read()?,
        };
        Ok(config.contexts.into_iter().map(|c| c.name).collect())
    }
}

/// `kubectl_complete-meshscope WORDS...`: the answer on `out`; why dynamic
/// candidates are missing, if they are, on `err`.
pub fn run(words: &[String], out: &mut dyn Write, err: &mut dyn Write) -> io::Result<()> {
    let c = complete(words, &ClusterLookup);
    if let Some(note) = &c.note {
        writeln!(err, "meshscope completion: {note}")?;
    }
    c.write(out)
}

#[cfg(test)]
mod tests {
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
        fn answer(
            &self,
            kind: Option<Kind>,
            cluster: &ClusterFlags,
        ) -> anyhow::Result<Vec<String>> {
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
        assert_eq!(run("re").values(), ["recommend"]);
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
            .collect();
        assert!(report.len() >= 4);
        assert_eq!(run("audit -o ").values(), report);
        assert_eq!(run("audit --output=j").values(), ["json"]);
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
                "destinationrule/"
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
            .map(|d| d.code)
            .filter(|c| c.starts_with("MS000"))
            .collect();
        assert!(!expected.is_empty());
        assert_eq!(c.values(), expected);
        assert_eq!(c.candidates[0].help.as_deref(), Some(CODES[0].title));
    }

    #[test]
    fn audit_code_and_suppress_complete_codes_after_the_last_comma() {
        let all: Vec<&str> = CODES.iter().map(|d| d.code).collect();
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
}
