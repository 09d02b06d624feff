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
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;
use thiserror::Error;

use crate::audit::{self, Finding};
use crate::inject::{self, PodFacts};
use crate::inputs::Inputs;
use crate::istio::{ServiceEntry, Sidecar, NETWORKING_GROUP};
use crate::snapshot::{Labels, MeshSnapshot, NamespaceInfo, Workload, WorkloadKind};

/// Namespace label that sets the policy: `enforce`, `warn` or `off`.
pub const POLICY_LABEL: &str = "meshscope.io/policy";
/// Object annotation that exempts a workload or ServiceEntry; the value is
/// the reason and must not be empty.
pub const EXEMPT_ANNOTATION: &str = "meshscope.io/exempt";
/// kubectl shows warnings on one line; longer ones are shortened.
pub const MAX_WARNING_CHARS: usize = 120;
/// The Sidecar codes the webhook reports: the ones that need no pods or
/// services to decide (MS0004 is added by its own probe).
const SIDECAR_CODES: &[&str] = &["MS0005", "MS0006", "MS0008"];

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

// === ObjectView ===

/// The parts of an admitted object that the rules read, borrowed from the
/// request body. Every other field (most of a workload: containers' images,
/// env, probes, volumes...) is skipped without being decoded. The object
/// comes from the API server, which has already decoded and validated it
/// against its schema.
///
/// One view fits every kind the rules cover: a Pod's own labels and spec,
/// a controller's `spec.template`, a CronJob's
/// `spec.jobTemplate.spec.template`. ServiceEntries and Sidecars are
/// decoded in full by their rules.
#[derive(Debug)]
pub struct ObjectView<'a> {
    pub metadata: MetaView<'a>,
    spec: SpecView<'a>,
}

// One per request, on the stack: boxing the large variant would only add
// an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum SpecView<'a> {
    /// A workload's, read with the object.
    Workload(Option<WorkloadSpecView<'a>>),
    /// Any other object's, or a workload's whose one-pass read failed:
    /// decoded by kind when a rule gets to it, which then reports why it
    /// cannot be read.
    Json(Option<&'a RawValue>),
}

#[derive(Deserialize)]
struct WorkloadObjectView<'a> {
    #[serde(borrow, default)]
    metadata: MetaView<'a>,
    #[serde(borrow, default)]
    spec: Option<WorkloadSpecView<'a>>,
}

#[derive(Deserialize)]
struct JsonObjectView<'a> {
    #[serde(borrow, default)]
    metadata: MetaView<'a>,
    #[serde(borrow, default)]
    spec: Option<&'a RawValue>,
}

/// The `spec` of any workload kind: a Pod's containers and host network,
/// a controller's `template`, a CronJob's `jobTemplate`. Each kind has
/// only its own of these fields.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WorkloadSpecView<'a> {
    #[serde(borrow, default)]
    containers: Option<Vec<NamedView<'a>>>,
    #[serde(borrow, default)]
    init_containers: Option<Vec<NamedView<'a>>>,
    #[serde(default)]
    host_network: Option<bool>,
    #[serde(borrow, default)]
    template: Option<TemplateView<'a>>,
    #[serde(borrow, default)]
    job_template: Option<JobTemplateView<'a>>,
}

/// `metadata`, as far as the rules read it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetaView<'a> {
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub generate_name: Option<Cow<'a, str>>,
    /// Set (not null) on an object being deleted.
    #[serde(default)]
    deletion_timestamp: Option<IgnoredAny>,
    #[serde(borrow, default)]
    owner_references: Option<Vec<OwnerView<'a>>>,
    /// Kept as JSON: the exemption reads one key of the annotations, and
    /// only a bare Pod needs its labels and annotations decoded (they are
    /// its pod template's).
    #[serde(borrow, default)]
    labels: Option<&'a RawValue>,
    #[serde(borrow, default)]
    annotations: Option<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
struct OwnerView<'a> {
    #[serde(default)]
    controller: Option<bool>,
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
}

/// The value of [`EXEMPT_ANNOTATION`] in an annotations map, if any; the
/// other annotations are skipped.
struct ExemptAnnotation(Option<Value>);

impl<'de> Deserialize<'de> for ExemptAnnotation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Find;
        impl<'de> Visitor<'de> for Find {
            type Value = ExemptAnnotation;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_unit<E>(self) -> Result<ExemptAnnotation, E> {
                Ok(ExemptAnnotation(None))
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<ExemptAnnotation, A::Error> {
                let mut found = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == EXEMPT_ANNOTATION {
                        found = Some(map.next_value::<Value>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(ExemptAnnotation(found))
            }
        }
        d.deserialize_any(Find)
    }
}

/// A pod template: `spec.template` of a controller, the Pod itself for a
/// bare Pod.
#[derive(Debug, Default, Deserialize)]
struct TemplateView<'a> {
    #[serde(default)]
    metadata: Option<TemplateMetaView>,
    #[serde(borrow, default)]
    spec: Option<PodSpecView<'a>>,
}

