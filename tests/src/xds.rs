//! A simulated sidecar: an xDS client that connects to istiod the way an
//! Envoy sidecar does (one ADS stream per proxy) and records what it is sent.
//!
//! It exists to measure what a Sidecar resource changes in a proxy's config
//! (how many clusters, listeners, routes and endpoints, and how many bytes)
//! and when istiod pushes, without running Envoy. See `tests/istiod/README.md`
//! ("The simulated sidecar").
//!
//! The protocol is the state-of-the-world ADS variant:
//!
//! * the first request carries the [`Node`](envoy_types::pb::envoy::config::core::v3::Node);
//!   later ones do not;
//! * CDS and LDS are wildcard subscriptions, and each response is the full
//!   set (the local map is replaced);
//! * EDS is subscribed for every cluster of type `EDS` (its
//!   `eds_cluster_config.service_name`, or the cluster name), and RDS for
//!   every `route_config_name` of an `HttpConnectionManager` with `rds` in
//!   the listeners; both are re-subscribed when those sets change. Their
//!   responses are merged into the local map (istiod sends only the changed
//!   ClusterLoadAssignments), and names no longer subscribed are dropped;
//! * every response is ACKed with its `version_info` and `response_nonce`
//!   and the current resource names of its type. Nothing is ever NACKed.
//!
//! Sizes: a resource's size is the length of the encoded protobuf in its
//! `google.protobuf.Any.value`, i.e. the encoded `Cluster`, `Listener`,
//! `RouteConfiguration` or `ClusterLoadAssignment` message, without the
//! `Any` wrapper and type URL. They depend on the node metadata, so compare
//! sizes only between proxies built from the same [`ProxySpec`].
//!
//! [`Sim`] is a blocking API for ordinary (non-async) tests and benchmarks:
//! it owns one tokio runtime, multiplexes the streams over a few HTTP/2
//! connections, and must not be created, used or dropped from inside
//! another tokio runtime's async context.
//!
//! The parts: who a proxy is (`node`), reading resources (`resources`),
//! the protocol's state machine (`state`), what a proxy holds
//! (`snapshot`), one proxy's handle (`proxy`), the simulator that runs
//! the streams (`sim`), and the references the listeners and routes name
//! ([`refs`]).

mod node;
mod proxy;
pub mod refs;
mod resources;
mod sim;
mod snapshot;
mod state;

pub use node::{ProxySpec, DEFAULT_ISTIO_VERSION};
pub use proxy::{ConnStatus, Proxy};
pub use resources::{
    eds_resource_name, route_names, short_type, ClusterType, CLUSTER_TYPE, ENDPOINT_TYPE,
    LISTENER_TYPE, ROUTE_TYPE, TYPES,
};
pub use sim::{Sim, SimOptions};
pub use snapshot::{ProxyConfig, TypeTotal};
pub use state::{merge_subscribed, replace_all, subscription_delta, ClusterChange, Push, XdsState};

#[cfg(test)]
mod tests;
