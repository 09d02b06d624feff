//! Live mode: the only module that talks to the API server. Every call
//! goes through [`Live`], each request bounded by `--request-timeout` (one
//! page of a list, or one call with kube's own retries), with a note on
//! a terminal when the server is slow to answer, and every failure turned
//! into one line naming the cause and the fix ([`ApiFailure`]).
//!
//! By job:
//!
//! - `client`: the [`Live`] handle, [`Live::connect`] and the bounded
//!   call every other file goes through;
//! - `grants`: the RBAC files in `deploy/rbac/` and which grants what;
//! - `kubeconfig`: finding and reading the kubeconfig as kubectl does;
//! - `failure`: [`ApiFailure`], what a kube error means, and the causes
//!   many failures share;
//! - `permissions`: what a command needs ([`Purpose`], [`Need`]), checked
//!   in one pass (SelfSubjectAccessReview), and one error with the Role
//!   that grants everything missing;
//! - `list`: listing page by page, a list that expired mid-way (410 Gone)
//!   read again;
//! - `read`: reading everything the scope engine needs, concurrently, with
//!   bounded parallelism, and naming what could not be read;
//! - `write`: reading, server-side applying and deleting Sidecars;
//! - `logs`: the istio-proxy logs of pods;
//! - `portforward`: port-forwards to a pod (istiod's debug port);
//! - `lease`: the election on a Lease that picks the one replica of
//!   `apply --watch` that writes ([`Election`]).

mod client;
mod failure;
mod grants;
mod kubeconfig;
mod lease;
mod list;
mod logs;
mod permissions;
mod portforward;
mod read;
mod webhooks;
mod write;

pub use crate::duration::{
    parse_duration, parse_request_timeout, show_duration, RequestTimeout, DEFAULT_REQUEST_TIMEOUT,
};
pub use client::{istio, istio_in, ConnectOptions, Live, NOTE_AFTER, PARALLELISM};
pub use failure::{systemic_cause, ApiFailure, FailureKind};
pub use grants::{rbac_file, APPLIER_FILE, READER_FILE, VERIFIER_FILE, WATCH_FILE};
pub use kubeconfig::load_kubeconfig;
pub use lease::{Election, LEASE_DURATION};
pub use list::{resource_of, Select};
pub use logs::{LogCursor, LogWindow, PodLogs};
pub use permissions::{lease_needs, rbac_error, role_for, Need, Purpose, LEASE_GROUP};
pub use read::{everything_needed, read_needs, Read};
pub use write::Patched;
