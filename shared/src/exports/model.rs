//! The vocabulary of export recommendations: why a namespace needs an
//! object, and what to do with its exportTo. A leaf.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

/// A namespace key meaning every namespace (the root default Sidecar
/// imports by name for all of them).
pub const ALL: &str = "*";

/// Why a namespace needs an object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Reason {
    /// Its namespace: always kept.
    Own,
    /// A workload of the namespace was seen calling it.
    Observed { caller: String, requests: u64 },
    /// A route of this VirtualService (`ns/name`) leads to it.
    Route(String),
    /// Gateway `ns/name`'s pods run in the namespace and route to it.
    Gateway(String),
    /// Sidecar `ns/name` imports it by name.
    Sidecar(String),
    /// The mesh config makes Envoy call it (the reasons).
    Required(String),
    /// Its traffic goes through a waypoint in this namespace
    /// (`istio.io/use-waypoint`), whose scope is the namespace's.
    Waypoint,
    /// It is a delegate of this VirtualService (`ns/name`).
    Delegate(String),
    /// Calls to this host use the DestinationRule.
    DestinationRuleFor(String),
}

impl Reason {
    /// Traffic or a gateway route shows the namespace calling it: hiding
    /// it from there breaks calls that happen (MS0019).
    pub fn is_call(&self) -> bool {
        matches!(
            self,
            Reason::Observed { .. } | Reason::Route(_) | Reason::Gateway(_)
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Own => f.write_str("own namespace"),
            Reason::Observed {
                caller,
                requests: 1,
            } => {
                write!(f, "called by {caller} (1 request)")
            }
            Reason::Observed { caller, requests } => {
                write!(f, "called by {caller} ({requests} requests)")
            }
            Reason::Route(vs) => write!(f, "routed to by VirtualService {vs}"),
            Reason::Gateway(g) => write!(f, "gateway {g}"),
            Reason::Sidecar(s) => write!(f, "imported by Sidecar {s}"),
            Reason::Required(why) => f.write_str(why),
            Reason::Waypoint => f.write_str("its waypoint runs here"),
            Reason::Delegate(vs) => write!(f, "delegate of VirtualService {vs}"),
            Reason::DestinationRuleFor(h) => write!(f, "applies to calls to {h}"),
        }
    }
}

/// Per namespace, why it needs the object.
pub type Need = BTreeMap<String, BTreeSet<Reason>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum ExportKind {
    Service,
    ServiceEntry,
    VirtualService,
    DestinationRule,
}

impl ExportKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ExportKind::Service => "Service",
            ExportKind::ServiceEntry => "ServiceEntry",
            ExportKind::VirtualService => "VirtualService",
            ExportKind::DestinationRule => "DestinationRule",
        }
    }
}

/// What to do with one object's exportTo.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ExportAction {
    /// Write [`ExportRec::recommended`].
    Write,
    /// Its exportTo already gives exactly the namespaces that need it.
    Unchanged,
    /// Its owner set exportTo: left alone (without `--force-exports`).
    OwnerSet,
    /// The root namespace's default Sidecar imports it by name, so every
    /// namespace needs it: it stays exported everywhere.
    Everyone,
    /// Its exportTo hides it from everyone today: left alone.
    Hidden,
    /// `meshscope.io/exempt` (ServiceEntries).
    Exempt,
}

/// The exportTo recommendation of one object.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportRec {
    pub kind: ExportKind,
    pub namespace: String,
    pub name: String,
    /// The exportTo its owner wrote (for a Service, the annotation's
    /// items), `None` when unset.
    pub declared: Option<Vec<String>>,
    /// meshscope wrote that exportTo (an earlier `apply --exports`): it is
    /// updated like one never set.
    pub ours: bool,
    pub needs: Need,
    /// The list to write, with `.` for the own namespace.
    pub recommended: Vec<String>,
    pub action: ExportAction,
    /// Namespaces that call it although its exportTo hides it from them.
    pub hidden_from: Vec<String>,
}

impl ExportRec {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ExportOptions {
    /// Recommend for objects whose owner set exportTo too.
    pub force: bool,
}
