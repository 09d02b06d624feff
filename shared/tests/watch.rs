//! Watch mode's pass decisions: what widens, what narrows after
//! `--prune-after`, what is never narrowed, and what is reported once.

use meshscope_test_support::access_log;
use meshscope_test_support::fixtures::{deployment, observe, snap};

use meshscope_shared::edges::Meets;
use meshscope_shared::observe::{LogIngest, Observations};
use meshscope_shared::recommend::{self, RecommendOptions};
use meshscope_shared::snapshot::{MeshSnapshot, WorkloadId, WorkloadKind};
use meshscope_shared::watch::{self, Change, Ledger, PassPlan, PassSettings, SidecarRef};

const CART: &str = "shop/cart.shop.svc.cluster.local";
const PAY: &str = "shop/pay.shop.svc.cluster.local";

fn deploy(name: &str, ip: &str) -> String {
    deployment("shop", name, ip)
}

fn service(name: &str, ip: &str) -> String {
    format!("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: shop\nspec:\n  clusterIP: {ip}\n  selector: {{app: {name}}}\n  ports:\n  - {{name: http, port: 80}}\n")
}

/// A managed Sidecar for deployment `web` with `hosts`.
fn managed(hosts: &[&str]) -> String {
    let hosts: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    format!("---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: web-deployment\n  namespace: shop\n  labels: {{app.kubernetes.io/managed-by: kubectl-meshscope}}\nspec:\n  workloadSelector:\n    labels: {{app: web}}\n  egress:\n  - hosts: [{}]\n", hosts.join(", "))
}

fn mesh(extra: &str) -> MeshSnapshot {
    let yaml = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {istio-injection: enabled}\n".to_string()
        + &deploy("web", "10.0.0.1")
        + &deploy("cart", "10.0.0.2")
        + &deploy("pay", "10.0.0.3")
        + &service("cart", "10.96.0.2")
        + &service("pay", "10.96.0.3")
        + extra;
    snap(&yaml)
}

/// web's calls, each through `cluster`, to the listed Service IPs.
fn calls(s: &MeshSnapshot, to: &[(&str, &str)]) -> Observations {
    let lines: Vec<String> = to
        .iter()
        .map(|(cluster, ip)| access_log::line("10.0.0.1", "a", cluster, &format!("{ip}:80")))
        .collect();
    observe(s, &lines.join("\n"))
}

fn web(s: &MeshSnapshot) -> WorkloadId {
    s.find_workload(&WorkloadKind::Deployment, "shop", "web")
        .unwrap()
}

fn pass(
    s: &MeshSnapshot,
    obs: &Observations,
    ledger: &mut Ledger,
    now: u64,
    prune_after: Option<u64>,
) -> PassPlan {
    let recs = recommend::recommend(s, obs, &[web(s)], &RecommendOptions::default());
    let settings = PassSettings {
        now,
        prune_after,
        include: Vec::new(),
    };
    watch::plan(s, obs, &recs, ledger, &settings)
}

fn hosts(w: &watch::Write) -> Vec<String> {
    w.sidecar.spec.egress[0].hosts.clone()
}

#[test]
fn a_workload_without_a_sidecar_gets_one_from_its_first_traffic() {
    let s = mesh("");
    let obs = calls(
        &s,
        &[("outbound|80||cart.shop.svc.cluster.local", "10.96.0.2")],
    );
    let p = pass(&s, &obs, &mut Ledger::default(), 0, None);
    assert_eq!(p.widen.len(), 1);
    assert_eq!(
        p.widen[0].change,
        Change::Create {
            hosts: vec![CART.into()]
        }
    );
    assert!(p.narrow.is_empty());
    // No Sidecar yet: the implicit scope imports everything, nothing is outside.
    assert!(p.outside.is_empty());
}

