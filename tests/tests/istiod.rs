//! The scope engine held to a real istiod (pilot-discovery 1.31, built by
//! tests/istiod/build) on the real test control plane. For every proxy of
//! fixed and seeded random scenarios, the outbound clusters istiod sends a
//! simulated sidecar must equal the ones `kubectl meshscope explain`
//! predicts, and the Sidecar istiod applied (`/debug/sidecarz`) must be the
//! one `explain` names. Then the safety property: recommending and
//! applying Sidecars from observed traffic never removes a cluster that the
//! traffic needs.
//!
//! The scenarios run one after another (a static lock): istiod and the
//! engine both see the whole cluster, so a scenario must not change under
//! another's feet.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::fidelity::{self, Scenario, DEFAULT_MESH, ROOT_NS};
use meshscope_e2e::istiod::{Istiod, ENGINE_VERSION};
use meshscope_e2e::run;
use meshscope_e2e::world::{Pod, World};
use meshscope_e2e::xds::{ProxySpec, Sim, SimOptions};

static SERIAL: Mutex<()> = Mutex::new(());

/// Seeds per run: `MESHSCOPE_FIDELITY_SEEDS` (default 20), starting at
/// `MESHSCOPE_FIDELITY_SEED` (default 1, so that CI runs the same scenarios;
/// sweep others by setting it).
fn seeds() -> Vec<u64> {
    let var = |name: &str, default: u64| -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (start, n) = (
        var("MESHSCOPE_FIDELITY_SEED", 1),
        var("MESHSCOPE_FIDELITY_SEEDS", 20),
    );
    (start..start + n).collect()
}

/// A few seeds that move with the commit under test
/// (`MESHSCOPE_FIDELITY_COMMIT_SEEDS`, default 3): from the hash of `git
/// rev-parse HEAD`, so each commit sweeps a little more of the space and a
/// failure is rerun with the seed it prints. None outside a git checkout.
fn commit_seeds() -> Vec<u64> {
    let n: u64 = std::env::var("MESHSCOPE_FIDELITY_COMMIT_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let head = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(meshscope_e2e::cluster::repo_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let Some(head) = head else {
        assert!(
            !meshscope_test_support::outside::in_ci(),
            "fidelity: not a git checkout, so no commit seeds; under CI=true the commit seeds must run (run from a git clone)"
        );
        eprintln!("fidelity: not a git checkout, so no commit seeds");
        return Vec::new();
    };
    // FNV-1a of the commit id; seeds above the fixed ones.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in head.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (0..n)
        .map(|i| 1_000 + (h.wrapping_add(i * 7_919) % 1_000_000))
        .collect()
}

/// Keeps this run's namespace names apart from an earlier run's, which
/// may still be terminating.
fn run_tag() -> u64 {
    u64::from(std::process::id()) % 1000
}

fn meshscope(kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let r = run::meshscope_at(kubeconfig, args);
    if let Err(e) = r.outcome {
        bail!("kubectl meshscope {}: {e:#}\n{}", args.join(" "), r.stderr);
    }
    Ok(r.stdout)
}

fn set_mesh(c: &Cluster, mesh: &str) {
    let indented: String = mesh.lines().map(|l| format!("    {l}\n")).collect();
    c.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: istio\n  namespace: {ROOT_NS}\ndata:\n  mesh: |-\n{indented}"
    ));
}

/// Applies a scenario (mesh config included), starts istiod on it, and
/// connects a simulated sidecar per pod, once their config has settled.
fn start_world(c: &Cluster, sc: &Scenario) -> (Istiod, Sim) {
    let options = SimOptions {
        concurrency: 8,
        ..SimOptions::default()
    };
    start_world_with(c, sc, options)
}

/// [`start_world`] with the simulated sidecars' `options`.
fn start_world_with(c: &Cluster, sc: &Scenario, options: SimOptions) -> (Istiod, Sim) {
    set_mesh(c, &sc.mesh);
    sc.world.apply(c).expect("world applied");
    let istiod = Istiod::start(c).expect("istiod starts");
    wait_for_world(&istiod, sc).expect("istiod sees the scenario");
    let sim = Sim::connect_settled(&istiod.grpc_url(), specs(&sc.world), options);
    (istiod, sim)
}

/// A simulated sidecar per pod that runs (not one held in Terminating).
fn specs(world: &World) -> Vec<ProxySpec> {
    world
        .pods
        .iter()
        .filter(|p| !p.terminating)
        .map(|p| p.proxy_spec())
        .collect()
}

/// The Sidecar istiod applied, as `ns/name`, or `None` for its implicit
/// default scope (`default-sidecar`, with no Sidecar spec).
fn applied_sidecar(sidecarz: &serde_json::Value) -> Option<String> {
    if sidecarz["sidecar"].is_null() {
        return None;
    }
    let name = sidecarz["name"].as_str()?;
    let ns = sidecarz["namespace"].as_str().unwrap_or("");
    Some(format!("{ns}/{name}"))
}

#[derive(Default)]
struct Tally {
    /// istiod runs with `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG=true`: a
    /// gateway's clusters are held to explain's `gateway_filter`.
    filter_gateways: bool,
    proxies: usize,
    clusters: usize,
    listeners: usize,
    /// Gateway API HTTP and gRPC route hosts compared with istiod's RDS.
    gateway_routes: usize,
    /// Of those, the ones a route applies to (a virtual host expected).
    gateway_routes_applied: usize,
    /// Gateway API TCP and TLS route hosts compared with the filter
    /// chains of istiod's LDS.
    stream_routes: usize,
    /// Gateways' pods compared, and those istiod gave their namespace's
    /// sidecar default scope.
    gateways: usize,
    gateway_shared_scopes: usize,
    /// Waypoints' pods compared.
    waypoints: usize,
    /// East-west gateways' SNI-DNAT clusters compared.
    sni_dnat_clusters: usize,
    failures: Vec<String>,
}

/// Applies a scenario, connects a simulated sidecar per pod, and compares
/// every proxy with the engine's prediction.
fn check(c: &Cluster, istiod: &Istiod, sc: &Scenario, tally: &mut Tally) -> Result<()> {
    set_mesh(c, &sc.mesh);
    sc.world.apply(c)?;
    // Proxies connect once istiod has seen the whole scenario: a change it
    // sees later would be pushed, but perhaps after the quiet window.
    wait_for_world(istiod, sc)?;
    let sim = Sim::connect_many(&istiod.grpc_url(), specs(&sc.world), 32)?;
    sim.wait_stable(Duration::from_millis(1500), Duration::from_secs(90))
        .with_context(|| format!("{}: istiod log:\n{}", sc.name, istiod.log_tail(20)))?;
    for p in sc.world.pods.iter().filter(|p| !p.terminating) {
        tally.proxies += 1;
        check_proxy(c, istiod, &sim, sc, p, tally)?;
    }
    sim.close();
    Ok(())
}

