//! Hosts the mesh needs that traffic never shows, through the CLI:
//! extension-provider services (the mesh config's tracing collector, a
//! CUSTOM AuthorizationPolicy's ext_authz server) and the egress gateway a
//! VirtualService routes an external host to, in `recommend` (YAML with
//! the meshscope.io/required-by annotation, `-o table`), `explain`, and
//! `audit` (MS0013).

use meshscope_e2e::run::meshscope;
use meshscope_test_support::access_log::line as log_line;

const MESH: &str = "\
extensionProviders:
- name: zipkin
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
- name: authz
  envoyExtAuthzGrpc: {service: \"auth/ext-authz.auth.svc.cluster.local\", port: 9000}
defaultProviders:
  tracing: [zipkin]
";

fn manifests() -> String {
    let deploy = |name: &str, ip: &str| {
        format!("---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: shop}}\nspec:\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: c, image: x}}]}}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}-abc12-xyz98\n  namespace: shop\n  labels: {{app: {name}, pod-template-hash: abc12}}\n  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: {name}-abc12, uid: u, controller: true}}]\nspec: {{containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]}}\nstatus: {{podIP: {ip}}}\n")
    };
    let svc = |ns: &str, name: &str, ip: &str, port: u32| {
        format!("---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  clusterIP: {ip}\n  selector: {{app: {name}}}\n  ports: [{{name: http, port: {port}}}]\n")
    };
    "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {istio-injection: enabled}}\n"
        .to_string()
        + &deploy("web", "10.0.0.1")
        + &deploy("cart", "10.0.0.3")
        + &svc("shop", "cart", "10.96.0.3", 80)
        + &svc("istio-system", "zipkin", "10.96.1.1", 9411)
        + &svc("istio-system", "istio-egressgateway", "10.96.1.2", 80)
        + &svc("auth", "ext-authz", "10.96.1.3", 9000)
        + "---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: cart-authz, namespace: shop}
spec:
  selector: {matchLabels: {app: cart}}
  action: CUSTOM
  provider: {name: authz}
  rules: [{to: [{operation: {paths: [/admin]}}]}]
---
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
  - route:
    - destination: {host: istio-egressgateway.istio-system.svc.cluster.local, port: {number: 80}}
"
}

struct Files {
    _dir: tempfile::TempDir,
    manifests: String,
    mesh: String,
    log: String,
}

fn files(extra: &str) -> Files {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    std::fs::write(p("manifests.yaml"), manifests() + extra).unwrap();
    std::fs::write(p("mesh.yaml"), MESH).unwrap();
    let log = log_line(
        "10.0.0.1",
        "cart",
        "outbound|80||cart.shop.svc.cluster.local",
        "10.96.0.3:80",
    ) + &log_line(
        "10.0.0.1",
        "api.example.com",
        "outbound|80||api.example.com",
        "10.96.9.9:80",
    );
    std::fs::write(p("access.log"), log).unwrap();
    Files {
        manifests: p("manifests.yaml"),
        mesh: p("mesh.yaml"),
        log: p("access.log"),
        _dir: dir,
    }
}

#[test]
fn recommend_adds_provider_and_egress_gateway_hosts_with_why() {
    let f = files("");
    let base = [
        "--manifests",
        f.manifests.as_str(),
        "--mesh-config",
        f.mesh.as_str(),
        "--access-log",
        f.log.as_str(),
    ];
    let mut args = vec!["recommend", "--allow-idle"];
    args.extend(base);
    let r = meshscope(&args);
    r.ok();
    let docs: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&r.stdout)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_json::Value| !v.is_null())
        .collect();
    let by_name = |n: &str| {
        docs.iter()
            .find(|d| d["metadata"]["name"] == n)
            .unwrap_or_else(|| panic!("no Sidecar {n}: {}", r.stdout))
    };
    let web = by_name("web-deployment-meshscope");
    let hosts: Vec<&str> = web["spec"]["egress"][0]["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    assert_eq!(
        hosts,
        [
            "istio-system/api.example.com",
            "istio-system/istio-egressgateway.istio-system.svc.cluster.local",
            "istio-system/zipkin.istio-system.svc.cluster.local",
            "shop/cart.shop.svc.cluster.local"
        ],
        "{}",
        r.stdout
    );
    assert_eq!(
        web["metadata"]["annotations"]["meshscope.io/required-by"],
        "istio-egressgateway.istio-system.svc.cluster.local:80: required by routing: VirtualService istio-system/api-via-egress routes api.example.com to it\nzipkin.istio-system.svc.cluster.local:9411: required by mesh config: defaultProviders.tracing zipkin"
    );
    let cart = by_name("cart-deployment-meshscope");
    assert_eq!(
        cart["spec"]["egress"][0]["hosts"],
        serde_json::json!([
            "auth/ext-authz.auth.svc.cluster.local",
            "istio-system/zipkin.istio-system.svc.cluster.local"
        ])
    );

    // The table says what was added and why.
    let mut args = vec!["recommend", "--allow-idle", "-o", "wide"];
    args.extend(base);
    let r = meshscope(&args);
    r.ok();
    assert!(
        r.stdout.contains("adds ext-authz.auth.svc.cluster.local:9000 (required by mesh config: AuthorizationPolicy shop/cart-authz (action CUSTOM) authz)"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("adds zipkin.istio-system.svc.cluster.local:9411 (required by mesh config: defaultProviders.tracing zipkin)"),
        "{}",
        r.stdout
    );
}

#[test]
fn explain_and_audit_name_a_provider_service_a_sidecar_lacks() {
    let f = files(
        "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: cart, namespace: shop}\nspec:\n  workloadSelector: {labels: {app: cart}}\n  egress: [{hosts: [istio-system/*]}]\n",
    );
    let base = [
        "--manifests",
        f.manifests.as_str(),
        "--mesh-config",
        f.mesh.as_str(),
    ];
    let mut args = vec!["explain", "workload", "deployment/cart", "-n", "shop"];
    args.extend(base);
    let r = meshscope(&args);
    r.ok();
    assert!(
        r.stdout
            .contains("Required by mesh config (Envoy calls them itself; no traffic shows them):"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("  in-scope       zipkin.istio-system.svc.cluster.local:9411 as istio-system/zipkin.istio-system.svc.cluster.local (required by mesh config: defaultProviders.tracing zipkin)"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("  out-of-scope   ext-authz.auth.svc.cluster.local:9000 as auth/ext-authz.auth.svc.cluster.local"),
        "{}",
        r.stdout
    );
    let mut args = vec!["audit", "-n", "shop", "-o", "json"];
    args.extend(base);
    let r = meshscope(&args);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let f: Vec<&serde_json::Value> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "MS0013")
        .collect();
    assert_eq!(f.len(), 1, "{}", r.stdout);
    assert_eq!(f[0]["name"], "cart");
    assert!(
        f[0]["message"]
            .as_str()
            .unwrap()
            .contains("add auth/ext-authz.auth.svc.cluster.local to its egress"),
        "{}",
        f[0]
    );
    // The code is documented.
    let r = meshscope(&["codes", "MS0013"]);
    r.ok();
    assert!(
        r.stdout.starts_with(
            "MS0013 (error): Sidecar lacks a service the mesh config makes Envoy call"
        ),
        "{}",
        r.stdout
    );
}