#[test]
fn a_call_outside_the_scope_widens_it_and_says_what_it_met() {
    let s = mesh(&managed(&[CART]));
    let obs = calls(
        &s,
        &[
            ("outbound|80||cart.shop.svc.cluster.local", "10.96.0.2"),
            ("PassthroughCluster", "10.96.0.3"),
        ],
    );
    let p = pass(&s, &obs, &mut Ledger::default(), 0, None);
    assert_eq!(p.widen.len(), 1, "{:?}", p.widen);
    let w = &p.widen[0];
    assert_eq!(
        w.change,
        Change::Widen {
            added: vec![PAY.into()]
        }
    );
    assert_eq!(hosts(w), vec![CART.to_string(), PAY.to_string()]);
    assert_eq!(w.outside.len(), 1);
    assert_eq!(w.outside[0].host, "pay.shop.svc.cluster.local");
    // The mesh default is ALLOW_ANY.
    assert_eq!(w.outside[0].meets, Meets::Passthrough);
    assert_eq!(p.outside.len(), 1);
}

#[test]
fn traffic_that_stays_in_scope_writes_nothing() {
    let s = mesh(&managed(&[CART]));
    let obs = calls(
        &s,
        &[("outbound|80||cart.shop.svc.cluster.local", "10.96.0.2")],
    );
    let mut ledger = Ledger::default();
    for now in [0, 30, 60] {
        let p = pass(&s, &obs, &mut ledger, now, Some(3600));
        assert!(p.widen.is_empty() && p.narrow.is_empty(), "{p:?}");
    }
}

#[test]
fn hosts_no_traffic_reached_for_prune_after_are_narrowed_and_only_those() {
    let s = mesh(&managed(&[CART, PAY]));
    let to_cart = calls(
        &s,
        &[("outbound|80||cart.shop.svc.cluster.local", "10.96.0.2")],
    );
    let mut ledger = Ledger::default();
    // Both hosts are first known at 0; cart is called every pass.
    for now in [0, 30, 59] {
        let p = pass(&s, &to_cart, &mut ledger, now, Some(60));
        assert!(p.narrow.is_empty(), "at {now}: {:?}", p.narrow);
    }
    let p = pass(&s, &to_cart, &mut ledger, 60, Some(60));
    assert!(p.widen.is_empty());
    assert_eq!(p.narrow.len(), 1);
    assert_eq!(
        p.narrow[0].change,
        Change::Narrow {
            removed: vec![PAY.into()]
        }
    );
    assert_eq!(hosts(&p.narrow[0]), vec![CART.to_string()]);
    // The annotation verify compares with says the same.
    let ann = p.narrow[0].sidecar.metadata.annotations.as_ref().unwrap();
    assert!(ann[recommend::EGRESS_ANNOTATION].contains(CART));
    assert!(!ann[recommend::EGRESS_ANNOTATION].contains(PAY));
}

#[test]
fn a_host_called_again_before_prune_after_is_kept() {
    let s = mesh(&managed(&[CART, PAY]));
    let to_cart = calls(
        &s,
        &[("outbound|80||cart.shop.svc.cluster.local", "10.96.0.2")],
    );
    let to_both = calls(
        &s,
        &[
            ("outbound|80||cart.shop.svc.cluster.local", "10.96.0.2"),
            ("outbound|80||pay.shop.svc.cluster.local", "10.96.0.3"),
        ],
    );
    let mut ledger = Ledger::default();
    pass(&s, &to_cart, &mut ledger, 0, Some(60));
    pass(&s, &to_both, &mut ledger, 50, Some(60));
    let p = pass(&s, &to_cart, &mut ledger, 100, Some(60));
    assert!(p.narrow.is_empty(), "{:?}", p.narrow);
    let p = pass(&s, &to_cart, &mut ledger, 110, Some(60));
    assert_eq!(p.narrow.len(), 1);
}

