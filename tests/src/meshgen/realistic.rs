//! The realistic mesh: a company's many-namespace mesh with hubs most
//! workloads call and a long tail drawn by a Zipf law ([`realistic`]),
//! and the same at a given number of services and sidecars
//! ([`realistic_sized`]).

use super::topology::{port, External, Kind, Target, Topology};
use crate::bench::{Rng, Zipf};
use crate::fidelity::DEFAULT_MESH;

/// Namespaces of app teams per unit of scale.
pub(super) const TEAMS: usize = 8;

const PLATFORM: &str = "rl-platform";
const DATA: &str = "rl-data";
const OBSERVABILITY: &str = "rl-observability";
const EGRESS: &str = "rl-egress";

/// A mesh shaped like a company's: a platform namespace of hubs that most
/// workloads call (auth, config, and a Redis cache as a StatefulSet behind
/// a headless Service); a data namespace (Postgres and Kafka
/// StatefulSets, headless); `8·scale` team namespaces, each with a web
/// front end, an api, a worker and four services of a long tail that the
/// callers draw by a Zipf law across namespaces (most are called by one or
/// two); DNS ServiceEntries (without exportTo, exported to `*`, to `.`,
/// and to a list), four per scale nobody calls; one external host routed
/// through an egress gateway by a VirtualService; a Zipkin extension
/// provider every sidecar traces to; several replicas per Deployment.
/// Everything but the names is drawn from `seed`.
pub fn realistic(scale: usize, seed: u64) -> Topology {
    let scale = scale.max(1);
    let mut rng = Rng::new(seed);
    let mut t = Topology::empty("realistic", scale, seed);
    let teams = namespaces(&mut t, scale);
    let hubs = platform(&mut t);
    let apps = team_workloads(&mut t, &teams, &mut rng);
    // The tail's popularity order: a seeded shuffle, so the most called
    // are spread over the namespaces.
    let mut order = apps.tail.clone();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let zipf = Zipf::new(order.len(), 1.1);
    let ext = externals(&mut t, &teams, scale);
    egress_route(&mut t, hubs.gateway);
    calls(&mut t, &mut rng, &hubs, &apps, &ext, (&order, &zipf));
    // A tail service nobody drew is called by its own namespace's api.
    for (i, &s) in apps.tail.iter().enumerate() {
        if t.fan_in(s).is_empty() {
            t.call_svc(apps.api[i / 4], s, &mut rng);
        }
    }
    t
}

/// The platform, data, observability and egress namespaces, then
/// `TEAMS·scale` team namespaces (injected but for observability and
/// egress); returns the teams'.
fn namespaces(t: &mut Topology, scale: usize) -> Vec<String> {
    let teams: Vec<String> = (1..=TEAMS * scale)
        .map(|i| format!("rl-team-{i:02}"))
        .collect();
    for ns in [PLATFORM, DATA] {
        t.namespaces.push((ns.into(), true));
    }
    // Tracing backends and gateways run without a sidecar.
    t.namespaces.push((OBSERVABILITY.into(), false));
    t.namespaces.push((EGRESS.into(), false));
    for ns in &teams {
        t.namespaces.push((ns.clone(), true));
    }
    teams
}

/// The workloads every team calls, by index.
struct Hubs {
    auth: usize,
    config: usize,
    cache: usize,
    postgres: usize,
    kafka: usize,
    gateway: usize,
}

/// The hubs, the Zipkin every sidecar traces to (the mesh's extension
/// provider) and the egress gateway.
fn platform(t: &mut Topology) -> Hubs {
    let auth = t.add(
        PLATFORM,
        "auth",
        Kind::Deployment,
        3,
        vec![port("http", 8080)],
    );
    let config = t.add(
        PLATFORM,
        "config",
        Kind::Deployment,
        2,
        vec![port("http", 8080)],
    );
    let cache = t.add(
        PLATFORM,
        "cache",
        Kind::StatefulSet,
        3,
        vec![port("tcp-redis", 6379)],
    );
    let postgres = t.add(
        DATA,
        "postgres",
        Kind::StatefulSet,
        2,
        vec![port("tcp-postgres", 5432)],
    );
    let kafka = t.add(
        DATA,
        "kafka",
        Kind::StatefulSet,
        3,
        vec![port("tcp-kafka", 9092)],
    );
    let zipkin = t.add(
        OBSERVABILITY,
        "zipkin",
        Kind::Deployment,
        1,
        vec![port("http-zipkin", 9411)],
    );
    let gateway = t.add(
        EGRESS,
        "istio-egressgateway",
        Kind::Deployment,
        2,
        vec![port("http2", 80), port("https", 443)],
    );
    t.provider = Some((zipkin, 9411));
    t.egress_gateway = Some((gateway, 80));
    t.mesh = format!(
        "{DEFAULT_MESH}extensionProviders:\n- name: zipkin\n  zipkin:\n    service: {}\n    port: 9411\ndefaultProviders:\n  tracing:\n  - zipkin\n",
        t.host(zipkin)
    );
    Hubs {
        auth,
        config,
        cache,
        postgres,
        kafka,
        gateway,
    }
}

