//! The Sidecar write layer: reading what each recommended Sidecar's name
//! holds now, writing the recommendations by server-side apply (in two
//! steps when a Sidecar drops hosts under `--wait`: the old and new hosts
//! first, then the new ones), waiting for istiod to push them, deleting
//! orphans (`--prune`), and reporting a row per Sidecar. `apply`,
//! `apply --watch`, `diff` and `apply --exports` call it; what to write is
//! decided by `shared` before this layer is reached.
//!
//! It works on a [`Cluster`]: the connection and the mesh as read. It
//! never writes a Sidecar without meshscope's managed-by label
//! ([`managed`]): those belong to their owners.
//!
//! Where to add things:
//! - a step of a write pass (another stage between widening and
//!   narrowing, say): [`mod@write`], as a method of its `Steps`, called from
//!   [`write_pass`];
//! - what is known about a Sidecar before writing it: [`plan`];
//! - a new outcome of a write: [`ApplyResult`] in [`result`], and its
//!   line in [`report`];
//! - another way to confirm a write on istiod: [`waiting`].

pub mod cluster;
pub mod compare;
pub mod plan;
pub mod prune;
pub mod report;
pub mod result;
pub mod waiting;
pub mod write;

#[cfg(test)]
mod tests;

pub use cluster::Cluster;
pub use meshscope_shared::meta::{SidecarRef, FIELD_MANAGER};
pub use result::{managed, ApplyResult, SidecarRow, CONFLICT, FORCE_HINT};
pub use write::{write_pass, Pass, WriteSettings};
