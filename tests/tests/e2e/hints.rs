//! `--from-manifest-hints` against the real API server: a Deployment that
//! has never run gets a Sidecar from the hosts its env and ConfigMaps
//! name, and the fix MS0001 prints for a workload not running yet, run as
//! printed, scopes it.

use kubectl_meshscope::Outcome;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::run::meshscope_at as meshscope;

fn service(ns: &str, name: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  selector: {{app: {name}}}\n  ports:\n  - {{name: http, port: 9080}}\n"
    )
}

/// A Deployment whose env names `reviews:9080` and whose envFrom reads
/// ConfigMap `<name>-upstreams`.
fn deployment(ns: &str, name: &str) -> String {
    format!(
        "---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {ns}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
      - name: app
        image: registry.example.com/{name}:1
        env:
        - {{name: REVIEWS, value: \"reviews:9080\"}}
        - {{name: LOG_LEVEL, value: info}}
        envFrom:
        - configMapRef: {{name: {name}-upstreams}}
"
    )
}

/// The Services, the ConfigMap naming ratings by its FQDN and, in another
/// namespace, a ServiceEntry exported only to its own.
fn world(c: &Cluster, ns: &str, other: &str, name: &str) {
    let mut yaml = service(ns, "reviews") + &service(ns, "ratings");
    yaml += &format!(
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}-upstreams\n  namespace: {ns}\ndata:\n  RATINGS_URL: http://ratings.{ns}.svc.cluster.local:9080/\n  BILLING: billing.example.com:443\n"
    );
    yaml += &format!(
        "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: billing\n  namespace: {other}\nspec:\n  hosts: [billing.example.com]\n  exportTo: [\".\"]\n  location: MESH_EXTERNAL\n  resolution: DNS\n  ports: [{{number: 443, name: tls, protocol: TLS}}]\n"
    );
    yaml += &deployment(ns, name);
    c.apply(&yaml);
}

fn hosts(c: &Cluster, ns: &str, sidecar: &str) -> Vec<String> {
    let json = c.sidecar_jsonpath(ns, sidecar, "{.spec.egress[0].hosts}");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

#[test]
fn apply_from_manifest_hints_writes_the_hinted_hosts_of_a_deployment_that_never_ran() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("hints", &[("istio-injection", "enabled")]);
    let other = c.namespace("hints-other", &[]);
    world(c, &ns, &other, "productpage");

    // Without hints there is nothing to go on.
    let r = meshscope(
        &c.kubeconfig,
        &["apply", "-n", &ns, "--workload", "deployment/productpage"],
    );
    assert!(r.outcome.is_err(), "{}", r.stderr);

    let r = meshscope(
        &c.kubeconfig,
        &[
            "apply",
            "-n",
            &ns,
            "--workload",
            "deployment/productpage",
            "--from-manifest-hints",
        ],
    );
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    assert!(!r.stderr.contains("no traffic source"), "{}", r.stderr);
    let sidecar = "productpage-deployment-meshscope";
    assert_eq!(
        hosts(c, &ns, sidecar),
        [
            format!("{ns}/ratings.{ns}.svc.cluster.local"),
            format!("{ns}/reviews.{ns}.svc.cluster.local"),
        ]
    );
    let sources = c.sidecar_jsonpath(
        &ns,
        sidecar,
        "{.metadata.annotations.meshscope\\.io/sources}",
    );
    assert_eq!(sources, "manifest-hints");
    // The same again changes nothing.
    let r = meshscope(
        &c.kubeconfig,
        &[
            "apply",
            "-n",
            &ns,
            "--workload",
            "deployment/productpage",
            "--from-manifest-hints",
        ],
    );
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    assert!(r.stderr.contains("1 unchanged"), "{}", r.stderr);
}

/// The command MS0001 offers for a workload not running yet, from a
/// message that carries it.
pub(crate) fn not_running_fix(message: &str) -> String {
    let (_, rest) = message
        .split_once("not running yet: ")
        .unwrap_or_else(|| panic!("no fix for a workload not running yet in {message:?}"));
    rest.split_once(')')
        .map_or(rest, |(cmd, _)| cmd)
        .to_string()
}

/// Runs a printed `kubectl meshscope ...` command as printed: the built
/// plugin, the words after `kubectl meshscope`, the cluster's kubeconfig
/// from the environment as kubectl would take it.
pub(crate) fn run_printed(c: &Cluster, cmd: &str) -> (bool, String) {
    let args = cmd
        .strip_prefix("kubectl meshscope ")
        .unwrap_or_else(|| panic!("not a kubectl meshscope command: {cmd}"));
    let o = meshscope_e2e::run::binary(args.split_whitespace())
        .env("KUBECONFIG", &c.kubeconfig)
        .output();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o.status.success(), err)
}

