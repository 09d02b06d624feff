//! Random scenarios, the same for the same seed: namespaces of Services
//! and pods, ServiceEntries, VirtualServices, DestinationRules and
//! Sidecars from one stream, then the rest ([`features`], shapes the
//! first seeds predate, a waypoint, Istio gateways) each from a stream of
//! its own. The order of the draws is the scenario: a step moved or a
//! draw added changes every seed after it.

use super::docs::{
    Dest, DestinationRuleDoc, Egress, ServiceEntryDoc, SidecarDoc, VirtualServiceDoc,
};
use super::draw::{chance, pick, SvcRef, PORTS};
use super::features::features;
use super::istio_gateway::istio_gateways;
use super::scenario::{fqdn, Builder, Scenario, DEFAULT_MESH, DOMAIN, ROOT_NS};
use super::unusual::{unusual_entries, unusual_host};
use crate::bench::Rng;
use crate::world::{labels, SvcPort};

/// A random scenario, the same for the same seed; `run` only keeps the
/// namespace names of different runs apart (a deleted namespace lingers
/// while it terminates).
pub fn random(seed: u64, run: u64) -> Scenario {
    random_scenario(seed, run, false)
}

/// [`random`]'s scenario of `seed` with a waypoint too (`random_waypoint`),
/// for an istiod with ambient on.
pub fn random_ambient(seed: u64, run: u64) -> Scenario {
    random_scenario(seed, run, true)
}

fn random_scenario(seed: u64, run: u64, ambient: bool) -> Scenario {
    let mut rng = Rng::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed);
    let mut b = Builder::new(1000 + seed);
    let nns = 2 + rng.below(2);
    let nss: Vec<String> = (0..nns)
        .map(|i| format!("r{run}-{seed}-{}", (b'a' + i as u8) as char))
        .collect();
    for ns in &nss {
        b.namespace(ns);
    }
    let svcs = services(&mut rng, &mut b, &nss);
    service_entries(&mut rng, &mut b, &nss, &svcs, seed);
    // Shapes the first seeds predate, from a stream of their own so that
    // the rest of each seed stays as it was.
    let mut shape = Rng::new(seed ^ 0xa11c_e5ee_d000_0021);
    let unusual = chance(&mut shape, 0.7);
    if unusual {
        unusual_entries(&mut b, &mut shape, &nss, seed);
    }
    virtual_services(&mut rng, &mut b, &nss, &svcs);
    destination_rules(&mut rng, &mut b, &nss, &svcs);
    let draw = EgressDraw {
        nss: &nss,
        svcs: &svcs,
        seed,
        unusual,
    };
    sidecars(&mut rng, &mut shape, &mut b, &draw, run);
    let mut mesh = DEFAULT_MESH.to_string();
    features(&mut b, &mut mesh, seed, &nss, &svcs);
    if ambient {
        random_waypoint(
            &mut Rng::new(seed ^ 0x3a7b_1e00_0033_0006),
            &mut b,
            &nss,
            &svcs,
        );
    }
    // Istio gateways, after every other pod (whose IPs stay as they were).
    istio_gateways(
        &mut Rng::new(seed ^ 0x15e0_9a7e_0041_0008),
        &mut b,
        &mut mesh,
        &nss,
        &svcs,
    );
    if chance(&mut rng, 0.25) {
        mesh.push_str("defaultServiceExportTo: [\".\"]\n");
    }
    if chance(&mut rng, 0.2) {
        mesh.push_str("defaultVirtualServiceExportTo: [\".\"]\n");
    }
    if chance(&mut rng, 0.2) {
        mesh.push_str("defaultDestinationRuleExportTo: [\".\"]\n");
    }
    let kind = if ambient {
        "random ambient seed"
    } else {
        "random seed"
    };
    b.finish(format!("{kind} {seed}"), mesh)
}

