//! Scenarios for holding the scope engine to a real istiod: a few fixed
//! ones that pin known-tricky rules, and a seeded random generator that
//! mixes exportTo (annotation, field, mesh defaults), ServiceEntries of
//! every resolution, VirtualServices pulling hosts in, DestinationRule
//! subsets, headless Services, and namespace, root and selector Sidecars
//! with every kind of egress host.
//!
//! [`Scenario`] and its [`Builder`] are in `scenario`, the YAML builders
//! of Istio objects in `docs`, the fixed scenarios in `fixed` (and, for
//! gateways' cluster filtering, `filtering`), the random
//! generator in `random` (with the steps it draws from streams of their
//! own in `features`, `gateway`, `istio_gateway` and `unusual`, and what
//! they share in `draw`).

mod docs;
mod draw;
mod features;
mod filtering;
mod fixed;
mod gateway;
mod istio_gateway;
mod random;
mod scenario;
mod unusual;

pub use docs::{
    labelled, Dest, DestinationRuleDoc, Egress, ServiceEntryDoc, SidecarDoc, VirtualServiceDoc,
};
pub use filtering::gateway_filtering;
pub use fixed::{fixed, waypoints};
pub use random::{random, random_ambient};
pub use scenario::{fqdn, Builder, Scenario, DEFAULT_MESH, DOMAIN, ROOT_NS};
