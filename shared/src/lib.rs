//! meshscope's scope engine: pure Istio scoping logic, shared by the
//! `kubectl-meshscope` plugin and the `meshscope-webhook` admission server
//! so that the two can never disagree.
//!
//! ```text
//!  Kubernetes objects ──► Inputs ──► MeshSnapshot ──► select_sidecar / visible / estimate
//!  access-log lines  ──► accesslog ──► Observations ─┬► recommend (Sidecars)
//!                                                    ├► audit (MS codes)
//!                                                    └► explain / impact
//! ```
//!
//! No I/O happens here: no files, no environment, no network, no async.

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod accesslog;
pub mod admission;
pub mod audit;
pub mod codes;
pub mod detect;
pub mod discovery;
pub mod duplicates;
pub mod edges;
pub mod error;
pub mod exempt;
pub mod explain;
pub mod exports;
pub mod finding;
pub mod gateway_api;
pub mod gateway_clusters;
pub mod gateway_listeners;
pub mod gateway_readiness;
pub mod gateway_routes;
pub mod gateway_servers;
pub mod graph;
mod hash;
pub mod hints;
pub mod host;
pub mod imports;
pub mod inject;
pub mod inputs;
pub mod installed;
pub mod istio;
pub mod labels;
pub mod listeners;
pub mod mesh;
pub mod meta;
pub mod notes;
pub mod observe;
pub mod planned;
pub mod recommend;
pub mod report;
pub mod required;
pub mod scope;
pub mod snapshot;
pub mod target;
pub mod telemetry;
pub mod units;
pub mod verify;
pub mod version;
pub mod visibility;
pub mod watch;
pub mod waypoint;

pub use error::Error;

pub use inputs::Inputs;
pub use mesh::{MeshConfig, Options};
pub use snapshot::MeshSnapshot;
pub use version::IstioVersion;