/// Services and their pods in each namespace, and a client pod in some.
fn services(rng: &mut Rng, b: &mut Builder, nss: &[String]) -> Vec<SvcRef> {
    let mut svcs: Vec<SvcRef> = Vec::new();
    for ns in nss {
        for k in 0..1 + rng.below(4) {
            let name = format!("svc{k}");
            let mut ports: Vec<SvcPort> = Vec::new();
            for _ in 0..1 + rng.below(3) {
                let (pn, pp) = *pick(rng, PORTS);
                if ports.iter().any(|p| p.port == pp || p.name == pn) {
                    continue;
                }
                let mut sp = SvcPort::new(pn, pp);
                if chance(rng, 0.15) && pn == "plain" {
                    sp.app_protocol = Some("http".into());
                }
                ports.push(sp);
            }
            let headless = chance(rng, 0.15);
            svcs.push((
                ns.clone(),
                name.clone(),
                ports.iter().map(|p| (p.name.clone(), p.port)).collect(),
            ));
            b.service(ns, &name, ports, headless);
            if chance(rng, 0.3) {
                let other = pick(rng, nss).clone();
                let export = match rng.below(4) {
                    0 => ".".to_string(),
                    1 => "*".to_string(),
                    2 => other,
                    _ => format!(".,{}", pick(rng, nss)),
                };
                b.export_service(ns, &name, &export);
            }
            for r in 0..1 + rng.below(2) {
                let version = if r == 0 { "v1" } else { "v2" };
                b.pod(
                    ns,
                    &format!("{name}-{r}"),
                    labels(&[("app", &name), ("version", version)]),
                );
            }
        }
        if chance(rng, 0.6) {
            b.pod(
                ns,
                "client-0",
                labels(&[("app", "client"), ("role", "caller")]),
            );
        }
    }
    svcs
}

/// A Service of the scenario: its namespace, its host (the short name
/// when `short`, else the FQDN) and its ports.
fn svc_host(rng: &mut Rng, svcs: &[SvcRef], short: bool) -> (String, String, Vec<(String, u32)>) {
    let (ns, name, ports) = svcs[rng.below(svcs.len())].clone();
    let host = if short {
        name.clone()
    } else {
        fqdn(&name, &ns)
    };
    (ns, host, ports)
}

/// No exportTo field (most often), or `.`, `*` or a namespace.
fn export_opt(rng: &mut Rng, nss: &[String]) -> Option<Vec<String>> {
    if chance(rng, 0.6) {
        return None;
    }
    Some(match rng.below(3) {
        0 => vec![".".into()],
        1 => vec!["*".into()],
        _ => vec![pick(rng, nss).clone()],
    })
}

/// Up to three ServiceEntries, of every resolution, one of them maybe of
/// a Kubernetes Service's hostname.
fn service_entries(rng: &mut Rng, b: &mut Builder, nss: &[String], svcs: &[SvcRef], seed: u64) {
    let mut entry_hosts: Vec<(String, String)> = Vec::new();
    for k in 0..rng.below(4) {
        let ns = pick(rng, nss).clone();
        let (host, resolution) = match rng.below(5) {
            0 => ("api.example.com".to_string(), "DNS"),
            1 => ("*.wild.example.com".to_string(), "NONE"),
            2 => ("db.example.com".to_string(), "STATIC"),
            3 => ("api.example.com".to_string(), "NONE"),
            _ => {
                // The hostname of a Kubernetes Service, from a ServiceEntry.
                let (_, h, _) = svc_host(rng, svcs, false);
                (h, "DNS")
            }
        };
        let ports: Vec<(u32, &str, &str)> = match rng.below(3) {
            0 => vec![(443, "tls", "TLS")],
            1 => vec![(80, "http", "HTTP"), (443, "https", "HTTPS")],
            _ => vec![(5432, "tcp", "TCP")],
        };
        let endpoints: Vec<String> = if resolution == "STATIC" {
            vec![format!("192.0.2.{}", 10 + k)]
        } else {
            vec![]
        };
        let addresses: Vec<String> = if chance(rng, 0.3) && !host.starts_with('*') {
            vec![format!("240.0.{}.{}", seed % 250, 10 + k)]
        } else {
            vec![]
        };
        let export = export_opt(rng, nss);
        // Never a second entry of one host in one namespace created in the
        // same second: istiod orders such a tie by map order (seed 10041);
        // unusual_entries makes that shape a second apart.
        if entry_hosts.contains(&(ns.clone(), host.clone())) {
            continue;
        }
        entry_hosts.push((ns.clone(), host.clone()));
        b.istio(
            ServiceEntryDoc::new(&ns, &format!("se{k}"))
                .host(host)
                .ports(&ports)
                .resolution(resolution)
                .addresses(addresses)
                .endpoints(endpoints)
                .export(export)
                .yaml(),
        );
    }
}

