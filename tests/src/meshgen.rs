//! Meshes shaped like real ones, for `meshscope-bench-istiod`: a seeded
//! generator of a many-namespace mesh with a power-law fan-in
//! ([`realistic()`]), and a published application's service graph
//! ([`social_network`]). Each is a [`Topology`]: workloads (Deployments and
//! StatefulSets, several replicas), their Services, ServiceEntries, the
//! calls between them, and the mesh config; printable as YAML
//! ([`Topology::yaml`]), with the calls as Istio access-log lines
//! ([`Topology::access_log`]), and deployable on the test control plane
//! ([`deploy`]).
//!
//! The [`Topology`] type is in `topology`, the generators in `realistic`
//! and `social`, and what runs against the control plane in
//! `control_plane`.

mod control_plane;
mod realistic;
mod social;
mod topology;

pub use control_plane::{cleanup, deploy, set_mesh};
pub use realistic::{realistic, realistic_sized};
pub use social::{social_network, SOCIAL_NETWORK_CALLS, SOCIAL_NETWORK_SERVICES};
pub use topology::{port, Edge, External, Kind, Port, Target, Topology, Workload, DOMAIN};

/// The scenario `name` at `scale`.
pub fn by_name(name: &str, scale: usize, seed: u64) -> Option<Topology> {
    match name {
        "realistic" => Some(realistic(scale, seed)),
        "social-network" => Some(social_network(scale, seed)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
