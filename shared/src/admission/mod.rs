//! Admission decisions for `meshscope-webhook`: pure functions over the
//! object being admitted and a [`MeshSnapshot`] of the cached cluster state.
//!
//! ```text
//!  AdmissionRequest ──► Request ──► review(&Request, &MeshSnapshot, &Config) ──► Decision
//!                                     │
//!                                     ├─ workloads      audit::unscoped            MS0001
//!                                     │                 audit::scoped_by_another   MS0012 (warn)
//!                                     ├─ ServiceEntries audit::dns_service_entry   MS0002 (deny, warn or patch)
//!                                     └─ Sidecars       audit::sidecar_findings,
//!                                                       audit::conflicting_selectors MS0004/5/6/8 (warn)
//! ```
//!
//! Every rule is the audit's own function, so the webhook and
//! `kubectl meshscope audit` give the same object the same code and message.
//! The HTTP side (AdmissionReview in, AdmissionResponse out) lives in the
//! webhook crate.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::value::RawValue;
use serde_json::Value;
use thiserror::Error;

use crate::audit::{self, Code, Finding};
use crate::inject::{self, PodFacts};
use crate::inputs::Inputs;
use crate::istio::{ServiceEntry, Sidecar, NETWORKING_GROUP};
use crate::snapshot::{Labels, MeshSnapshot, NamespaceInfo, Workload, WorkloadKind};

mod object;

use object::PodTemplate;
pub use object::{Exemption, MetaView, ObjectView, EXEMPT_ANNOTATION};

/// Namespace label that sets the policy: `enforce`, `warn` or `off`.
pub const POLICY_LABEL: &str = "meshscope.io/policy";
/// kubectl shows warnings on one line; longer ones are shortened.
pub const MAX_WARNING_CHARS: usize = 120;
/// The Sidecar codes the webhook reports: the ones that need no pods or
/// services to decide (MS0004 is added by its own probe).
const SIDECAR_CODES: &[Code] = &[
    Code::SeveralNamespaceSidecars,
    Code::SidecarWithoutEgress,
    Code::RootSidecarWithSelector,
];

// === Policy ===

/// What the webhook does in a namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Deny MS0001 and MS0002; warn on Sidecar hygiene.
    Enforce,
    /// Allow everything, with a warning per finding.
    #[default]
    Warn,
    /// Do nothing.
    Off,
}

impl Policy {
    /// Every policy, as the `meshscope.io/policy` label takes them.
    pub const ALL: [Policy; 3] = [Policy::Enforce, Policy::Warn, Policy::Off];

    /// What the policy does, in a few words (for help and completion).
    pub fn summary(self) -> &'static str {
        match self {
            Policy::Enforce => "deny MS0001 and MS0002; warn on Sidecar hygiene",
            Policy::Warn => "allow everything, with a warning per finding",
            Policy::Off => "do nothing",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Enforce => "enforce",
            Policy::Warn => "warn",
            Policy::Off => "off",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy value that is not `enforce`, `warn` or `off`.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("invalid policy {0:?} (expected enforce, warn or off)")]
pub struct InvalidPolicy(pub String);

impl FromStr for Policy {
    type Err = InvalidPolicy;
    fn from_str(s: &str) -> Result<Self, InvalidPolicy> {
        match s {
            "enforce" => Ok(Policy::Enforce),
            "warn" => Ok(Policy::Warn),
            "off" => Ok(Policy::Off),
            other => Err(InvalidPolicy(other.to_string())),
        }
    }
}

// === Request ===

/// The admission operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// Which webhook is asking: the mutating one only ever patches
/// ServiceEntries; every check and warning comes from the validating one,
/// so kubectl shows each warning once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Validate,
    Mutate,
}

impl Endpoint {
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Validate => "validate",
            Endpoint::Mutate => "mutate",
        }
    }
}

/// The webhook's settings that decisions depend on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// The policy of namespaces without a valid `meshscope.io/policy` label.
    pub default_policy: Policy,
    /// `/mutate` sets `exportTo: ["."]` on DNS ServiceEntries instead of
    /// `/validate` denying or warning.
    pub mutate_service_entry_export_to: bool,
}

