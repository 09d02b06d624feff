//! What became of each Sidecar a write pass handled: the vocabulary the
//! apply pass, `--prune`, the watcher and the export side report in.

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
    pub(crate) fn word(self) -> &'static str {
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

/// A Sidecar's outcome: the result, namespace, name and why.
pub(crate) type Row = (ApplyResult, String, String, String);
