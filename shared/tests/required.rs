//! Hosts the mesh needs that traffic never shows: extension-provider
//! services (tracing, ext_authz, access-log services) and the services
//! VirtualServices route imported hosts to (an egress gateway), in
//! recommendations and in audit (MS0013).

use meshscope_test_support::access_log::line;
use meshscope_test_support::fixtures::{deployment, hosts, observe, snap};

use meshscope_shared::audit::{self, AuditScope};
use meshscope_shared::recommend::{self, Outcome, RecommendOptions};
use meshscope_shared::required::REQUIRED_BY_ANNOTATION;
use meshscope_shared::snapshot::{MeshSnapshot, WorkloadId, WorkloadKind};

fn deploy(name: &str, ip: &str) -> String {
    deployment("shop", name, ip)
}

fn service(ns: &str, name: &str, ip: &str, port: u32) -> String {
    format!("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  clusterIP: {ip}\n  selector: {{app: {name}}}\n  ports:\n  - {{name: http, port: {port}}}\n")
}

const MESH: &str = r#"---
apiVersion: v1
kind: ConfigMap
metadata: {name: istio, namespace: istio-system}
data:
  mesh: |-
    extensionProviders:
    - name: zipkin
      zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
    - name: authz
      envoyExtAuthzHttp: {service: "auth/ext-authz.auth.svc.cluster.local", port: 8000}
    defaultProviders:
      tracing: [zipkin]
"#;

const EGRESS: &str = r#"---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: istio-system}
spec:
  hosts: [api.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api-via-egress, namespace: istio-system}
spec:
  hosts: [api.example.com]
  gateways: [mesh]
  http:
  - delegate: {name: api-routes, namespace: egress-routes}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api-routes, namespace: egress-routes}
spec:
  exportTo: [istio-system]
  http:
  - route:
    - destination: {host: istio-egressgateway.istio-system.svc.cluster.local, port: {number: 80}}
"#;

fn base() -> String {
    "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {istio-injection: enabled}\n".to_string()
        + MESH
        + &deploy("web", "10.0.0.1")
        + &deploy("cart", "10.0.0.3")
        + &service("shop", "cart", "10.96.0.3", 80)
        + &service("istio-system", "zipkin", "10.96.1.1", 9411)
        + &service("istio-system", "istio-egressgateway", "10.96.1.2", 80)
        + &service("auth", "ext-authz", "10.96.1.3", 8000)
}

fn w(s: &MeshSnapshot, name: &str) -> WorkloadId {
    s.find_workload(&WorkloadKind::Deployment, "shop", name)
        .unwrap()
}

fn web_calls_cart() -> String {
    line(
        "10.0.0.1",
        "cart",
        "outbound|80||cart.shop.svc.cluster.local",
        "10.96.0.3:80",
    )
}

fn annotation(r: &recommend::Recommendation) -> String {
    r.sidecar().unwrap().metadata.annotations.as_ref().unwrap()[REQUIRED_BY_ANNOTATION].clone()
}

#[test]
fn the_default_tracing_provider_is_added_with_why() {
    let s = snap(&base());
    let obs = observe(&s, &web_calls_cart());
    let recs = recommend::recommend(&s, &obs, &[w(&s, "web")], &RecommendOptions::default());
    assert_eq!(
        hosts(&recs[0]),
        [
            "istio-system/zipkin.istio-system.svc.cluster.local",
            "shop/cart.shop.svc.cluster.local"
        ]
    );
    assert_eq!(
        annotation(&recs[0]),
        "zipkin.istio-system.svc.cluster.local:9411: required by mesh config: defaultProviders.tracing zipkin"
    );
    assert_eq!(recs[0].dependencies, ["shop/cart.shop.svc.cluster.local"]);
    // A workload that only receives traffic gets the collector too, not
    // a closed scope.
    let idle = recommend::recommend(
        &s,
        &obs,
        &[w(&s, "cart")],
        &RecommendOptions {
            allow_idle: true,
            ..Default::default()
        },
    );
    assert_eq!(
        hosts(&idle[0]),
        ["istio-system/zipkin.istio-system.svc.cluster.local"]
    );
    // Per namespace, too.
    let ns = recommend::recommend(
        &s,
        &obs,
        &[w(&s, "web"), w(&s, "cart")],
        &RecommendOptions {
            per_namespace: true,
            ..Default::default()
        },
    );
    assert!(hosts(&ns[0]).contains(&"istio-system/zipkin.istio-system.svc.cluster.local".into()));
}

#[test]
fn custom_authorization_and_telemetry_overrides_apply_per_workload() {
    let extra = r#"---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: cart-authz, namespace: shop}
spec:
  selector: {matchLabels: {app: cart}}
  action: CUSTOM
  provider: {name: authz}
  rules: [{to: [{operation: {paths: ["/admin"]}}]}]
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: no-tracing, namespace: shop}
spec:
  tracing: [{disableSpanReporting: true}]
"#;
    let s = snap(&(base() + extra));
    let obs = observe(&s, &web_calls_cart());
    let recs = recommend::recommend(
        &s,
        &obs,
        &[w(&s, "web"), w(&s, "cart")],
        &RecommendOptions {
            allow_idle: true,
            ..Default::default()
        },
    );
    // Tracing is off in shop: web needs no collector.
    assert_eq!(hosts(&recs[0]), ["shop/cart.shop.svc.cluster.local"]);
    assert!(recs[0].required.is_empty());
    // cart's CUSTOM policy makes its proxy call the ext_authz server.
    assert_eq!(hosts(&recs[1]), ["auth/ext-authz.auth.svc.cluster.local"]);
    assert_eq!(
        annotation(&recs[1]),
        "ext-authz.auth.svc.cluster.local:8000: required by mesh config: AuthorizationPolicy shop/cart-authz (action CUSTOM) authz"
    );
}