#[test]
fn a_source_error_restarts_the_prune_clock_of_every_host() {
    let s = mesh(&managed(&[CART, PAY]));
    let to_cart = calls(
        &s,
        &[("outbound|80||cart.shop.svc.cluster.local", "10.96.0.2")],
    );
    let mut ledger = Ledger::default();
    pass(&s, &to_cart, &mut ledger, 0, Some(60));
    // pay was last known at 0; at 40 a pass's source failed: it read
    // nothing, which is no evidence that pay went unseen meanwhile.
    ledger.restart_clock(40);
    assert_eq!(
        ledger.last_seen(&SidecarRef::new("shop", "web-deployment"), PAY),
        Some(40)
    );
    let p = pass(&s, &to_cart, &mut ledger, 60, Some(60));
    assert!(
        p.narrow.is_empty(),
        "narrowed 20 s after a failed read: {:?}",
        p.narrow
    );
    let p = pass(&s, &to_cart, &mut ledger, 99, Some(60));
    assert!(p.narrow.is_empty(), "{:?}", p.narrow);
    let p = pass(&s, &to_cart, &mut ledger, 100, Some(60));
    assert_eq!(
        p.narrow[0].change,
        Change::Narrow {
            removed: vec![PAY.into()]
        }
    );
    // A restart never moves a later sighting back.
    let mut ledger = Ledger::default();
    pass(&s, &to_cart, &mut ledger, 50, Some(60));
    ledger.restart_clock(10);
    assert_eq!(
        ledger.last_seen(&SidecarRef::new("shop", "web-deployment"), CART),
        Some(50)
    );
}

#[test]
fn a_users_sidecar_selecting_a_managed_workload_is_a_conflict_said_once_per_change() {
    let own = "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: web-own\n  namespace: shop\nspec:\n  workloadSelector:\n    labels: {app: web}\n  egress:\n  - hosts: [\"./*\"]\n";
    let both = mesh(&(managed(&[CART]) + own));
    let to_cart = |s: &MeshSnapshot| {
        calls(
            s,
            &[("outbound|80||cart.shop.svc.cluster.local", "10.96.0.2")],
        )
    };
    let mut ledger = Ledger::default();
    let p = pass(&both, &to_cart(&both), &mut ledger, 0, None);
    assert_eq!(
        p.conflicts,
        vec![watch::Conflict {
            namespace: "shop".into(),
            workload: "Deployment/shop/web".into(),
            sidecars: vec!["web-deployment".into(), "web-own".into()],
            managed: vec!["web-deployment".into()],
        }]
    );
    // Said once while it lasts.
    let p = pass(&both, &to_cart(&both), &mut ledger, 10, None);
    assert!(p.conflicts.is_empty(), "{:?}", p.conflicts);
    // Gone, then back: said again.
    let alone = mesh(&managed(&[CART]));
    assert!(pass(&alone, &to_cart(&alone), &mut ledger, 20, None)
        .conflicts
        .is_empty());
    assert_eq!(
        pass(&both, &to_cart(&both), &mut ledger, 30, None)
            .conflicts
            .len(),
        1
    );
}

#[test]
fn included_hosts_are_never_narrowed() {
    let s = mesh(&managed(&[CART, PAY]));
    let to_cart = calls(
        &s,
        &[("outbound|80||cart.shop.svc.cluster.local", "10.96.0.2")],
    );
    let mut ledger = Ledger::default();
    let opts = RecommendOptions {
        include: vec![PAY.into()],
        ..Default::default()
    };
    let settings = |now| PassSettings {
        now,
        prune_after: Some(10),
        include: vec![PAY.into()],
    };
    for now in [0, 100] {
        let recs = recommend::recommend(&s, &to_cart, &[web(&s)], &opts);
        let p = watch::plan(&s, &to_cart, &recs, &mut ledger, &settings(now));
        assert!(p.narrow.is_empty(), "{:?}", p.narrow);
    }
}

#[test]
fn silence_is_not_evidence_an_idle_workload_keeps_its_scope() {
    let s = mesh(&managed(&[CART, PAY]));
    let mut ledger = Ledger::default();
    for now in [0, 1000, 100_000] {
        let p = pass(&s, &Observations::default(), &mut ledger, now, Some(60));
        assert!(p.widen.is_empty() && p.narrow.is_empty(), "{p:?}");
    }
}