#[derive(Debug, Default, Deserialize)]
struct TemplateMetaView {
    #[serde(default)]
    labels: Option<Labels>,
    #[serde(default)]
    annotations: Option<Labels>,
}

/// What injection looks at in a pod spec.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpecView<'a> {
    #[serde(borrow, default)]
    containers: Option<Vec<NamedView<'a>>>,
    #[serde(borrow, default)]
    init_containers: Option<Vec<NamedView<'a>>>,
    #[serde(default)]
    host_network: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct NamedView<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

/// `spec` of a Deployment, StatefulSet, DaemonSet, ReplicaSet or Job.
#[derive(Debug, Deserialize)]
struct ControllerSpecView<'a> {
    #[serde(borrow, default)]
    template: Option<TemplateView<'a>>,
}

/// `spec` of a CronJob: `jobTemplate.spec.template`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CronJobSpecView<'a> {
    #[serde(borrow, default)]
    job_template: Option<JobTemplateView<'a>>,
}

#[derive(Debug, Deserialize)]
struct JobTemplateView<'a> {
    #[serde(borrow, default)]
    spec: Option<ControllerSpecView<'a>>,
}

impl<'a> ObjectView<'a> {
    /// Reads the view from the object's JSON; for a workload (`workload`
    /// true) with its pod template, in the same pass.
    pub fn read(object: &'a RawValue, workload: bool) -> Result<Self, serde_json::Error> {
        if workload {
            // Fails only on a field that is not what its schema says; the
            // second read below then leaves the spec for the rule to report.
            if let Ok(v) = serde_json::from_str::<WorkloadObjectView<'a>>(object.get()) {
                return Ok(ObjectView {
                    metadata: v.metadata,
                    spec: SpecView::Workload(v.spec),
                });
            }
        }
        let v: JsonObjectView<'a> = serde_json::from_str(object.get())?;
        Ok(ObjectView {
            metadata: v.metadata,
            spec: SpecView::Json(v.spec),
        })
    }

    /// Whether the object is being deleted.
    pub fn is_terminating(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// `meshscope.io/exempt` on the object.
    pub fn exemption(&self) -> Exemption {
        let found = self
            .metadata
            .annotations
            .and_then(|a| serde_json::from_str::<ExemptAnnotation>(a.get()).ok())
            .and_then(|e| e.0);
        match found {
            None => Exemption::None,
            Some(v) => match v.as_str().map(str::trim) {
                Some(r) if !r.is_empty() => Exemption::Exempt(r.to_string()),
                _ => Exemption::NoReason,
            },
        }
    }

    /// The kind of the controller that owns the object, if one does.
    fn controller(&self) -> Option<Option<&str>> {
        let owners = self.metadata.owner_references.as_deref()?;
        let r = owners.iter().find(|r| r.controller == Some(true))?;
        Some(r.kind.as_deref())
    }

    /// The pod template of a workload object (for a Pod, the pod itself),
    /// or `None` when it has none.
    fn pod_template(
        self,
        kind: &WorkloadKind,
    ) -> Result<Option<TemplateView<'a>>, serde_json::Error> {
        let spec = match self.spec {
            SpecView::Workload(spec) => spec,
            SpecView::Json(None) => None,
            SpecView::Json(Some(raw)) => match kind {
                WorkloadKind::Pod => serde_json::from_str::<Option<PodSpecView<'a>>>(raw.get())?
                    .map(PodSpecView::into_workload_spec),
                WorkloadKind::CronJob => {
                    serde_json::from_str::<Option<CronJobSpecView<'a>>>(raw.get())?
                        .map(CronJobSpecView::into_workload_spec)
                }
                _ => serde_json::from_str::<Option<ControllerSpecView<'a>>>(raw.get())?
                    .map(ControllerSpecView::into_workload_spec),
            },
        };
        match kind {
            WorkloadKind::Pod => {
                let labels = decode_labels(self.metadata.labels)?;
                let annotations = decode_labels(self.metadata.annotations)?;
                Ok(Some(TemplateView {
                    metadata: Some(TemplateMetaView {
                        labels,
                        annotations,
                    }),
                    spec: spec.map(|s| PodSpecView {
                        containers: s.containers,
                        init_containers: s.init_containers,
                        host_network: s.host_network,
                    }),
                }))
            }
            WorkloadKind::CronJob => Ok(spec
                .and_then(|s| s.job_template)
                .and_then(|j| j.spec)
                .and_then(|s| s.template)),
            _ => Ok(spec.and_then(|s| s.template)),
        }
    }
}

fn decode_labels(raw: Option<&RawValue>) -> Result<Option<Labels>, serde_json::Error> {
    match raw {
        Some(raw) => serde_json::from_str(raw.get()),
        None => Ok(None),
    }
}

impl<'a> PodSpecView<'a> {
    fn into_workload_spec(self) -> WorkloadSpecView<'a> {
        WorkloadSpecView {
            containers: self.containers,
            init_containers: self.init_containers,
            host_network: self.host_network,
            template: None,
            job_template: None,
        }
    }
}

impl<'a> ControllerSpecView<'a> {
    fn into_workload_spec(self) -> WorkloadSpecView<'a> {
        WorkloadSpecView {
            containers: None,
            init_containers: None,
            host_network: None,
            template: self.template,
            job_template: None,
        }
    }
}