/// Up to three VirtualServices of a Service's host, routing http (with a
/// mirror) and tcp to others.
fn virtual_services(rng: &mut Rng, b: &mut Builder, nss: &[String], svcs: &[SvcRef]) {
    for k in 0..rng.below(4) {
        let ns = pick(rng, nss).clone();
        let (_, host, _) = svc_host(rng, svcs, false);
        let mut http: Vec<Dest> = Vec::new();
        let mut tcp: Vec<Dest> = Vec::new();
        let n = 1 + rng.below(2);
        for _ in 0..n {
            let short = chance(rng, 0.2);
            let (dns, dh, dports) = svc_host(rng, svcs, short);
            // A short name resolves in the VirtualService's namespace.
            let dh = if short && dns != ns {
                fqdn(&dh, &dns)
            } else {
                dh
            };
            let port = if chance(rng, 0.5) {
                Some(pick(rng, &dports).1)
            } else {
                None
            };
            let subset = if chance(rng, 0.2) {
                Some("v1".to_string())
            } else {
                None
            };
            // Never a tcp route to a service with a UDP port, nor a second
            // destination in a tcp route (the generator writes no
            // weights): istiod 1.31 (eed52ebb66ad) panics in
            // pilot/pkg/networking/core/networkfilter.go:297
            // (buildOutboundNetworkFiltersWithWeightedClusters) when no
            // destination of a multi-destination tcp route has a weight
            // (seeds 10014 and 10078); validation would reject such a
            // route. The second destination goes to the http routes.
            let udp = dports.iter().any(|p| p.0.starts_with("udp"));
            if chance(rng, 0.25) && !udp && tcp.is_empty() {
                tcp.push((dh, port, None));
            } else {
                http.push((dh, port, subset));
            }
        }
        let mirror = if chance(rng, 0.3) && !http.is_empty() {
            let (_, mh, _) = svc_host(rng, svcs, false);
            Some((mh, None, None))
        } else {
            None
        };
        let export = export_opt(rng, nss);
        let mut vs = VirtualServiceDoc::new(&ns, &format!("vs{k}"))
            .host(host)
            .destinations(http)
            .tcp_destinations(tcp)
            .export(export);
        if let Some(m) = mirror {
            vs = vs.mirror(m);
        }
        b.istio(vs.yaml());
    }
}

/// Up to three DestinationRules of a Service's host or a namespace's
/// wildcard, with subsets.
fn destination_rules(rng: &mut Rng, b: &mut Builder, nss: &[String], svcs: &[SvcRef]) {
    for k in 0..rng.below(4) {
        let ns = pick(rng, nss).clone();
        let host = if chance(rng, 0.2) {
            format!("*.{}.{DOMAIN}", pick(rng, nss))
        } else {
            svc_host(rng, svcs, false).1
        };
        let subsets: &[&str] = match rng.below(3) {
            0 => &[],
            1 => &["v1"],
            _ => &["v1", "v2"],
        };
        let export = export_opt(rng, nss);
        b.istio(
            DestinationRuleDoc::new(&ns, &format!("dr{k}"), &host)
                .subsets(subsets)
                .export(export)
                .yaml(),
        );
    }
}

/// What a Sidecar's egress hosts are drawn from.
struct EgressDraw<'a> {
    nss: &'a [String],
    svcs: &'a [SvcRef],
    seed: u64,
    /// The scenario has [`unusual_entries`]: egress hosts may name them.
    unusual: bool,
}

/// One egress host of a Sidecar in `ns`, of every kind.
fn host_entry(rng: &mut Rng, d: &EgressDraw<'_>, ns: &str) -> String {
    let other = pick(rng, d.nss).clone();
    match rng.below(12) {
        0 => "./*".into(),
        1 => format!("{other}/*"),
        2 => "*/api.example.com".into(),
        3 => "*/*.example.com".into(),
        4 => {
            let (sns, h, _) = svc_host(rng, d.svcs, false);
            format!("{sns}/{h}")
        }
        5 => "~/*".into(),
        6 => format!("{ROOT_NS}/*"),
        7 => {
            let (_, h, _) = svc_host(rng, d.svcs, false);
            format!("*/{h}")
        }
        8 => {
            // A short name: egress hosts do no expansion, so this
            // imports nothing.
            let (_, h, _) = svc_host(rng, d.svcs, true);
            format!("./{h}")
        }
        9 => format!("{other}/*.{other}.{DOMAIN}"),
        10 => format!("./*.{ns}.{DOMAIN}"),
        _ => "*/*".into(),
    }
}

