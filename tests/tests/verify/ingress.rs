//! An ingress Gateway on a real istiod with the Gateway API on (issue #33):
//! Gateway `gw` of class `istio` in `ing`, its pod `gw-0` written as
//! istiod's deployment controller would render it (the test istiod has no
//! `kube-gateway` template: `../shared/istiod.md` §7), connected as a
//! router proxy, and an HTTPRoute in `ing` sending `shop.example.com` to
//! Service `front` of namespace `shop`, which a ReferenceGrant there
//! permits. istiod is the reference for the gateway pod's scope (every
//! service exported to its namespace, whatever Sidecar exists), for the
//! grant (without it, istiod routes nothing to `front`), and for what an
//! export meshscope writes leaves the gateway.

use std::time::{Duration, Instant};

use kubectl_meshscope::Outcome;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::fidelity::{Builder, Scenario, DEFAULT_MESH};
use meshscope_e2e::istiod::Istiod;
use meshscope_e2e::outbound_text_line;
use meshscope_e2e::world::{labels, SvcPort};
use meshscope_e2e::xds::Sim;
use serde_json::Value;

use super::gateway_api::{await_routed, routed_clusters};
use super::{meshscope, serial, tag};

const HOST: &str = "shop.example.com";

#[test]
fn a_gateway_pod_gets_istiods_scope_and_its_route_needs_the_grant_istiod_needs() {
    meshscope_e2e::needs_cluster!();
    let _serial = serial();
    with_ingress(checks);
}

/// `impact` names the proxies istiod pushes a change to: a change of the
/// route, or of the Gateway, reaches the gateway's pod and no sidecar.
#[test]
fn impact_of_a_gateway_or_its_route_names_the_gateway_pods_istiod_pushes() {
    meshscope_e2e::needs_cluster!();
    let _serial = serial();
    with_ingress(pushes);
}

type Check = fn(&Cluster, &Istiod, &Scenario, &str, &str);

/// The ingress mesh (namespaces `ing` and `shop`), istiod started, `check`
/// run, everything deleted.
fn with_ingress(check: Check) {
    let c = Cluster::shared();
    let ns = |n: &str| format!("ving{}-{n}", tag());
    let (ing, shop) = (ns("ing"), ns("shop"));
    let mut w = Builder::new(450 + tag() % 50);
    w.namespace(&ing);
    w.namespace(&shop);
    for svc in ["front", "other"] {
        w.service(&shop, svc, vec![SvcPort::new("http", 80)], false);
        w.pod(&shop, &format!("{svc}-0"), labels(&[("app", svc)]));
    }
    // What the deployment controller renders for Gateway gw: Service
    // gw-istio and a pod whose istio-proxy runs `proxy router`.
    w.service(&ing, "gw-istio", vec![SvcPort::new("http", 80)], false);
    w.pod(
        &ing,
        "gw-0",
        labels(&[
            ("app", "gw-istio"),
            ("gateway.networking.k8s.io/gateway-name", "gw"),
            ("sidecar.istio.io/inject", "false"),
        ]),
    );
    w.world.pods.last_mut().expect("gw-0").gateway =
        Some(meshscope_shared::inject::Gateway::Router);
    let sc = w.finish("verify-ingress".into(), DEFAULT_MESH.into());
    sc.world.apply(c).expect("world applied");
    c.kubectl_ok(&["apply", "-f", "-"], Some(&gateway_and_route(&ing, &shop)));
    c.kubectl_ok(&["apply", "-f", "-"], Some(&grant(&ing, &shop)));
    let mut istiod = None;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let started = istiod.insert(Istiod::start_with_gateway_api(c).expect("istiod starts"));
        check(c, started, &sc, &ing, &shop)
    }));
    let _ = c.kubectl(&["delete", "gateway", "gw", "-n", &ing], None);
    let _ = c.kubectl(&["delete", "httproute", "shop", "-n", &ing], None);
    let _ = c.kubectl(&["delete", "referencegrant", "--all", "-n", &shop], None);
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

fn gateway_and_route(ing: &str, shop: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: {ing}}}\nspec:\n  gatewayClassName: istio\n  listeners:\n  - {{name: http, port: 80, protocol: HTTP, allowedRoutes: {{namespaces: {{from: All}}}}}}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: shop, namespace: {ing}}}\nspec:\n  parentRefs: [{{name: gw}}]\n  hostnames: [{HOST}]\n  rules:\n  - backendRefs: [{{name: front, namespace: {shop}, port: 80}}]\n"
    )
}

