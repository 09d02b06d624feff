//! The end-to-end tests that can share one process (one test binary, so
//! kube, tonic and the Envoy types are linked once, not once a file). Each
//! module is one former `tests/tests/<name>.rs`, unchanged; run one with
//! `cargo test -p meshscope-e2e --test e2e <module>::`.
//!
//! What may join: tests that touch only their own namespaces of the shared
//! test control plane (or none at all) and set no process-wide state. What
//! keeps its own binary (`tests/tests/<name>.rs`), and why:
//! - `detect`, `examples`: create an istiod pod in `istio-system`, which
//!   changes what every other live test detects;
//! - `verify`, `istiod`: run a real istiod whose answers for a proxy
//!   without a Sidecar depend on every namespace's services, so another
//!   test's world appearing mid-check would change them (`istiod` also
//!   rewrites the cluster's mesh config);
//! - `faults`: compacts etcd and kills applies mid-run, which would expire
//!   the continue tokens and watches of any test running beside it;
//! - `webhook_hostile`: raises the process's descriptor limit and bounds
//!   descriptors and memory while it runs.

mod complete;
mod connection;
mod dumps;
mod exempt;
mod exports;
mod fuzz_regressions;
mod habits;
mod hints;
mod hosts;
mod injection;
mod lease;
mod live;
mod offline;
mod plumbing;
mod portforward;
mod required;
mod selectors;
mod webhook;