#[test]
fn a_user_owned_sidecar_is_reported_once_per_change_and_never_written() {
    let mine = "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: mine\n  namespace: shop\nspec:\n  workloadSelector:\n    labels: {app: web}\n  egress:\n  - hosts: [\"istio-system/*\"]\n";
    let s = mesh(mine);
    let to_cart = calls(&s, &[("PassthroughCluster", "10.96.0.2")]);
    let to_both = calls(
        &s,
        &[
            ("PassthroughCluster", "10.96.0.2"),
            ("PassthroughCluster", "10.96.0.3"),
        ],
    );
    let mut ledger = Ledger::default();
    let p = pass(&s, &to_cart, &mut ledger, 0, Some(1));
    assert!(p.widen.is_empty() && p.narrow.is_empty());
    assert_eq!(p.user_owned.len(), 1);
    assert_eq!(p.user_owned[0].sidecar, "mine");
    assert_eq!(p.user_owned[0].missing, vec![CART.to_string()]);
    assert!(pass(&s, &to_cart, &mut ledger, 10, Some(1))
        .user_owned
        .is_empty());
    let p = pass(&s, &to_both, &mut ledger, 20, Some(1));
    assert_eq!(
        p.user_owned[0].missing,
        vec![CART.to_string(), PAY.to_string()]
    );
    assert_eq!(p.outside.len(), 2);
}

#[test]
fn hints_give_a_first_scope_but_never_widen_an_existing_one() {
    use meshscope_shared::hints::ManifestHints;
    use meshscope_shared::inputs::Inputs;
    use meshscope_shared::Options;
    use meshscope_test_support::fixtures::yaml_docs;
    // web's template names pay in its environment.
    let with_env = |extra: &str| {
        let yaml = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {istio-injection: enabled}\n".to_string()
            + &deploy("web", "10.0.0.1").replace(
                "containers: [{name: c, image: x}]",
                "containers: [{name: c, image: x, env: [{name: PAY_URL, value: \"http://pay.shop.svc.cluster.local/charge\"}]}]",
            )
            + &service("cart", "10.96.0.2")
            + &service("pay", "10.96.0.3")
            + extra;
        let mut inputs = Inputs {
            manifest_hints: true,
            ..Default::default()
        };
        for v in yaml_docs(&yaml) {
            inputs.add(v).unwrap();
        }
        let s = MeshSnapshot::build(&inputs, Options::default()).unwrap();
        let hints = ManifestHints::collect(&inputs, &s);
        (s, hints)
    };
    let opts = |hints: ManifestHints| RecommendOptions {
        manifest_hints: Some(hints),
        allow_idle: true,
        ..Default::default()
    };
    let settings = |now| PassSettings {
        now,
        prune_after: Some(60),
        include: Vec::new(),
    };
    // No Sidecar yet: the hints are its first scope.
    let (s, hints) = with_env("");
    let recs = recommend::recommend(&s, &Observations::default(), &[web(&s)], &opts(hints));
    let p = watch::plan(
        &s,
        &Observations::default(),
        &recs,
        &mut Ledger::default(),
        &settings(0),
    );
    assert_eq!(p.widen.len(), 1, "{p:?}");
    assert_eq!(
        p.widen[0].change,
        Change::Create {
            hosts: vec![PAY.into()]
        }
    );
    // A Sidecar without pay (narrowed away): web calls cart, in scope, and
    // the hint does not bring pay back.
    let (s, hints) = with_env(&managed(&[CART]));
    let obs = calls(
        &s,
        &[("outbound|80||cart.shop.svc.cluster.local", "10.96.0.2")],
    );
    let recs = recommend::recommend(&s, &obs, &[web(&s)], &opts(hints));
    let p = watch::plan(&s, &obs, &recs, &mut Ledger::default(), &settings(0));
    assert!(p.widen.is_empty(), "{:?}", p.widen);
}