/// Each team's workloads, by index: `web[i]` is team i's.
struct Apps {
    web: Vec<usize>,
    api: Vec<usize>,
    worker: Vec<usize>,
    /// Four per team, in team order.
    tail: Vec<usize>,
}

/// Per team: web (calls its api), api, worker; four tail services.
fn team_workloads(t: &mut Topology, teams: &[String], rng: &mut Rng) -> Apps {
    let mut web = Vec::new();
    let mut api = Vec::new();
    let mut worker = Vec::new();
    let mut tail = Vec::new();
    for ns in teams {
        web.push(t.add(ns, "web", Kind::Deployment, 2, vec![port("http", 8080)]));
        let r = 2 + rng.below(2);
        api.push(t.add(ns, "api", Kind::Deployment, r, vec![port("http", 8080)]));
        let r = 1 + rng.below(2);
        worker.push(t.add(ns, "worker", Kind::Deployment, r, Vec::new()));
        for j in 0..4 {
            let p = if rng.unit() < 0.3 {
                port("grpc", 9090)
            } else {
                port("http", 8080)
            };
            let r = 1 + rng.below(2);
            tail.push(t.add(ns, &format!("svc-{j}"), Kind::Deployment, r, vec![p]));
        }
    }
    Apps {
        web,
        api,
        worker,
        tail,
    }
}

/// The external hosts the teams call, by index into
/// [`Topology::externals`].
struct Externals {
    stripe: usize,
    slack: usize,
    smtp: usize,
    s3: usize,
    payments: usize,
}

/// One external host (a DNS ServiceEntry): its index.
fn external(
    t: &mut Topology,
    (ns, name, host): (&str, &str, &str),
    p: (u32, &str, &str),
    export: Option<Vec<&str>>,
    via: bool,
) -> usize {
    t.externals.push(External {
        namespace: ns.into(),
        name: name.into(),
        host: host.into(),
        port: p.0,
        port_name: p.1.into(),
        protocol: p.2.into(),
        export: export.map(|v| v.into_iter().map(String::from).collect()),
        via_gateway: via,
    });
    t.externals.len() - 1
}

/// External hosts (DNS ServiceEntries): without exportTo, exported to
/// `*`, to `.` and to a list, one routed through the egress gateway, and
/// four per scale nobody calls.
fn externals(t: &mut Topology, teams: &[String], scale: usize) -> Externals {
    let tls = (443, "tls", "TLS");
    let stripe = external(t, (PLATFORM, "stripe", "api.stripe.com"), tls, None, false);
    let slack = (PLATFORM, "slack", "hooks.slack.com");
    let slack = external(t, slack, tls, Some(vec!["*"]), false);
    let smtp = (teams[0].as_str(), "sendgrid", "smtp.sendgrid.net");
    let smtp = external(t, smtp, (587, "tcp-smtp", "TCP"), Some(vec!["."]), false);
    let s3 = (teams[1].as_str(), "s3", "s3.eu-west-1.amazonaws.com");
    let s3 = external(t, s3, tls, Some(vec![".", teams[2].as_str()]), false);
    let payments = (PLATFORM, "payments", "api.payments.example.com");
    let payments = external(t, payments, (80, "http", "HTTP"), None, true);
    for i in 0..4 * scale {
        let host = format!("partner-{i}.legacy.example.com");
        let partner = format!("partner-{i}");
        external(t, (PLATFORM, &partner, &host), tls, None, false);
    }
    Externals {
        stripe,
        slack,
        smtp,
        s3,
        payments,
    }
}

