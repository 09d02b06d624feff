//! The admission router on golden AdmissionReview bodies
//! (tests/fixtures/admission/), without TLS or a cluster: every rule, every
//! policy mode, every operation, exemptions, and malformed input.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{to_bytes, Body};
use axum::http::{Method, Request, StatusCode};
use meshscope_shared::admission::{Config, Policy};
use meshscope_shared::{Inputs, MeshConfig, MeshSnapshot, Options};
use meshscope_webhook::{admin, router, State};
use serde_json::{json, Value};
use tower::ServiceExt;

// === fixtures ===

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/admission")
}

fn raw_fixture(name: &str) -> String {
    let path = fixtures_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fixture(name: &str) -> Value {
    serde_json::from_str(&raw_fixture(name)).unwrap()
}

/// The fixture with its object moved to namespace `ns`.
fn fixture_in(name: &str, ns: &str) -> Value {
    let mut v = fixture(name);
    v["request"]["namespace"] = json!(ns);
    for key in ["object", "oldObject"] {
        if v["request"][key].is_object() {
            v["request"][key]["metadata"]["namespace"] = json!(ns);
        }
    }
    v
}

fn namespace(name: &str, labels: &[(&str, &str)]) -> Value {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

fn sidecar(ns: &str, name: &str, selector: Option<(&str, &str)>, created: &str) -> Value {
    let mut v = json!({
        "apiVersion": "networking.istio.io/v1", "kind": "Sidecar",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
        "spec": {"egress": [{"hosts": ["./*", "istio-system/*"]}]}
    });
    if let Some((k, val)) = selector {
        v["spec"]["workloadSelector"] = json!({"labels": {k: val}});
    }
    v
}

/// Injected namespaces `enforce`, `warn`, `off` and `unlabelled` (no policy
/// label), `payments` (warn) with a namespace-wide Sidecar, and Sidecar
/// `warn/web` selecting `app=web`. No mesh default in `istio-system`.
fn cluster() -> MeshSnapshot {
    let mut inputs = Inputs::default();
    let injected = ("istio-injection", "enabled");
    for (ns, policy) in [
        ("enforce", "enforce"),
        ("warn", "warn"),
        ("off", "off"),
        ("payments", "warn"),
    ] {
        inputs
            .add(namespace(ns, &[injected, ("meshscope.io/policy", policy)]))
            .unwrap();
    }
    inputs.add(namespace("unlabelled", &[injected])).unwrap();
    inputs.add(namespace("istio-system", &[])).unwrap();
    inputs
        .add(sidecar(
            "warn",
            "web",
            Some(("app", "web")),
            "2025-01-01T00:00:00Z",
        ))
        .unwrap();
    inputs
        .add(sidecar(
            "payments",
            "payments-default",
            None,
            "2025-01-01T00:00:00Z",
        ))
        .unwrap();
    MeshSnapshot::build_with_mesh(&inputs, Options::default(), MeshConfig::default())
}

fn state_with(config: Config) -> Arc<State> {
    Arc::new(State::with_snapshot(config, cluster()))
}

fn state() -> Arc<State> {
    state_with(Config::default())
}

// === requests ===

struct Reply {
    status: StatusCode,
    body: Value,
}

impl Reply {
    fn response(&self) -> &Value {
        assert_eq!(self.status, StatusCode::OK, "{}", self.body);
        &self.body["response"]
    }
    fn allowed(&self) -> bool {
        self.response()["allowed"]
            .as_bool()
            .expect("allowed is a bool")
    }
    fn message(&self) -> &str {
        self.response()["status"]["message"].as_str().unwrap_or("")
    }
    fn warnings(&self) -> Vec<String> {
        self.response()["warnings"]
            .as_array()
            .map(|w| w.iter().map(|s| s.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    }
    /// The JSON patch, decoded.
    fn patch(&self) -> Option<Value> {
        let p = self.response().get("patch")?;
        let bytes: Vec<u8> = match p {
            Value::Array(a) => a.iter().map(|b| b.as_u64().unwrap() as u8).collect(),
            other => panic!("patch is not a byte array: {other}"),
        };
        Some(serde_json::from_slice(&bytes).unwrap())
    }
}

async fn send(app: axum::Router, method: Method, path: &str, body: Body) -> Reply {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    let res = app.oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = to_bytes(res.into_body(), usize::MAX).await.unwrap();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Reply { status, body }
}

async fn post(state: &Arc<State>, path: &str, review: &Value) -> Reply {
    send(
        router(state.clone()),
        Method::POST,
        path,
        Body::from(review.to_string()),
    )
    .await
}

async fn validate(state: &Arc<State>, review: &Value) -> Reply {
    post(state, "/validate", review).await
}

async fn admin_get(state: &Arc<State>, path: &str) -> (StatusCode, String) {
    let req = Request::builder().uri(path).body(Body::empty()).unwrap();
    let res = admin::router(state.clone()).oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = to_bytes(res.into_body(), usize::MAX).await.unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

/// The workload fixtures with their kind and name.
const WORKLOADS: &[(&str, &str, &str)] = &[
    ("deployment-create.json", "Deployment", "worker"),
    ("deployment-update.json", "Deployment", "worker"),
    ("deployment-create-dry-run.json", "Deployment", "worker"),
    ("statefulset-create.json", "StatefulSet", "ledger"),
    ("daemonset-create.json", "DaemonSet", "node-agent"),
    ("job-create.json", "Job", "migrate"),
    ("cronjob-create.json", "CronJob", "nightly-report"),
    ("pod-bare-create.json", "Pod", "debug"),
    ("replicaset-bare-create.json", "ReplicaSet", "cache"),
];

fn all_fixtures() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json") && !n.starts_with("malformed-"))
        .collect();
    names.sort();
    names
}

// === the protocol ===

#[tokio::test]
async fn every_response_echoes_the_uid_and_the_review_version() {
    let state = state();
    let names = all_fixtures();
    assert!(names.len() >= 20, "{names:?}");
    for name in names {
        for ns in ["enforce", "warn"] {
            let review = fixture_in(&name, ns);
            for path in ["/validate", "/mutate"] {
                let reply = post(&state, path, &review).await;
                assert_eq!(
                    reply.status,
                    StatusCode::OK,
                    "{name} {path}: {}",
                    reply.body
                );
                assert_eq!(reply.body["apiVersion"], "admission.k8s.io/v1", "{name}");
                assert_eq!(reply.body["kind"], "AdmissionReview", "{name}");
                assert_eq!(reply.response()["uid"], review["request"]["uid"], "{name}");
                for w in reply.warnings() {
                    assert!(w.chars().count() <= 120, "{name}: {w}");
                }
            }
        }
    }
}

// === MS0001 ===

#[tokio::test]
async fn unscoped_workloads_are_denied_in_enforce_namespaces_with_the_code_and_the_fix() {
    let state = state();
    for (file, kind, name) in WORKLOADS {
        let review = fixture_in(file, "enforce");
        let reply = validate(&state, &review).await;
        assert!(!reply.allowed(), "{file}");
        let lower = kind.to_ascii_lowercase();
        // A creation: the workload is not in the cluster, so the fix plans
        // from its manifest; an update: from the cluster, as audit says.
        let expected = match review["request"]["operation"].as_str() {
            Some("CREATE") => format!("MS0001: {kind} enforce/{name} has no Sidecar scope; create its Sidecar first from the manifest you are applying, then apply that again: kubectl meshscope apply -n enforce --workload {lower}/{name} --from-manifest-hints --allow-idle -f FILE (FILE: the manifest that holds this {kind})"),
            _ => format!("MS0001: {kind} enforce/{name} has no Sidecar scope; run: kubectl meshscope apply -n enforce --workload {lower}/{name} --from-pod-logs (not running yet: kubectl meshscope apply -n enforce --workload {lower}/{name} --from-manifest-hints --allow-idle)"),
        };
        assert_eq!(reply.message(), expected, "{file}");
        assert_eq!(reply.response()["status"]["code"], 403, "{file}");
        assert_eq!(reply.response()["auditAnnotations"]["codes"], "MS0001");
    }
}

#[tokio::test]
async fn warn_namespaces_allow_unscoped_workloads_with_one_short_warning() {
    let state = state();
    for (file, kind, name) in WORKLOADS {
        let reply = validate(&state, &fixture_in(file, "warn")).await;
        assert!(reply.allowed(), "{file}");
        assert_eq!(
            reply.warnings(),
            vec![format!("MS0001: {kind} warn/{name} has no Sidecar scope; see kubectl meshscope codes MS0001")],
            "{file}"
        );
    }
}

#[tokio::test]
async fn off_namespaces_allow_everything_silently() {
    let state = state();
    for name in all_fixtures() {
        let reply = validate(&state, &fixture_in(&name, "off")).await;
        assert!(reply.allowed(), "{name}");
        assert!(
            reply.warnings().is_empty(),
            "{name}: {:?}",
            reply.warnings()
        );
    }
}

#[tokio::test]
async fn unlabelled_namespaces_get_the_default_policy() {
    let review = fixture_in("deployment-create.json", "unlabelled");
    let warn = validate(&state(), &review).await;
    assert!(warn.allowed() && warn.warnings().len() == 1);
    let enforcing = state_with(Config {
        default_policy: Policy::Enforce,
        ..Config::default()
    });
    assert!(!validate(&enforcing, &review).await.allowed());
    let off = state_with(Config {
        default_policy: Policy::Off,
        ..Config::default()
    });
    let reply = validate(&off, &review).await;
    assert!(reply.allowed() && reply.warnings().is_empty());
    // The label overrides the default either way.
    assert!(
        validate(&enforcing, &fixture_in("deployment-create.json", "warn"))
            .await
            .allowed()
    );
}

#[tokio::test]
async fn a_workload_a_sidecar_selects_is_allowed_without_warnings() {
    let state = state();
    let mut review = fixture_in("deployment-create.json", "warn");
    review["request"]["object"]["spec"]["template"]["metadata"]["labels"]["app"] = json!("web");
    let reply = validate(&state, &review).await;
    assert!(
        reply.allowed() && reply.warnings().is_empty(),
        "{:?}",
        reply.warnings()
    );
    // A namespace-wide Sidecar scopes every workload of its namespace.
    let reply = validate(&state, &fixture_in("deployment-create.json", "payments")).await;
    assert!(reply.allowed() && reply.warnings().is_empty());
}

#[tokio::test]
async fn deletes_are_allowed_and_dry_runs_are_judged_like_real_requests() {
    let state = state();
    let reply = validate(&state, &fixture_in("deployment-delete.json", "enforce")).await;
    assert!(reply.allowed() && reply.warnings().is_empty());
    let dry = validate(
        &state,
        &fixture_in("deployment-create-dry-run.json", "enforce"),
    )
    .await;
    let real = validate(&state, &fixture_in("deployment-create.json", "enforce")).await;
    assert_eq!(
        fixture("deployment-create-dry-run.json")["request"]["dryRun"],
        true
    );
    assert_eq!(
        (dry.allowed(), dry.message()),
        (real.allowed(), real.message())
    );
}

#[tokio::test]
async fn controller_owned_pods_and_cronjob_jobs_are_left_to_their_controller() {
    let state = state();
    for file in ["pod-owned-create.json", "job-from-cronjob-create.json"] {
        let reply = validate(&state, &fixture_in(file, "enforce")).await;
        assert!(reply.allowed() && reply.warnings().is_empty(), "{file}");
    }
}

#[tokio::test]
async fn other_kinds_are_allowed_silently() {
    let reply = validate(&state(), &fixture_in("configmap-create.json", "enforce")).await;
    assert!(reply.allowed() && reply.warnings().is_empty());
}

// === exemptions ===

#[tokio::test]
async fn exempt_objects_are_allowed_logged_and_counted() {
    let state = state();
    for file in [
        "deployment-create-exempt.json",
        "serviceentry-dns-exempt-create.json",
    ] {
        let reply = validate(&state, &fixture_in(file, "enforce")).await;
        assert!(reply.allowed() && reply.warnings().is_empty(), "{file}");
        assert!(
            reply.response()["auditAnnotations"]["exempt"].is_string(),
            "{file}"
        );
    }
    let (_, metrics) = admin_get(&state, "/metrics").await;
    assert!(
        metrics.contains(
            "meshscope_webhook_exemptions_total{kind=\"Deployment\",namespace=\"enforce\"} 1\n"
        ),
        "{metrics}"
    );
    assert!(metrics.contains(
        "meshscope_webhook_exemptions_total{kind=\"ServiceEntry\",namespace=\"enforce\"} 1\n"
    ));
    assert!(metrics.contains("decision=\"exempt\"} 1\n"));
}

#[tokio::test]
async fn an_exemption_without_a_reason_is_ignored_with_a_warning() {
    let reply = validate(
        &state(),
        &fixture_in("deployment-create-exempt-no-reason.json", "enforce"),
    )
    .await;
    assert!(!reply.allowed());
    assert_eq!(
        reply.warnings(),
        vec!["meshscope.io/exempt on Deployment enforce/worker has no reason, so it is ignored"]
    );
}

// === MS0002 ===

#[tokio::test]
async fn dns_service_entries_without_export_to_are_denied_or_warned() {
    let state = state();
    let reply = validate(
        &state,
        &fixture_in("serviceentry-dns-create.json", "enforce"),
    )
    .await;
    assert!(!reply.allowed());
    assert_eq!(
        reply.message(),
        // A creation: the fix is in the manifest being applied.
        "MS0002: ServiceEntry enforce/payments-api has resolution DNS and no exportTo, so every proxy in the mesh would resolve its hosts; add exportTo to its manifest before applying it: spec.exportTo: [\".\"] keeps it to namespace enforce, or list the namespaces that call its hosts (kubectl meshscope recommend --exports -f FILE -n enforce --from-pod-logs plans it from their traffic), or cap ServiceEntries in the mesh config: meshConfig.serviceEntryVisibility with visibility NAMESPACE for namespace enforce (a policy or defaultVisibility) and applyToSidecars: true"
    );
    let reply = validate(
        &state,
        &fixture_in("serviceentry-dns-round-robin-update.json", "warn"),
    )
    .await;
    assert!(reply.allowed());
    assert_eq!(reply.warnings().len(), 2);
    assert!(reply.warnings()[0]
        .starts_with("MS0002: ServiceEntry warn/payments-api has resolution DNS_ROUND_ROBIN"));
    assert_eq!(
        reply.warnings()[1],
        "MS0002: exportTo from traffic: kubectl meshscope recommend --exports -n warn --from-pod-logs"
    );
    for file in [
        "serviceentry-dns-exported-create.json",
        "serviceentry-static-create.json",
    ] {
        let reply = validate(&state, &fixture_in(file, "enforce")).await;
        assert!(reply.allowed() && reply.warnings().is_empty(), "{file}");
    }
}

#[tokio::test]
async fn mutate_mode_adds_export_to_here_with_a_json_patch_and_says_so() {
    let state = state_with(Config {
        mutate_service_entry_export_to: true,
        ..Config::default()
    });
    let review = fixture_in("serviceentry-dns-create.json", "enforce");
    let reply = post(&state, "/mutate", &review).await;
    assert!(reply.allowed());
    assert_eq!(reply.response()["patchType"], "JSONPatch");
    let patch = reply.patch().expect("a patch");
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/spec/exportTo", "value": ["."]}])
    );
    assert_eq!(
        reply.warnings(),
        vec!["MS0002: meshscope set exportTo: [\".\"] on ServiceEntry enforce/payments-api (resolution DNS, no exportTo)"]
    );
    // What the API server stores, and what /validate then sees.
    let mut object = review["request"]["object"].clone();
    let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
    json_patch::patch(&mut object, &patch).unwrap();
    assert_eq!(object["spec"]["exportTo"], json!(["."]));
    let mut patched = review.clone();
    patched["request"]["object"] = object;
    let reply = validate(&state, &patched).await;
    assert!(reply.allowed() && reply.warnings().is_empty());
    // Nothing to patch on other objects, exempt ones, or in off namespaces.
    for (file, ns) in [
        ("deployment-create.json", "enforce"),
        ("serviceentry-dns-exported-create.json", "enforce"),
        ("serviceentry-dns-exempt-create.json", "enforce"),
        ("serviceentry-dns-create.json", "off"),
    ] {
        let reply = post(&state, "/mutate", &fixture_in(file, ns)).await;
        assert!(reply.allowed() && reply.patch().is_none(), "{file}");
        assert!(reply.warnings().is_empty(), "{file}");
    }
}

#[tokio::test]
async fn without_mutate_mode_the_mutating_endpoint_only_allows() {
    let state = state();
    let reply = post(
        &state,
        "/mutate",
        &fixture_in("serviceentry-dns-create.json", "enforce"),
    )
    .await;
    assert!(reply.allowed() && reply.patch().is_none() && reply.warnings().is_empty());
}

// === Sidecar hygiene ===

#[tokio::test]
async fn sidecar_hygiene_warns_and_never_denies() {
    let state = state();
    for (file, ns, code) in [
        ("sidecar-no-egress-create.json", "enforce", "MS0006"),
        ("sidecar-same-selector-create.json", "warn", "MS0004"),
        ("sidecar-second-default-create.json", "payments", "MS0005"),
        (
            "sidecar-root-selector-create.json",
            "istio-system",
            "MS0008",
        ),
    ] {
        let reply = validate(&state, &fixture_in(file, ns)).await;
        assert!(reply.allowed(), "{file}");
        let w = reply.warnings();
        assert_eq!(w.len(), 1, "{file}: {w:?}");
        assert!(w[0].starts_with(&format!("{code}: ")), "{file}: {w:?}");
    }
    let reply = validate(&state, &fixture_in("sidecar-clean-update.json", "enforce")).await;
    assert!(
        reply.allowed() && reply.warnings().is_empty(),
        "{:?}",
        reply.warnings()
    );
}

// === bad input ===

#[tokio::test]
async fn malformed_bodies_get_400_with_a_json_error() {
    let state = state();
    let mut bodies: Vec<(String, Vec<u8>)> = Vec::new();
    for name in [
        "malformed-truncated.json",
        "malformed-v1beta1.json",
        "malformed-no-request.json",
        "malformed-operation.json",
    ] {
        bodies.push((name.into(), raw_fixture(name).into_bytes()));
    }
    bodies.push(("empty".into(), Vec::new()));
    bodies.push(("not json".into(), b"hello".to_vec()));
    bodies.push(("a JSON array".into(), b"[1,2,3]".to_vec()));
    bodies.push(("binary".into(), vec![0xff, 0xfe, 0x00, 0x01]));
    // Larger than the limit: a valid review padded with whitespace.
    let mut big = raw_fixture("deployment-create.json");
    big.push_str(&" ".repeat(meshscope_webhook::admission::MAX_BODY_BYTES));
    bodies.push(("oversized".into(), big.into_bytes()));
    for (what, body) in &bodies {
        for path in ["/validate", "/mutate"] {
            let reply = send(
                router(state.clone()),
                Method::POST,
                path,
                Body::from(body.clone()),
            )
            .await;
            assert_eq!(
                reply.status,
                StatusCode::BAD_REQUEST,
                "{what} {path}: {}",
                reply.body
            );
            let error = reply.body["error"].as_str().unwrap_or_default();
            assert!(!error.is_empty(), "{what}: {}", reply.body);
        }
    }
    let (_, metrics) = admin_get(&state, "/metrics").await;
    let expected = format!(
        "meshscope_webhook_bad_requests_total {}\n",
        2 * bodies.len()
    );
    assert!(metrics.contains(&expected), "{metrics}");
}

#[tokio::test]
async fn unknown_paths_are_404_and_wrong_methods_405() {
    let state = state();
    let review = fixture("deployment-create.json").to_string();
    for path in ["/", "/validate/", "/admit", "/metrics"] {
        let reply = send(
            router(state.clone()),
            Method::POST,
            path,
            Body::from(review.clone()),
        )
        .await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        assert!(reply.body["error"].is_string());
    }
    let reply = send(
        router(state.clone()),
        Method::GET,
        "/validate",
        Body::empty(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
}

// === cache state ===

#[tokio::test]
async fn before_the_first_sync_requests_are_allowed_with_a_warning_that_says_so() {
    let state = Arc::new(State::new(
        Config::default(),
        Options::default(),
        None,
        Duration::from_secs(300),
    ));
    let reply = validate(&state, &fixture_in("deployment-create.json", "enforce")).await;
    assert!(reply.allowed());
    assert_eq!(
        reply.warnings(),
        vec!["meshscope-webhook has not synced its caches yet; allowed without checks"]
    );
    // Requests no rule looks at get no warning.
    let reply = validate(&state, &fixture_in("deployment-delete.json", "enforce")).await;
    assert!(reply.allowed() && reply.warnings().is_empty());
    let (status, body) = admin_get(&state, "/readyz").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced\n")
    );
    let (_, metrics) = admin_get(&state, "/metrics").await;
    assert!(metrics.contains("decision=\"unchecked\"} 1\n"), "{metrics}");
    assert!(metrics.contains("meshscope_webhook_cache_synced 0\n"));
}

#[tokio::test]
async fn stale_caches_still_decide_with_a_warning_that_says_so() {
    let state = state();
    let fresh = validate(&state, &fixture_in("deployment-create.json", "enforce")).await;
    let now = Instant::now();
    state.watch_failed("sidecars", now - Duration::from_secs(60), false);
    state.watch_failed("sidecars", now, false);
    // The same decision as from fresh caches (an unscoped Deployment in an
    // enforce namespace is denied), with a warning added.
    let reply = validate(&state, &fixture_in("deployment-create.json", "enforce")).await;
    assert_eq!(reply.allowed(), fresh.allowed());
    assert!(!reply.allowed());
    assert_eq!(
        reply.warnings().last().map(String::as_str),
        Some("meshscope-webhook decided from caches that its sidecars watch has not refreshed lately (API server unreachable?)")
    );
    let (_, metrics) = admin_get(&state, "/metrics").await;
    assert!(!metrics.contains("decision=\"unchecked\""), "{metrics}");
    let (_, metrics) = admin_get(&state, "/metrics").await;
    assert!(
        metrics.contains("meshscope_webhook_cache_stale 1\n"),
        "{metrics}"
    );
    // Still ready (an unready webhook would only be skipped), and says
    // the caches are stale.
    assert_eq!(
        admin_get(&state, "/readyz").await,
        (
            StatusCode::OK,
            "ok, but stale: the sidecars watch is failing; decisions come from the last state it saw\n".into()
        )
    );
}

/// issue #35 item 19: with the Sidecar CRD deleted (the API server answers
/// the sidecars watch 404), an unscoped Deployment that fresh caches would
/// deny is allowed, with a warning that names the missing resource, not
/// an unreachable API server; /readyz says so too.
#[tokio::test]
async fn a_sidecar_crd_no_longer_served_allows_without_checks_and_says_why() {
    let state = state();
    let fresh = validate(&state, &fixture_in("deployment-create.json", "enforce")).await;
    assert!(!fresh.allowed());
    state.watch_failed("sidecars", Instant::now(), true);
    let reply = validate(&state, &fixture_in("deployment-create.json", "enforce")).await;
    assert!(reply.allowed());
    assert_eq!(
        reply.warnings(),
        vec!["meshscope-webhook allowed this unchecked: the API server does not serve sidecars.networking.istio.io"]
    );
    let (status, body) = admin_get(&state, "/readyz").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains("does not serve sidecars.networking.istio.io"),
        "{body}"
    );
}

#[tokio::test]
async fn probes_and_metrics_are_served_on_the_admin_router() {
    let state = state();
    assert_eq!(
        admin_get(&state, "/healthz").await,
        (StatusCode::OK, "ok\n".into())
    );
    assert_eq!(
        admin_get(&state, "/readyz").await,
        (StatusCode::OK, "ok\n".into())
    );
    validate(&state, &fixture_in("deployment-create.json", "enforce")).await;
    validate(&state, &fixture_in("deployment-create.json", "warn")).await;
    validate(&state, &fixture_in("deployment-delete.json", "warn")).await;
    let (status, metrics) = admin_get(&state, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    for line in [
        "meshscope_webhook_requests_total{endpoint=\"validate\",kind=\"Deployment\",operation=\"CREATE\",decision=\"deny\"} 1\n",
        "meshscope_webhook_requests_total{endpoint=\"validate\",kind=\"Deployment\",operation=\"CREATE\",decision=\"warn\"} 1\n",
        "meshscope_webhook_requests_total{endpoint=\"validate\",kind=\"Deployment\",operation=\"DELETE\",decision=\"allow\"} 1\n",
        "meshscope_webhook_request_duration_seconds_count{endpoint=\"validate\"} 3\n",
        "meshscope_webhook_cache_objects{resource=\"sidecars\"} 2\n",
        "meshscope_webhook_cache_objects{resource=\"namespaces\"} 6\n",
        "meshscope_webhook_cache_synced 1\n",
        "# TYPE meshscope_webhook_request_duration_seconds histogram\n",
    ] {
        assert!(metrics.contains(line), "missing {line:?} in\n{metrics}");
    }
    state.start_draining();
    assert_eq!(
        admin_get(&state, "/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}