/// One proxy: explain's prediction against what istiod sent it, and
/// against istiod's own views (its catch-all and the Sidecar it applied).
fn check_proxy(
    c: &Cluster,
    istiod: &Istiod,
    sim: &Sim,
    sc: &Scenario,
    p: &Pod,
    tally: &mut Tally,
) -> Result<()> {
    let key = format!("{}/{}", p.namespace, p.name);
    let proxy = sim.get(&key).context("a proxy per pod")?;
    let e: serde_json::Value = serde_json::from_str(&meshscope(
        &c.kubeconfig,
        &[
            "explain",
            "pod",
            &p.name,
            "-n",
            &p.namespace,
            "-o",
            "json",
            "--istio-version",
            ENGINE_VERSION,
        ],
    )?)?;
    let at = format!("{}: proxy {key}", sc.name);
    let snapshot = proxy.snapshot();
    let clusters: BTreeSet<String> = proxy
        .cluster_names()
        .into_iter()
        .filter(|n| n.starts_with("outbound|") || n.starts_with("inbound-vip|"))
        .collect();
    tally.clusters += clusters.len();
    let router = p.gateway == Some(meshscope_shared::inject::Gateway::Router);
    let filtered = tally.filter_gateways && router;
    let clusters_of = |field: &str| match filtered {
        true => string_set(&e["gateway_filter"], field),
        false => string_set(&e, field),
    };
    let mut predicted = clusters_of("outbound_clusters")?;
    // A gateway's pod gets either its own scope or, by the order of
    // istiod's push, its namespace's sidecar default (explain names both).
    let mut shared_scope = false;
    if let Ok(shared) = clusters_of("outbound_clusters_if_shared") {
        if shared == clusters {
            tally.gateway_shared_scopes += 1;
            predicted = shared;
            shared_scope = true;
        }
    }
    compare_sets(tally, &at, "clusters", &clusters, &predicted);
    if router {
        tally.gateways += 1;
        // An east-west gateway's SNI-DNAT clusters, the flag on or off.
        let sni: BTreeSet<String> = proxy
            .cluster_names()
            .into_iter()
            .filter(|n| n.starts_with("outbound_."))
            .collect();
        tally.sni_dnat_clusters += sni.len();
        let field = match shared_scope {
            true => "sni_dnat_clusters_if_shared",
            false => "sni_dnat_clusters",
        };
        let predicted = string_set(&e, field).unwrap_or_default();
        compare_sets(tally, &at, "SNI-DNAT clusters", &sni, &predicted);
        // A gateway's pod: its clusters (above), its listeners and route
        // configurations by name (from its Gateways' servers), the routes
        // of its Gateways (HTTP ones in RDS, TCP and TLS ones in the
        // filter chains of its listeners) and the scope istiod applied.
        compare_listeners_and_routes(&snapshot, &e, &at, tally)?;
        check_gateway_routes(istiod, p, &e, &at, tally)?;
        check_gateway_domains(istiod, p, &e, &at, tally)?;
        check_stream_routes(istiod, p, &e, &at, tally)?;
        return check_applied_sidecar(istiod, p, &e, &at, tally);
    }
    if p.gateway == Some(meshscope_shared::inject::Gateway::Waypoint) {
        return check_waypoint(&snapshot, &e, &at, tally);
    }
    compare_listeners_and_routes(&snapshot, &e, &at, tally)?;
    compare_counts(&snapshot, &e, &at, tally);
    check_gateway_routes(istiod, p, &e, &at, tally)?;
    check_stream_routes(istiod, p, &e, &at, tally)?;
    check_istiod_views(istiod, p, &e, &at, tally)
}

/// The outbound listeners (the virtual ones aside) and route
/// configurations istiod sent, by name, against explain's.
fn compare_listeners_and_routes(
    snapshot: &meshscope_e2e::xds::ProxyConfig,
    e: &serde_json::Value,
    at: &str,
    tally: &mut Tally,
) -> Result<()> {
    let listeners: BTreeSet<String> = snapshot
        .names("lds")
        .into_iter()
        .filter(|n| !n.starts_with("virtual"))
        .collect();
    tally.listeners += listeners.len();
    let predicted = string_set(e, "outbound_listeners")?;
    compare_sets(tally, at, "listeners", &listeners, &predicted);
    let routes: BTreeSet<String> = snapshot.names("rds").into_iter().collect();
    let predicted = string_set(e, "outbound_routes")?;
    compare_sets(tally, at, "routes", &routes, &predicted);
    Ok(())
}

/// A waypoint's pod, beside its clusters (compared above): its listeners
/// by name, no route configuration, and the estimate's cluster and
/// listener counts against istiod's CDS and LDS (the fixed ones too).
fn check_waypoint(
    snapshot: &meshscope_e2e::xds::ProxyConfig,
    e: &serde_json::Value,
    at: &str,
    tally: &mut Tally,
) -> Result<()> {
    tally.waypoints += 1;
    let listeners: BTreeSet<String> = snapshot.names("lds").into_iter().collect();
    compare_sets(
        tally,
        at,
        "listeners",
        &listeners,
        &string_set(e, "outbound_listeners")?,
    );
    let routes: BTreeSet<String> = snapshot.names("rds").into_iter().collect();
    compare_sets(tally, at, "routes", &routes, &BTreeSet::new());
    compare_counts(snapshot, e, at, tally);
    Ok(())
}

/// Resource counts: the estimate's clusters and listeners against
/// istiod's CDS and LDS.
fn compare_counts(
    snapshot: &meshscope_e2e::xds::ProxyConfig,
    e: &serde_json::Value,
    at: &str,
    tally: &mut Tally,
) {
    for (what, ty) in [("clusters", "cds"), ("listeners", "lds")] {
        let got = snapshot.total(ty).count as u64;
        let want = e["estimate"][what].as_u64().unwrap_or(u64::MAX);
        if got != want {
            tally.failures.push(format!(
                "{at}: istiod sends {got} {what} ({:?}), explain predicts {want}",
                snapshot.names(ty)
            ));
        }
    }
}

/// A gateway pod's virtual-host domains in istiod's RDS (those without a
/// port) against the hostnames explain says its Gateways' routes bind
/// for: a route its Gateway's listeners do not admit has none, one they
/// admit has its hostnames (narrowed by the listener's).
fn check_gateway_domains(
    istiod: &Istiod,
    p: &Pod,
    e: &serde_json::Value,
    at: &str,
    tally: &mut Tally,
) -> Result<()> {
    let predicted: BTreeSet<String> = e["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["applies"] == true)
        .filter(|r| {
            let label = r["route"].as_str().unwrap_or("");
            !(label.starts_with("TCPRoute ") || label.starts_with("TLSRoute "))
        })
        .filter_map(|r| r["host"].as_str().map(str::to_string))
        .collect();
    let got = generated(istiod, p, "rds")?;
    let domains: BTreeSet<String> = got
        .virtual_hosts
        .keys()
        .filter(|d| !d.contains(':') && (*d != "*" || predicted.contains("*")))
        .cloned()
        .collect();
    if domains != predicted {
        tally.failures.push(format!(
            "{at}: istiod's gateway virtual hosts are for {domains:?}, explain predicts {predicted:?}"
        ));
    }
    Ok(())
}

/// explain's Gateway API TCP and TLS mesh routes against the filter
/// chains of istiod's LDS for the proxy, as `verify` compares them
/// (`meshscope_shared::verify::route_diffs`): per host, the TCP proxies
/// on the routes' listeners name the applying routes' backends, or none
/// of them when no route applies.
fn check_stream_routes(
    istiod: &Istiod,
    p: &Pod,
    e: &serde_json::Value,
    at: &str,
    tally: &mut Tally,
) -> Result<()> {
    use meshscope_shared::gateway_routes::RouteSeen;
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_str().map(str::to_string))
            .collect()
    };
    let mut seen = Vec::new();
    for r in e["routes"].as_array().into_iter().flatten() {
        let label = r["route"].as_str().unwrap_or("");
        if !(label.starts_with("TCPRoute ") || label.starts_with("TLSRoute ")) {
            continue;
        }
        seen.push(RouteSeen {
            route: label.to_string(),
            host: r["host"].as_str().context("a route's host")?.to_string(),
            applies: r["applies"] == true,
            reason: None,
            clusters: strings(&r["clusters"]),
            port: r["port"].as_u64().map(|p| p as u32),
            http: false,
            listeners: strings(&r["listeners"]),
            tls: label.starts_with("TLSRoute "),
        });
    }
    if seen.iter().all(|r| r.listeners.is_empty()) {
        return Ok(());
    }
    let got = generated(istiod, p, "lds")?;
    let hosts: BTreeSet<(&str, bool)> = seen
        .iter()
        .filter(|r| !r.listeners.is_empty())
        .map(|r| (r.host.as_str(), r.tls))
        .collect();
    tally.stream_routes += hosts.len();
    for d in meshscope_shared::verify::route_diffs(&seen, &got) {
        tally.failures.push(format!("{at}: {}", d.describe()));
    }
    Ok(())
}

