//! Selectors that stay true: generated selectors start from the workload's
//! own `spec.selector`, never hold labels that change per release, run or
//! pod, and never select another workload's pods; a managed Sidecar that
//! selects a workload it was not generated for is MS0012; long names fit
//! in labels and Sidecar names.

use meshscope_test_support::fixtures::{labels, snap};

use meshscope_shared::audit::{self, AuditScope};
use meshscope_shared::labels::{is_dns_subdomain, is_label_value, UNSTABLE_LABELS};
use meshscope_shared::observe::Observations;
use meshscope_shared::recommend::{
    self, generated_for, orphaned, sidecar_name, stable_selector, Action, Outcome,
    RecommendOptions, NO_STABLE_SELECTOR, WORKLOAD_NAME_FULL_ANNOTATION, WORKLOAD_NAME_LABEL,
};
use meshscope_shared::snapshot::{Labels, MeshSnapshot, WorkloadId, WorkloadKind};

const NS: &str = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {istio-injection: enabled}\n";

fn flow(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}: '{v}'")).collect();
    format!("{{{}}}", inner.join(", "))
}

/// A pod of a controller, with `extra` labels the controller adds.
fn pod(name: &str, owner: (&str, &str), labels: &[(&str, &str)], ip: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: shop\n  labels: {}\n  ownerReferences:\n  - {{apiVersion: v1, kind: {}, name: {}, uid: u, controller: true}}\nspec:\n  containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]\nstatus:\n  podIP: {ip}\n",
        flow(labels),
        owner.0,
        owner.1
    )
}

/// A Deployment with one running pod (which also carries pod-template-hash).
fn deploy(name: &str, sel: &[(&str, &str)], tpl: &[(&str, &str)], ip: &str) -> String {
    format!(
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: shop\nspec:\n  selector:\n    matchLabels: {}\n  template:\n    metadata:\n      labels: {}\n    spec:\n      containers: [{{name: c, image: x}}]\n",
        flow(sel),
        flow(tpl)
    ) + &deployment_pod(name, tpl, ip)
}

/// The pod of Deployment `name`, owned by its ReplicaSet
/// `<name>-<pod-template-hash>`.
fn deployment_pod(name: &str, tpl: &[(&str, &str)], ip: &str) -> String {
    let mut pod_labels = tpl.to_vec();
    pod_labels.push(("pod-template-hash", "5d8f7c9b4f"));
    pod(
        &format!("{name}-5d8f7c9b4f-x7k2p"),
        ("ReplicaSet", &format!("{name}-5d8f7c9b4f")),
        &pod_labels,
        ip,
    )
}

fn managed_sidecar(name: &str, sel: &[(&str, &str)], for_workload: Option<&str>) -> String {
    let meta = match for_workload {
        Some(w) => format!(
            "{{app.kubernetes.io/managed-by: kubectl-meshscope, meshscope.io/workload-kind: Deployment, meshscope.io/workload-name: {w}}}"
        ),
        None => "{app.kubernetes.io/managed-by: kubectl-meshscope}".to_string(),
    };
    format!(
        "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: {name}\n  namespace: shop\n  creationTimestamp: '2025-01-01T00:00:00Z'\n  labels: {meta}\nspec:\n  workloadSelector:\n    labels: {}\n  egress:\n  - hosts: ['~/*']\n",
        flow(sel)
    )
}

fn w(s: &MeshSnapshot, kind: WorkloadKind, name: &str) -> WorkloadId {
    s.find_workload(&kind, "shop", name)
        .unwrap_or_else(|| panic!("{kind} {name}"))
}

fn dep(s: &MeshSnapshot, name: &str) -> WorkloadId {
    w(s, WorkloadKind::Deployment, name)
}

fn idle() -> RecommendOptions {
    RecommendOptions {
        allow_idle: true,
        ..Default::default()
    }
}

fn selector_of(r: &recommend::Recommendation) -> Labels {
    r.sidecar()
        .unwrap_or_else(|| panic!("a Sidecar: {:?}", r.outcome))
        .spec
        .workload_selector
        .as_ref()
        .unwrap()
        .labels
        .clone()
}