fn grant(ing: &str, shop: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: from-ing, namespace: {shop}}}\nspec:\n  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: {ing}}}]\n  to: [{{group: \"\", kind: Service, name: front}}]\n"
    )
}

fn fqdn(s: &str, ns: &str) -> String {
    format!("{s}.{ns}.svc.cluster.local")
}

/// istiod has the services; `pods` connected; istiod routes HOST through
/// the gateway to front.
fn connected(istiod: &Istiod, sc: &Scenario, ing: &str, shop: &str, pods: &[&str]) -> Sim {
    istiod
        .wait_for(
            &[
                (shop.to_string(), fqdn("front", shop)),
                (shop.to_string(), fqdn("other", shop)),
                (ing.to_string(), fqdn("gw-istio", ing)),
            ],
            &[],
            Duration::from_secs(60),
        )
        .expect("istiod sees the services");
    let specs: Vec<_> = sc
        .world
        .pods
        .iter()
        .filter(|p| pods.contains(&p.name.as_str()))
        .map(|p| p.proxy_spec())
        .collect();
    let n = specs.len();
    let sim = Sim::connect_many_settled(&istiod.grpc_url(), specs, n);
    let front = vec![format!("outbound|80||{}", fqdn("front", shop))];
    await_routed(istiod, &format!("gw-0.{ing}"), HOST, &front);
    sim
}

fn checks(c: &Cluster, istiod: &Istiod, sc: &Scenario, ing: &str, shop: &str) {
    let sim = connected(istiod, sc, ing, shop, &["gw-0"]);
    let proxy = format!("gw-0.{ing}");
    let front = vec![format!("outbound|80||{}", fqdn("front", shop))];

    // The gateway pod is not a sidecar: explain gives it the scope istiod
    // does, and verify, comparing every cluster, finds it OK.
    let (status, p) = verified(c, istiod, ing);
    assert_eq!(status, "OK", "{p}");
    let explained = explain(c, ing);
    assert!(
        explained["scope_reason"]
            .as_str()
            .is_some_and(|r| r.contains("router proxy")),
        "{explained}"
    );
    assert_eq!(audit(c, ing, "MS0024"), Vec::<String>::new());
    // explain lists the route the gateway serves, with the cluster istiod's
    // route names (verify compared them too).
    let served: Vec<&Value> = explained["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["host"] == HOST && r["applies"] == true)
        .collect();
    assert_eq!(served.len(), 1, "{explained}");
    assert_eq!(served[0]["route"], format!("HTTPRoute {ing}/shop"));
    assert_eq!(
        served[0]["clusters"],
        serde_json::json!(front),
        "{explained}"
    );

    // apply --exports from a log in which only other-0 calls front keeps
    // front exported to the gateway's namespace too (the route and its
    // grant are the evidence, not traffic from the gateway), and the
    // gateway keeps its cluster and route.
    let other = sc.world.pods.iter().find(|p| p.name == "other-0").unwrap();
    let mut log = tempfile::NamedTempFile::new().unwrap();
    let line = outbound_text_line(0, &other.ip, &fqdn("front", shop), 80, "10.255.0.3:80");
    std::io::Write::write_all(&mut log, line.as_bytes()).unwrap();
    let t0 = Instant::now();
    let r = meshscope(
        &c.kubeconfig,
        &[
            "apply",
            "--exports",
            "-n",
            shop,
            "--access-log",
            log.path().to_str().unwrap(),
        ],
    );
    assert_eq!(r.outcome, Ok(Outcome::Ok), "{}\n{}", r.stdout, r.stderr);
    let export = c.kubectl_ok(
        &[
            "get",
            "service",
            "front",
            "-n",
            shop,
            "-o",
            "jsonpath={.metadata.annotations.networking\\.istio\\.io/exportTo}",
        ],
        None,
    );
    assert_eq!(export, format!(".,{ing}"), "{}", r.stdout);
    sim.wait_push_after(t0, Duration::from_millis(1000), Duration::from_secs(60))
        .expect("istiod pushes the exports");
    assert_eq!(routed_clusters(istiod, &proxy, HOST), front);
    let (status, p) = verified(c, istiod, ing);
    assert_eq!(status, "OK", "{p}");

    // Without the grant istiod drops front from the route, and MS0024 says
    // so.
    c.kubectl_ok(&["delete", "referencegrant", "from-ing", "-n", shop], None);
    let deadline = Instant::now() + Duration::from_secs(30);
    while routed_clusters(istiod, &proxy, HOST).contains(&front[0]) {
        assert!(Instant::now() < deadline, "istiod still routes to front");
        std::thread::sleep(Duration::from_millis(300));
    }
    // verify predicts the route without front, as istiod sends it.
    let (status, p) = verified(c, istiod, ing);
    assert_eq!(status, "OK", "{p}");
    let found = audit(c, ing, "MS0024");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains(&format!("sends requests to {shop}/front")),
        "{found:?}"
    );
    sim.close();
}

fn pushes(c: &Cluster, istiod: &Istiod, sc: &Scenario, ing: &str, shop: &str) {
    let sim = connected(istiod, sc, ing, shop, &["gw-0", "front-0", "other-0"]);
    let ours = [format!("Pod/{ing}/"), format!("Pod/{shop}/")];
    for (target, ns) in [("httproute/shop", ing), ("gateway/gw", ing)] {
        let r = meshscope(&c.kubeconfig, &["impact", target, "-n", ns, "-o", "json"]);
        assert!(r.outcome.is_ok(), "{:?}\n{}", r.outcome, r.stderr);
        let v: Value = serde_json::from_str(&r.stdout).expect(&r.stderr);
        // Other tests' unscoped pods share the API server: compare within
        // this mesh's namespaces, the only proxies connected to istiod.
        let named: Vec<&String> = v["now"]["workloads"]
            .as_object()
            .unwrap_or_else(|| panic!("{v}"))
            .keys()
            .filter(|k| ours.iter().any(|p| k.starts_with(p.as_str())))
            .collect();
        assert_eq!(
            named,
            [&format!("Pod/{ing}/gw-0")],
            "{target}: {}",
            r.stdout
        );
        assert_eq!(
            v["now"]["gateways"][format!("Pod/{ing}/gw-0")],
            1,
            "{target}: {}",
            r.stdout
        );
    }
    // istiod agrees: a change of the route, then of the Gateway, is pushed
    // to the gateway's pod alone.
    let edits = [
        (
            "httproute",
            "shop",
            "  - shop.example.com\n",
            "  - shop.example.com\n  - www.example.com\n",
        ),
        ("gateway", "gw", "name: http\n", "name: web\n"),
    ];
    for (kind, name, from, to) in edits {
        let t0 = Instant::now();
        let obj = c.kubectl_ok(&["get", kind, name, "-n", ing, "-o", "yaml"], None);
        let changed = obj.replacen(from, to, 1);
        assert_ne!(changed, obj, "{kind} {name}: no {from:?} in {obj}");
        c.kubectl_ok(&["apply", "-f", "-"], Some(&changed));
        sim.wait_push_after(t0, Duration::from_millis(2000), Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("istiod pushes the {kind} change: {e:#}"));
        let pushed: Vec<String> = sim
            .proxies()
            .iter()
            .filter(|p| !p.pushes_since(t0).is_empty())
            .map(|p| p.key().to_string())
            .collect();
        assert_eq!(pushed, [format!("{ing}/gw-0")], "{kind} change pushed to");
    }
    sim.close();
}

/// `verify -n ING -o json` on gw-0: its status and its entry.
fn verified(c: &Cluster, istiod: &Istiod, ing: &str) -> (String, Value) {
    let url = format!("http://{}", istiod.monitoring);
    let r = meshscope(
        &c.kubeconfig,
        &["verify", "-n", ing, "--istiod-url", &url, "-o", "json"],
    );
    let v: Value = serde_json::from_str(&r.stdout).expect(&r.stderr);
    let p = v["proxies"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["pod"] == "gw-0"))
        .cloned()
        .unwrap_or_else(|| panic!("gw-0 in {v}"));
    (p["status"].as_str().unwrap_or_default().to_string(), p)
}

fn explain(c: &Cluster, ing: &str) -> Value {
    let r = meshscope(
        &c.kubeconfig,
        &["explain", "pod", "gw-0", "-n", ing, "-o", "json"],
    );
    assert!(r.outcome.is_ok(), "{:?}\n{}", r.outcome, r.stderr);
    serde_json::from_str(&r.stdout).expect(&r.stderr)
}

/// `audit -n NS --code CODE -o json`: each finding's message.
fn audit(c: &Cluster, ns: &str, code: &str) -> Vec<String> {
    let r = meshscope(
        &c.kubeconfig,
        &["audit", "-n", ns, "--code", code, "-o", "json"],
    );
    let v: Value = serde_json::from_str(&r.stdout).expect(&r.stderr);
    v["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["message"].as_str().map(str::to_string))
        .collect()
}
