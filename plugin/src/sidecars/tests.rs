//! The write layer against a fake API server (`meshscope_test_support::
//! fake_api`, a mock: these check what the layer sends, case by case;
//! the same writes meet a real kube-apiserver in `tests/tests/e2e`).

use std::time::Duration;

use meshscope_shared::observe::Observations;
use meshscope_shared::recommend::{self, RecommendOptions, Recommendation};
use meshscope_shared::snapshot::{MeshSnapshot, WorkloadKind};
use meshscope_test_support::access_log;
use meshscope_test_support::fake_api::FakeApi;
use meshscope_test_support::fixtures::{deployment, observe, snap, yaml_docs};
use serde_json::Value;

use super::prune::prune;
use super::{write_pass, ApplyResult, Cluster, SidecarRef, SidecarRow, WriteSettings};
use super::{CONFLICT, FORCE_HINT};
use crate::args::DryRun;
use crate::interrupt::Interrupt;
use crate::live::{ConnectOptions, Live};
use crate::output::Printer;
use crate::world::LiveCtx;

/// Deployment `shop/name` with a pod at `ip`, and its Service.
fn deploy(name: &str, ip: &str) -> String {
    deployment("shop", name, ip)
        + &format!("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: shop\nspec:\n  selector: {{app: {name}}}\n  ports:\n  - {{name: http, port: 80}}\n")
}

/// A Sidecar `name` for Deployment `app` with `hosts`, labelled as
/// meshscope's (as generated for that Deployment) when `managed`.
fn sidecar(name: &str, app: &str, hosts: &[&str], managed: bool) -> String {
    let hosts: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    let labels = if managed {
        format!("{{app.kubernetes.io/managed-by: kubectl-meshscope, meshscope.io/workload-kind: Deployment, meshscope.io/workload-name: {app}}}")
    } else {
        "{}".to_string()
    };
    format!("---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: {name}\n  namespace: shop\n  labels: {labels}\nspec:\n  workloadSelector:\n    labels: {{app: {app}}}\n  egress:\n  - hosts: [{}]\n", hosts.join(", "))
}

/// The name meshscope gives deployment web's Sidecar.
const WEB: &str = "web-deployment-meshscope";
const CART: &str = "shop/cart.shop.svc.cluster.local";
const PAY: &str = "shop/pay.shop.svc.cluster.local";

/// shop's web, cart and pay, with `extra` objects; web calls cart.
fn mesh(extra: &str) -> (MeshSnapshot, Observations) {
    let yaml = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {istio-injection: enabled}\n".to_string()
        + &deploy("web", "10.0.0.1")
        + &deploy("cart", "10.0.0.2")
        + &deploy("pay", "10.0.0.3")
        + extra;
    let s = snap(&yaml);
    let line = access_log::line(
        "10.0.0.1",
        "cart",
        "outbound|80||cart.shop.svc.cluster.local",
        "10.0.0.2:80",
    );
    let obs = observe(&s, &line);
    (s, obs)
}

fn recs(s: &MeshSnapshot, obs: &Observations, prune_hosts: bool) -> Vec<Recommendation> {
    let web = s
        .find_workload(&WorkloadKind::Deployment, "shop", "web")
        .unwrap();
    let opts = RecommendOptions {
        prune: prune_hosts,
        ..RecommendOptions::default()
    };
    recommend::recommend(s, obs, &[web], &opts)
}