/// One admission request, as the decision functions see it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub endpoint: Endpoint,
    pub operation: Operation,
    /// API group of the object (`""` for core, `apps`, `networking.istio.io`).
    pub group: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    /// The request's name; empty when the API server has not generated it yet.
    pub name: &'a str,
    /// The new object, as the JSON the API server sent (`None` on DELETE).
    /// The rules read only the few fields they need from it (see
    /// [`ObjectView`]); the rest is skipped, never decoded.
    pub object: Option<&'a RawValue>,
    /// The namespace, when the caller had to look it up because the
    /// snapshot does not know it yet (created after the last sync).
    pub namespace_fallback: Option<&'a NamespaceInfo>,
}

impl Request<'_> {
    /// A name to show: the request's, the object's, or its `generateName`.
    pub fn display_name(&self, meta: &MetaView<'_>) -> String {
        if !self.name.is_empty() {
            return self.name.to_string();
        }
        fn non_empty<'s>(s: &'s Option<Cow<'_, str>>) -> Option<&'s str> {
            s.as_deref().filter(|s| !s.is_empty())
        }
        match (non_empty(&meta.name), non_empty(&meta.generate_name)) {
            (Some(n), _) => n.to_string(),
            (None, Some(g)) => format!("{g}*"),
            (None, None) => "<unnamed>".to_string(),
        }
    }
}

// === Decision ===

/// The outcome of one admission request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The denial reason: `CODE: message` (kubectl prints it after
    /// "denied the request:").
    pub message: Option<String>,
    /// One per finding, each at most [`MAX_WARNING_CHARS`] characters.
    pub warnings: Vec<String>,
    pub patch: Option<Patch>,
    /// Every finding behind the decision, for logs.
    pub findings: Vec<Finding>,
    /// The reason given by `meshscope.io/exempt`, when that allowed the object.
    pub exempt: Option<String>,
    /// The namespace policy that applied (`None` when no rule looked at it).
    pub policy: Option<Policy>,
}

/// What a decision amounts to, as a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    Allowed,
    Warned,
    Patched,
    Exempt,
    Denied,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allow",
            Outcome::Warned => "warn",
            Outcome::Patched => "patch",
            Outcome::Exempt => "exempt",
            Outcome::Denied => "deny",
        }
    }
}

impl Decision {
    /// Allowed, nothing to say.
    pub fn allow() -> Self {
        Decision {
            allowed: true,
            message: None,
            warnings: Vec::new(),
            patch: None,
            findings: Vec::new(),
            exempt: None,
            policy: None,
        }
    }

    /// Allowed with one warning (not tied to a finding).
    pub fn allow_with_warning(warning: &str) -> Self {
        let mut d = Decision::allow();
        d.warnings.push(shorten(warning));
        d
    }

    pub fn outcome(&self) -> Outcome {
        if !self.allowed {
            Outcome::Denied
        } else if self.patch.is_some() {
            Outcome::Patched
        } else if self.exempt.is_some() {
            Outcome::Exempt
        } else if !self.warnings.is_empty() {
            Outcome::Warned
        } else {
            Outcome::Allowed
        }
    }

    /// The finding codes, in order, for logs.
    pub fn codes(&self) -> Vec<&'static str> {
        self.findings.iter().map(|f| f.code.as_str()).collect()
    }

    /// A workload being created is not in the cluster yet: its MS0001 fix
    /// is the one that plans from its manifest.
    fn on_creation(&mut self, kind: &WorkloadKind, ns: &str, name: &str) {
        let Some(f) = self
            .findings
            .iter_mut()
            .find(|f| f.code == Code::UnscopedWorkload)
        else {
            return;
        };
        f.message = audit::unscoped_on_creation_message(kind.as_str(), ns, name);
        if !self.allowed {
            self.message = Some(format!("{}: {}", f.code, f.message));
        }
    }

    fn deny(&mut self, f: &Finding) {
        self.allowed = false;
        self.message = Some(format!("{}: {}", f.code, f.message));
    }

    fn warn(&mut self, f: &Finding) {
        self.warnings.push(finding_warning(f.code, &f.message));
    }
}

/// A finding as a warning of at most [`MAX_WARNING_CHARS`] characters:
/// the whole message if it fits, else its first clause and where to read
/// the fix (`kubectl meshscope codes CODE`), else a cut at a word boundary.
pub fn finding_warning(code: Code, message: &str) -> String {
    let full = format!("{code}: {message}");
    if fits(&full) {
        return full;
    }
    let head = message.split("; ").next().unwrap_or(message);
    let pointed = format!("{code}: {head}; see kubectl meshscope codes {code}");
    if fits(&pointed) {
        return pointed;
    }
    shorten(&format!("{code}: {head}"))
}

