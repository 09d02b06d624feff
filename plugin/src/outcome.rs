//! How a successful run ended, for the exit code. A leaf module.

/// How a successful run ended, for the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Ok,
    /// Exit 1: findings at or above `--fail-on`, or objects that failed.
    Findings,
}