impl<'a> CronJobSpecView<'a> {
    fn into_workload_spec(self) -> WorkloadSpecView<'a> {
        WorkloadSpecView {
            containers: None,
            init_containers: None,
            host_network: None,
            template: None,
            job_template: self.job_template,
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
        self.findings.iter().map(|f| f.code).collect()
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
pub fn finding_warning(code: &str, message: &str) -> String {
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

/// `meshscope.io/exempt` on an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exemption {
    None,
    /// The annotation with its reason.
    Exempt(String),
    /// The annotation with an empty reason: not an exemption.
    NoReason,
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
        Exemption::NoReason if !mutating => d.warnings.push(shorten(&format!(
            "{EXEMPT_ANNOTATION} on {} {}/{name} has no reason, so it is ignored",
            req.kind, req.namespace
        ))),
        _ => {}
    }
    match subject {
        Subject::Workload(kind) => {
            review_workload(&mut d, snap, ns_info, &kind, req.namespace, &name, view)
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
    let meta = template.metadata.unwrap_or_default();
    let labels: Labels = meta.labels.unwrap_or_default();
    let annotations: Labels = meta.annotations.unwrap_or_default();
    let spec = template.spec.unwrap_or_default();
    let has_proxy = spec
        .containers
        .iter()
        .flatten()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| c.name.as_deref() == Some(crate::inject::PROXY_CONTAINER));
    let empty = NamespaceInfo::default();
    let injection = inject::evaluate(
        &PodFacts {
            namespace: ns,
            labels: &labels,
            annotations: &annotations,
            has_proxy,
            host_network: spec.host_network.unwrap_or(false),
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
    let Some(f) =
        audit::dns_service_entry(snap, ns, name, resolution, se.spec.export_to.as_deref())
    else {
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
            _ => d.warn(&f),
        },
    }
    d.findings.push(f);
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
        inbound: Default::default(),
        created: None,
        injection: inject::Injection {
            sidecar: true,
            ambient: false,
            reason: "probe".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::audit::{audit, AuditScope};
    use crate::mesh::{MeshConfig, Options};

    // === builders ===

    fn mk_namespace(name: &str, labels: &[(&str, &str)]) -> Value {
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    }

    fn mk_sidecar(
        ns: &str,
        name: &str,
        selector: Option<&[(&str, &str)]>,
        hosts: &[&str],
    ) -> Value {
        let mut spec = json!({});
        if let Some(sel) = selector {
            let labels: serde_json::Map<String, Value> =
                sel.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
            spec["workloadSelector"] = json!({ "labels": labels });
        }
        if !hosts.is_empty() {
            spec["egress"] = json!([{ "hosts": hosts }]);
        }
        json!({
            "apiVersion": "networking.istio.io/v1", "kind": "Sidecar",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": spec
        })
    }

    fn mk_deployment(ns: &str, name: &str, labels: &[(&str, &str)]) -> Value {
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "app", "image": "app:1"}]}
                }
            }
        })
    }

    fn mk_service_entry(
        ns: &str,
        name: &str,
        resolution: &str,
        export_to: Option<&[&str]>,
    ) -> Value {
        let mut v = json!({
            "apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"hosts": ["api.example.com"], "ports": [{"number": 443, "name": "tls", "protocol": "TLS"}],
                     "resolution": resolution, "location": "MESH_EXTERNAL"}
        });
        if let Some(e) = export_to {
            v["spec"]["exportTo"] = json!(e);
        }
        v
    }

    /// Namespaces `enforce`, `warn`, `off` and `plain` (no policy label),
    /// all injected, plus `ambient` and `uninjected`.
    fn mesh(extra: impl IntoIterator<Item = Value>) -> MeshSnapshot {
        mesh_with(extra, MeshConfig::default(), Options::default())
    }

    fn mesh_with(
        extra: impl IntoIterator<Item = Value>,
        mesh: MeshConfig,
        options: Options,
    ) -> MeshSnapshot {
        let mut inputs = Inputs::default();
        for (ns, policy) in [("enforce", "enforce"), ("warn", "warn"), ("off", "off")] {
            inputs
                .add(mk_namespace(
                    ns,
                    &[("istio-injection", "enabled"), (POLICY_LABEL, policy)],
                ))
                .unwrap();
        }
        inputs
            .add(mk_namespace("plain", &[("istio-injection", "enabled")]))
            .unwrap();
        inputs
            .add(mk_namespace(
                "ambient",
                &[
                    ("istio.io/dataplane-mode", "ambient"),
                    (POLICY_LABEL, "enforce"),
                ],
            ))
            .unwrap();
        inputs
            .add(mk_namespace("uninjected", &[(POLICY_LABEL, "enforce")]))
            .unwrap();
        inputs.add(mk_namespace("istio-system", &[])).unwrap();
        for v in extra {
            inputs.add(v).unwrap();
        }
        MeshSnapshot::build_with_mesh(&inputs, options, mesh)
    }

    fn enforce_cfg() -> Config {
        Config {
            default_policy: Policy::Warn,
            mutate_service_entry_export_to: false,
        }
    }

    fn request<'a>(endpoint: Endpoint, op: Operation, object: &'a Value) -> Request<'a> {
        let kind = object["kind"].as_str().unwrap();
        let group = object["apiVersion"]
            .as_str()
            .unwrap()
            .split_once('/')
            .map_or("", |(g, _)| g);
        Request {
            endpoint,
            operation: op,
            group,
            kind,
            namespace: object["metadata"]["namespace"].as_str().unwrap(),
            name: object["metadata"]["name"].as_str().unwrap_or(""),
            // As the webhook gets it: the object's JSON. Leaked: a test's
            // few objects live until the test ends anyway.
            object: Some(Box::leak(
                serde_json::value::to_raw_value(object).expect("must encode"),
            )),
            namespace_fallback: None,
        }
    }

    fn validate(snap: &MeshSnapshot, object: &Value) -> Decision {
        review(
            &request(Endpoint::Validate, Operation::Create, object),
            snap,
            &enforce_cfg(),
        )
    }

    fn codes(d: &Decision) -> Vec<&'static str> {
        d.codes()
    }

    // === MS0001 ===

    #[test]
    fn enforce_denies_an_unscoped_deployment_with_the_audit_message() {
        let dep = mk_deployment("enforce", "worker", &[("app", "worker")]);
        let d = validate(&mesh([]), &dep);
        assert!(!d.allowed);
        assert_eq!(
            d.message.as_deref(),
            Some("MS0001: Deployment enforce/worker has no Sidecar scope; run: kubectl meshscope apply -n enforce --workload deployment/worker --from-pod-logs (not running yet: kubectl meshscope apply -n enforce --per-namespace --from-pod-logs)")
        );
        assert_eq!(d.outcome(), Outcome::Denied);

        // The audit of a cluster holding the same object says the same.
        let snap = mesh([dep.clone()]);
        let found = audit(
            &snap,
            None,
            &AuditScope {
                namespaces: None,
                workloads: None,
            },
        );
        let f = found.iter().find(|f| f.code == "MS0001").unwrap();
        assert_eq!(format!("{}: {}", f.code, f.message), d.message.unwrap());
    }

    #[test]
    fn warn_allows_an_unscoped_deployment_with_one_short_warning() {
        let d = validate(
            &mesh([]),
            &mk_deployment("warn", "worker", &[("app", "worker")]),
        );
        assert!(d.allowed);
        assert_eq!(d.warnings, vec!["MS0001: Deployment warn/worker has no Sidecar scope; see kubectl meshscope codes MS0001"]);
        assert_eq!(d.outcome(), Outcome::Warned);
    }

    #[test]
    fn off_and_unlabelled_namespaces_follow_their_policy() {
        let snap = mesh([]);
        let d = validate(&snap, &mk_deployment("off", "worker", &[("app", "worker")]));
        assert_eq!(
            (d.allowed, d.warnings.len(), d.policy),
            (true, 0, Some(Policy::Off))
        );
        // No label: the default policy.
        let dep = mk_deployment("plain", "worker", &[("app", "worker")]);
        let d = validate(&snap, &dep);
        assert!(d.allowed && d.warnings.len() == 1);
        let cfg = Config {
            default_policy: Policy::Enforce,
            ..enforce_cfg()
        };
        let d = review(
            &request(Endpoint::Validate, Operation::Update, &dep),
            &snap,
            &cfg,
        );
        assert!(!d.allowed);
    }

    #[test]
    fn uninjected_and_ambient_workloads_need_no_scope() {
        let snap = mesh([]);
        for ns in ["uninjected", "ambient"] {
            let d = validate(&snap, &mk_deployment(ns, "worker", &[("app", "worker")]));
            assert_eq!(
                d,
                Decision {
                    policy: Some(Policy::Enforce),
                    ..Decision::allow()
                },
                "{ns}"
            );
        }
        // A pod label opts out of injection.
        let d = validate(
            &snap,
            &mk_deployment("enforce", "w", &[("sidecar.istio.io/inject", "false")]),
        );
        assert!(d.allowed);
        // enableNamespacesByDefault injects unlabelled namespaces.
        let options = Options {
            inject_by_default: true,
            ..Options::default()
        };
        let snap = mesh_with(
            [mk_namespace("bare", &[(POLICY_LABEL, "enforce")])],
            MeshConfig::default(),
            options,
        );
        assert!(!validate(&snap, &mk_deployment("bare", "w", &[("app", "w")])).allowed);
    }

    #[test]
    fn any_sidecar_istiod_would_apply_scopes_the_workload() {
        let dep = mk_deployment("enforce", "worker", &[("app", "worker")]);
        let selector = mk_sidecar("enforce", "worker", Some(&[("app", "worker")]), &["./*"]);
        let other = mk_sidecar("enforce", "other", Some(&[("app", "other")]), &["./*"]);
        let ns_default = mk_sidecar("enforce", "default", None, &["./*"]);
        let root = mk_sidecar("istio-system", "default", None, &["./*"]);
        assert!(validate(&mesh([selector]), &dep).allowed);
        assert!(!validate(&mesh([other.clone()]), &dep).allowed);
        assert!(validate(&mesh([other, ns_default]), &dep).allowed);
        assert!(validate(&mesh([root]), &dep).allowed);
        // A selector Sidecar in the root namespace is not a mesh default.
        let root_sel = mk_sidecar("istio-system", "sel", Some(&[("app", "worker")]), &["./*"]);
        assert!(!validate(&mesh([root_sel]), &dep).allowed);
    }

    // === MS0012 ===

    /// A Sidecar meshscope generated for `workload` (a Deployment).
    fn mk_managed_sidecar(ns: &str, name: &str, sel: &[(&str, &str)], workload: &str) -> Value {
        let mut v = mk_sidecar(ns, name, Some(sel), &["./*"]);
        v["metadata"]["labels"] = json!({
            "app.kubernetes.io/managed-by": "kubectl-meshscope",
            "meshscope.io/workload-kind": "Deployment",
            "meshscope.io/workload-name": workload,
        });
        v
    }

    #[test]
    fn a_workload_scoped_by_another_workloads_generated_sidecar_gets_an_ms0012_warning() {
        let reviews = mk_managed_sidecar(
            "enforce",
            "reviews-v2-deployment-meshscope",
            &[("version", "v2")],
            "reviews-v2",
        );
        let snap = mesh([reviews]);
        // ratings-v2, created after reviews-v2's Sidecar, carries version: v2.
        let dep = mk_deployment(
            "enforce",
            "ratings-v2",
            &[("app", "ratings"), ("version", "v2")],
        );
        let d = validate(&snap, &dep);
        // It has a scope, so even enforce only warns.
        assert!(d.allowed, "{d:?}");
        assert_eq!(codes(&d), ["MS0012"]);
        assert_eq!(d.warnings.len(), 1);
        assert!(
            d.warnings[0] == "MS0012: Deployment enforce/ratings-v2 is scoped by the Sidecar generated for Deployment reviews-v2",
            "{:?}",
            d.warnings
        );
        assert!(d.warnings[0].chars().count() <= MAX_WARNING_CHARS);
        // The same finding as the audit's for that workload.
        let mut inputs = Inputs::default();
        inputs
            .add(mk_namespace("enforce", &[("istio-injection", "enabled")]))
            .unwrap();
        inputs.add(dep.clone()).unwrap();
        inputs
            .add(mk_managed_sidecar(
                "enforce",
                "reviews-v2-deployment-meshscope",
                &[("version", "v2")],
                "reviews-v2",
            ))
            .unwrap();
        let full = MeshSnapshot::build(&inputs, Options::default()).unwrap();
        let found = audit(
            &full,
            None,
            &AuditScope {
                namespaces: None,
                workloads: None,
            },
        );
        let f = found.iter().find(|f| f.code == "MS0012").unwrap();
        assert_eq!(f, &d.findings[0]);

        // The workload the Sidecar was generated for is not warned.
        let own = mk_deployment(
            "enforce",
            "reviews-v2",
            &[("app", "reviews"), ("version", "v2")],
        );
        let d = validate(&snap, &own);
        assert!(d.allowed && d.warnings.is_empty(), "{d:?}");
        // Nor is one selected by a Sidecar its owner wrote.
        let mine = mk_sidecar("enforce", "mine", Some(&[("version", "v2")]), &["./*"]);
        let d = validate(&mesh([mine]), &dep);
        assert!(d.allowed && d.warnings.is_empty(), "{d:?}");
        // Under warn, the warning is the same and nothing is denied.
        let mut warn_dep = dep.clone();
        warn_dep["metadata"]["namespace"] = json!("warn");
        let snap = mesh([mk_managed_sidecar(
            "warn",
            "reviews-v2-deployment-meshscope",
            &[("version", "v2")],
            "reviews-v2",
        )]);
        assert_eq!(codes(&validate(&snap, &warn_dep)), ["MS0012"]);
    }

    #[test]
    fn every_workload_kind_is_read_from_its_pod_template() {
        let snap = mesh([]);
        let tpl =
            json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}});
        let objects = [
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "x", "namespace": "enforce"}, "spec": {"template": tpl}}),
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "x", "namespace": "enforce"}, "spec": {"template": tpl}}),
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "x", "namespace": "enforce"}, "spec": {"template": tpl}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x", "namespace": "enforce"}, "spec": {"template": tpl}}),
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "x", "namespace": "enforce"}, "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": tpl}}}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "enforce", "labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}}),
        ];
        for o in &objects {
            let d = validate(&snap, o);
            let kind = o["kind"].as_str().unwrap();
            assert_eq!(
                d.message
                    .as_deref()
                    .map(|m| m.starts_with(&format!("MS0001: {kind} enforce/x "))),
                Some(true),
                "{kind}"
            );
        }
    }

    #[test]
    fn controller_owned_pods_replicasets_and_cronjob_jobs_are_judged_through_their_controller() {
        let snap = mesh([]);
        let owner = |kind: &str| json!([{"apiVersion": "apps/v1", "kind": kind, "name": "o", "uid": "1", "controller": true}]);
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "enforce", "ownerReferences": owner("ReplicaSet")}, "spec": {"containers": [{"name": "c"}]}});
        assert!(validate(&snap, &pod).allowed);
        let tpl = json!({"spec": {"containers": [{"name": "c"}]}});
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "r", "namespace": "enforce", "ownerReferences": owner("Deployment")}, "spec": {"template": tpl}});
        assert!(validate(&snap, &rs).allowed);
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "enforce", "ownerReferences": owner("CronJob")}, "spec": {"template": tpl}});
        assert!(validate(&snap, &job).allowed);
        // A Job owned by something else is still checked.
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "enforce", "ownerReferences": owner("Workflow")}, "spec": {"template": tpl}});
        assert!(!validate(&snap, &job).allowed);
    }

    #[test]
    fn an_istio_proxy_container_or_host_network_decides_injection() {
        let snap = mesh([]);
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "uninjected"},
                         "spec": {"containers": [{"name": "app"}, {"name": "istio-proxy"}]}});
        assert!(!validate(&snap, &pod).allowed);
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "enforce"},
                         "spec": {"hostNetwork": true, "containers": [{"name": "app"}]}});
        assert!(validate(&snap, &pod).allowed);
    }

    #[test]
    fn exemptions_need_a_reason() {
        let snap = mesh([]);
        let mut dep = mk_deployment("enforce", "worker", &[("app", "worker")]);
        dep["metadata"]["annotations"] =
            json!({EXEMPT_ANNOTATION: "batch job, talks to everything"});
        let d = validate(&snap, &dep);
        assert!(d.allowed && d.warnings.is_empty());
        assert_eq!(d.exempt.as_deref(), Some("batch job, talks to everything"));
        assert_eq!(d.outcome(), Outcome::Exempt);
        dep["metadata"]["annotations"] = json!({EXEMPT_ANNOTATION: "  "});
        let d = validate(&snap, &dep);
        assert!(!d.allowed);
        assert_eq!(d.exempt, None);
        assert_eq!(
            d.warnings,
            vec![
                "meshscope.io/exempt on Deployment enforce/worker has no reason, so it is ignored"
            ]
        );
    }

    #[test]
    fn deletes_connects_other_kinds_and_terminating_objects_are_allowed() {
        let snap = mesh([]);
        let dep = mk_deployment("enforce", "worker", &[("app", "worker")]);
        for op in [Operation::Delete, Operation::Connect] {
            assert_eq!(
                review(
                    &request(Endpoint::Validate, op, &dep),
                    &snap,
                    &enforce_cfg()
                ),
                Decision::allow()
            );
        }
        let mut r = request(Endpoint::Validate, Operation::Delete, &dep);
        r.object = None;
        assert_eq!(review(&r, &snap, &enforce_cfg()), Decision::allow());
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "enforce"}});
        assert_eq!(validate(&snap, &cm), Decision::allow());
        let mut gone = dep.clone();
        gone["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        assert_eq!(
            review(
                &request(Endpoint::Validate, Operation::Update, &gone),
                &snap,
                &enforce_cfg()
            ),
            Decision::allow()
        );
    }

    #[test]
    fn a_namespace_the_snapshot_does_not_know_yet_uses_the_fallback() {
        let snap = mesh([]);
        let dep = mk_deployment("fresh", "worker", &[("app", "worker")]);
        let mut r = request(Endpoint::Validate, Operation::Create, &dep);
        assert!(review(&r, &snap, &enforce_cfg()).allowed);
        let info = NamespaceInfo {
            labels: [
                ("istio-injection".to_string(), "enabled".to_string()),
                (POLICY_LABEL.to_string(), "enforce".to_string()),
            ]
            .into(),
        };
        r.namespace_fallback = Some(&info);
        assert!(!review(&r, &snap, &enforce_cfg()).allowed);
    }

    #[test]
    fn generated_names_are_shown_as_prefixes() {
        let mut dep = mk_deployment("enforce", "", &[("app", "w")]);
        dep["metadata"].as_object_mut().unwrap().remove("name");
        dep["metadata"]["generateName"] = json!("worker-");
        let d = validate(&mesh([]), &dep);
        assert!(d
            .message
            .unwrap()
            .starts_with("MS0001: Deployment enforce/worker-* has no Sidecar scope"));
    }

    // === MS0002 ===

    #[test]
    fn dns_service_entries_without_export_to_are_denied_or_warned() {
        let snap = mesh([]);
        let se = mk_service_entry("enforce", "api", "DNS", None);
        let d = validate(&snap, &se);
        assert!(!d.allowed);
        assert!(d
            .message
            .unwrap()
            .starts_with("MS0002: ServiceEntry enforce/api has resolution DNS and no exportTo"));
        let d = validate(
            &snap,
            &mk_service_entry("warn", "api", "DNS_ROUND_ROBIN", None),
        );
        assert!(d.allowed && codes(&d) == ["MS0002"] && d.warnings.len() == 1);
        assert!(d.warnings[0].chars().count() <= MAX_WARNING_CHARS);
        for ok in [
            mk_service_entry("enforce", "api", "DNS", Some(&["."])),
            mk_service_entry("enforce", "api", "STATIC", None),
            mk_service_entry("enforce", "api", "NONE", None),
        ] {
            assert!(validate(&snap, &ok).allowed);
        }
        // An explicit empty list is as good as none.
        assert!(!validate(&snap, &mk_service_entry("enforce", "api", "DNS", Some(&[]))).allowed);
        // When the mesh exports nothing everywhere by default, there is no risk.
        let private = MeshConfig {
            default_service_export_to: vec![".".into()],
            ..MeshConfig::default()
        };
        assert!(validate(&mesh_with([], private, Options::default()), &se).allowed);
        // Nor when the mesh's serviceEntryVisibility keeps the namespace's
        // ServiceEntries to it for sidecars (Istio 1.31+).
        let capped = |apply: bool| {
            MeshConfig::from_yaml(&format!(
                "serviceEntryVisibility:\n  applyToSidecars: {apply}\n  policies:\n  - visibility: NAMESPACE\n    matchingRules:\n    - namespaceSelector:\n        matchLabels: {{{POLICY_LABEL}: enforce}}\n"
            ))
            .unwrap()
        };
        assert!(validate(&mesh_with([], capped(true), Options::default()), &se).allowed);
        let d = validate(&mesh_with([], capped(false), Options::default()), &se);
        assert!(!d.allowed);
        assert!(d
            .message
            .unwrap()
            .ends_with("or set meshConfig.serviceEntryVisibility.applyToSidecars: true (it makes ServiceEntries in enforce visible NAMESPACE, which sidecars ignore until then)"));
        let before = Options {
            istio: "1.30".parse().unwrap(),
            ..Options::default()
        };
        assert!(!validate(&mesh_with([], capped(true), before), &se).allowed);
    }

    #[test]
    fn mutate_mode_patches_export_to_here_and_says_so() {
        let snap = mesh([]);
        let cfg = Config {
            mutate_service_entry_export_to: true,
            ..enforce_cfg()
        };
        let mut se = mk_service_entry("enforce", "api", "DNS", None);
        let d = review(
            &request(Endpoint::Mutate, Operation::Create, &se),
            &snap,
            &cfg,
        );
        assert!(d.allowed);
        assert_eq!(d.outcome(), Outcome::Patched);
        assert_eq!(d.warnings, vec!["MS0002: meshscope set exportTo: [\".\"] on ServiceEntry enforce/api (resolution DNS, no exportTo)"]);
        json_patch::patch(&mut se, &d.patch.unwrap()).unwrap();
        assert_eq!(se["spec"]["exportTo"], json!(["."]));
        // The validating webhook then sees the patched object.
        assert!(
            review(
                &request(Endpoint::Validate, Operation::Create, &se),
                &snap,
                &cfg
            )
            .allowed
        );
        // ...and still denies one that was not patched.
        let unpatched = mk_service_entry("enforce", "api", "DNS", None);
        assert!(
            !review(
                &request(Endpoint::Validate, Operation::Create, &unpatched),
                &snap,
                &cfg
            )
            .allowed
        );
    }

    #[test]
    fn the_mutating_endpoint_does_nothing_else() {
        let snap = mesh([]);
        let se = mk_service_entry("enforce", "api", "DNS", None);
        // Mutation off: no patch, no warning (the validating webhook speaks).
        assert_eq!(
            review(
                &request(Endpoint::Mutate, Operation::Create, &se),
                &snap,
                &enforce_cfg()
            ),
            Decision::allow()
        );
        let cfg = Config {
            mutate_service_entry_export_to: true,
            ..enforce_cfg()
        };
        let dep = mk_deployment("enforce", "worker", &[("app", "worker")]);
        assert_eq!(
            review(
                &request(Endpoint::Mutate, Operation::Create, &dep),
                &snap,
                &cfg
            ),
            Decision::allow()
        );
        // Off namespaces and exempt objects are left alone.
        let off = mk_service_entry("off", "api", "DNS", None);
        assert!(review(
            &request(Endpoint::Mutate, Operation::Create, &off),
            &snap,
            &cfg
        )
        .patch
        .is_none());
        let mut exempt = se.clone();
        exempt["metadata"]["annotations"] = json!({EXEMPT_ANNOTATION: "shared egress gateway"});
        let d = review(
            &request(Endpoint::Mutate, Operation::Update, &exempt),
            &snap,
            &cfg,
        );
        assert!(d.patch.is_none() && d.exempt.is_some());
    }

    // === Sidecar hygiene ===

    #[test]
    fn a_sidecar_without_egress_gets_ms0006_and_is_never_denied() {
        let sc = mk_sidecar("enforce", "web", Some(&[("app", "web")]), &[]);
        let d = validate(&mesh([]), &sc);
        assert!(d.allowed);
        assert_eq!(codes(&d), ["MS0006"]);
        assert!(d.warnings[0].starts_with("MS0006: Sidecar enforce/web has no egress"));
    }

    #[test]
    fn a_second_namespace_default_gets_ms0005() {
        let old = mk_sidecar("warn", "default", None, &["./*"]);
        // Being created, it has no creation time yet: it is the newest.
        let mut new = mk_sidecar("warn", "another", None, &["./*"]);
        new["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("creationTimestamp");
        let d = validate(&mesh([old.clone()]), &new);
        assert_eq!(codes(&d), ["MS0005"]);
        assert!(
            d.findings[0]
                .message
                .contains("istiod uses default (the oldest)"),
            "{:?}",
            d.findings
        );
        // Updating the one default is not a conflict with itself.
        let d = review(
            &request(Endpoint::Validate, Operation::Update, &old),
            &mesh([old.clone()]),
            &enforce_cfg(),
        );
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    }

    #[test]
    fn equal_or_nested_selectors_get_ms0004() {
        let old = mk_sidecar("warn", "web", Some(&[("app", "web")]), &["./*"]);
        let snap = mesh([old]);
        let same = mk_sidecar("warn", "web-2", Some(&[("app", "web")]), &["./*"]);
        let d = validate(&snap, &same);
        assert_eq!(codes(&d), ["MS0004"]);
        assert!(
            d.findings[0]
                .message
                .contains("(web, web-2); istiod uses web (the oldest)"),
            "{}",
            d.findings[0].message
        );
        let narrower = mk_sidecar(
            "warn",
            "web-v2",
            Some(&[("app", "web"), ("version", "v2")]),
            &["./*"],
        );
        assert_eq!(codes(&validate(&snap, &narrower)), ["MS0004"]);
        let disjoint = mk_sidecar("warn", "api", Some(&[("app", "api")]), &["./*"]);
        assert!(validate(&snap, &disjoint).warnings.is_empty());
        // Another namespace's Sidecars never conflict.
        let elsewhere = mk_sidecar("enforce", "web", Some(&[("app", "web")]), &["./*"]);
        assert!(validate(&snap, &elsewhere).warnings.is_empty());
    }

    #[test]
    fn a_root_namespace_sidecar_with_a_selector_gets_ms0008() {
        let sc = mk_sidecar("istio-system", "gw", Some(&[("app", "gw")]), &["./*"]);
        assert_eq!(codes(&validate(&mesh([]), &sc)), ["MS0008"]);
        let root_default = mk_sidecar("istio-system", "default", None, &["./*"]);
        assert!(validate(&mesh([]), &root_default).warnings.is_empty());
    }

    #[test]
    fn sidecar_checks_follow_the_namespace_policy_and_exemptions() {
        let mut sc = mk_sidecar("off", "web", None, &[]);
        assert!(validate(&mesh([]), &sc).warnings.is_empty());
        sc["metadata"]["namespace"] = json!("warn");
        sc["metadata"]["annotations"] = json!({EXEMPT_ANNOTATION: "ingress tuning only"});
        assert!(validate(&mesh([]), &sc).warnings.is_empty());
    }

    #[test]
    fn the_registered_kinds_are_exactly_the_ones_the_rules_read() {
        for (group, _, kind) in VALIDATED {
            assert!(subject(group, kind).is_some(), "{group}/{kind}");
        }
        for (group, _, kind) in MUTATED {
            assert_eq!(subject(group, kind), Some(Subject::ServiceEntry));
        }
        assert_eq!(subject("apps", "ControllerRevision"), None);
        assert_eq!(subject("", "Sidecar"), None);
    }

    // === warnings ===

    #[test]
    fn warnings_that_fit_are_kept_whole() {
        assert_eq!(finding_warning("MS0006", "short"), "MS0006: short");
    }

    #[test]
    fn long_warnings_keep_the_first_clause_and_point_at_the_code() {
        let msg = "Deployment shop/worker has no Sidecar scope; run: kubectl meshscope apply -n shop --workload deployment/worker --from-pod-logs (not running yet: kubectl meshscope apply -n shop --per-namespace --from-pod-logs)";
        let w = finding_warning("MS0001", msg);
        assert_eq!(
            w,
            "MS0001: Deployment shop/worker has no Sidecar scope; see kubectl meshscope codes MS0001"
        );
        let long = format!("{} {}", "word".repeat(20), "x ".repeat(60));
        let w = finding_warning("MS0001", &long);
        assert!(w.chars().count() <= MAX_WARNING_CHARS, "{w}");
        assert!(w.ends_with('…'));
    }

    #[test]
    fn policies_parse_and_bad_labels_fall_back_with_a_warning() {
        assert_eq!("enforce".parse::<Policy>(), Ok(Policy::Enforce));
        assert!("Enforce".parse::<Policy>().is_err());
        let info = NamespaceInfo {
            labels: [(POLICY_LABEL.to_string(), "block".to_string())].into(),
        };
        let (p, w) = namespace_policy("shop", Some(&info), Policy::Warn);
        assert_eq!(p, Policy::Warn);
        assert!(w.unwrap().contains("\"block\""));
        assert_eq!(
            namespace_policy("shop", None, Policy::Enforce),
            (Policy::Enforce, None)
        );
    }
}
