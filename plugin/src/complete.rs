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
use meshscope_shared::gateway_api::{RouteKind, GATEWAY_API_GROUP};
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
    Route(RouteKind),
    /// A Gateway API Gateway (completion lists those; `impact` also finds
    /// istio's).
    Gateway,
}

/// Workload kinds offered for `explain` and `verify` targets.
const WORKLOAD_KINDS: [Kind; 3] = [Kind::Deployment, Kind::StatefulSet, Kind::DaemonSet];
/// Kinds offered for `impact` targets.
const IMPACT_KINDS: [Kind; 9] = [
    Kind::Service,
    Kind::ServiceEntry,
    Kind::VirtualService,
    Kind::DestinationRule,
    Kind::Route(RouteKind::Http),
    Kind::Route(RouteKind::Grpc),
    Kind::Route(RouteKind::Tcp),
    Kind::Route(RouteKind::Tls),
    Kind::Gateway,
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
            Kind::Route(k) => k.singular(),
            Kind::Gateway => "gateway",
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
            Target::Route { kind, .. } => Kind::Route(kind),
            Target::Gateway { .. } => Kind::Gateway,
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
    /// The other connection flags (`--server`, `--token`, `--as`...), as
    /// typed: the cluster is asked as the command would ask it.
    pub connection: crate::args::Connection,
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
            "insecure_skip_tls_verify" => self.cluster.connection.insecure_skip_tls_verify = true,
            "cluster" => self.cluster.connection.cluster = Some(value.to_string()),
            "user" => self.cluster.connection.user = Some(value.to_string()),
            "server" => self.cluster.connection.server = Some(value.to_string()),
            "token" => self.cluster.connection.token = Some(value.to_string()),
            "certificate_authority" => {
                self.cluster.connection.certificate_authority = Some(PathBuf::from(value))
            }
            "impersonate" => self.cluster.connection.impersonate = Some(value.to_string()),
            "impersonate_groups" => self
                .cluster
                .connection
                .impersonate_groups
                .push(value.to_string()),
            "impersonate_uid" => self.cluster.connection.impersonate_uid = Some(value.to_string()),
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
                    // A switch: recorded as given.
                    None if !takes_value(&a) => self.record(&a, "true"),
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
    // `-n NS audit ...` completes as `audit -n NS ...`, as it runs.
    let line: Vec<String> = std::iter::once(String::new())
        .chain(typed.iter().cloned())
        .collect();
    let typed = &crate::hoist::hoist_words(&line)[1..];
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
            .filter(|d| {
                !given
                    .iter()
                    .any(|g| g.eq_ignore_ascii_case(d.code.as_str()))
            })
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
        let c = crate::args::Connection {
            context: cluster.context.clone(),
            kubeconfig: cluster.kubeconfig.clone(),
            request_timeout: live::RequestTimeout(Some(CLUSTER_TIMEOUT)),
            chunk_size: 500,
            ..cluster.connection.clone()
        };
        Common {
            namespace: cluster.namespace.clone(),
            connection: c,
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
                let live = Live::connect(&common.connect_options()?).await?.quiet();
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
        Kind::Route(k) => live::istio_in(GATEWAY_API_GROUP, k.as_str(), k.plural()),
        Kind::Gateway => live::istio_in(GATEWAY_API_GROUP, "Gateway", "gateways"),
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
mod tests;