/// What istiod generates for `p`, of the xDS `types` (`rds`, `lds`), as
/// `/debug/config_dump` shows it.
fn generated(istiod: &Istiod, p: &Pod, types: &str) -> Result<meshscope_shared::verify::Generated> {
    let dump = istiod.debug(&format!(
        "/debug/config_dump?proxyID={}.{}&types={types}",
        p.name, p.namespace
    ))?;
    Ok(meshscope_shared::verify::parse_config_dump(
        dump.as_bytes(),
    )?)
}

/// explain's Gateway API HTTP and gRPC mesh routes against the virtual
/// hosts of istiod's RDS for the proxy (`/debug/config_dump`): per host,
/// when a route applies, the clusters the host's routes name are the
/// union of the applying routes' clusters; when none applies, none of the
/// routes' backends but the host's own.
fn check_gateway_routes(
    istiod: &Istiod,
    p: &Pod,
    e: &serde_json::Value,
    at: &str,
    tally: &mut Tally,
) -> Result<()> {
    use std::collections::BTreeMap;
    // Per host: whether a route applies, the applying routes' clusters,
    // every route's clusters, and the parent ports they attach to.
    type Host = (
        bool,
        BTreeSet<String>,
        BTreeSet<String>,
        BTreeSet<Option<u64>>,
    );
    let mut by_host: BTreeMap<String, Host> = BTreeMap::new();
    for r in e["routes"].as_array().into_iter().flatten() {
        let label = r["route"].as_str().unwrap_or("");
        if !(label.starts_with("HTTPRoute ") || label.starts_with("GRPCRoute ")) {
            continue;
        }
        let host = r["host"].as_str().context("a route's host")?.to_string();
        let clusters: BTreeSet<String> = r["clusters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_str().map(str::to_string))
            .collect();
        let entry = by_host.entry(host).or_default();
        if r["applies"] == true {
            entry.0 = true;
            entry.1.extend(clusters.iter().cloned());
        }
        entry.2.extend(clusters);
        entry.3.insert(r["port"].as_u64());
    }
    if by_host.is_empty() {
        return Ok(());
    }
    let got = generated(istiod, p, "rds")?;
    for (host, (applies, predicted, all, ports)) in by_host {
        tally.gateway_routes += 1;
        tally.gateway_routes_applied += usize::from(applies);
        // Routes that all attach to one port of the parent: that port's
        // route configuration (its other ports keep their default).
        let one_port = match ports.iter().collect::<Vec<_>>()[..] {
            [Some(p)] => Some(*p as u32),
            _ => None,
        };
        let actual = match one_port {
            Some(p) => got.port_virtual_hosts.get(&(p, host.clone())),
            None => got.virtual_hosts.get(&host),
        }
        .cloned()
        .unwrap_or_default();
        let own = format!("||{host}");
        let agrees = match applies {
            true => actual == predicted,
            false => all
                .iter()
                .filter(|c| !c.ends_with(&own))
                .all(|c| !actual.contains(c)),
        };
        if !agrees {
            tally.failures.push(format!(
                "{at}: istiod routes {host} to {actual:?}, explain predicts {} {predicted:?}",
                if applies {
                    "its routes to"
                } else {
                    "no route of"
                }
            ));
        }
    }
    Ok(())
}

/// istiod's catch-all cluster and the Sidecar it applied to `p`, against
/// explain's.
fn check_istiod_views(
    istiod: &Istiod,
    p: &Pod,
    e: &serde_json::Value,
    at: &str,
    tally: &mut Tally,
) -> Result<()> {
    let got = catch_all_cluster(istiod, &p.name, &p.namespace)?;
    let want = e["fallthrough"]["catch_all_cluster"].as_str().unwrap_or("");
    if got != want {
        tally.failures.push(format!(
            "{at}: istiod's catch-all goes to {got}, explain predicts {want} (policy {})",
            e["fallthrough"]["policy"]
        ));
    }
    check_applied_sidecar(istiod, p, e, at, tally)
}

/// The Sidecar istiod applied to `p`, against explain's.
fn check_applied_sidecar(
    istiod: &Istiod,
    p: &Pod,
    e: &serde_json::Value,
    at: &str,
    tally: &mut Tally,
) -> Result<()> {
    let z = istiod.sidecarz(&p.name, &p.namespace)?;
    let got = applied_sidecar(&z);
    // istiod shows the root namespace's default under the proxy's
    // namespace (it is evaluated there).
    let want = e["sidecar"]
        .as_str()
        .map(|s| match e["scope_source"].as_str() {
            Some("root") => format!("{}/{}", p.namespace, s.split_once('/').map_or(s, |x| x.1)),
            _ => s.to_string(),
        });
    if got != want {
        tally.failures.push(format!(
            "{at}: istiod applied Sidecar {got:?}, explain names {want:?}"
        ));
    }
    Ok(())
}

/// The strings of the array `field` of explain's JSON.
fn string_set(e: &serde_json::Value, field: &str) -> Result<BTreeSet<String>> {
    Ok(e[field]
        .as_array()
        .with_context(|| format!("explain -o json has {field}"))?
        .iter()
        .filter_map(|v| v.as_str().map(String::from))
        .collect())
}

/// Records a disagreement when what istiod sent and what explain predicts
/// differ.
fn compare_sets(
    tally: &mut Tally,
    at: &str,
    what: &str,
    istiod: &BTreeSet<String>,
    explain: &BTreeSet<String>,
) {
    if istiod != explain {
        tally.failures.push(format!(
            "{at}: istiod sends but explain does not predict {what} {:?}; explain predicts but istiod does not send {:?}",
            istiod.difference(explain).collect::<Vec<_>>(),
            explain.difference(istiod).collect::<Vec<_>>()
        ));
    }
}

/// Waits until istiod has every Service, ServiceEntry host and Istio object
/// of the scenario.
fn wait_for_world(istiod: &Istiod, sc: &Scenario) -> Result<()> {
    let mut services: Vec<(String, String)> = sc
        .world
        .services
        .iter()
        .map(|s| {
            (
                s.namespace.clone(),
                format!("{}.{}.svc.cluster.local", s.name, s.namespace),
            )
        })
        .collect();
    let mut configs = Vec::new();
    for doc in &sc.world.istio {
        let v: serde_yaml::Value = serde_yaml::from_str(doc)?;
        let ns = v["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        configs.push((
            ns.clone(),
            v["metadata"]["name"].as_str().unwrap_or("").to_string(),
        ));
        if v["kind"].as_str() == Some("ServiceEntry") {
            for h in v["spec"]["hosts"].as_sequence().into_iter().flatten() {
                if let Some(h) = h.as_str() {
                    services.push((ns.clone(), h.to_string()));
                }
            }
        }
    }
    istiod.wait_for(&services, &configs, Duration::from_secs(60))
}