#[test]
fn an_egress_gateway_a_delegated_virtual_service_routes_to_is_imported() {
    let s = snap(&(base() + EGRESS));
    // web dials api.example.com; its sidecar sends it to the egress gateway.
    let log = web_calls_cart()
        + &line(
            "10.0.0.1",
            "api.example.com",
            "outbound|80||istio-egressgateway.istio-system.svc.cluster.local",
            "10.96.1.2:80",
        );
    let obs = observe(&s, &log);
    let recs = recommend::recommend(&s, &obs, &[w(&s, "web")], &RecommendOptions::default());
    let h = hosts(&recs[0]);
    for want in [
        "istio-system/api.example.com",
        "istio-system/istio-egressgateway.istio-system.svc.cluster.local",
    ] {
        assert!(h.contains(&want.to_string()), "{want}: {h:?}");
    }
    // Observed already (its cluster was in the log): no routing reason.
    assert!(
        !annotation(&recs[0]).contains("istio-egressgateway"),
        "{}",
        annotation(&recs[0])
    );

    // Seen only as the dialled name (a log that names the external
    // host's cluster): the gateway comes from the routing graph, with why.
    let log = web_calls_cart()
        + &line(
            "10.0.0.1",
            "api.example.com",
            "outbound|80||api.example.com",
            "10.96.1.9:80",
        );
    let obs = observe(&s, &log);
    let recs = recommend::recommend(&s, &obs, &[w(&s, "web")], &RecommendOptions::default());
    let h = hosts(&recs[0]);
    assert!(
        h.contains(&"istio-system/istio-egressgateway.istio-system.svc.cluster.local".to_string()),
        "{h:?}"
    );
    assert!(
        annotation(&recs[0]).contains(
            "istio-egressgateway.istio-system.svc.cluster.local:80: required by routing: VirtualService egress-routes/api-routes (delegate of istio-system/api-via-egress) routes api.example.com to it"
        ),
        "{}",
        annotation(&recs[0])
    );
}

#[test]
fn audit_reports_a_sidecar_without_a_provider_service_its_workload_needs() {
    let sidecar = r#"---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: web, namespace: shop}
spec:
  workloadSelector: {labels: {app: web}}
  egress: [{hosts: [./cart.shop.svc.cluster.local]}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: cart, namespace: shop}
spec:
  workloadSelector: {labels: {app: cart}}
  egress: [{hosts: [istio-system/*]}]
"#;
    let s = snap(&(base() + sidecar));
    let all = AuditScope {
        namespaces: None,
        workloads: None,
    };
    let f = audit::audit(&s, None, &all);
    let ms13: Vec<_> = f.iter().filter(|f| f.code.as_str() == "MS0013").collect();
    assert_eq!(ms13.len(), 1, "{f:#?}");
    assert_eq!(ms13[0].name, "web");
    assert_eq!(
        ms13[0].message,
        "Deployment shop/web needs zipkin.istio-system.svc.cluster.local:9411 (required by mesh config: defaultProviders.tracing zipkin), which Sidecar shop/web does not import; add istio-system/zipkin.istio-system.svc.cluster.local to its egress"
    );
    // A user-owned Sidecar is never replaced: recommend names the host.
    let obs = observe(&s, &web_calls_cart());
    let recs = recommend::recommend(&s, &obs, &[w(&s, "web")], &RecommendOptions::default());
    match &recs[0].outcome {
        Outcome::UserOwned { missing, .. } => assert_eq!(
            missing,
            &["istio-system/zipkin.istio-system.svc.cluster.local".to_string()]
        ),
        o => panic!("{o:?}"),
    }
    assert!(audit::code_doc("MS0013").is_some());
}

/// A VirtualService in `shop` for `cart.shop.svc.cluster.local` sending half
/// of the requests to `cart-v2`.
const CART_SPLIT: &str = r#"---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: cart-split, namespace: shop}
spec:
  hosts: [cart.shop.svc.cluster.local]
  http:
  - route:
    - {destination: {host: cart.shop.svc.cluster.local}, weight: 50}
    - {destination: {host: cart-v2.shop.svc.cluster.local}, weight: 50}
"#;

/// issue #33, found on the way: Envoy's virtual host for a Kubernetes
/// service lists `svc.ns` and `svc.ns.svc` as domains too, so a request
/// to `cart.shop:80` that the route sent to `cart-v2` dialled
/// `cart.shop.svc.cluster.local`: the recommendation imports that host and
/// every backend of its route, not only the one the log saw.
#[test]
fn a_service_dialled_as_svc_dot_ns_brings_its_route_and_every_backend() {
    let yaml = base() + &service("shop", "cart-v2", "10.96.0.4", 80) + CART_SPLIT;
    let s = snap(&yaml);
    for authority in ["cart.shop:80", "cart.shop.svc", "cart"] {
        let log = line(
            "10.0.0.1",
            authority,
            "outbound|80||cart-v2.shop.svc.cluster.local",
            "10.96.0.4:80",
        );
        let obs = observe(&s, &log);
        let recs = recommend::recommend(&s, &obs, &[w(&s, "web")], &RecommendOptions::default());
        let h = hosts(&recs[0]);
        for want in [
            "shop/cart.shop.svc.cluster.local",
            "shop/cart-v2.shop.svc.cluster.local",
        ] {
            assert!(h.contains(&want.to_string()), "{authority}: {h:?}");
        }
    }
    // `example.com`-like names are no short form of a service.
    assert_eq!(s.dialled_hosts("cart.example", "shop"), ["cart.example"]);
    assert_eq!(
        s.dialled_hosts("cart.shop", "web"),
        ["cart.shop", "cart.shop.svc.cluster.local"]
    );
}