fn fits(s: &str) -> bool {
    s.chars().count() <= MAX_WARNING_CHARS
}

/// Cuts a text to [`MAX_WARNING_CHARS`] characters at a word boundary,
/// ending it with `…`.
pub fn shorten(s: &str) -> String {
    if fits(s) {
        return s.to_string();
    }
    let cut: String = s.chars().take(MAX_WARNING_CHARS - 1).collect();
    let at_word = match cut.rfind(' ') {
        Some(i) if i > MAX_WARNING_CHARS / 2 => &cut[..i],
        _ => cut.as_str(),
    };
    format!("{}…", at_word.trim_end_matches([' ', ';', ',']))
}

// === review ===

/// The objects `/validate` checks, as `(API group, resource, kind)`. The
/// webhook configurations in deploy/ register exactly these (a test keeps
/// them in step).
pub const VALIDATED: &[(&str, &str, &str)] = &[
    ("", "pods", "Pod"),
    ("apps", "deployments", "Deployment"),
    ("apps", "statefulsets", "StatefulSet"),
    ("apps", "daemonsets", "DaemonSet"),
    ("apps", "replicasets", "ReplicaSet"),
    ("batch", "jobs", "Job"),
    ("batch", "cronjobs", "CronJob"),
    (NETWORKING_GROUP, "serviceentries", "ServiceEntry"),
    (NETWORKING_GROUP, "sidecars", "Sidecar"),
];

/// The objects `/mutate` may patch.
pub const MUTATED: &[(&str, &str, &str)] = &[(NETWORKING_GROUP, "serviceentries", "ServiceEntry")];

/// What kind of object a request is about, for the rules.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Subject {
    Workload(WorkloadKind),
    ServiceEntry,
    Sidecar,
}

/// The subject of a request, for the kinds in [`VALIDATED`] only.
fn subject(group: &str, kind: &str) -> Option<Subject> {
    if !VALIDATED.iter().any(|(g, _, k)| *g == group && *k == kind) {
        return None;
    }
    match kind {
        "ServiceEntry" => Some(Subject::ServiceEntry),
        "Sidecar" => Some(Subject::Sidecar),
        workload => WorkloadKind::parse(workload).map(Subject::Workload),
    }
}

/// The namespace's policy, and a warning when its label is not valid.
pub fn namespace_policy(
    ns: &str,
    info: Option<&NamespaceInfo>,
    default: Policy,
) -> (Policy, Option<String>) {
    match info.and_then(|i| i.labels.get(POLICY_LABEL)) {
        None => (default, None),
        Some(v) => match v.parse() {
            Ok(p) => (p, None),
            Err(_) => (
                default,
                Some(shorten(&format!(
                    "namespace {ns} has {POLICY_LABEL}={v:?}, not enforce, warn or off; using {default}"
                ))),
            ),
        },
    }
}

/// Whether [`review`] looks at a request at all: CREATE and UPDATE of the
/// kinds the rules cover, on `/validate`; on `/mutate` only ServiceEntries,
/// and only with mutation on. Everything else is allowed without a word,
/// whatever the state of the webhook's caches.
pub fn in_scope(req: &Request<'_>, cfg: &Config) -> bool {
    if !matches!(req.operation, Operation::Create | Operation::Update) || req.object.is_none() {
        return false;
    }
    match (subject(req.group, req.kind), req.endpoint) {
        (None, _) => false,
        (Some(_), Endpoint::Validate) => true,
        (Some(Subject::ServiceEntry), Endpoint::Mutate) => cfg.mutate_service_entry_export_to,
        (Some(_), Endpoint::Mutate) => false,
    }
}