fn cleanup(c: &Cluster, sc: &Scenario) {
    for (kind, ns, name) in &sc.outside {
        let _ = c.kubectl(
            &["delete", kind, name, "-n", ns, "--ignore-not-found"],
            None,
        );
    }
    if let Err(e) = sc.world.delete(c) {
        eprintln!("cleanup of {}: {e:#}", sc.name);
    }
    set_mesh(c, DEFAULT_MESH);
}

fn run_all(scenarios: Vec<Scenario>) {
    run_with(scenarios, Istiod::start_with_gateway_api, |_| {}, false);
}

/// [`run_all`] on an istiod with `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG=true`:
/// gateways' clusters are held to what explain predicts with the flag on.
fn run_filtering_gateways(scenarios: Vec<Scenario>) {
    run_with(scenarios, Istiod::start_filtering_gateways, |_| {}, true);
}

/// The GatewayClass istiod creates with ambient on, and only then: left
/// in the shared cluster, it would tell later tests' engine that their
/// istiod runs with ambient.
const WAYPOINT_CLASS: &str = "istio-waypoint";

/// [`run_all`] on an istiod with ambient on; the waypoint GatewayClass is
/// deleted afterwards, also when the run fails (random ambient seed 33:
/// left behind, it made the next test's engine predict an ambient mesh).
fn run_ambient(scenarios: Vec<Scenario>) {
    run_with(
        scenarios,
        Istiod::start_ambient,
        |c| {
            let _ = c.kubectl(
                &[
                    "delete",
                    "gatewayclass",
                    WAYPOINT_CLASS,
                    "--ignore-not-found",
                ],
                None,
            );
        },
        false,
    );
}

/// Runs `cleanup` on the cluster when dropped: a failed assertion does not
/// skip it.
struct OnDrop<'a>(&'a Cluster, fn(&Cluster));

impl Drop for OnDrop<'_> {
    fn drop(&mut self) {
        (self.1)(self.0)
    }
}

/// Checks `scenarios` on an istiod `start` starts, holding the test lock;
/// `after` runs before it is released. `filter_gateways`: that istiod
/// filters gateways' clusters.
fn run_with(
    scenarios: Vec<Scenario>,
    start: fn(&Cluster) -> anyhow::Result<Istiod>,
    after: fn(&Cluster),
    filter_gateways: bool,
) {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::shared();
    let _after = OnDrop(c, after);
    let mut istiod = start(c).expect("istiod starts");
    let mut tally = Tally {
        filter_gateways,
        ..Tally::default()
    };
    let started = Instant::now();
    for sc in &scenarios {
        // A scenario that crashed istiod fails alone: the next gets a new one.
        if !istiod.running() {
            istiod = start(c).expect("istiod starts again");
        }
        let r = check(c, &istiod, sc, &mut tally);
        cleanup(c, sc);
        if let Err(e) = r {
            tally.failures.push(format!("{}: {e:#}", sc.name));
        }
    }
    eprintln!(
        "fidelity: {} scenarios, {} proxies ({} gateway pods, {} given their namespace's sidecar scope, {} waypoint pods), {} outbound clusters ({} SNI-DNAT), {} outbound listeners and their routes, {} Gateway API route hosts ({} routed), {} TCP and TLS route hosts compared in {:.1} s, {} disagreements",
        scenarios.len(),
        tally.proxies,
        tally.gateways,
        tally.gateway_shared_scopes,
        tally.waypoints,
        tally.clusters,
        tally.sni_dnat_clusters,
        tally.listeners,
        tally.gateway_routes,
        tally.gateway_routes_applied,
        tally.stream_routes,
        started.elapsed().as_secs_f64(),
        tally.failures.len()
    );
    assert!(
        tally.failures.is_empty(),
        "the scope engine disagrees with istiod:\n{}",
        tally.failures.join("\n")
    );
}

#[test]
fn fixed_scenarios_match_istiod() {
    meshscope_e2e::needs_cluster!();
    run_all(fidelity::fixed(run_tag()));
}

/// Waypoints' pods, and sidecars beside them, on an istiod with ambient
/// on.
#[test]
fn waypoints_match_istiod() {
    meshscope_e2e::needs_cluster!();
    run_ambient(fidelity::waypoints(run_tag()));
}

/// The random scenarios of [`seeds`] with a waypoint, on an istiod with
/// ambient on: CI's first five seeds, or those the variables name.
#[test]
fn random_waypoint_scenarios_match_istiod() {
    meshscope_e2e::needs_cluster!();
    let mut seeds = seeds();
    if std::env::var_os("MESHSCOPE_FIDELITY_SEEDS").is_none() {
        seeds.truncate(5);
    }
    let run = run_tag();
    run_ambient(
        seeds
            .into_iter()
            .map(|s| fidelity::random_ambient(s, run))
            .collect(),
    );
}

/// The cases istiod's own rules and unit tests pin
/// (`tests/src/upstream_cases.rs`).
#[test]
fn upstream_cases_match_istiod() {
    meshscope_e2e::needs_cluster!();
    run_all(meshscope_e2e::upstream_cases::cases(run_tag()));
}

#[test]
fn random_scenarios_match_istiod() {
    meshscope_e2e::needs_cluster!();
    let seeds = seeds();
    eprintln!(
        "fidelity: random seeds {}..={} (rerun one with MESHSCOPE_FIDELITY_SEED=N MESHSCOPE_FIDELITY_SEEDS=1)",
        seeds[0],
        seeds[seeds.len() - 1]
    );
    run_seeds(seeds);
}

/// The random scenarios of `seeds`, held to istiod.
fn run_seeds(seeds: Vec<u64>) {
    let run = run_tag();
    run_all(
        seeds
            .into_iter()
            .map(|s| fidelity::random(s, run))
            .collect(),
    );
}

/// Gateways' clusters with `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG=true` on
/// a real istiod: the fixed scenarios, and the random ones of [`seeds`]
/// (CI's first five, or those the variables name) and of the commit.
#[test]
fn filtered_gateway_clusters_match_istiod() {
    meshscope_e2e::needs_cluster!();
    let mut seeds = seeds();
    if std::env::var_os("MESHSCOPE_FIDELITY_SEEDS").is_none() {
        seeds.truncate(5);
        seeds.extend(commit_seeds());
    }
    eprintln!("fidelity with gateway cluster filtering: random seeds {seeds:?}");
    let run = run_tag();
    let mut scenarios = fidelity::fixed(run);
    scenarios.extend(seeds.into_iter().map(|s| fidelity::random(s, run)));
    run_filtering_gateways(scenarios);
}

#[test]
fn commit_seeds_match_istiod() {
    meshscope_e2e::needs_cluster!();
    let seeds = commit_seeds();
    if seeds.is_empty() {
        return;
    }
    eprintln!(
        "fidelity: commit seeds {seeds:?} (rerun one with MESHSCOPE_FIDELITY_SEED=N MESHSCOPE_FIDELITY_SEEDS=1 and the random_scenarios test)"
    );
    run_seeds(seeds);
}

