//! A Gateway API mesh route on a real istiod with the Gateway API on
//! (issue #33): `app`'s HTTPRoute splits requests for Service `a` 50/50 to
//! `b` and `c`; `front`'s web called `a.app:80` and the log saw only `b`.
//! The Sidecar `apply` writes for web must keep istiod's virtual host for
//! `a` and both of its backends: importing `b` alone would make requests
//! to `a` bypass the route.

use std::time::{Duration, Instant};

use kubectl_meshscope::Outcome;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::fidelity::{Builder, DEFAULT_MESH};
use meshscope_e2e::istiod::Istiod;
use meshscope_e2e::routed_text_line;
use meshscope_e2e::world::{labels, SvcPort};
use meshscope_e2e::xds::Sim;
use serde_json::Value;

use super::{meshscope, serial, tag};

/// The clusters each virtual host's routes name, for the virtual hosts
/// whose domains include `domain`, from istiod's config dump of `proxy`
/// (`?types=rds`: one RouteConfiguration per entry, protobuf JSON names).
pub(super) fn routed_clusters(istiod: &Istiod, proxy: &str, domain: &str) -> Vec<String> {
    let dump = istiod
        .debug(&format!("/debug/config_dump?proxyID={proxy}&types=rds"))
        .expect("config dump");
    let v: Value = serde_json::from_str(&dump).expect("config dump is JSON");
    let list = |v: &Value, camel: &str, snake: &str| -> Vec<Value> {
        let f = if v.get(camel).is_some() {
            &v[camel]
        } else {
            &v[snake]
        };
        f.as_array().cloned().unwrap_or_default()
    };
    let mut out = Vec::new();
    for rc in list(&v, "configs", "configs") {
        for vh in list(&rc, "virtualHosts", "virtual_hosts") {
            let domains = list(&vh, "domains", "domains");
            if !domains
                .iter()
                .filter_map(Value::as_str)
                .any(|d| d == domain)
            {
                continue;
            }
            for r in list(&vh, "routes", "routes") {
                let route = &r["route"];
                if let Some(c) = route["cluster"].as_str() {
                    out.push(c.to_string());
                }
                let weighted = match route.get("weightedClusters") {
                    Some(w) => w,
                    None => &route["weighted_clusters"],
                };
                for c in list(weighted, "clusters", "clusters") {
                    out.extend(c["name"].as_str().map(str::to_string));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn apply_keeps_a_mesh_routes_virtual_host_and_every_backend_it_splits_to() {
    meshscope_e2e::needs_cluster!();
    let _serial = serial();
    split(Place::Producer, false, scenario);
}

/// The producer route as a GRPCRoute (a Service port named grpc).
#[test]
fn apply_keeps_a_grpc_routes_virtual_host_and_every_backend_it_splits_to() {
    meshscope_e2e::needs_cluster!();
    let _serial = serial();
    split_by("GRPCRoute", Place::Producer, false, scenario);
}

/// The producer route as a TCPRoute: its split sits on the parent's
/// listener, and the access log names only b's cluster and a's address.
#[test]
fn apply_keeps_a_tcp_routes_listener_and_every_backend_it_splits_to() {
    meshscope_e2e::needs_cluster!();
    let _serial = serial();
    split_by("TCPRoute", Place::Producer, false, tcp_scenario);
}

/// The same route in the caller's namespace (a consumer route): the
/// Sidecar imports it from there, and its parent from `app`.
#[test]
fn apply_keeps_a_consumer_routes_virtual_host_and_its_parent() {
    meshscope_e2e::needs_cluster!();
    let _serial = serial();
    split(Place::Consumer, false, scenario);
}

/// `impact httproute/NAME` names the proxies istiod pushes a change of the
/// route to: web, whose Sidecar imports the route's parent, and not the
/// app pods, whose Sidecar imports nothing of app (a route change is a
/// VirtualService change to istiod: `pilot/pkg/config/kube/gateway/controller.go`,
/// 1.31, leaves its push to the VirtualService controller).
#[test]
fn impact_of_a_route_names_the_proxies_istiod_pushes_its_change_to() {
    meshscope_e2e::needs_cluster!();
    let _serial = serial();
    split(Place::Producer, false, route_change);
}

/// MS0023 is istiod's answer: with `c` exported only to its own namespace
/// (and `a` to `app` and `front`),
/// `audit` names it hidden from `front`, and istiod gives web a route to
/// `c`'s cluster without the cluster; exported again, neither.
#[test]
fn audit_names_a_routed_backend_hidden_from_the_callers_namespace_as_istiod_drops_its_cluster() {
    meshscope_e2e::needs_cluster!();
    let _serial = serial();
    split(Place::Producer, true, hidden_backend);
}

/// Where the route lives: with its parent Service, or with its caller.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    Producer,
    Consumer,
}

/// The scenario's checks, given the cluster, istiod, the world and the
/// `front` and `app` namespaces.
type Check = fn(&Cluster, &Istiod, &meshscope_e2e::fidelity::Scenario, &str, &str);

/// The mesh, the route at `place` (and `c` exported only to `app` when
/// `hide_c`), istiod started, `check` run, everything deleted.
fn split(place: Place, hide_c: bool, check: Check) {
    split_by("HTTPRoute", place, hide_c, check)
}

/// [`split`] with a route of `kind` (HTTPRoute, GRPCRoute or TCPRoute),
/// its Services' port named for the protocol.
fn split_by(kind: &str, place: Place, hide_c: bool, check: Check) {
    let c = Cluster::shared();
    let ns = |n: &str| format!("vgw{}-{n}", tag());
    let (front, app) = (ns("front"), ns("app"));
    let mut w = Builder::new(400 + tag() % 50);
    w.namespace(&front);
    w.namespace(&app);
    let port = match kind {
        "GRPCRoute" => "grpc",
        "TCPRoute" => "tcp",
        _ => "http",
    };
    for svc in ["a", "b", "c"] {
        w.service(&app, svc, vec![SvcPort::new(port, 80)], false);
        w.pod(&app, &format!("{svc}-0"), labels(&[("app", svc)]));
    }
    w.pod(&front, "web-0", labels(&[("app", "web")]));
    let sc = w.finish("verify-gateway-api".into(), DEFAULT_MESH.into());
    sc.world.apply(c).expect("world applied");
    let at = match place {
        Place::Producer => &app,
        Place::Consumer => &front,
    };
    let route = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\nmetadata: {{name: split, namespace: {at}}}\nspec:\n  parentRefs:\n  - {{group: \"\", kind: Service, name: a, namespace: {app}, port: 80}}\n  rules:\n  - backendRefs:\n    - {{name: b, namespace: {app}, port: 80, weight: 50}}\n    - {{name: c, namespace: {app}, port: 80, weight: 50}}\n"
    );
    c.kubectl_ok(&["apply", "-f", "-"], Some(&route));
    if hide_c {
        // a only to front (so that the route applies there and in app, not
        // in the other tests' namespaces), c only to app.
        let to_front = format!("networking.istio.io/exportTo=.,{front}");
        for (svc, export) in [
            ("a", to_front.as_str()),
            ("c", "networking.istio.io/exportTo=."),
        ] {
            c.kubectl_ok(&["annotate", "service", svc, "-n", &app, export], None);
        }
    }
    let mut istiod = None;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let started = istiod.insert(Istiod::start_with_gateway_api(c).expect("istiod starts"));
        check(c, started, &sc, &front, &app)
    }));
    let _ = c.kubectl(&["delete", &kind.to_lowercase(), "split", "-n", at], None);
    if let Err(e) = sc.world.delete(c) {
        eprintln!("cleanup: {e:#}");
    }
    if let Err(p) = result {
        if let Some(i) = &istiod {
            eprintln!("istiod log:\n{}", i.log_tail(30));
        }
        std::panic::resume_unwind(p);
    }
}

/// istiod has Services a, b and c of `app`.
fn await_services(istiod: &Istiod, app: &str) {
    istiod
        .wait_for(
            &["a", "b", "c"].map(|s| (app.to_string(), format!("{s}.{app}.svc.cluster.local"))),
            &[],
            Duration::from_secs(60),
        )
        .expect("istiod sees the services");
}

/// istiod's routes for `domain` in `proxy`'s RDS name `want` within 30 s:
/// else the harness, not meshscope, is at fault.
pub(super) fn await_routed(istiod: &Istiod, proxy: &str, domain: &str, want: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while routed_clusters(istiod, proxy, domain) != want {
        assert!(
            Instant::now() < deadline,
            "istiod never routed {domain} by the HTTPRoute: {:?}; its routes: {}",
            routed_clusters(istiod, proxy, domain),
            istiod
                .debug(&format!("/debug/config_dump?proxyID={proxy}&types=rds"))
                .unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Once istiod has a, b and c: web-0, its simulated sidecar connected,
/// its proxy id, and the clusters of the route's backends b and c.
fn web_connected<'a>(
    istiod: &Istiod,
    sc: &'a meshscope_e2e::fidelity::Scenario,
    front: &str,
    app: &str,
) -> (&'a meshscope_e2e::world::Pod, Sim, String, Vec<String>) {
    await_services(istiod, app);
    let web = sc.world.pods.iter().find(|p| p.name == "web-0").unwrap();
    let sim = Sim::connect_many_settled(&istiod.grpc_url(), vec![web.proxy_spec()], 1);
    let want = ["b", "c"]
        .map(|s| format!("outbound|80||{s}.{app}.svc.cluster.local"))
        .to_vec();
    (web, sim, format!("web-0.{front}"), want)
}

fn scenario(
    c: &Cluster,
    istiod: &Istiod,
    sc: &meshscope_e2e::fidelity::Scenario,
    front: &str,
    app: &str,
) {
    let fqdn = |s: &str| format!("{s}.{app}.svc.cluster.local");
    let (web, sim, proxy, want) = web_connected(istiod, sc, front, app);
    let domain = fqdn("a");
    // istiod routes `a` by the HTTPRoute (with no Sidecar yet): else the
    // harness, not meshscope, is at fault.
    await_routed(istiod, &proxy, &domain, &want);

    let mut log = tempfile::NamedTempFile::new().unwrap();
    let line = routed_text_line(
        0,
        &web.ip,
        &format!("a.{app}:80"),
        &format!("outbound|80||{}", fqdn("b")),
        "10.255.0.2:80",
        "10.255.0.1:80",
    );
    std::io::Write::write_all(&mut log, line.as_bytes()).unwrap();
    let sidecar = apply_from(c, &sim, front, app, log.path());
    assert_eq!(
        routed_clusters(istiod, &proxy, &domain),
        want,
        "the route survives the Sidecar: {sidecar}"
    );
    let clusters = sim.get(&format!("{front}/web-0")).unwrap().cluster_names();
    for w in &want {
        assert!(clusters.contains(w), "{w} in {clusters:?}");
    }
    // explain lists the route with the clusters istiod's routes name, and
    // verify, comparing them with istiod's, finds web OK.
    assert_eq!(explained_route(c, front, &domain), Some(want.clone()));
    let (status, p) = verified(c, istiod, front, &[]);
    assert_eq!(status, "OK", "{p}");

    // The route lost: a user's Sidecar that imports the backends but not
    // the parent. istiod sends no virtual host for a (the requests to
    // a.app then find no route), and verify, given the traffic, says
    // MISSING and names the route.
    let t0 = Instant::now();
    c.kubectl_ok(&["delete", "sidecars", "--all", "-n", front], None);
    let backends: Vec<String> = ["b", "c"]
        .map(|s| format!("\"{app}/{}\"", fqdn(s)))
        .to_vec();
    c.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: mine, namespace: {front}}}\nspec:\n  egress:\n  - hosts: [{}]\n",
            backends.join(", ")
        )),
    );
    sim.wait_push_after(t0, Duration::from_millis(1000), Duration::from_secs(60))
        .expect("istiod pushes the user's Sidecar");
    assert_eq!(
        routed_clusters(istiod, &proxy, &domain),
        Vec::<String>::new()
    );
    let (status, p) = verified(
        c,
        istiod,
        front,
        &["--access-log", log.path().to_str().unwrap()],
    );
    assert_eq!(status, "MISSING", "{p}");
    assert_eq!(p["missing_routes"][0]["host"], domain.as_str(), "{p}");
    assert_eq!(p["missing_routes"][0]["dialled"], format!("a.{app}"), "{p}");
    let _ = c.kubectl(&["delete", "sidecar", "mine", "-n", front], None);
    sim.close();
}