/// Decides one admission request. Never fails: anything it cannot read is
/// allowed (with a warning when the object should have been checked),
/// because the webhook must never be the reason a cluster cannot deploy.
pub fn review(req: &Request<'_>, snap: &MeshSnapshot, cfg: &Config) -> Decision {
    if !in_scope(req, cfg) {
        return Decision::allow();
    }
    let (Some(object), Some(subject)) = (req.object, subject(req.group, req.kind)) else {
        return Decision::allow();
    };
    let mutating = req.endpoint == Endpoint::Mutate;
    let ns_info = snap.namespace(req.namespace).or(req.namespace_fallback);
    let workload = matches!(subject, Subject::Workload(_));
    let view = match ObjectView::read(object, workload) {
        Ok(v) => v,
        Err(e) => return unreadable(req, ns_info, cfg, &e),
    };
    // Denying the update that removes a finalizer would keep the object
    // from ever being deleted.
    if view.is_terminating() {
        return Decision::allow();
    }
    let (policy, policy_warning) = namespace_policy(req.namespace, ns_info, cfg.default_policy);
    let mut d = Decision::allow();
    d.policy = Some(policy);
    if policy == Policy::Off {
        return d;
    }
    if !mutating {
        d.warnings.extend(policy_warning);
    }
    let name = req.display_name(&view.metadata);
    match view.exemption() {
        Exemption::Exempt(reason) => {
            d.exempt = Some(reason);
            return d;
        }
        Exemption::NoReason if !mutating => d.warnings.push(shorten(
            &crate::exempt::no_reason_warning(req.kind, req.namespace, &name),
        )),
        _ => {}
    }
    match subject {
        Subject::Workload(kind) => {
            review_workload(&mut d, snap, ns_info, &kind, req.namespace, &name, view);
            if req.operation == Operation::Create {
                d.on_creation(&kind, req.namespace, &name);
            }
        }
        Subject::ServiceEntry => review_service_entry(&mut d, req, snap, &name, object),
        Subject::Sidecar => review_sidecar(&mut d, req, snap, &name, object),
    }
    d
}

/// An object whose metadata cannot be read (the API server never sends
/// one): allowed, with a warning from `/validate` unless the namespace's
/// policy is `off`.
fn unreadable(
    req: &Request<'_>,
    ns_info: Option<&NamespaceInfo>,
    cfg: &Config,
    e: &serde_json::Error,
) -> Decision {
    let (policy, _) = namespace_policy(req.namespace, ns_info, cfg.default_policy);
    let mut d = Decision::allow();
    d.policy = Some(policy);
    if policy != Policy::Off && req.endpoint == Endpoint::Validate {
        let name = req.display_name(&MetaView::default());
        let e = without_position(e);
        d.warnings.push(shorten(&format!(
            "meshscope cannot read {} {}/{name} ({e}); not checked",
            req.kind, req.namespace
        )));
    }
    d
}

/// A decoding error without its position in the object's JSON, which
/// means nothing to the user (they never saw that text).
fn without_position(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    match message.strip_suffix(&position) {
        Some(m) => m.to_string(),
        None => message,
    }
}

// === workloads: MS0001, MS0012 ===

/// Pods, ReplicaSets and a CronJob's Jobs are judged through their
/// controller, which the webhook sees (and checks) itself.
fn judged_through_controller(kind: &WorkloadKind, object: &ObjectView<'_>) -> bool {
    let controller = object.controller();
    match kind {
        WorkloadKind::Pod | WorkloadKind::ReplicaSet => controller.is_some(),
        WorkloadKind::Job => controller.flatten() == Some("CronJob"),
        _ => false,
    }
}

fn review_workload(
    d: &mut Decision,
    snap: &MeshSnapshot,
    ns_info: Option<&NamespaceInfo>,
    kind: &WorkloadKind,
    ns: &str,
    name: &str,
    object: ObjectView<'_>,
) {
    if judged_through_controller(kind, &object) {
        return;
    }
    let template = match object.pod_template(kind) {
        Ok(Some(t)) => t,
        Ok(None) => return,
        Err(e) => {
            let e = without_position(&e);
            d.warnings.push(shorten(&format!(
                "meshscope cannot read the pod template of {kind} {ns}/{name} ({e}); not checked"
            )));
            return;
        }
    };
    let PodTemplate {
        labels,
        annotations,
        has_proxy,
        proxy_gateway,
        host_network,
    } = template;
    let empty = NamespaceInfo::default();
    let injection = inject::evaluate(
        &PodFacts {
            namespace: ns,
            labels: &labels,
            annotations: &annotations,
            has_proxy,
            proxy_gateway,
            host_network,
            // Under admission, the pod does not exist yet: the injector's
            // rules decide what it will run.
            admitted: false,
        },
        ns_info.unwrap_or(&empty),
        &snap.options,
    );
    if let Some(f) = audit::unscoped(snap, kind.as_str(), ns, name, &injection, &labels) {
        match d.policy {
            Some(Policy::Enforce) => d.deny(&f),
            _ => d.warn(&f),
        }
        d.findings.push(f);
    }
    // Scoped, but by a Sidecar made from another workload's traffic: a
    // warning under every policy, since the workload does have a scope.
    if let Some(f) = audit::scoped_by_another(snap, kind.as_str(), ns, name, &injection, &labels) {
        d.warn(&f);
        d.findings.push(f);
    }
}

