//! DeathStarBench's social network as a [`Topology`]: its services,
//! ports and call graph, written out by hand.

use super::topology::{port, Kind, Topology};
use crate::bench::Rng;

/// The social network of DeathStarBench (github.com/delimitrou/DeathStarBench,
/// commit 6ecb09706140f8730b5385c08f1386c654c3c526, 2024-06-27): its
/// services and ports from `socialNetwork/docker-compose.yml`,
/// `socialNetwork/config/service-config.json` and the Helm chart
/// (`socialNetwork/helm-chart/socialnetwork`, which names each Service
/// port by its number), and its call graph from the clients each service
/// builds in `socialNetwork/src/<Service>/<Service>.cpp`, from the Lua
/// handlers of `socialNetwork/nginx-web-server/lua-scripts/api/` (what
/// nginx-thrift calls) and `socialNetwork/media-frontend/lua-scripts/`.
/// Written out here by hand as data; nothing of the upstream repository is
/// included. jaeger-agent is left out: the services send it spans over
/// UDP, which the sidecars do not intercept.
///
/// (service, port, storage) — storage runs `scale` replicas, the rest `2·scale`.
pub const SOCIAL_NETWORK_SERVICES: &[(&str, u32, bool)] = &[
    ("nginx-thrift", 8080, false),
    ("media-frontend", 8081, false),
    ("compose-post-service", 9090, false),
    ("home-timeline-service", 9090, false),
    ("media-service", 9090, false),
    ("post-storage-service", 9090, false),
    ("social-graph-service", 9090, false),
    ("text-service", 9090, false),
    ("unique-id-service", 9090, false),
    ("url-shorten-service", 9090, false),
    ("user-mention-service", 9090, false),
    ("user-service", 9090, false),
    ("user-timeline-service", 9090, false),
    ("home-timeline-redis", 6379, true),
    ("social-graph-redis", 6379, true),
    ("user-timeline-redis", 6379, true),
    ("media-memcached", 11211, true),
    ("post-storage-memcached", 11211, true),
    ("url-shorten-memcached", 11211, true),
    ("user-memcached", 11211, true),
    ("media-mongodb", 27017, true),
    ("post-storage-mongodb", 27017, true),
    ("social-graph-mongodb", 27017, true),
    ("url-shorten-mongodb", 27017, true),
    ("user-mongodb", 27017, true),
    ("user-timeline-mongodb", 27017, true),
];

/// Caller -> callees, at the commit above.
pub const SOCIAL_NETWORK_CALLS: &[(&str, &[&str])] = &[
    (
        "nginx-thrift",
        &[
            "compose-post-service",
            "home-timeline-service",
            "user-timeline-service",
            "social-graph-service",
            "user-service",
        ],
    ),
    ("media-frontend", &["media-mongodb"]),
    (
        "compose-post-service",
        &[
            "home-timeline-service",
            "media-service",
            "post-storage-service",
            "text-service",
            "unique-id-service",
            "user-service",
            "user-timeline-service",
        ],
    ),
    (
        "home-timeline-service",
        &[
            "home-timeline-redis",
            "post-storage-service",
            "social-graph-service",
        ],
    ),
    (
        "post-storage-service",
        &["post-storage-memcached", "post-storage-mongodb"],
    ),
    (
        "social-graph-service",
        &["social-graph-mongodb", "social-graph-redis", "user-service"],
    ),
    (
        "text-service",
        &["url-shorten-service", "user-mention-service"],
    ),
    (
        "url-shorten-service",
        &["url-shorten-memcached", "url-shorten-mongodb"],
    ),
    ("user-mention-service", &["user-memcached", "user-mongodb"]),
    (
        "user-service",
        &["social-graph-service", "user-memcached", "user-mongodb"],
    ),
    (
        "user-timeline-service",
        &[
            "post-storage-service",
            "user-timeline-mongodb",
            "user-timeline-redis",
        ],
    ),
];

/// DeathStarBench's social network in namespace `social-network`: one
/// Deployment and Service per service (ports named by number, as the Helm
/// chart names them, so istiod sniffs their protocol), its call graph as
/// the traffic, request counts drawn from `seed`.
pub fn social_network(scale: usize, seed: u64) -> Topology {
    let scale = scale.max(1);
    let mut rng = Rng::new(seed);
    let mut t = Topology::empty("social-network", scale, seed);
    let ns = "social-network";
    t.namespaces.push((ns.into(), true));
    for (name, number, storage) in SOCIAL_NETWORK_SERVICES {
        let replicas = if *storage { scale } else { 2 * scale };
        t.add(
            ns,
            name,
            Kind::Deployment,
            replicas,
            vec![port(&number.to_string(), *number)],
        );
    }
    for (from, tos) in SOCIAL_NETWORK_CALLS {
        let f = t.find(ns, from).expect("callers are services");
        for to in *tos {
            let w = t.find(ns, to).expect("callees are services");
            t.call_svc(f, w, &mut rng);
        }
    }
    t
}