/// The egress Gateway, and the VirtualService that sends the payments
/// host through it.
fn egress_route(t: &mut Topology, gateway: usize) {
    let (platform, egress) = (PLATFORM, EGRESS);
    t.istio.push(format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: egressgateway\n  namespace: {egress}\nspec:\n  selector:\n    app: istio-egressgateway\n  servers:\n  - port:\n      number: 80\n      name: http\n      protocol: HTTP\n    hosts:\n    - api.payments.example.com\n"
    ));
    t.istio.push(format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: payments-via-egress\n  namespace: {platform}\nspec:\n  hosts:\n  - api.payments.example.com\n  gateways:\n  - mesh\n  - {egress}/egressgateway\n  http:\n  - match:\n    - gateways:\n      - mesh\n      port: 80\n    route:\n    - destination:\n        host: {gwh}\n        port:\n          number: 80\n  - match:\n    - gateways:\n      - {egress}/egressgateway\n      port: 80\n    route:\n    - destination:\n        host: api.payments.example.com\n        port:\n          number: 80\n",
        gwh = t.host(gateway)
    ));
}

/// The calls. Hubs: most callers; the tail: Zipf draws over `order`.
fn calls(
    t: &mut Topology,
    rng: &mut Rng,
    hubs: &Hubs,
    apps: &Apps,
    ext: &Externals,
    (order, zipf): (&[usize], &Zipf),
) {
    let p = |rng: &mut Rng, p: f64| rng.unit() < p;
    for i in 0..apps.web.len() {
        let (w, a, k) = (apps.web[i], apps.api[i], apps.worker[i]);
        t.call_svc(w, a, rng);
        for (hub, pw, pa, pk) in [
            (hubs.auth, 1.0, 0.95, 0.8),
            (hubs.config, 0.9, 0.85, 0.6),
            (hubs.cache, 0.6, 0.7, 0.3),
        ] {
            for (from, q) in [(w, pw), (a, pa), (k, pk)] {
                if p(rng, q) {
                    t.call_svc(from, hub, rng);
                }
            }
        }
        for (from, pp, pk) in [(a, 0.4, 0.3), (k, 0.6, 0.8)] {
            if p(rng, pp) {
                t.call_svc(from, hubs.postgres, rng);
            }
            if p(rng, pk) {
                t.call_svc(from, hubs.kafka, rng);
            }
        }
        for _ in 0..1 + rng.below(3) {
            let to = order[zipf.sample(rng)];
            t.call_svc(a, to, rng);
        }
        for _ in 0..rng.below(2) {
            let to = order[zipf.sample(rng)];
            t.call_svc(k, to, rng);
        }
        if p(rng, 0.3) {
            t.call(a, Target::External(ext.stripe), rng);
        }
        if p(rng, 0.2) {
            t.call(a, Target::External(ext.slack), rng);
        }
        if p(rng, 0.25) || i == 0 {
            t.call(a, Target::External(ext.payments), rng);
        }
        match i {
            0 => t.call(k, Target::External(ext.smtp), rng),
            1 | 2 => t.call(a, Target::External(ext.s3), rng),
            _ => {}
        }
    }
}

/// The realistic scenario with about `services` services (Kubernetes
/// Services and ServiceEntry hosts: the smallest scale that has that many)
/// and exactly `sidecars` injected pods: every injected workload's replicas
/// are scaled by one factor, rounded so that the sum comes out exact (the
/// largest remainders round up), and at least 1. Its calls, hosts and
/// ServiceEntries are those of that scale.
pub fn realistic_sized(services: usize, sidecars: usize, seed: u64) -> Topology {
    let mut scale = 1;
    let mut t = realistic(scale, seed);
    while t.services().len() + t.externals.len() < services {
        scale += 1;
        t = realistic(scale, seed);
    }
    let injected: Vec<usize> = (0..t.workloads.len())
        .filter(|w| t.workloads[*w].injected)
        .collect();
    let now: usize = injected.iter().map(|w| t.workloads[*w].replicas).sum();
    let want = sidecars.max(injected.len());
    let factor = want as f64 / now as f64;
    let mut parts: Vec<(usize, usize, f64)> = injected
        .iter()
        .map(|&w| {
            let x = t.workloads[w].replicas as f64 * factor;
            (w, (x.floor() as usize).max(1), x - x.floor())
        })
        .collect();
    parts.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    let mut have: usize = parts.iter().map(|p| p.1).sum();
    // The largest remainders take the pods still missing (fewer than
    // there are workloads); when rounding up to 1 overshot, the smallest
    // give some back.
    for p in parts.iter_mut() {
        if have >= want {
            break;
        }
        p.1 += 1;
        have += 1;
    }
    for p in parts.iter_mut().rev() {
        if have <= want {
            break;
        }
        if p.1 > 1 {
            p.1 -= 1;
            have -= 1;
        }
    }
    for (w, r, _) in parts {
        t.workloads[w].replicas = r;
    }
    t
}
