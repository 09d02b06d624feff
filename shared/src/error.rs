//! Typed errors of the scope engine. Messages are lowercase, without a
//! trailing period, and make sense when shown to a user on their own.

use thiserror::Error;

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum Error {
    #[error("invalid mesh config: {0}")]
    MeshConfig(String),
    #[error("invalid Istio version {0:?} (expected e.g. 1.31 or 1.30.2)")]
    Version(String),
    #[error("unknown Istio version {version}; meshscope knows {known}")]
    UnknownVersion { version: String, known: String },
    #[error("invalid {kind} {name}: {reason}")]
    Object {
        kind: String,
        name: String,
        reason: String,
    },
    #[error("invalid egress host {host:?}: {reason}")]
    Host { host: String, reason: String },
    #[error("object has no kind")]
    NoKind,
}