/// One or two egress listeners of a Sidecar in `ns`, the port-less one
/// last.
fn egress(rng: &mut Rng, shape: &mut Rng, d: &EgressDraw<'_>, ns: &str) -> Vec<Egress<'static>> {
    let mut ls = Vec::new();
    let n = 1 + rng.below(2);
    let mut used_ports: Vec<Option<u32>> = Vec::new();
    for _ in 0..n {
        let port = if chance(rng, 0.35) {
            let (pn, pp) = *pick(rng, PORTS);
            let proto = if pn.starts_with("http") {
                "HTTP"
            } else if pn == "grpc" {
                "GRPC"
            } else if pn.starts_with("udp") {
                continue;
            } else {
                "TCP"
            };
            Some((pp, proto))
        } else {
            None
        };
        // istiod rejects two listeners on one port (or two catch-alls).
        let key = port.map(|p| p.0);
        if used_ports.contains(&key) {
            continue;
        }
        used_ports.push(key);
        let mut hosts: Vec<String> = (0..1 + rng.below(3))
            .map(|_| host_entry(rng, d, ns))
            .collect();
        if d.unusual && chance(shape, 0.5) {
            hosts.push(unusual_host(shape, d.nss, d.seed));
        }
        ls.push((port, hosts));
    }
    // Every listener skipped (a UDP port, a port twice): one catch-all,
    // as a Sidecar with no egress and no selector is invalid.
    if ls.is_empty() {
        ls.push((None, vec![host_entry(rng, d, ns)]));
    }
    // A port-less listener must come last: istiod takes the first
    // catch-all.
    ls.sort_by_key(|(p, _)| p.is_none());
    ls
}

/// A root namespace default (sometimes), namespace defaults and selector
/// Sidecars.
fn sidecars(rng: &mut Rng, shape: &mut Rng, b: &mut Builder, d: &EgressDraw<'_>, run: u64) {
    if chance(rng, 0.3) {
        let e = egress(rng, shape, d, ROOT_NS);
        let name = format!("r{run}-{}-root", d.seed);
        b.istio(SidecarDoc::new(ROOT_NS, &name).listeners(&e).yaml());
    }
    for ns in d.nss {
        if chance(rng, 0.5) {
            let e = egress(rng, shape, d, ns);
            b.istio(SidecarDoc::new(ns, "default").listeners(&e).yaml());
        }
        for k in 0..rng.below(3) {
            let sel = match rng.below(3) {
                0 => labels(&[("version", "v2")]),
                1 => labels(&[("role", "caller")]),
                _ => {
                    let names: Vec<&SvcRef> = d.svcs.iter().filter(|s| &s.0 == ns).collect();
                    let s = names[rng.below(names.len())];
                    labels(&[("app", &s.1)])
                }
            };
            let e = if chance(rng, 0.1) {
                Vec::new()
            } else {
                egress(rng, shape, d, ns)
            };
            b.istio(
                SidecarDoc::new(ns, &format!("sel{k}"))
                    .selector(&sel)
                    .listeners(&e)
                    .yaml(),
            );
        }
    }
}

/// A waypoint `wp` in one namespace ([`Builder::waypoint`]), whose HBONE
/// listener admits its own namespace (the default), every one, or a
/// selector's; one time in six for workloads only, one in six for all
/// traffic. Each Service names it one time in three (with its namespace
/// when elsewhere) and opts out (`none`) one time in ten; one namespace
/// in three names it for its services.
fn random_waypoint(f: &mut Rng, b: &mut Builder, nss: &[String], svcs: &[SvcRef]) {
    let wns = pick(f, nss).clone();
    let allowed = match f.below(3) {
        0 => String::new(),
        1 => ", allowedRoutes: {namespaces: {from: All}}".to_string(),
        _ => {
            let picked = pick(f, nss).clone();
            format!(", allowedRoutes: {{namespaces: {{from: Selector, selector: {{matchLabels: {{kubernetes.io/metadata.name: {picked}}}}}}}}}")
        }
    };
    let traffic = match f.below(6) {
        0 => "istio.io/waypoint-for: workload",
        1 => "istio.io/waypoint-for: all",
        _ => "",
    };
    let naming = |ns: &str| {
        let mut l = labels(&[("istio.io/use-waypoint", "wp")]);
        if ns != wns {
            l.insert("istio.io/use-waypoint-namespace".into(), wns.clone());
        }
        l
    };
    for (ns, name, _) in svcs {
        if chance(f, 0.33) {
            b.label_service(ns, name, naming(ns));
        } else if chance(f, 0.1) {
            b.label_service(ns, name, labels(&[("istio.io/use-waypoint", "none")]));
        }
    }
    for (ns, l) in b.world.namespaces.iter_mut() {
        if chance(f, 0.33) {
            l.extend(naming(ns));
        }
    }
    b.waypoint(&wns, "wp", &allowed, traffic);
}
