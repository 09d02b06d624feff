//! Test-only machinery shared by every test crate of the workspace
//! (`shared/tests`, `webhook/tests`, `tests/tests` and meshscope-e2e's
//! library): build a snapshot from YAML, write access-log lines, find a
//! free port, name the commit a build says it came from ([`build_info`]),
//! read the user documentation the examples come from ([`docs`]), and
//! reach the Istio inputs that live outside the repository
//! (skipping visibly when they are absent, failing under `CI=true`), and
//! record which tests ran against a real component ([`ledger`]); and a
//! fake API server for Sidecars ([`fake_api`], a mock the plugin's write
//! layer is unit-tested against). The
//! cluster, istiod and CLI machinery, which needs kube and the plugin, is
//! in meshscope-e2e.
//!
//! Nothing here is used by a product crate.

pub mod access_log;
pub mod audit_json;
pub mod build_info;
pub mod docs;
pub mod fake_api;
pub mod fixtures;
pub mod ledger;
pub mod net;
pub mod outside;
pub mod shape;
