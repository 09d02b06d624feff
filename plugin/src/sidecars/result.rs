//! What became of each Sidecar a write pass handled: the vocabulary the
//! apply pass, `--prune`, the watcher and the export side report in.

use meshscope_shared::meta::SidecarRef;
use meshscope_shared::snapshot::{managed_by_meshscope, Labels};
use serde_json::Value;

/// Whether a live Sidecar is meshscope's, as `shared` decides it
/// ([`managed_by_meshscope`]): without it, the Sidecar belongs to its
/// owner and apply never writes it.
pub fn managed(v: &Value) -> bool {
    let labels: Option<Labels> = v
        .pointer("/metadata/labels")
        .and_then(|l| serde_json::from_value(l.clone()).ok());
    managed_by_meshscope(labels.as_ref())
}

/// How the reason of a write skipped on a field-manager conflict starts.
pub const CONFLICT: &str = "conflict: ";
/// How a conflict's message ends: what takes the fields over.
pub const FORCE_HINT: &str = "; rerun with --force-conflicts to take those fields over";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ApplyResult {
    Created,
    Configured,
    Unchanged,
    Skipped,
    Pruned,
    Failed,
}

impl ApplyResult {
    pub fn word(self) -> &'static str {
        match self {
            ApplyResult::Created => "created",
            ApplyResult::Configured => "configured",
            ApplyResult::Unchanged => "unchanged",
            ApplyResult::Skipped => "skipped",
            ApplyResult::Pruned => "pruned",
            ApplyResult::Failed => "failed",
        }
    }
}

/// A Sidecar's outcome: the result, the Sidecar, and why (empty when
/// there is nothing to say).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidecarRow {
    pub result: ApplyResult,
    pub sidecar: SidecarRef,
    pub reason: String,
}

impl SidecarRow {
    pub fn new(result: ApplyResult, sidecar: SidecarRef, reason: impl Into<String>) -> Self {
        SidecarRow {
            result,
            sidecar,
            reason: reason.into(),
        }
    }
}