fn audit_all(s: &MeshSnapshot) -> Vec<audit::Finding> {
    audit::audit(
        s,
        None,
        &AuditScope {
            namespaces: None,
            workloads: None,
        },
    )
}

fn bookinfo_reviews() -> String {
    let mut y = NS.to_string();
    for (i, v) in ["v1", "v2", "v3"].iter().enumerate() {
        let l = [("app", "reviews"), ("version", *v)];
        y += &deploy(
            &format!("reviews-{v}"),
            &l,
            &l,
            &format!("10.0.0.{}", i + 1),
        );
    }
    let l = [("app", "ratings"), ("version", "v1")];
    y + &deploy("ratings-v1", &l, &l, "10.0.0.9")
}

#[test]
fn per_version_deployments_get_their_own_match_labels_not_version_alone() {
    let s = snap(&bookinfo_reviews());
    // `version: v2` alone is unique today; tomorrow's ratings-v2 would be
    // scoped by it. The Deployment's own selector is what stays true.
    for v in ["v1", "v2", "v3"] {
        assert_eq!(
            stable_selector(&s, dep(&s, &format!("reviews-{v}"))).unwrap(),
            labels(&[("app", "reviews"), ("version", v)])
        );
    }
}

#[test]
fn a_canary_told_apart_only_by_its_release_label_is_skipped_with_the_reason() {
    let y = NS.to_string()
        + &deploy(
            "web",
            &[("app", "web"), ("track", "stable")],
            &[
                ("app", "web"),
                ("track", "stable"),
                ("app.kubernetes.io/version", "1.2.3"),
            ],
            "10.0.0.1",
        )
        + &deploy(
            "web-canary",
            &[("app", "web")],
            &[("app", "web"), ("app.kubernetes.io/version", "1.2.4")],
            "10.0.0.2",
        );
    let s = snap(&y);
    assert_eq!(
        stable_selector(&s, dep(&s, "web")).unwrap(),
        labels(&[("app", "web"), ("track", "stable")])
    );
    let why = stable_selector(&s, dep(&s, "web-canary")).unwrap_err();
    assert_eq!(
        why,
        "no stable selector: its stable labels (app=web) also select the pods of Deployment web; only labels that do not stay true tell them apart (app.kubernetes.io/version changes per release)"
    );
    let r = recommend::recommend(
        &s,
        &Observations::default(),
        &[dep(&s, "web-canary")],
        &idle(),
    );
    assert!(
        matches!(&r[0].outcome, Outcome::Skipped(m) if *m == why),
        "{:?}",
        r[0].outcome
    );
}

#[test]
fn version_is_used_only_from_the_immutable_selector() {
    let y = NS.to_string()
        + &deploy(
            "web",
            &[("app", "web")],
            &[("app", "web"), ("version", "v1")],
            "10.0.0.1",
        )
        + &deploy(
            "web-v2",
            &[("app", "web")],
            &[("app", "web"), ("version", "v2")],
            "10.0.0.2",
        );
    let s = snap(&y);
    let why = stable_selector(&s, dep(&s, "web")).unwrap_err();
    assert!(
        why.ends_with("(version may change per release (not in spec.selector))"),
        "{why}"
    );
}

#[test]
fn bare_pods_and_jobs_keep_their_labels_for_life_so_version_is_used_with_their_app() {
    let bare = |name: &str, v: &str, ip: &str| {
        format!("---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: shop\n  labels: {{app: api, version: {v}}}\nspec:\n  containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]\nstatus:\n  podIP: {ip}\n")
    };
    let s = snap(
        &(NS.to_string() + &bare("api-0", "v1", "10.0.0.1") + &bare("api-1", "v2", "10.0.0.2")),
    );
    assert_eq!(
        stable_selector(&s, w(&s, WorkloadKind::Pod, "api-0")).unwrap(),
        labels(&[("app", "api"), ("version", "v1")])
    );
}