fn ms0001_for(c: &Cluster, ns: &str, name: &str) -> Option<String> {
    let r = meshscope(&c.kubeconfig, &["audit", "-n", ns, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    v["findings"].as_array().unwrap().iter().find_map(|f| {
        (f["code"] == "MS0001" && f["name"] == name)
            .then(|| f["message"].as_str().unwrap().to_string())
    })
}

#[test]
fn the_fix_audit_prints_for_a_workload_not_running_yet_scopes_it_as_printed() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("hints-fix", &[("istio-injection", "enabled")]);
    let other = c.namespace("hints-fix-other", &[]);
    world(c, &ns, &other, "worker");

    let message = ms0001_for(c, &ns, "worker").expect("worker is unscoped");
    let fix = not_running_fix(&message);
    assert_eq!(
        fix,
        format!(
            "kubectl meshscope apply -n {ns} --workload deployment/worker --from-manifest-hints --allow-idle"
        )
    );
    let (ok, err) = run_printed(c, &fix);
    assert!(ok, "{fix}: {err}");
    assert_eq!(ms0001_for(c, &ns, "worker"), None);
    assert_eq!(
        hosts(c, &ns, "worker-deployment-meshscope"),
        [
            format!("{ns}/ratings.{ns}.svc.cluster.local"),
            format!("{ns}/reviews.{ns}.svc.cluster.local"),
        ]
    );
}

#[test]
fn listing_config_maps_joins_the_permission_check_and_the_shipped_reader_grants_it() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("hints-rbac", &[("istio-injection", "enabled")]);
    let other = c.namespace("hints-rbac-other", &[]);
    world(c, &ns, &other, "web");
    let dir = tempfile::tempdir().unwrap();

    // Nothing granted: the one error names configmaps only with the flag.
    let nobody = c
        .impersonating(&format!("meshscope-nobody-{ns}"), dir.path())
        .unwrap();
    let plain = meshscope(&nobody, &["recommend", "-n", &ns]).error();
    assert!(!plain.contains("configmaps"), "{plain}");
    let e = meshscope(&nobody, &["recommend", "-n", &ns, "--from-manifest-hints"]).error();
    assert!(
        e.contains(", configmaps in namespace") && e.contains("\"configmaps\""),
        "{e}"
    );

    // deploy/rbac/meshscope-reader.yaml is enough.
    let user = format!("meshscope-reader-{ns}");
    c.bind_reader(&user);
    let reader = c.impersonating(&user, dir.path()).unwrap();
    let r = meshscope(
        &reader,
        &[
            "recommend",
            "-n",
            &ns,
            "--from-manifest-hints",
            "-o",
            "yaml",
        ],
    );
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    let hosts = meshscope_e2e::sidecar_hosts(&r.stdout);
    assert_eq!(
        hosts["web-deployment-meshscope"],
        [
            format!("{ns}/ratings.{ns}.svc.cluster.local"),
            format!("{ns}/reviews.{ns}.svc.cluster.local"),
        ]
    );
}