#[test]
fn a_virtual_service_destination_is_not_narrowed_before_the_host_it_routes() {
    // cart's VirtualService sends 10 % to pay: the proxy's route for cart
    // names pay's cluster. istiod imports a VirtualService's destinations
    // whatever the hosts (docs/istio-semantics.md §2), so a scope written
    // without pay would not drop pay's cluster: it would disagree with what
    // the proxy holds, and the next call to cart would widen it back. pay
    // goes with cart, in the same write.
    let vs = "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: cart\n  namespace: shop\nspec:\n  hosts: [cart.shop.svc.cluster.local]\n  http:\n  - route:\n    - destination: {host: cart.shop.svc.cluster.local}\n      weight: 90\n    - destination: {host: pay.shop.svc.cluster.local}\n      weight: 10\n";
    let ship = "shop/ship.shop.svc.cluster.local";
    let s = mesh(&(managed(&[CART, PAY, ship]) + vs + &service("ship", "10.96.0.4")));
    let to_cart = calls(
        &s,
        &[
            ("outbound|80||cart.shop.svc.cluster.local", "10.96.0.2"),
            ("outbound|80||ship.shop.svc.cluster.local", "10.96.0.4"),
        ],
    );
    let to_ship = calls(
        &s,
        &[("outbound|80||ship.shop.svc.cluster.local", "10.96.0.4")],
    );
    let mut ledger = Ledger::default();
    // Every host is first known at 0; cart and ship are called (pay
    // required by cart's routing) until 60, and never pay itself.
    for now in [0, 30, 60] {
        let p = pass(&s, &to_cart, &mut ledger, now, Some(60));
        assert!(p.narrow.is_empty(), "at {now}: {:?}", p.narrow);
    }
    // At 70 web calls only ship: cart was seen at 60, so it stays; pay must
    // stay with it.
    // pay counts as seen whenever cart's routing requires it.
    let key = SidecarRef::new("shop", "web-deployment");
    assert_eq!(ledger.last_seen(&key, PAY), Some(60));
    let p = pass(&s, &to_ship, &mut ledger, 70, Some(60));
    assert!(p.narrow.is_empty(), "{:?}", p.narrow);
    // At 120 both go, in one write (one istiod push cycle).
    let p = pass(&s, &to_ship, &mut ledger, 120, Some(60));
    assert_eq!(p.narrow.len(), 1);
    assert_eq!(
        p.narrow[0].change,
        Change::Narrow {
            removed: vec![CART.into(), PAY.into()]
        }
    );
}

/// A watcher that starts, or leads after another, starts from the
/// Sidecars' own evidence: web's lines at or before the end of its managed
/// Sidecar's window are applied already and skipped; web's later lines and
/// other workloads' lines are read. A user's Sidecar, or a managed one
/// without a window, covers nothing.
#[test]
fn lines_a_managed_sidecars_evidence_covers_are_skipped_at_a_start() {
    let window = "  annotations: {meshscope.io/window: '2026-01-01T00:00:00.000Z/2026-01-01T00:05:00.000Z'}\n";
    let with_window = managed(&[CART]).replace("spec:\n", &format!("{window}spec:\n"));
    let s = mesh(&with_window);
    let applied = watch::applied(&s);
    assert_eq!(applied.0.keys().copied().collect::<Vec<_>>(), [web(&s)]);
    let at = |t: &str, src: &str, ip: &str| {
        access_log::line(src, "a", "PassthroughCluster", &format!("{ip}:80"))
            .replace("2026-01-01T00:00:00.000Z", t)
    };
    let lines = [
        at("2026-01-01T00:04:59.000Z", "10.0.0.1", "10.96.0.3"),
        at("2026-01-01T00:05:00.000Z", "10.0.0.1", "10.96.0.3"),
        at("2026-01-01T00:05:01.000Z", "10.0.0.1", "10.96.0.2"),
        at("2026-01-01T00:01:00.000Z", "10.0.0.2", "10.96.0.3"),
    ];
    let mut ingest = LogIngest::new(&s, "access-log").applied(Some(&applied));
    for l in &lines {
        ingest.line(l);
    }
    let obs = ingest.finish();
    assert_eq!(obs.stats.already_applied, 2);
    let called = |w: WorkloadId| -> Vec<String> {
        obs.of(w)
            .map(|t| t.outbound.keys().map(|(h, _)| h.clone()).collect())
            .unwrap_or_default()
    };
    assert_eq!(called(web(&s)), ["cart.shop.svc.cluster.local"]);
    let cart = s
        .find_workload(&WorkloadKind::Deployment, "shop", "cart")
        .unwrap();
    assert_eq!(called(cart), ["pay.shop.svc.cluster.local"]);

    let users = with_window.replace(
        "app.kubernetes.io/managed-by: kubectl-meshscope",
        "team: web",
    );
    assert!(watch::applied(&mesh(&users)).0.is_empty());
    assert!(watch::applied(&mesh(&managed(&[CART]))).0.is_empty());
}

