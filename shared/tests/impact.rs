//! `explain::impact`: which proxies istiod 1.31 pushes a change to. Those
//! whose scope depends on the changed object (`DependsOnConfig`), and for
//! a Service or ServiceEntry also the proxies it selects, whose inbound
//! config comes from it (`filterRelevantUpdates` in
//! `pilot/pkg/xds/proxy_dependencies.go`; `docs/istio-semantics.md` §4).
//! `tests/tests/verify/impact.rs` holds the same rule to a real istiod.

use std::collections::{BTreeSet, HashMap};

use meshscope_shared::explain::{explain, impact, Impact, Target};
use meshscope_shared::snapshot::WorkloadKind;
use meshscope_test_support::fixtures::snap;

fn pod(ns: &str, name: &str, labels: &str, ip: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{{labels}}}\nspec:\n  containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]\nstatus:\n  podIP: {ip}\n"
    )
}

fn service(ns: &str, name: &str, selector: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  selector: {{{selector}}}\n  ports:\n  - {{name: http, port: 9080}}\n"
    )
}

/// A Sidecar for the pods labelled `app: <app>` that imports `hosts`.
fn sidecar(ns: &str, app: &str, hosts: &[&str]) -> String {
    let hosts: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    format!(
        "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: {app}\n  namespace: {ns}\nspec:\n  workloadSelector:\n    labels: {{app: {app}}}\n  egress:\n  - hosts: [{}]\n",
        hosts.join(", ")
    )
}

/// Bookinfo's shape in `shop`: productpage calls reviews (three versions)
/// and details; reviews calls ratings; ratings and details call nothing
/// but istio-system. A ServiceEntry with a workloadSelector puts the
/// ratings pods behind `ratings.mesh`, and `other` has a pod with the
/// reviews labels that no Service of `shop` selects.
fn mesh() -> String {
    let mut y = String::new();
    for (name, labels, ip) in [
        ("productpage-0", "app: productpage", "10.1.0.1"),
        ("reviews-v1-0", "app: reviews, version: v1", "10.1.0.2"),
        ("reviews-v2-0", "app: reviews, version: v2", "10.1.0.3"),
        ("reviews-v3-0", "app: reviews, version: v3", "10.1.0.4"),
        ("ratings-0", "app: ratings", "10.1.0.5"),
        ("details-0", "app: details", "10.1.0.6"),
    ] {
        y += &pod("shop", name, labels, ip);
    }
    y += &pod("other", "reviews-0", "app: reviews", "10.2.0.1");
    for name in ["productpage", "reviews", "ratings", "details"] {
        y += &service("shop", name, &format!("app: {name}"));
    }
    y += &service("other", "reviews", "app: reviews");
    y += &sidecar(
        "shop",
        "productpage",
        &[
            "./reviews.shop.svc.cluster.local",
            "./details.shop.svc.cluster.local",
        ],
    );
    y += &sidecar(
        "shop",
        "reviews",
        &["./ratings.shop.svc.cluster.local", "./ratings.mesh"],
    );
    y += &sidecar("shop", "ratings", &["istio-system/*"]);
    y += &sidecar("shop", "details", &["istio-system/*"]);
    y += &sidecar("other", "reviews", &["istio-system/*"]);
    y += "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: ratings-mesh\n  namespace: shop\nspec:\n  hosts: [ratings.mesh]\n  location: MESH_INTERNAL\n  resolution: STATIC\n  ports:\n  - {number: 9080, name: http, protocol: HTTP}\n  workloadSelector:\n    labels: {app: ratings}\n";
    y += "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: reviews\n  namespace: shop\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: reviews, subset: v1}\n";
    y += "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: reviews\n  namespace: shop\nspec:\n  host: reviews\n  subsets:\n  - {name: v1, labels: {version: v1}}\n";
    y
}

fn run(yaml: &str, spec: &str, ns: &str) -> Impact {
    let s = snap(yaml);
    let target = Target::parse(spec, ns).unwrap();
    impact(&s, &target, &HashMap::new(), &|_| true, None).unwrap()
}

fn keys<V>(m: &std::collections::BTreeMap<String, V>) -> BTreeSet<&str> {
    m.keys().map(String::as_str).collect()
}