/// A ServiceEntry or Sidecar decoded in full (through a JSON tree, so that
/// an unreadable one is reported as before, without positions). These are
/// rare; workloads, the bulk of admissions, are read through
/// [`ObjectView`].
fn decode<T: serde::de::DeserializeOwned>(object: &RawValue) -> Result<T, serde_json::Error> {
    serde_json::from_str::<Value>(object.get()).and_then(serde_json::from_value)
}

// === ServiceEntries: MS0002 ===

fn review_service_entry(
    d: &mut Decision,
    req: &Request<'_>,
    snap: &MeshSnapshot,
    name: &str,
    object: &RawValue,
) {
    let ns = req.namespace;
    let se: ServiceEntry = match decode(object) {
        Ok(se) => se,
        Err(e) => {
            if req.endpoint == Endpoint::Validate {
                d.warnings.push(shorten(&format!(
                    "meshscope cannot read ServiceEntry {ns}/{name} ({e}); not checked"
                )));
            }
            return;
        }
    };
    let resolution = se.spec.resolution.as_deref().unwrap_or("NONE");
    if req.endpoint == Endpoint::Validate {
        review_entry_exports(d, snap, ns, name, &se);
    }
    let creating = req.operation == Operation::Create;
    let export_to = se.spec.export_to.as_deref();
    let Some(f) = audit::dns_service_entry(snap, ns, name, resolution, export_to, creating) else {
        return;
    };
    match req.endpoint {
        Endpoint::Mutate => {
            d.patch = Some(export_to_here_patch());
            d.warnings.push(shorten(&format!(
                "{}: meshscope set exportTo: [\".\"] on ServiceEntry {ns}/{name} (resolution {resolution}, no exportTo)",
                f.code
            )));
        }
        // With mutation on, /mutate has already set exportTo; an object that
        // still lacks it was not patched (the mutating webhook is not
        // registered or failed open), so the policy applies as usual.
        Endpoint::Validate => match d.policy {
            Some(Policy::Enforce) => d.deny(&f),
            _ => {
                d.warn(&f);
                // A new object's fix is in its manifest (the message).
                if !creating {
                    d.warnings.push(exports_hint(f.code, ns));
                }
            }
        },
    }
    d.findings.push(f);
}

/// MS0016 and MS0017: what the ServiceEntry alone (and the mesh config)
/// shows. Denied under `Enforce`, warned otherwise.
fn review_entry_exports(
    d: &mut Decision,
    snap: &MeshSnapshot,
    ns: &str,
    name: &str,
    se: &ServiceEntry,
) {
    let ports = crate::snapshot::catch_all_ports(&se.spec.ports);
    let facts = crate::exports::findings::EntryFacts {
        namespace: ns,
        name,
        hosts: &se.spec.hosts,
        addresses: &se.spec.addresses,
        catch_all_ports: &ports,
        export_to: se.spec.export_to.as_deref(),
    };
    for f in facts.findings(snap) {
        match d.policy {
            Some(Policy::Enforce) if d.allowed => d.deny(&f),
            _ => {
                d.warn(&f);
                d.warnings.push(exports_hint(f.code, ns));
            }
        }
        d.findings.push(f);
    }
}

/// The webhook sees no traffic: where the exportTo list comes from.
fn exports_hint(code: Code, ns: &str) -> String {
    shorten(&format!(
        "{code}: exportTo from traffic: kubectl meshscope recommend --exports -n {ns} --from-pod-logs"
    ))
}

/// `exportTo: ["."]`. `add` on an existing member replaces it, which covers
/// an explicit empty list; `spec` always exists on a ServiceEntry with a
/// resolution.
fn export_to_here_patch() -> Patch {
    Patch(vec![PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(["spec", "exportTo"]),
        value: Value::Array(vec![Value::String(".".into())]),
    })])
}

// === Sidecars: MS0004, MS0005, MS0006, MS0008 ===