#[test]
fn labels_set_per_pod_per_revision_and_per_run_are_never_used() {
    // A StatefulSet whose pods differ only in per-pod labels, a Job (whose
    // generated selector is per run) and a CronJob's Job, and a bare pod.
    let mut y = NS.to_string();
    y += "---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\n  namespace: shop\nspec:\n  selector:\n    matchLabels: {app: db}\n  template:\n    metadata:\n      labels: {app: db}\n    spec:\n      containers: [{name: c, image: x}]\n";
    for i in 0..2 {
        y += &pod(
            &format!("db-{i}"),
            ("StatefulSet", "db"),
            &[
                ("app", "db"),
                ("controller-revision-hash", "db-7c9d"),
                ("statefulset.kubernetes.io/pod-name", &format!("db-{i}")),
                ("apps.kubernetes.io/pod-index", &i.to_string()),
            ],
            &format!("10.0.1.{i}"),
        );
    }
    let job_pod = |job: &str, uid: &str, app: &str, ip: &str| {
        pod(
            &format!("{job}-abcde"),
            ("Job", job),
            &[
                ("app", app),
                ("batch.kubernetes.io/controller-uid", uid),
                ("batch.kubernetes.io/job-name", job),
                ("controller-uid", uid),
                ("job-name", job),
            ],
            ip,
        )
    };
    y += "---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  namespace: shop\nspec:\n  selector:\n    matchLabels: {batch.kubernetes.io/controller-uid: '1111'}\n  template:\n    metadata:\n      labels: {app: migrate, batch.kubernetes.io/controller-uid: '1111', batch.kubernetes.io/job-name: migrate, controller-uid: '1111', job-name: migrate}\n    spec:\n      containers: [{name: c, image: x}]\n";
    y += &job_pod("migrate", "1111", "migrate", "10.0.2.1");
    y += "---\napiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: report\n  namespace: shop\nspec:\n  schedule: '@hourly'\n  jobTemplate:\n    spec:\n      template:\n        metadata:\n          labels: {app: report}\n        spec:\n          containers: [{name: c, image: x}]\n";
    y += "---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: report-2900\n  namespace: shop\n  ownerReferences:\n  - {apiVersion: batch/v1, kind: CronJob, name: report, uid: c, controller: true}\nspec:\n  selector:\n    matchLabels: {batch.kubernetes.io/controller-uid: '2222'}\n  template:\n    metadata:\n      labels: {app: report, batch.kubernetes.io/controller-uid: '2222', batch.kubernetes.io/job-name: report-2900, controller-uid: '2222', job-name: report-2900}\n    spec:\n      containers: [{name: c, image: x}]\n";
    y += &job_pod("report-2900", "2222", "report", "10.0.2.2");
    y += "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: debug\n  namespace: shop\n  labels: {run: debug, pod-template-hash: x}\nspec:\n  containers: [{name: c, image: x}, {name: istio-proxy, image: proxyv2}]\nstatus:\n  podIP: 10.0.3.1\n";
    let s = snap(&y);
    let cases = [
        (WorkloadKind::StatefulSet, "db", labels(&[("app", "db")])),
        (WorkloadKind::Job, "migrate", labels(&[("app", "migrate")])),
        (
            WorkloadKind::CronJob,
            "report",
            labels(&[("app", "report")]),
        ),
        (WorkloadKind::Pod, "debug", labels(&[("run", "debug")])),
    ];
    for (kind, name, want) in cases {
        let sel = stable_selector(&s, w(&s, kind.clone(), name)).unwrap();
        assert_eq!(sel, want, "{kind} {name}");
        assert!(
            sel.keys()
                .all(|k| !UNSTABLE_LABELS.iter().any(|u| u.key == k)),
            "{sel:?}"
        );
    }
}

#[test]
fn a_job_told_apart_only_by_its_run_labels_is_skipped() {
    let mut y = NS.to_string();
    for (job, uid, ip) in [("load-1", "1", "10.0.2.1"), ("load-2", "2", "10.0.2.2")] {
        y += &format!("---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {job}\n  namespace: shop\nspec:\n  template:\n    metadata:\n      labels: {{app: load, job-name: {job}, controller-uid: '{uid}'}}\n    spec:\n      containers: [{{name: c, image: x}}]\n");
        y += &pod(
            &format!("{job}-x"),
            ("Job", job),
            &[("app", "load"), ("job-name", job), ("controller-uid", uid)],
            ip,
        );
    }
    let s = snap(&y);
    let why = stable_selector(&s, w(&s, WorkloadKind::Job, "load-1")).unwrap_err();
    assert!(why.starts_with(NO_STABLE_SELECTOR), "{why}");
    assert!(
        why.contains("controller-uid changes per run") && why.contains("job-name changes per run"),
        "{why}"
    );
}