/// The clusters the TCP proxy of `proxy`'s outbound listener for
/// `ip:port` sends to (istiod names it `IP_PORT`), sorted.
fn tcp_routed(istiod: &Istiod, proxy: &str, ip: &str, port: u16) -> Vec<String> {
    let dump = istiod
        .debug(&format!("/debug/config_dump?proxyID={proxy}&types=lds"))
        .expect("config dump");
    let v: Value = serde_json::from_str(&dump).expect("config dump is JSON");
    let name = format!("{ip}_{port}");
    let mut out = Vec::new();
    for l in v["configs"].as_array().into_iter().flatten() {
        if l["name"] == name.as_str() {
            outbound_clusters_in(l, &mut out);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Every `outbound|...` cluster a resource names, as `cluster` or among
/// weighted clusters.
fn outbound_clusters_in(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("cluster" | "name", Value::String(c)) if c.starts_with("outbound|") => {
                        out.push(c.clone())
                    }
                    _ => outbound_clusters_in(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| outbound_clusters_in(x, out)),
        _ => {}
    }
}

fn tcp_scenario(
    c: &Cluster,
    istiod: &Istiod,
    sc: &meshscope_e2e::fidelity::Scenario,
    front: &str,
    app: &str,
) {
    let fqdn = |s: &str| format!("{s}.{app}.svc.cluster.local");
    let (web, sim, proxy, want) = web_connected(istiod, sc, front, app);
    let a_ip = c
        .kubectl_ok(
            &[
                "get",
                "service",
                "a",
                "-n",
                app,
                "-o",
                "jsonpath={.spec.clusterIP}",
            ],
            None,
        )
        .trim()
        .to_string();
    // istiod splits a's listener by the TCPRoute (no Sidecar yet): else
    // the harness, not meshscope, is at fault.
    let deadline = Instant::now() + Duration::from_secs(30);
    while tcp_routed(istiod, &proxy, &a_ip, 80) != want {
        assert!(
            Instant::now() < deadline,
            "istiod never split {a_ip}:80 by the TCPRoute: {:?}",
            tcp_routed(istiod, &proxy, &a_ip, 80)
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    // A TCP connection's line: no authority, b's cluster, a's address.
    let mut log = tempfile::NamedTempFile::new().unwrap();
    let line = routed_text_line(
        0,
        &web.ip,
        "-",
        &format!("outbound|80||{}", fqdn("b")),
        "10.255.0.2:80",
        &format!("{a_ip}:80"),
    );
    std::io::Write::write_all(&mut log, line.as_bytes()).unwrap();
    let sidecar = apply_from(c, &sim, front, app, log.path());
    assert_eq!(
        tcp_routed(istiod, &proxy, &a_ip, 80),
        want,
        "the split survives the Sidecar: {sidecar}"
    );
    let clusters = sim.get(&format!("{front}/web-0")).unwrap().cluster_names();
    for w in &want {
        assert!(clusters.contains(w), "{w} in {clusters:?}");
    }
    // explain lists the route with the clusters istiod's listener names,
    // and verify finds web OK.
    assert_eq!(explained_route(c, front, &fqdn("a")), Some(want));
    let (status, p) = verified(c, istiod, front, &[]);
    assert_eq!(status, "OK", "{p}");
    sim.close();
}

/// `apply -n front --access-log LOG`, istiod's push of the Sidecar to
/// `sim`, and the Sidecar (JSON) importing a, b and c of `app`.
fn apply_from(c: &Cluster, sim: &Sim, front: &str, app: &str, log: &std::path::Path) -> String {
    let t0 = Instant::now();
    let r = meshscope(
        &c.kubeconfig,
        &["apply", "-n", front, "--access-log", log.to_str().unwrap()],
    );
    assert_eq!(r.outcome, Ok(Outcome::Ok), "{}\n{}", r.stdout, r.stderr);
    sim.wait_push_after(t0, Duration::from_millis(1000), Duration::from_secs(60))
        .expect("istiod pushes the Sidecar");
    let sidecar = c.kubectl_ok(&["get", "sidecars", "-n", front, "-o", "json"], None);
    for s in ["a", "b", "c"] {
        let host = format!("{s}.{app}.svc.cluster.local");
        assert!(sidecar.contains(&host), "{s} imported: {sidecar}");
    }
    sidecar
}

/// `verify -n NS --istiod-url ... -o json` on web-0: its status and its
/// entry.
fn verified(c: &Cluster, istiod: &Istiod, ns: &str, extra: &[&str]) -> (String, Value) {
    let url = format!("http://{}", istiod.monitoring);
    let mut args = vec!["verify", "-n", ns, "--istiod-url", &url, "-o", "json"];
    args.extend_from_slice(extra);
    let r = meshscope(&c.kubeconfig, &args);
    assert!(r.stdout.starts_with('{'), "{:?}\n{}", r.outcome, r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).expect(&r.stderr);
    let p = v["proxies"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["pod"] == "web-0"))
        .cloned()
        .unwrap_or_else(|| panic!("web-0 in {v}"));
    (p["status"].as_str().unwrap_or_default().to_string(), p)
}

/// The clusters `explain pod web-0` says web's route for `domain` names,
/// `None` when it lists no such route or says it does not apply.
fn explained_route(c: &Cluster, front: &str, domain: &str) -> Option<Vec<String>> {
    let r = meshscope(
        &c.kubeconfig,
        &["explain", "pod", "web-0", "-n", front, "-o", "json"],
    );
    assert!(r.outcome.is_ok(), "{:?}\n{}", r.outcome, r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).expect(&r.stderr);
    let routes = v["routes"].as_array().cloned().unwrap_or_default();
    let route = routes
        .iter()
        .find(|x| x["host"] == domain && x["applies"] == true)?;
    Some(
        route["clusters"]
            .as_array()?
            .iter()
            .filter_map(|c| c.as_str().map(str::to_string))
            .collect(),
    )
}

fn hidden_backend(
    c: &Cluster,
    istiod: &Istiod,
    sc: &meshscope_e2e::fidelity::Scenario,
    front: &str,
    app: &str,
) {
    let fqdn = |s: &str| format!("{s}.{app}.svc.cluster.local");
    await_services(istiod, app);
    let web = sc.world.pods.iter().find(|p| p.name == "web-0").unwrap();
    let sim = Sim::connect_many_settled(&istiod.grpc_url(), vec![web.proxy_spec()], 1);
    let proxy = format!("web-0.{front}");
    let (b, cc) = (
        format!("outbound|80||{}", fqdn("b")),
        format!("outbound|80||{}", fqdn("c")),
    );
    let domain = fqdn("a");
    // istiod's side: web routes `a` to both, and holds no cluster for c.
    await_routed(istiod, &proxy, &domain, &[b.clone(), cc.clone()]);
    let clusters = sim.get(&format!("{front}/web-0")).unwrap().cluster_names();
    assert!(clusters.contains(&b), "{b} in {clusters:?}");
    assert!(!clusters.contains(&cc), "{cc} hidden, yet in {clusters:?}");
    // verify agrees with istiod: the route's virtual host names c, and no
    // cluster for c is sent.
    let (status, p) = verified(c, istiod, front, &[]);
    assert_eq!(status, "OK", "{p}");

    // meshscope's: MS0023 on the route, naming c and front.
    let audit = |c: &Cluster| {
        meshscope(
            &c.kubeconfig,
            &["audit", "-n", app, "--code", "MS0023", "-o", "json"],
        )
    };
    let r = audit(c);
    let v: Value = serde_json::from_str(&r.stdout).expect(&r.stderr);
    let found = v["findings"].as_array().cloned().unwrap_or_default();
    assert_eq!(found.len(), 1, "{}", r.stdout);
    assert_eq!(found[0]["kind"], "HTTPRoute", "{}", r.stdout);
    let msg = found[0]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains(&format!(
            "backend {} is hidden from namespace {front},",
            fqdn("c")
        )),
        "{msg}"
    );

    // Exported again: istiod sends the cluster, and audit is quiet.
    let t0 = Instant::now();
    c.kubectl_ok(
        &[
            "annotate",
            "service",
            "c",
            "-n",
            app,
            "networking.istio.io/exportTo-",
        ],
        None,
    );
    sim.wait_push_after(t0, Duration::from_millis(1000), Duration::from_secs(60))
        .expect("istiod pushes the export");
    let clusters = sim.get(&format!("{front}/web-0")).unwrap().cluster_names();
    assert!(clusters.contains(&cc), "{cc} in {clusters:?}");
    let r = audit(c);
    let v: Value = serde_json::from_str(&r.stdout).expect(&r.stderr);
    assert_eq!(
        v["findings"].as_array().map(Vec::len),
        Some(0),
        "{}",
        r.stdout
    );
    sim.close();
}

fn route_change(
    c: &Cluster,
    istiod: &Istiod,
    sc: &meshscope_e2e::fidelity::Scenario,
    front: &str,
    app: &str,
) {
    let fqdn = |s: &str| format!("{s}.{app}.svc.cluster.local");
    await_services(istiod, app);
    let sidecar = |ns: &str, hosts: &[String]| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: default, namespace: {ns}}}\nspec:\n  egress:\n  - hosts: [{}]\n",
            hosts.join(", ")
        )
    };
    let to_app: Vec<String> = ["a", "b", "c"]
        .map(|s| format!("\"{app}/{}\"", fqdn(s)))
        .to_vec();
    c.kubectl_ok(&["apply", "-f", "-"], Some(&sidecar(front, &to_app)));
    c.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&sidecar(app, &["\"istio-system/*\"".to_string()])),
    );
    let specs: Vec<_> = sc.world.pods.iter().map(|p| p.proxy_spec()).collect();
    let n = specs.len();
    let sim = Sim::connect_many_settled(&istiod.grpc_url(), specs, n);

    let r = meshscope(
        &c.kubeconfig,
        &["impact", "httproute/split", "-n", app, "-o", "json"],
    );
    assert!(r.outcome.is_ok(), "{:?}\n{}", r.outcome, r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).expect(&r.stderr);
    // Other tests share the API server, and impact rightly names their
    // unscoped pods too: compare within this mesh's namespaces, the only
    // proxies connected to this istiod.
    let ours: Vec<String> = sc
        .world
        .namespaces
        .iter()
        .map(|(ns, _)| format!("Pod/{ns}/"))
        .collect();
    let named: Vec<String> = v["now"]["workloads"]
        .as_object()
        .unwrap_or_else(|| panic!("{v}"))
        .keys()
        .filter(|k| ours.iter().any(|p| k.starts_with(p)))
        .cloned()
        .collect();
    assert_eq!(named, [format!("Pod/{front}/web-0")], "{}", r.stdout);

    // Weights 80/20: istiod pushes web alone.
    let t0 = Instant::now();
    let route = c.kubectl_ok(
        &["get", "httproute", "split", "-n", app, "-o", "yaml"],
        None,
    );
    let changed = route.replacen("weight: 50", "weight: 80", 1);
    assert_ne!(changed, route);
    c.kubectl_ok(&["apply", "-f", "-"], Some(&changed));
    sim.wait_push_after(t0, Duration::from_millis(2000), Duration::from_secs(60))
        .expect("istiod pushes the route change");
    let pushed: Vec<String> = sim
        .proxies()
        .iter()
        .filter(|p| !p.pushes_since(t0).is_empty())
        .map(|p| p.key().to_string())
        .collect();
    assert_eq!(pushed, [format!("{front}/web-0")], "istiod pushed (left)");
    let _ = c.kubectl(&["delete", "sidecar", "default", "-n", front], None);
    let _ = c.kubectl(&["delete", "sidecar", "default", "-n", app], None);
    sim.close();
}