/// Safety on a real istiod: after `kubectl meshscope apply` from observed
/// traffic, every observed edge's cluster is still in its proxy's CDS, and
/// the scopes did narrow (so the check is not vacuous).
#[test]
fn recommended_sidecars_keep_every_observed_cluster() {
    meshscope_e2e::needs_cluster!();
    use meshscope_e2e::fidelity::Builder;
    use meshscope_e2e::outbound_text_line;
    use meshscope_e2e::world::{labels, SvcPort};

    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::shared();
    let tag = run_tag();
    let (a, b) = (format!("safe{tag}-a"), format!("safe{tag}-b"));
    let mut w = Builder::new(900 + tag % 100);
    w.namespace(&a);
    w.namespace(&b);
    w.service(&a, "web", vec![SvcPort::new("http", 80)], false);
    w.service(&a, "db", vec![SvcPort::new("tcp-db", 5432)], false);
    w.service(&a, "idle", vec![SvcPort::new("http", 80)], false);
    w.service(
        &b,
        "api",
        vec![SvcPort::new("http", 8080), SvcPort::new("grpc", 9090)],
        false,
    );
    w.service(&b, "cache", vec![SvcPort::new("tcp-redis", 6379)], true);
    w.service(&b, "other", vec![SvcPort::new("http", 80)], false);
    w.pod(&a, "client-0", labels(&[("app", "client")]));
    w.pod(&a, "web-0", labels(&[("app", "web")]));
    w.pod(&a, "db-0", labels(&[("app", "db")]));
    w.pod(&a, "idle-0", labels(&[("app", "idle")]));
    w.pod(&b, "api-0", labels(&[("app", "api")]));
    w.pod(&b, "cache-0", labels(&[("app", "cache")]));
    w.pod(&b, "other-0", labels(&[("app", "other")]));
    w.istio(
        fidelity::ServiceEntryDoc::new(&a, "payments")
            .host("payments.example.com")
            .port(443, "tls", "TLS")
            .yaml(),
    );
    let sc = w.finish("safety".into(), DEFAULT_MESH.into());
    let ip = |ns: &str, pod: &str| {
        sc.world
            .pods
            .iter()
            .find(|p| p.namespace == ns && p.name == pod)
            .map(|p| p.ip.clone())
            .expect("pod")
    };
    let host = |name: &str, ns: &str| format!("{name}.{ns}.svc.cluster.local");
    // (source namespace, source pod, host, port)
    let edges: Vec<(String, String, String, u32)> = vec![
        (a.clone(), "client-0".into(), host("web", &a), 80),
        (a.clone(), "client-0".into(), host("api", &b), 8080),
        (a.clone(), "client-0".into(), host("api", &b), 9090),
        (
            a.clone(),
            "client-0".into(),
            "payments.example.com".into(),
            443,
        ),
        (a.clone(), "web-0".into(), host("db", &a), 5432),
        (b.clone(), "api-0".into(), host("cache", &b), 6379),
        (b.clone(), "api-0".into(), host("web", &a), 80),
    ];
    let mut log = String::new();
    for (n, (ns, pod, h, port)) in edges.iter().enumerate() {
        for k in 0..3u64 {
            log.push_str(&outbound_text_line(
                n as u64 * 3 + k,
                &ip(ns, pod),
                h,
                *port,
                "10.255.0.1:80",
            ));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("access.log");
    std::fs::write(&log_path, &log).unwrap();

    set_mesh(c, &sc.mesh);
    sc.world.apply(c).expect("world applied");
    let istiod = Istiod::start(c).expect("istiod starts");
    wait_for_world(&istiod, &sc).expect("istiod sees the scenario");
    let sim = Sim::connect_many_settled(&istiod.grpc_url(), specs(&sc.world), 16);
    let before: usize = sim.proxies().iter().map(|p| p.cluster_names().len()).sum();

    let ns_arg = format!("{a},{b}");
    let mut failures = Vec::new();
    let t0 = Instant::now();
    for ns in [&a, &b] {
        let out = meshscope(
            &c.kubeconfig,
            &[
                "apply",
                "-n",
                ns,
                "--access-log",
                log_path.to_str().unwrap(),
            ],
        );
        if let Err(e) = out {
            failures.push(format!("apply -n {ns}: {e:#}"));
        }
    }
    sim.wait_push_after(t0, Duration::from_millis(1500), Duration::from_secs(90))
        .expect("config settles after apply");
    let after: usize = sim.proxies().iter().map(|p| p.cluster_names().len()).sum();
    for (ns, pod, h, port) in &edges {
        let want = format!("outbound|{port}||{h}");
        let got = sim
            .get(&format!("{ns}/{pod}"))
            .expect("proxy")
            .cluster_names();
        if !got.contains(&want) {
            failures.push(format!("{ns}/{pod} lost {want} (has {got:?})"));
        }
    }
    let applied = c.kubectl_ok(
        &[
            "get",
            "sidecars",
            "-A",
            "-l",
            "app.kubernetes.io/managed-by=kubectl-meshscope",
            "-o",
            "name",
        ],
        None,
    );
    sim.close();
    drop(istiod);
    cleanup(c, &sc);
    eprintln!(
        "safety ({ns_arg}): {} clusters before, {after} after; Sidecars: {}",
        before,
        applied.split_whitespace().count()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        after < before,
        "the recommended Sidecars did not narrow any scope ({before} -> {after} clusters)"
    );
}

/// The mesh of [`recommended_exports_keep_every_observed_edge`]: no
/// Sidecars; `b` serves api, reviews (a VirtualService sends all of it to
/// subset v2 of its DestinationRule) and a DNS ServiceEntry; `a` and `c`
/// call into `b`, `d` calls nothing.
fn exports_world(tag: u64) -> (Scenario, [String; 4]) {
    use meshscope_e2e::fidelity::{Builder, DestinationRuleDoc, ServiceEntryDoc};
    use meshscope_e2e::world::{labels, SvcPort};
    let ns = |n: &str| format!("exp{tag}-{n}");
    let (a, b, c, d) = (ns("a"), ns("b"), ns("c"), ns("d"));
    let mut w = Builder::new(950 + tag % 50);
    for n in [&a, &b, &c, &d] {
        w.namespace(n);
    }
    w.service(&b, "api", vec![SvcPort::new("http", 8080)], false);
    w.service(&b, "reviews", vec![SvcPort::new("http", 9080)], false);
    w.service(&d, "idle", vec![SvcPort::new("http", 80)], false);
    for (n, pod, app, v) in [
        (&b, "api-0", "api", "v1"),
        (&b, "reviews-0", "reviews", "v1"),
        (&b, "reviews-1", "reviews", "v2"),
        (&a, "client-0", "client", "v1"),
        (&c, "worker-0", "worker", "v1"),
        (&d, "idle-0", "idle", "v1"),
    ] {
        w.pod(n, pod, labels(&[("app", app), ("version", v)]));
    }
    let reviews = format!("reviews.{b}.svc.cluster.local");
    w.istio(
        DestinationRuleDoc::new(&b, "reviews", &reviews)
            .subsets(&["v1", "v2"])
            .yaml(),
    );
    w.istio(format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: reviews\n  namespace: {b}\nspec:\n  hosts: [{reviews}]\n  http:\n  - route:\n    - destination:\n        host: {reviews}\n        subset: v2\n"));
    let payments = format!("payments.{tag}.example.com");
    w.istio(
        ServiceEntryDoc::new(&b, "payments")
            .host(payments)
            .port(443, "tls", "TLS")
            .yaml(),
    );
    (
        w.finish("exports".into(), DEFAULT_MESH.into()),
        [a, b, c, d],
    )
}

/// Safety of `apply --exports` on a real istiod, with no Sidecar anywhere:
/// after it, every observed edge's caller still gets the callee's cluster,
/// and a call through a VirtualService still gets its route (the route
/// configuration names the subset cluster it sends to); the namespace
/// that calls nothing loses them (so the check is not vacuous).
#[test]
fn recommended_exports_keep_every_observed_edge() {
    meshscope_e2e::needs_cluster!();
    use meshscope_e2e::outbound_text_line;

    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::shared();
    let tag = run_tag();
    let (sc, [a, b, cc, d]) = exports_world(tag);
    let ip = |ns: &str, pod: &str| {
        let p = sc
            .world
            .pods
            .iter()
            .find(|p| p.namespace == ns && p.name == pod);
        p.map(|p| p.ip.clone()).expect("pod")
    };
    let host = |name: &str| format!("{name}.{b}.svc.cluster.local");
    let payments = format!("payments.{tag}.example.com");
    let edges = [
        (&a, "client-0", host("api"), 8080),
        (&a, "client-0", host("reviews"), 9080),
        (&a, "client-0", payments.clone(), 443),
        (&cc, "worker-0", host("api"), 8080),
    ];
    let mut log = String::new();
    for (n, (ns, pod, h, port)) in edges.iter().enumerate() {
        log.push_str(&outbound_text_line(
            n as u64,
            &ip(ns, pod),
            h,
            *port,
            "10.255.0.9:80",
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("access.log");
    std::fs::write(&log_path, &log).unwrap();

    // Reference tracking decodes routes: which clusters each names.
    let options = SimOptions {
        concurrency: 8,
        references: true,
        ..SimOptions::default()
    };
    let (istiod, sim) = start_world_with(c, &sc, options);
    let v2 = format!("outbound|9080|v2|{}", host("reviews"));
    let client = format!("{a}/client-0");
    let routed = |sim: &Sim| {
        let p = sim.get(&client).expect("proxy");
        p.referenced_clusters().values().any(|cs| cs.contains(&v2))
    };
    assert!(routed(&sim), "{client} has no route to {v2} to begin with");
    let idle = format!("{d}/idle-0");
    let before = sim.get(&idle).expect("proxy").cluster_names();
    let t0 = Instant::now();
    let mut failures = Vec::new();
    for ns in [&a, &b, &cc, &d] {
        let args = [
            "apply",
            "--exports",
            "-n",
            ns,
            "--access-log",
            log_path.to_str().unwrap(),
        ];
        match meshscope(&c.kubeconfig, &args) {
            Ok(out) => eprintln!("apply --exports -n {ns}:\n{out}"),
            Err(e) => failures.push(format!("apply --exports -n {ns}: {e:#}")),
        }
    }
    sim.wait_push_after(t0, Duration::from_millis(1500), Duration::from_secs(90))
        .expect("config settles after apply --exports");
    for (ns, pod, h, port) in &edges {
        let want = format!("outbound|{port}||{h}");
        let got = sim
            .get(&format!("{ns}/{pod}"))
            .expect("proxy")
            .cluster_names();
        if !got.contains(&want) {
            failures.push(format!("{ns}/{pod} lost {want}"));
        }
    }
    if !routed(&sim) {
        failures.push(format!(
            "{a}/client-0 lost the VirtualService route to {v2}"
        ));
    }
    let after = sim.get(&idle).expect("proxy").cluster_names();
    let narrowed = [host("api"), host("reviews"), payments.clone()]
        .iter()
        .all(|h| {
            before.iter().any(|c| c.ends_with(h.as_str()))
                && !after.iter().any(|c| c.ends_with(h.as_str()))
        });
    sim.close();
    drop(istiod);
    cleanup(c, &sc);
    eprintln!(
        "exports safety: {idle} {} clusters before, {} after",
        before.len(),
        after.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(narrowed, "{idle} still gets b's services: {after:?}");
}

/// Hosts written the way istiod resolves them, on a real istiod: a
/// hostname defined in two namespaces with different ports, and a call to
/// a headless Service's pod by its name. After `kubectl meshscope apply`,
/// each proxy's CDS still holds the cluster of the copy its traffic used
/// (the port tells the copies apart) and not the other one, and the
/// headless Service's cluster.
#[test]
fn applied_hosts_import_the_copy_the_traffic_used() {
    meshscope_e2e::needs_cluster!();
    use meshscope_e2e::fidelity::Builder;
    use meshscope_e2e::outbound_text_line;
    use meshscope_e2e::world::{labels, SvcPort};

    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::shared();
    let tag = run_tag();
    let (a, b) = (format!("dup{tag}-a"), format!("dup{tag}-b"));
    let (web, other) = (format!("dup{tag}-web"), format!("dup{tag}-other"));
    let mut w = Builder::new(800 + tag % 100);
    for ns in [&a, &b, &web, &other] {
        w.namespace(ns);
    }
    // api.example.com: a's is public (443), b's only for web (8443).
    w.istio(
        fidelity::ServiceEntryDoc::new(&a, "api")
            .host("api.example.com")
            .port(443, "tls", "TLS")
            .yaml(),
    );
    w.istio(
        fidelity::ServiceEntryDoc::new(&b, "api")
            .host("api.example.com")
            .port(8443, "http", "HTTP")
            .export_to([&web])
            .yaml(),
    );
    w.service(&a, "db", vec![SvcPort::new("tcp-db", 5432)], true);
    w.pod(&a, "db-0", labels(&[("app", "db")]));
    w.pod(&web, "client-0", labels(&[("app", "client")]));
    w.pod(&other, "client-0", labels(&[("app", "client")]));
    let sc = w.finish("duplicates".into(), DEFAULT_MESH.into());
    let ip = |ns: &str, pod: &str| {
        sc.world
            .pods
            .iter()
            .find(|p| p.namespace == ns && p.name == pod)
            .map(|p| p.ip.clone())
            .expect("pod")
    };
    let mut log = outbound_text_line(
        0,
        &ip(&web, "client-0"),
        "api.example.com",
        8443,
        "203.0.113.7:8443",
    );
    log += &outbound_text_line(
        1,
        &ip(&other, "client-0"),
        "api.example.com",
        443,
        "203.0.113.7:443",
    );
    // web calls a pod of the headless Service by its DNS name, at an
    // address that is no pod's: the name is what maps it back.
    let src = ip(&web, "client-0");
    let dst = "10.255.0.9:5432";
    log += &format!("[2026-11-21T10:00:02.000Z] \"GET / HTTP/1.1\" 200 - via_upstream - \"-\" 0 1 1 1 \"-\" \"x\" \"id\" \"db-0.db.{a}.svc.cluster.local:5432\" \"{dst}\" PassthroughCluster {src}:40001 {dst} {src}:40000 - allow_any\n");
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("access.log");
    std::fs::write(&log_path, &log).unwrap();

    let (istiod, sim) = start_world(c, &sc);
    let db_cluster = format!("outbound|5432||db.{a}.svc.cluster.local");
    let cds = |ns: &str| {
        sim.get(&format!("{ns}/client-0"))
            .expect("proxy")
            .cluster_names()
    };
    // Unscoped, as istiod resolves it: web gets b's copy, other a's.
    let before_web = cds(&web);
    assert!(
        before_web.contains(&"outbound|8443||api.example.com".to_string())
            && !before_web.contains(&"outbound|443||api.example.com".to_string()),
        "{before_web:?}"
    );

    let t0 = Instant::now();
    let mut failures = Vec::new();
    for ns in [&web, &other] {
        if let Err(e) = meshscope(
            &c.kubeconfig,
            &[
                "apply",
                "-n",
                ns,
                "--access-log",
                log_path.to_str().unwrap(),
            ],
        ) {
            failures.push(format!("apply -n {ns}: {e:#}"));
        }
    }
    sim.wait_push_after(t0, Duration::from_millis(1500), Duration::from_secs(90))
        .expect("config settles after apply");
    let egress = c.kubectl_ok(
        &[
            "get",
            "sidecars",
            "-n",
            &web,
            "-o",
            "jsonpath={.items[*].spec.egress[*].hosts}",
        ],
        None,
    );
    for (ns, has, lacks) in [
        (
            &web,
            vec!["outbound|8443||api.example.com", db_cluster.as_str()],
            "outbound|443||api.example.com",
        ),
        (
            &other,
            vec!["outbound|443||api.example.com"],
            "outbound|8443||api.example.com",
        ),
    ] {
        let got = cds(ns);
        for h in has {
            if !got.iter().any(|g| g == h) {
                failures.push(format!("{ns}/client-0 lacks {h} after apply (has {got:?})"));
            }
        }
        if got.iter().any(|g| g == lacks) {
            failures.push(format!(
                "{ns}/client-0 has {lacks}, another copy's, after apply"
            ));
        }
    }
    sim.close();
    drop(istiod);
    cleanup(c, &sc);
    assert!(
        failures.is_empty(),
        "{}\nweb's Sidecar egress: {egress}",
        failures.join("\n")
    );
    assert!(
        egress.contains(&format!("{b}/api.example.com"))
            && egress.contains(&format!("{a}/db.{a}.svc.cluster.local")),
        "{egress}"
    );
}

/// Hosts the mesh needs that traffic never shows, on a real istiod. The
/// log shows client-0 calling only cart and api.example.com; after
/// `apply`, its CDS must also hold the tracing collector's cluster
/// (`defaultProviders.tracing`) and the egress gateway's: a VirtualService
/// in the gateway's namespace routes api.example.com there, and istiod
/// follows it only when the Sidecar imports that VirtualService (an entry
/// for its namespace), not for the ServiceEntry's `./api.example.com`.
/// cart-0, under a user-owned Sidecar that lists only that, shows that
/// istiod adds neither cluster by itself.
#[test]
fn applied_sidecars_keep_provider_and_egress_gateway_clusters() {
    meshscope_e2e::needs_cluster!();
    use meshscope_e2e::fidelity::Builder;
    use meshscope_e2e::outbound_text_line;
    use meshscope_e2e::world::{labels, SvcPort};

    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::shared();
    let tag = run_tag();
    let (app, tracing, egress) = (
        format!("req{tag}-app"),
        format!("req{tag}-tracing"),
        format!("req{tag}-egress"),
    );
    let mut w = Builder::new(900 + tag % 100);
    for ns in [&app, &tracing, &egress] {
        w.namespace(ns);
    }
    w.service(
        &tracing,
        "zipkin",
        vec![SvcPort::new("http-zipkin", 9411)],
        false,
    );
    w.pod(&tracing, "zipkin-0", labels(&[("app", "zipkin")]));
    w.service(
        &egress,
        "egressgateway",
        vec![SvcPort::new("http", 80)],
        false,
    );
    w.pod(
        &egress,
        "egressgateway-0",
        labels(&[("app", "egressgateway")]),
    );
    w.service(&app, "cart", vec![SvcPort::new("http", 80)], false);
    w.service(&app, "unused", vec![SvcPort::new("http", 80)], false);
    w.pod(&app, "cart-0", labels(&[("app", "cart")]));
    w.pod(&app, "client-0", labels(&[("app", "client")]));
    w.istio(
        fidelity::ServiceEntryDoc::new(&app, "api")
            .host("api.example.com")
            .port(80, "http", "HTTP")
            .yaml(),
    );
    w.istio(format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: api-via-egress\n  namespace: {egress}\nspec:\n  hosts: [api.example.com]\n  gateways: [mesh]\n  http:\n  - route:\n    - destination:\n        host: egressgateway.{egress}.svc.cluster.local\n        port: {{number: 80}}\n"
    ));
    w.istio(format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: cart-own\n  namespace: {app}\nspec:\n  workloadSelector:\n    labels: {{app: cart}}\n  egress:\n  - hosts: [\"./api.example.com\"]\n"
    ));
    let mesh = format!(
        "{DEFAULT_MESH}extensionProviders:\n- name: zipkin\n  zipkin: {{service: zipkin.{tracing}.svc.cluster.local, port: 9411}}\ndefaultProviders:\n  tracing: [zipkin]\n"
    );
    let sc = w.finish("required-hosts".into(), mesh);
    let src = sc
        .world
        .pods
        .iter()
        .find(|p| p.namespace == app && p.name == "client-0")
        .map(|p| p.ip.clone())
        .expect("client-0");
    let cart = format!("cart.{app}.svc.cluster.local");
    let log = outbound_text_line(0, &src, &cart, 80, "10.255.1.1:80")
        + &outbound_text_line(1, &src, "api.example.com", 80, "203.0.113.9:80");
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("access.log");
    std::fs::write(&log_path, &log).unwrap();

    let (istiod, sim) = start_world(c, &sc);
    let cds = |pod: &str| {
        sim.get(&format!("{app}/{pod}"))
            .expect("proxy")
            .cluster_names()
    };
    let zipkin = format!("outbound|9411||zipkin.{tracing}.svc.cluster.local");
    let gateway = format!("outbound|80||egressgateway.{egress}.svc.cluster.local");
    let unused = format!("outbound|80||unused.{app}.svc.cluster.local");
    let mut failures = Vec::new();
    // The premise: a Sidecar that omits them gets neither from istiod.
    let own = cds("cart-0");
    for h in [&zipkin, &gateway] {
        if own.contains(h) {
            failures.push(format!("cart-0's Sidecar omits {h}, yet istiod sent it"));
        }
    }
    if !cds("client-0").contains(&unused) {
        failures.push(format!("unscoped client-0 lacks {unused} before apply"));
    }

    let t0 = Instant::now();
    if let Err(e) = meshscope(
        &c.kubeconfig,
        &[
            "apply",
            "-n",
            &app,
            "--access-log",
            log_path.to_str().unwrap(),
        ],
    ) {
        failures.push(format!("apply -n {app}: {e:#}"));
    }
    sim.wait_push_after(t0, Duration::from_millis(1500), Duration::from_secs(90))
        .expect("config settles after apply");
    let got = cds("client-0");
    for h in [
        &zipkin,
        &gateway,
        &format!("outbound|80||{cart}"),
        &"outbound|80||api.example.com".to_string(),
    ] {
        if !got.contains(h) {
            failures.push(format!("client-0 lacks {h} after apply (has {got:?})"));
        }
    }
    if got.contains(&unused) {
        failures.push(format!(
            "client-0 still has {unused}: the Sidecar did not scope it"
        ));
    }
    let required_by = c.kubectl_ok(
        &[
            "get",
            "sidecars",
            "-n",
            &app,
            "-l",
            "app.kubernetes.io/managed-by=kubectl-meshscope",
            "-o",
            "jsonpath={.items[*].metadata.annotations.meshscope\\.io/required-by}",
        ],
        None,
    );
    sim.close();
    drop(istiod);
    cleanup(c, &sc);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        required_by.contains("defaultProviders.tracing zipkin")
            && required_by.contains("api.example.com"),
        "{required_by}"
    );
}

/// The cluster a proxy's outbound catch-all (`virtualOutbound`, chain
/// `virtualOutbound-catchall-tcp`) sends traffic to, from istiod's
/// `/debug/config_dump`.
fn catch_all_cluster(istiod: &Istiod, pod: &str, ns: &str) -> Result<String> {
    fn find<'a>(
        v: &'a serde_json::Value,
        pred: &dyn Fn(&serde_json::Value) -> bool,
    ) -> Option<&'a serde_json::Value> {
        if pred(v) {
            return Some(v);
        }
        match v {
            serde_json::Value::Object(m) => m.values().find_map(|x| find(x, pred)),
            serde_json::Value::Array(a) => a.iter().find_map(|x| find(x, pred)),
            _ => None,
        }
    }
    let body = istiod.debug(&format!("/debug/config_dump?proxyID={pod}.{ns}&types=lds"))?;
    let v: serde_json::Value = serde_json::from_str(&body).context("config_dump JSON")?;
    let listener = find(&v, &|x| {
        x.get("name").and_then(|n| n.as_str()) == Some("virtualOutbound")
            && x.get("filterChains").is_some()
    })
    .context("no virtualOutbound listener")?;
    let chain = find(listener, &|x| {
        x.get("name").and_then(|n| n.as_str()) == Some("virtualOutbound-catchall-tcp")
    })
    .context("no catch-all filter chain")?;
    let cluster = find(chain, &|x| x.get("cluster").is_some_and(|c| c.is_string()))
        .and_then(|x| x["cluster"].as_str())
        .context("no cluster in the catch-all chain")?;
    Ok(cluster.to_string())
}

/// What traffic outside the scope meets, on a real istiod: for a Sidecar
/// without `outboundTrafficPolicy` (the mesh's ALLOW_ANY), one with an
/// empty one (istiod's zero value, REGISTRY_ONLY), REGISTRY_ONLY, and
/// ALLOW_ANY with an egressProxy, the catch-all cluster istiod builds must
/// be the one `explain`'s outbound policy says; then under a mesh-wide
/// ALLOW_ANY_DYNAMIC_DNS, the dynamic forward proxy's cluster must be
/// there exactly for the proxies `explain` puts under that mode.
#[test]
fn outbound_policy_matches_istiods_catch_all() {
    meshscope_e2e::needs_cluster!();
    use meshscope_e2e::fidelity::Builder;
    use meshscope_e2e::world::{labels, SvcPort};

    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::shared();
    let tag = run_tag();
    let ns = format!("otp{tag}");
    let mut w = Builder::new(600 + tag % 100);
    w.namespace(&ns);
    w.service(&ns, "egress", vec![SvcPort::new("http", 80)], false);
    w.pod(&ns, "egress-0", labels(&[("app", "egress")]));
    let cases = [
        ("mesh", ""),
        ("empty", "  outboundTrafficPolicy: {}\n"),
        ("registry", "  outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n"),
        (
            "proxy",
            "  outboundTrafficPolicy:\n    mode: ALLOW_ANY\n    egressProxy:\n      host: egress.NS.svc.cluster.local\n      port: {number: 80}\n",
        ),
    ];
    for (app, policy) in cases {
        w.pod(&ns, &format!("{app}-0"), labels(&[("app", app)]));
        w.istio(format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: {app}\n  namespace: {ns}\nspec:\n  workloadSelector:\n    labels: {{app: {app}}}\n  egress:\n  - hosts: [\"./*\"]\n{}",
            policy.replace("NS", &ns)
        ));
    }
    let sc = w.finish("outbound-policy".into(), DEFAULT_MESH.into());
    let (istiod, sim) = start_world(c, &sc);
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for (app, _) in cases {
        let pod = format!("{app}-0");
        let explained = meshscope(
            &c.kubeconfig,
            &["explain", "pod", &pod, "-n", &ns, "-o", "json"],
        )
        .and_then(|o| Ok(serde_json::from_str::<serde_json::Value>(&o)?));
        let got = catch_all_cluster(&istiod, &pod, &ns);
        match (explained, got) {
            (Ok(e), Ok(got)) => {
                let p = &e["fallthrough"]["policy"];
                let want = e["fallthrough"]["catch_all_cluster"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                rows.push(format!("{pod}: explain {p}, istiod {got}"));
                if got != want {
                    failures.push(format!(
                        "{pod}: istiod's catch-all goes to {got}, explain's policy {p} says {want}"
                    ));
                }
            }
            (e, g) => failures.push(format!("{pod}: explain {e:?}, config_dump {g:?}")),
        }
    }
    // The mesh-wide ALLOW_ANY_DYNAMIC_DNS (1.31+): the proxies that run
    // under the mesh's policy get the dynamic forward proxy's cluster, and
    // TCP still passes through; a Sidecar's own policy keeps it away.
    let t0 = Instant::now();
    set_mesh(
        c,
        &DEFAULT_MESH.replace("mode: ALLOW_ANY\n", "mode: ALLOW_ANY_DYNAMIC_DNS\n"),
    );
    sim.wait_push_after(t0, Duration::from_millis(1500), Duration::from_secs(90))
        .expect("config settles after the mesh change");
    for (app, _) in cases {
        let pod = format!("{app}-0");
        let mode = meshscope(
            &c.kubeconfig,
            &["explain", "pod", &pod, "-n", &ns, "-o", "json"],
        )
        .and_then(|o| Ok(serde_json::from_str::<serde_json::Value>(&o)?))
        .map(|e| {
            e["fallthrough"]["policy"]["mode"]
                .as_str()
                .unwrap_or("")
                .to_string()
        });
        let dfp = sim
            .get(&format!("{ns}/{pod}"))
            .expect("proxy")
            .cluster_names()
            .contains(&"AllowAnyDynamicDNSCluster".to_string());
        let tcp = catch_all_cluster(&istiod, &pod, &ns);
        rows.push(format!("{pod} under ALLOW_ANY_DYNAMIC_DNS: explain {mode:?}, istiod DFP cluster {dfp}, catch-all {tcp:?}"));
        match mode {
            Ok(m) if (m == "ALLOW_ANY_DYNAMIC_DNS") == dfp => {}
            other => failures.push(format!(
                "{pod}: explain's mode {other:?}, but istiod's DFP cluster present: {dfp}"
            )),
        }
        if app == "mesh" && tcp.as_deref().ok() != Some("PassthroughCluster") {
            failures.push(format!(
                "{pod}: TCP under ALLOW_ANY_DYNAMIC_DNS goes to {tcp:?}"
            ));
        }
    }
    sim.close();
    drop(istiod);
    cleanup(c, &sc);
    eprintln!("{}", rows.join("\n"));
    assert!(
        failures.is_empty(),
        "{}\n{}",
        failures.join("\n"),
        rows.join("\n")
    );
}

/// meshConfig.serviceEntryVisibility on a real istiod: with
/// `defaultVisibility: NAMESPACE` and `applyToSidecars: true`, istiod keeps
/// each ServiceEntry to its own namespace whatever its exportTo, and the
/// engine (explain) predicts the same clusters for every proxy. The
/// engine caps them (shared/tests/hosts.rs), so agreement means istiod
/// does too.
#[test]
fn service_entry_visibility_matches_istiod() {
    meshscope_e2e::needs_cluster!();
    use meshscope_e2e::fidelity::Builder;
    use meshscope_e2e::world::labels;

    let tag = run_tag();
    let (a, b, c) = (
        format!("sev{tag}-a"),
        format!("sev{tag}-b"),
        format!("sev{tag}-c"),
    );
    let mut w = Builder::new(700 + tag % 100);
    for ns in [&a, &b, &c] {
        w.namespace(ns);
        w.pod(ns, "client-0", labels(&[("app", "client")]));
    }
    w.istio(
        fidelity::ServiceEntryDoc::new(&a, "ext")
            .host("ext.example.com")
            .port(443, "tls", "TLS")
            .yaml(),
    );
    w.istio(
        fidelity::ServiceEntryDoc::new(&b, "other")
            .host("other.example.com")
            .port(8443, "tls", "TLS")
            .export_to(["*"])
            .yaml(),
    );
    let mesh = format!(
        "{DEFAULT_MESH}serviceEntryVisibility:\n  defaultVisibility: NAMESPACE\n  applyToSidecars: true\n"
    );
    run_all(vec![w.finish("service-entry-visibility".into(), mesh)]);
}