#[test]
fn a_managed_sidecar_with_an_unstable_selector_is_updated_to_a_stable_one() {
    let y = bookinfo_reviews()
        + &managed_sidecar(
            "reviews-v2-deployment-meshscope",
            &[("version", "v2"), ("pod-template-hash", "5d8f7c9b4f")],
            Some("reviews-v2"),
        );
    let s = snap(&y);
    let r = recommend::recommend(
        &s,
        &Observations::default(),
        &[dep(&s, "reviews-v2")],
        &idle(),
    );
    match &r[0].outcome {
        Outcome::Sidecar { action, object, .. } => {
            assert_eq!(*action, Action::Update);
            assert_eq!(
                object.metadata.name.as_deref(),
                Some("reviews-v2-deployment-meshscope")
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        selector_of(&r[0]),
        labels(&[("app", "reviews"), ("version", "v2")])
    );
    assert_eq!(
        r[0].notes,
        ["selector pod-template-hash=5d8f7c9b4f,version=v2 replaced by app=reviews,version=v2 (pod-template-hash changes per revision)"]
    );

    // Once it is stable, applying again changes nothing.
    let written = serde_yaml::to_string(r[0].sidecar().unwrap()).unwrap();
    let s = snap(&(bookinfo_reviews() + "---\n" + &written));
    let r = recommend::recommend(
        &s,
        &Observations::default(),
        &[dep(&s, "reviews-v2")],
        &idle(),
    );
    assert!(
        matches!(
            &r[0].outcome,
            Outcome::Sidecar {
                action: Action::Unchanged,
                ..
            }
        ),
        "{:?}",
        r[0].outcome
    );
    assert!(r[0].notes.is_empty(), "{:?}", r[0].notes);
}

#[test]
fn with_no_stable_selector_an_existing_managed_sidecar_is_left_and_the_skip_says_so() {
    let y = NS.to_string()
        + &deploy(
            "web",
            &[("app", "web")],
            &[("app", "web"), ("app.kubernetes.io/version", "1")],
            "10.0.0.1",
        )
        + &deploy(
            "web-next",
            &[("app", "web")],
            &[("app", "web"), ("app.kubernetes.io/version", "2")],
            "10.0.0.2",
        )
        + &managed_sidecar(
            "web-deployment-meshscope",
            &[("app.kubernetes.io/version", "1")],
            Some("web"),
        );
    let s = snap(&y);
    let r = recommend::recommend(&s, &Observations::default(), &[dep(&s, "web")], &idle());
    match &r[0].outcome {
        Outcome::Skipped(why) => assert!(
            why.starts_with(NO_STABLE_SELECTOR)
                && why.ends_with("its Sidecar shop/web-deployment-meshscope is left as it is (selector app.kubernetes.io/version=1)"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
}

fn with_ratings_v2() -> String {
    let l = [("app", "ratings"), ("version", "v2")];
    bookinfo_reviews() + &deploy("ratings-v2", &l, &l, "10.0.0.10")
}

/// reviews-v2's Sidecar from before: `version: v2` alone. ratings-v2 came later.
fn overlap() -> String {
    with_ratings_v2()
        + &managed_sidecar(
            "reviews-v2-deployment-meshscope",
            &[("version", "v2")],
            Some("reviews-v2"),
        )
}

#[test]
fn a_managed_sidecar_selecting_another_workload_is_ms0012() {
    let s = snap(&overlap());
    let f: Vec<audit::Finding> = audit_all(&s)
        .into_iter()
        .filter(|f| f.code.as_str() == "MS0012")
        .collect();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        (f[0].kind.as_str(), f[0].name.as_str()),
        ("Deployment", "ratings-v2")
    );
    assert_eq!(f[0].severity, audit::Severity::Warning);
    assert_eq!(
        f[0].message,
        "Deployment shop/ratings-v2 is scoped by the Sidecar generated for Deployment reviews-v2; Sidecar shop/reviews-v2-deployment-meshscope selects its pods, so it runs with another workload's scope; re-apply the namespace's Sidecars: kubectl meshscope apply -n shop --from-pod-logs"
    );
    assert!(audit::code_doc("MS0012").is_some());
}

#[test]
fn overlaps_are_resolved_and_every_name_is_emitted_once() {
    let s = snap(&overlap());
    let all: Vec<WorkloadId> = s.sidecar_workloads().collect();
    let r = recommend::recommend(&s, &Observations::default(), &all, &idle());
    let mut names: Vec<String> = r
        .iter()
        .filter_map(|r| r.sidecar()?.metadata.name.clone())
        .collect();
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "{names:?}");
    assert_eq!(n, all.len());
    let by = |name: &str| r.iter().find(|r| r.workloads == [dep(&s, name)]).unwrap();
    assert_eq!(
        selector_of(by("reviews-v2")),
        labels(&[("app", "reviews"), ("version", "v2")])
    );
    let ratings = by("ratings-v2");
    assert_eq!(
        ratings.sidecar().unwrap().metadata.name.as_deref(),
        Some("ratings-v2-deployment-meshscope")
    );
    assert_eq!(
        ratings.notes,
        ["Sidecar shop/reviews-v2-deployment-meshscope, generated for Deployment reviews-v2, selects it today; its recommended selector no longer does"]
    );

    // Recommending ratings-v2 alone: the overlap stays, and it says how to end it.
    let r = recommend::recommend(
        &s,
        &Observations::default(),
        &[dep(&s, "ratings-v2")],
        &idle(),
    );
    assert_eq!(
        r[0].notes,
        ["MS0012: Sidecar shop/reviews-v2-deployment-meshscope, generated for Deployment reviews-v2, also selects it and is the one istiod applies; re-apply it: kubectl meshscope apply -n shop --workload deployment/reviews-v2"]
    );

    // After applying everything (the old Sidecar replaced by its update),
    // nothing overlaps.
    let mut y = with_ratings_v2();
    let r = recommend::recommend(&s, &Observations::default(), &all, &idle());
    for rec in &r {
        y += "---\n";
        y += &serde_yaml::to_string(rec.sidecar().unwrap()).unwrap();
    }
    let s2 = snap(&y);
    let findings = audit_all(&s2);
    assert!(
        !findings
            .iter()
            .any(|f| f.code.as_str() == "MS0012" || f.code.as_str() == "MS0004"),
        "{findings:?}"
    );
}

#[test]
fn a_sidecar_relabelled_for_another_workload_is_not_emitted_twice() {
    // An older meshscope updated reviews-v2's Sidecar for ratings-v2 and
    // relabelled it: both would claim that name.
    let y = with_ratings_v2()
        + &managed_sidecar(
            "reviews-v2-deployment-meshscope",
            &[("version", "v2")],
            Some("ratings-v2"),
        );
    let s = snap(&y);
    let all: Vec<WorkloadId> = s.sidecar_workloads().collect();
    let r = recommend::recommend(&s, &Observations::default(), &all, &idle());
    let names: Vec<String> = r
        .iter()
        .filter_map(|r| r.sidecar()?.metadata.name.clone())
        .collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    assert!(names.contains(&"ratings-v2-deployment-meshscope".to_string()));
}

#[test]
fn a_managed_sidecar_naming_no_workload_is_adopted_by_one_workload_only() {
    // Managed, but without the workload labels, selecting two workloads.
    let s = snap(&(with_ratings_v2() + &managed_sidecar("legacy", &[("version", "v2")], None)));
    let all: Vec<WorkloadId> = s.sidecar_workloads().collect();
    let r = recommend::recommend(&s, &Observations::default(), &all, &idle());
    let by = |name: &str| r.iter().find(|r| r.workloads == [dep(&s, name)]).unwrap();
    let name = |r: &recommend::Recommendation| r.sidecar().unwrap().metadata.name.clone().unwrap();
    assert_eq!(name(by("reviews-v2")), "legacy");
    assert_eq!(
        selector_of(by("reviews-v2")),
        labels(&[("app", "reviews"), ("version", "v2")])
    );
    assert_eq!(name(by("ratings-v2")), "ratings-v2-deployment-meshscope");
    assert!(r.iter().all(|r| r.sidecar().is_some()), "none skipped");
}

#[test]
fn long_names_fit_labels_and_sidecar_names_and_are_read_back_in_full() {
    let long = format!("checkout-{}", "x".repeat(70));
    let l = [("app", "checkout")];
    let y = NS.to_string() + &deploy(&long, &l, &l, "10.0.0.1");
    let s = snap(&y);
    let r = recommend::recommend(&s, &Observations::default(), &[dep(&s, &long)], &idle());
    let sc = r[0].sidecar().unwrap();
    let value = &sc.metadata.labels.as_ref().unwrap()[WORKLOAD_NAME_LABEL];
    assert!(value.len() <= 63 && is_label_value(value), "{value}");
    assert_eq!(
        sc.metadata.annotations.as_ref().unwrap()[WORKLOAD_NAME_FULL_ANNOTATION],
        long
    );
    assert_eq!(
        generated_for(&sc.metadata),
        Some((WorkloadKind::Deployment, long.clone()))
    );
    assert!(!orphaned(&s, "shop", &sc.metadata));
    assert!(orphaned(&snap(NS), "shop", &sc.metadata));
    // A short name carries no annotation.
    let y = NS.to_string() + &deploy("cart", &[("app", "cart")], &[("app", "cart")], "10.0.0.2");
    let s = snap(&y);
    let r = recommend::recommend(&s, &Observations::default(), &[dep(&s, "cart")], &idle());
    let meta = &r[0].sidecar().unwrap().metadata;
    assert!(!meta
        .annotations
        .as_ref()
        .unwrap()
        .contains_key(WORKLOAD_NAME_FULL_ANNOTATION));
    assert_eq!(meta.labels.as_ref().unwrap()[WORKLOAD_NAME_LABEL], "cart");
}

#[test]
fn sidecar_names_are_valid_subdomains_and_distinct() {
    assert_eq!(
        sidecar_name(&WorkloadKind::Deployment, "reviews-v2"),
        "reviews-v2-deployment-meshscope"
    );
    let a = sidecar_name(&WorkloadKind::Deployment, &("a".repeat(250) + "1"));
    let b = sidecar_name(&WorkloadKind::Deployment, &("a".repeat(250) + "2"));
    assert!(is_dns_subdomain(&a) && is_dns_subdomain(&b), "{a}");
    assert_ne!(a, b);
    assert!(a.ends_with("-deployment-meshscope"));
    let odd = sidecar_name(&WorkloadKind::Other("Argo.Rollout".into()), "web");
    assert!(is_dns_subdomain(&odd), "{odd}");
}

#[test]
fn a_deleted_deployment_whose_pods_still_run_is_not_gone_until_they_are() {
    let l = [("app", "cart")];
    let y = NS.to_string() + &deploy("cart", &l, &l, "10.0.0.2");
    let s = snap(&y);
    let r = recommend::recommend(&s, &Observations::default(), &[dep(&s, "cart")], &idle());
    let meta = r[0].sidecar().unwrap().metadata.clone();
    // The Deployment is deleted; its ReplicaSet and pod wait for the
    // garbage collector (or the pod for its grace period). The Sidecar
    // still scopes that pod's proxy, so --prune keeps it.
    let pod_only = NS.to_string() + &deployment_pod("cart", &l, "10.0.0.2");
    assert!(!orphaned(&snap(&pod_only), "shop", &meta));
    let with_rs = pod_only
        + "---\napiVersion: apps/v1\nkind: ReplicaSet\nmetadata:\n  name: cart-5d8f7c9b4f\n  namespace: shop\n  ownerReferences:\n  - {apiVersion: apps/v1, kind: Deployment, name: cart, uid: u, controller: true}\nspec:\n  selector:\n    matchLabels: {app: cart, pod-template-hash: 5d8f7c9b4f}\n";
    assert!(!orphaned(&snap(&with_rs), "shop", &meta));
    // Once they are gone, so is the workload.
    assert!(orphaned(&snap(NS), "shop", &meta));
}