/// web's calls through PassthroughCluster at `time`, repeated `n` times.
fn calls_at(s: &MeshSnapshot, time: &str, to: &[&str], n: usize) -> Observations {
    let mut lines = Vec::new();
    for ip in to {
        for _ in 0..n {
            lines.push(
                access_log::line("10.0.0.1", "a", "PassthroughCluster", &format!("{ip}:80"))
                    .replace("2026-01-01T00:00:00.000Z", time),
            );
        }
    }
    observe(s, &lines.join(""))
}

/// The mesh with web's Sidecar as one recommendation made it.
fn with_recommended(obs_of: impl Fn(&MeshSnapshot) -> Observations) -> MeshSnapshot {
    let s = mesh("");
    let recs = recommend::recommend(&s, &obs_of(&s), &[web(&s)], &RecommendOptions::default());
    let yaml = serde_yaml::to_string(recs[0].sidecar().unwrap()).unwrap();
    mesh(&format!("---\n{yaml}"))
}

fn evidence(r: &recommend::Recommendation) -> (String, String) {
    let a = r.sidecar().unwrap().metadata.annotations.clone().unwrap();
    (
        a["meshscope.io/window"].clone(),
        a["meshscope.io/requests"].clone(),
    )
}

/// issue #35 items 4 and 5: newer traffic on the same edges changes only
/// the evidence, which is no change (nothing to write, no drift); a change
/// of scope keeps the evidence cumulative over the reads after the live
/// window, and a read of the same window again replaces it.
#[test]
fn evidence_alone_is_no_change_and_grows_with_the_reads_after_it() {
    let s = with_recommended(|s| calls_at(s, "2026-01-01T00:00:00.000Z", &["10.96.0.2"], 3));
    let opts = RecommendOptions::default();
    let later = calls_at(&s, "2026-01-02T00:00:00.000Z", &["10.96.0.2"], 7);
    let recs = recommend::recommend(&s, &later, &[web(&s)], &opts);
    assert!(recs[0].unchanged(), "{:?}", recs[0].outcome);

    let wider = calls_at(
        &s,
        "2026-01-02T00:00:00.000Z",
        &["10.96.0.2", "10.96.0.3"],
        2,
    );
    let recs = recommend::recommend(&s, &wider, &[web(&s)], &opts);
    assert!(!recs[0].unchanged());
    assert_eq!(
        evidence(&recs[0]),
        (
            "2026-01-01T00:00:00.000Z/2026-01-02T00:00:00.000Z".to_string(),
            "7".to_string()
        ),
        "3 requests before, 4 now"
    );

    let again = calls_at(
        &s,
        "2026-01-01T00:00:00.000Z",
        &["10.96.0.2", "10.96.0.3"],
        2,
    );
    let recs = recommend::recommend(&s, &again, &[web(&s)], &opts);
    assert_eq!(
        evidence(&recs[0]),
        (
            "2026-01-01T00:00:00.000Z/2026-01-01T00:00:00.000Z".to_string(),
            "4".to_string()
        ),
        "the same window read again"
    );
}
