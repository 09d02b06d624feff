//! What the random scenarios draw from: their Service ports, and picks and
//! coin flips on a seeded [`Rng`].

use crate::bench::Rng;

/// A generated Service: namespace, name, (port name, number) pairs.
pub(super) type SvcRef = (String, String, Vec<(String, u32)>);

/// The Service ports (name, number) the random scenarios draw.
pub(super) const PORTS: &[(&str, u32)] = &[
    ("http", 80),
    ("http-alt", 8080),
    ("grpc", 9090),
    ("tcp-db", 5432),
    ("plain", 7000),
    ("udp-dns", 5353),
    ("tls", 443),
    ("https-x", 8443),
];

pub(super) fn pick<'a, T>(rng: &mut Rng, v: &'a [T]) -> &'a T {
    &v[rng.below(v.len())]
}

pub(super) fn chance(rng: &mut Rng, p: f64) -> bool {
    rng.unit() < p
}
