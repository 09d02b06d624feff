//! Where observed traffic comes from: one [`TrafficSource`] per source a
//! command was given. A leaf: [`crate::args::Traffic::sources`] makes
//! them from the flags, the request carries them
//! ([`crate::request::MeshRequest::sources`]), and the world reads each in
//! turn, merging what they observed (`plugin/src/world/observe.rs`).
//!
//! Adding a source (DNS proxy logs, Loki, another metrics store) touches
//! four files:
//! 1. this one: its variant, and its arms in [`TrafficSource::flag`] and
//!    [`TrafficSource::from_cluster`];
//! 2. `plugin/src/args.rs`: its flag in [`crate::args::Traffic`] and its
//!    line in [`crate::args::Traffic::sources`];
//! 3. its reader, returning `meshscope_shared::observe::Observations`
//!    (as `plugin/src/input.rs` does for access logs and
//!    `plugin/src/prometheus.rs` for Prometheus);
//! 4. `plugin/src/world/observe.rs`: its arm in the observe loop.
//!
//! A source read through the API server also needs its permission in the
//! one-pass RBAC check (`plugin/src/live`, as `pods/log` is for pod logs).

use std::path::PathBuf;

/// One place the traffic of the mesh is observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrafficSource {
    /// Envoy access-log files, directories, `.gz` files or `-` for stdin
    /// (`--access-log`).
    AccessLogs(Vec<PathBuf>),
    /// Each proxy's istio-proxy log, read through the API server
    /// (`--from-pod-logs`).
    PodLogs,
    /// Istio's request metrics in this Prometheus (`--prometheus URL`).
    Prometheus(String),
}

impl TrafficSource {
    /// The flag that gives the source.
    pub fn flag(&self) -> &'static str {
        match self {
            TrafficSource::AccessLogs(_) => "--access-log",
            TrafficSource::PodLogs => "--from-pod-logs",
            TrafficSource::Prometheus(_) => "--prometheus",
        }
    }

    /// Whether the source is read from a cluster (so it cannot go with
    /// `--manifests`, and `--since` bounds how far back it reads); files
    /// are read whole.
    pub fn from_cluster(&self) -> bool {
        match self {
            TrafficSource::AccessLogs(_) => false,
            TrafficSource::PodLogs | TrafficSource::Prometheus(_) => true,
        }
    }
}