fn review_sidecar(
    d: &mut Decision,
    req: &Request<'_>,
    snap: &MeshSnapshot,
    name: &str,
    object: &RawValue,
) {
    let ns = req.namespace;
    let mut incoming: Sidecar = match decode(object) {
        Ok(s) => s,
        Err(e) => {
            d.warnings.push(shorten(&format!(
                "meshscope cannot read Sidecar {ns}/{name} ({e}); not checked"
            )));
            return;
        }
    };
    for f in sidecar_hygiene(snap, ns, name, &mut incoming) {
        d.warn(&f);
        d.findings.push(f);
    }
}

/// The findings about an incoming Sidecar, judged in a snapshot of its
/// namespace where it replaces any Sidecar of the same name: MS0005, MS0006 and MS0008 from
/// `audit::sidecar_findings`, and MS0004 from `audit::conflicting_selectors`
/// on probe workloads labelled exactly like each selector that shares pods
/// with the new one (equal or nested selectors; the webhook does not see
/// pods).
pub fn sidecar_hygiene(
    snap: &MeshSnapshot,
    ns: &str,
    name: &str,
    incoming: &mut Sidecar,
) -> Vec<Finding> {
    incoming.metadata.namespace = Some(ns.to_string());
    incoming.metadata.name = Some(name.to_string());
    // The findings reported here only ever compare a Sidecar with the
    // others of its namespace, so the probe holds that namespace and its
    // Sidecars, not the whole mesh.
    let in_ns = || snap.sidecars_in(ns).iter().map(|&id| &snap.sidecars[id]);
    if incoming.metadata.creation_timestamp.is_none() {
        // Being created: newer than every Sidecar of its namespace.
        let newest = in_ns().filter_map(|s| s.created).max();
        let ts = newest
            .and_then(|n| Timestamp::from_nanosecond(n + 1_000_000_000).ok())
            .unwrap_or(Timestamp::UNIX_EPOCH);
        incoming.metadata.creation_timestamp = Some(Time(ts));
    }
    let mut inputs = Inputs {
        namespaces: snap
            .namespaces
            .get_key_value(ns)
            .map(|(n, info)| Namespace {
                metadata: ObjectMeta {
                    name: Some(n.clone()),
                    labels: Some(info.labels.clone()),
                    ..Default::default()
                },
                ..Default::default()
            })
            .into_iter()
            .collect(),
        ..Default::default()
    };
    inputs.sidecars = in_ns()
        .filter(|s| s.name != name)
        .map(|s| s.object.clone())
        .collect();
    inputs.sidecars.push(incoming.clone());
    let mut probe = MeshSnapshot::build_with_mesh(&inputs, snap.options.clone(), snap.mesh.clone());
    let Some(id) = probe
        .sidecars
        .iter()
        .position(|s| s.namespace == ns && s.name == name)
    else {
        return Vec::new();
    };
    let mut out: Vec<Finding> = audit::sidecar_findings(&probe, id)
        .into_iter()
        .filter(|f| SIDECAR_CODES.contains(&f.code))
        .collect();
    if let Some(sel) = probe.sidecars[id].selector.clone() {
        let mut label_sets = vec![sel.clone()];
        for &other in probe.sidecars_in(ns) {
            if other == id {
                continue;
            }
            if let Some(o) = &probe.sidecars[other].selector {
                if crate::snapshot::selector_matches(&sel, o) && !label_sets.contains(o) {
                    label_sets.push(o.clone());
                }
            }
        }
        for labels in label_sets {
            let w = probe.workloads.len();
            probe.workloads.push(probe_workload(ns, labels));
            if let Some(f) = audit::conflicting_selectors(&probe, w) {
                if !out.iter().any(|o| o.code == f.code) {
                    out.push(f);
                }
            }
        }
    }
    out
}

/// A stand-in for "pods with exactly these labels".
fn probe_workload(ns: &str, labels: Labels) -> Workload {
    Workload {
        kind: WorkloadKind::Other("pods labelled".into()),
        name: labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
        namespace: ns.to_string(),
        labels,
        annotations: Labels::new(),
        selector: None,
        pods: Vec::new(),
        replicas: 1,
        host_network: false,
        template_has_proxy: true,
        template_proxy_gateway: None,
        inbound: Default::default(),
        created: None,
        injection: inject::Injection {
            sidecar: true,
            reason: "probe".into(),
            ..Default::default()
        },
        proxy_pods: 0,
        exemption: Default::default(),
    }
}

#[cfg(test)]
mod tests;