/// A connection to `api`, as a user's kubeconfig gives it.
fn connect(api: &FakeApi) -> (LiveCtx, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let opts = ConnectOptions {
        kubeconfig: Some(api.kubeconfig(dir.path())),
        chunk_size: 500,
        ..ConnectOptions::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let live = rt
        .block_on(Live::connect(&opts))
        .expect("connect to the fake");
    (LiveCtx { rt, live }, dir)
}

fn settings(force_conflicts: bool, wait: Option<Duration>) -> WriteSettings {
    WriteSettings {
        dry_run: DryRun::None,
        force_conflicts,
        wait,
        diff: false,
        wait_advice: "",
    }
}

/// One write pass of `recs` against `api`: its rows.
fn pass(
    api: &FakeApi,
    s: &MeshSnapshot,
    recs: &[Recommendation],
    w: &WriteSettings,
) -> Vec<SidecarRow> {
    let (ctx, _dir) = connect(api);
    let c = Cluster {
        ctx: &ctx,
        snap: s,
        namespaces: None,
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut p = Printer {
        out: &mut out,
        err: &mut err,
        no_headers: false,
        quiet: true,
    };
    let stop = Interrupt::install();
    write_pass(&c, recs, w, None, true, &stop, &mut p)
        .expect("a write pass")
        .results
}

/// The egress hosts of a Sidecar as sent or stored.
fn hosts(v: &Value) -> Vec<String> {
    v.pointer("/spec/egress/0/hosts")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|h| h.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn put(api: &FakeApi, yaml: &str) {
    for doc in yaml_docs(yaml) {
        api.put(doc);
    }
}

fn web_sidecar() -> SidecarRef {
    SidecarRef::new("shop", WEB)
}

#[test]
fn a_conflict_is_skipped_with_the_hint_until_forced() {
    let old = sidecar(WEB, "web", &[PAY], true);
    let (s, obs) = mesh(&old);
    let recs = recs(&s, &obs, false);
    let api = FakeApi::start();
    put(&api, &old);
    api.conflict_on("shop", WEB);
    let rows = pass(&api, &s, &recs, &settings(false, None));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].result, ApplyResult::Skipped);
    assert_eq!(rows[0].sidecar, web_sidecar());
    assert!(rows[0].reason.starts_with(CONFLICT), "{}", rows[0].reason);
    assert!(rows[0].reason.ends_with(FORCE_HINT), "{}", rows[0].reason);
    assert_eq!(hosts(&api.object("shop", WEB).unwrap()), [PAY]);
    // Forced, the same write takes the fields over.
    let rows = pass(&api, &s, &recs, &settings(true, None));
    assert_eq!(rows[0].result, ApplyResult::Configured, "{rows:?}");
    let patches = api.seen_with("PATCH");
    assert!(patches.last().unwrap().query.contains("force=true"));
    assert!(hosts(&api.object("shop", WEB).unwrap()).contains(&CART.to_string()));
}

#[test]
fn a_sidecar_another_owner_set_is_never_written() {
    // Made after the mesh was read: the read did not see it, the write
    // layer's own read does.
    let (s, obs) = mesh("");
    let recs = recs(&s, &obs, false);
    let api = FakeApi::start();
    put(&api, &sidecar(WEB, "web", &[PAY], false));
    let rows = pass(&api, &s, &recs, &settings(false, None));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].result, ApplyResult::Skipped);
    assert!(
        rows[0].reason.contains("belongs to its owner"),
        "{}",
        rows[0].reason
    );
    assert!(api.seen_with("PATCH").is_empty(), "{:?}", api.seen());
    assert_eq!(hosts(&api.object("shop", WEB).unwrap()), [PAY]);
}

#[test]
fn a_sidecar_that_drops_hosts_is_widened_before_it_is_narrowed() {
    let old = sidecar(WEB, "web", &[CART, PAY], true);
    let (s, obs) = mesh(&old);
    let recs = recs(&s, &obs, true);
    let api = FakeApi::start();
    put(&api, &old);
    let rows = pass(
        &api,
        &s,
        &recs,
        &settings(false, Some(Duration::from_secs(5))),
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].result, ApplyResult::Configured);
    let patches = api.seen_with("PATCH");
    assert_eq!(patches.len(), 2, "{patches:?}");
    let first = hosts(patches[0].body.as_ref().unwrap());
    assert!(
        first.contains(&CART.to_string()) && first.contains(&PAY.to_string()),
        "step 1 keeps the old hosts: {first:?}"
    );
    assert_eq!(hosts(patches[1].body.as_ref().unwrap()), [CART]);
    assert_eq!(hosts(&api.object("shop", WEB).unwrap()), [CART]);
    // Without --wait there is nothing to confirm between steps: one write.
    let api = FakeApi::start();
    put(&api, &old);
    pass(&api, &s, &recs, &settings(false, None));
    assert_eq!(api.seen_with("PATCH").len(), 1);
}

#[test]
fn prune_deletes_only_managed_sidecars_whose_workload_is_gone() {
    let (s, _) = mesh("");
    let api = FakeApi::start();
    put(&api, &sidecar(WEB, "web", &[CART], true));
    put(
        &api,
        &sidecar("gone-deployment-meshscope", "gone", &[CART], true),
    );
    put(&api, &sidecar("mine", "gone", &[CART], false));
    let (ctx, _dir) = connect(&api);
    let c = Cluster {
        ctx: &ctx,
        snap: &s,
        namespaces: None,
    };
    let mut rows = Vec::new();
    prune(&c, DryRun::None, &mut rows);
    assert_eq!(
        rows,
        [SidecarRow::new(
            ApplyResult::Pruned,
            SidecarRef::new("shop", "gone-deployment-meshscope"),
            ""
        )]
    );
    let deletes: Vec<String> = api
        .seen_with("DELETE")
        .into_iter()
        .map(|d| d.path)
        .collect();
    assert_eq!(
        deletes,
        ["/apis/networking.istio.io/v1/namespaces/shop/sidecars/gone-deployment-meshscope"]
    );
    assert!(api.object("shop", "mine").is_some());
    assert!(api.object("shop", WEB).is_some());
}