fn set<'a>(items: &[&'a str]) -> BTreeSet<&'a str> {
    items.iter().copied().collect()
}

#[test]
fn a_service_change_reaches_its_callers_and_the_pods_it_selects() {
    let imp = run(&mesh(), "service/reviews", "shop");
    let now = &imp.now;
    assert_eq!(keys(&now.importing), set(&["Pod/shop/productpage-0"]));
    assert_eq!(
        keys(&now.serving),
        set(&[
            "Pod/shop/reviews-v1-0",
            "Pod/shop/reviews-v2-0",
            "Pod/shop/reviews-v3-0"
        ]),
        "their Sidecar does not import reviews, but their inbound config comes from it"
    );
    assert_eq!(now.proxies, 4);
    assert_eq!(keys(&now.workloads).len(), 4);
    // `other`'s reviews pod has the labels, but a Service selects only the
    // pods of its own namespace.
    assert!(!now.workloads.contains_key("Pod/other/reviews-0"));
    assert_eq!(imp.total_proxies, 7);
    // No proposal: after is now.
    assert_eq!(imp.after, imp.now);
}

#[test]
fn a_proxy_that_calls_and_serves_is_counted_once() {
    // Without Sidecars every proxy imports every service.
    let yaml: String = mesh()
        .split("---\n")
        .filter(|d| !d.contains("kind: Sidecar"))
        .map(|d| format!("---\n{d}"))
        .collect();
    let imp = run(&yaml, "service/reviews", "shop");
    assert_eq!(imp.now.proxies, 7);
    assert_eq!(keys(&imp.now.importing).len(), 7);
    assert_eq!(keys(&imp.now.serving).len(), 3);
    assert_eq!(imp.now.workloads.values().sum::<usize>(), 7);
}

#[test]
fn a_service_entry_with_a_workload_selector_reaches_the_pods_it_selects() {
    let imp = run(&mesh(), "serviceentry/ratings-mesh", "shop");
    assert_eq!(
        keys(&imp.now.importing),
        set(&[
            "Pod/shop/reviews-v1-0",
            "Pod/shop/reviews-v2-0",
            "Pod/shop/reviews-v3-0"
        ])
    );
    assert_eq!(keys(&imp.now.serving), set(&["Pod/shop/ratings-0"]));
    assert_eq!(imp.now.proxies, 4);
    // The same entry without its selector serves no pod.
    let yaml = mesh().replace("  workloadSelector:\n    labels: {app: ratings}\n", "");
    let imp = run(&yaml, "serviceentry/ratings-mesh", "shop");
    assert!(imp.now.serving.is_empty(), "{:?}", imp.now.serving);
    assert_eq!(imp.now.proxies, 3);
}

#[test]
fn routing_changes_reach_only_the_proxies_whose_scope_holds_them() {
    // istiod adds VirtualServices and DestinationRules to a scope's
    // dependencies only for its egress side; the pods of the routed
    // service are not pushed.
    for spec in ["virtualservice/reviews", "destinationrule/reviews"] {
        let imp = run(&mesh(), spec, "shop");
        assert_eq!(
            keys(&imp.now.importing),
            set(&["Pod/shop/productpage-0"]),
            "{spec}"
        );
        assert!(imp.now.serving.is_empty(), "{spec}: {:?}", imp.now.serving);
        assert_eq!(imp.now.proxies, 1, "{spec}");
    }
}

#[test]
fn explain_names_the_services_a_proxy_serves_among_what_pushes_reach_it() {
    let s = snap(&mesh());
    let w = s
        .find_workload(&WorkloadKind::Pod, "shop", "ratings-0")
        .unwrap();
    let e = explain(&s, w, None, None);
    assert_eq!(
        e.pushed_by.serving,
        vec![
            "shop/ratings.mesh".to_string(),
            "shop/ratings.shop.svc.cluster.local".to_string()
        ]
    );
    // Its Sidecar imports neither.
    assert_eq!(e.pushed_by.services, 0, "{:?}", e.visible_services);
    let w = s
        .find_workload(&WorkloadKind::Pod, "other", "reviews-0")
        .unwrap();
    assert_eq!(
        explain(&s, w, None, None).pushed_by.serving,
        vec!["other/reviews.other.svc.cluster.local".to_string()]
    );
}
