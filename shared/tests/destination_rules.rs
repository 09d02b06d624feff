//! istiod's DestinationRule lookup and merging (root-namespace proxies,
//! rules of one host in one namespace, `workloadSelector` rules, the most
//! specific host before exportTo), a VirtualService exportTo with `~`,
//! route `sourceNamespace`, delegates, and the serviceEntryVisibility cap
//! of a `~` list (`shared/src/snapshot/destination_rules.rs`; each also a
//! case of `tests/src/upstream_cases.rs`, held to a real istiod).

use meshscope_shared::snapshot::{Labels, MeshSnapshot};
use meshscope_test_support::fixtures::{labels, snap_with_mesh};

const R: &str = "reviews.shop.svc.cluster.local";

fn snap_with(yaml: &str, mesh: &str) -> MeshSnapshot {
    snap_with_mesh(yaml, "1.31", mesh)
}

fn snap(yaml: &str) -> MeshSnapshot {
    snap_with(yaml, "rootNamespace: istio-system\n")
}

/// `shop/reviews` (port 9080) and `shop/ratings` (9080).
fn services() -> String {
    ["reviews", "ratings"]
        .iter()
        .map(|n| format!("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {n}\n  namespace: shop\nspec:\n  selector: {{app: {n}}}\n  ports:\n  - {{name: http, port: 9080}}\n"))
        .collect()
}

/// A DestinationRule for `host`, created at second `t`; `extra` is spec
/// YAML (exportTo, workloadSelector).
fn dr(ns: &str, name: &str, host: &str, t: u32, subsets: &[&str], extra: &str) -> String {
    let subs: String = subsets
        .iter()
        .map(|s| format!("  - name: {s}\n    labels: {{version: {s}}}\n"))
        .collect();
    format!("---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: {name}\n  namespace: {ns}\n  creationTimestamp: \"2026-01-01T00:00:{t:02}Z\"\nspec:\n  host: \"{host}\"\n{extra}  subsets:\n{subs}")
}

/// The subset clusters of `host` a proxy in `ns` with `app=<app>` gets.
fn subsets(s: &MeshSnapshot, ns: &str, app: &str, host: &str) -> Vec<String> {
    let l: Labels = labels(&[("app", app)]);
    let sel = s.select_sidecar(ns, &l);
    let vis = s.visible(ns, &s.listeners_of(sel.source));
    let prefix = "outbound|9080|";
    s.outbound_clusters(&vis, Some(&l))
        .into_iter()
        .filter_map(|c| {
            let rest = c.strip_prefix(prefix)?;
            let (sub, h) = rest.split_once('|')?;
            (h == host && !sub.is_empty()).then(|| sub.to_string())
        })
        .collect()
}

fn set(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_root_proxy_takes_root_private_rules_then_the_service_namespace_then_root_exported() {
    let base = services() + &dr("shop", "reviews-dr", R, 1, &["v1", "v2"], "");
    let s = snap(&base);
    assert_eq!(subsets(&s, "istio-system", "tool", R), set(&["v1", "v2"]));
    // A public root rule does not beat the service namespace's.
    let public = dr(
        "istio-system",
        "reviews-pub",
        R,
        2,
        &["canary"],
        "  exportTo: [\"*\"]\n",
    );
    let s = snap(&(base.clone() + &public));
    assert_eq!(subsets(&s, "istio-system", "tool", R), set(&["v1", "v2"]));
    assert_eq!(subsets(&s, "web", "client", R), set(&["v1", "v2"]));
    // A root rule private to root comes first for root's proxies.
    let private = dr(
        "istio-system",
        "reviews-priv",
        R,
        3,
        &["debug"],
        "  exportTo: [\".\"]\n",
    );
    let s = snap(&(base + &public + &private));
    assert_eq!(subsets(&s, "istio-system", "tool", R), set(&["debug"]));
    assert_eq!(subsets(&s, "web", "client", R), set(&["v1", "v2"]));
    // `[".", "web"]` in root is neither private nor exported to root.
    let both = dr(
        "istio-system",
        "reviews-pub",
        R,
        2,
        &["canary"],
        "  exportTo: [\".\", \"web\"]\n",
    );
    let s = snap(&(services() + &both));
    assert!(subsets(&s, "istio-system", "tool", R).is_empty());
    assert_eq!(subsets(&s, "web", "client", R), set(&["canary"]));
}

#[test]
fn rules_of_one_host_merge_only_when_their_export_is_alike() {
    let a = |export: &str| dr("shop", "dr-a", R, 1, &["v1"], export);
    let b = |export: &str| dr("shop", "dr-b", R, 2, &["v2"], export);
    // Unset and `*` differ: the newest entry alone.
    let s = snap(&(services() + &a("") + &b("  exportTo: [\"*\"]\n")));
    for ns in ["web", "api", "shop"] {
        assert_eq!(subsets(&s, ns, "client", R), set(&["v2"]), "{ns}");
    }
    // A newer list that contains the older merges into it and is not kept
    // on its own: api, named only by the newer, gets neither.
    let s = snap(
        &(services() + &a("  exportTo: [\"web\"]\n") + &b("  exportTo: [\"web\", \"api\"]\n")),
    );
    assert_eq!(subsets(&s, "web", "client", R), set(&["v1", "v2"]));
    assert!(subsets(&s, "api", "client", R).is_empty());
    assert!(subsets(&s, "shop", "client", R).is_empty());
    // Alike: one entry with both.
    let s = snap(&(services() + &a("  exportTo: [\"*\"]\n") + &b("  exportTo: [\"*\"]\n")));
    assert_eq!(subsets(&s, "api", "client", R), set(&["v1", "v2"]));
}

#[test]
fn a_selector_rule_ends_the_namespace_lookup_for_every_proxy_there() {
    let base = services()
        + &dr(
            "shop",
            "reviews-dr",
            R,
            1,
            &["v1", "v2"],
            "  exportTo: [\"*\"]\n",
        );
    let sel = dr(
        "web",
        "reviews-sel",
        R,
        2,
        &["canary"],
        "  workloadSelector:\n    matchLabels: {app: canary}\n",
    );
    let s = snap(&(base.clone() + &sel));
    assert!(subsets(&s, "web", "client", R).is_empty());
    assert_eq!(subsets(&s, "web", "canary", R), set(&["canary"]));
    assert_eq!(subsets(&s, "api", "client", R), set(&["v1", "v2"]));
    // A plain rule exported to "." is absorbed by the selector rule.
    let dot = dr(
        "web",
        "reviews-dot",
        R,
        3,
        &["local"],
        "  exportTo: [\".\"]\n",
    );
    let s = snap(&(base.clone() + &sel + &dot));
    assert!(subsets(&s, "web", "client", R).is_empty());
    assert_eq!(subsets(&s, "web", "canary", R), set(&["canary", "local"]));
    // Without exportTo it stays apart, for the proxies the selector misses.
    let plain = dr("web", "reviews-dot", R, 3, &["local"], "");
    let s = snap(&(base + &sel + &plain));
    assert_eq!(subsets(&s, "web", "client", R), set(&["local"]));
    assert_eq!(subsets(&s, "web", "canary", R), set(&["canary"]));
}

#[test]
fn the_most_specific_host_is_chosen_before_its_export_is_checked() {
    let wild = dr(
        "shop",
        "dr-wild",
        "*.shop.svc.cluster.local",
        1,
        &["w"],
        "  exportTo: [\"*\"]\n",
    );
    for export in ["[\"api\"]", "[\"~\"]"] {
        let exact = dr(
            "shop",
            "dr-exact",
            R,
            2,
            &["x"],
            &format!("  exportTo: {export}\n"),
        );
        let s = snap(&(services() + &wild + &exact));
        assert!(subsets(&s, "web", "client", R).is_empty(), "{export}");
        let want = if export.contains("api") {
            set(&["x"])
        } else {
            Vec::new()
        };
        assert_eq!(subsets(&s, "api", "client", R), want, "{export}");
        assert_eq!(subsets(&s, "shop", "client", R), set(&["w"]), "{export}");
    }
}

/// A Sidecar `web/default` importing `./*` only, and a VirtualService in
/// web routing reviews to ratings, exported as `export`.
fn routed(export: &str, route_extra: &str) -> MeshSnapshot {
    let y = services()
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: default\n  namespace: web\nspec:\n  egress:\n  - hosts: [\"./*\"]\n"
        + &format!("---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: fwd\n  namespace: web\nspec:\n  hosts: [{R}]\n{export}  http:\n  - {route_extra}route:\n    - destination:\n        host: ratings.shop.svc.cluster.local\n        port: {{number: 9080}}\n");
    snap(&y)
}

fn has_ratings(s: &MeshSnapshot, ns: &str) -> bool {
    let l: Labels = labels(&[("app", "client")]);
    let sel = s.select_sidecar(ns, &l);
    let vis = s.visible(ns, &s.listeners_of(sel.source));
    s.outbound_clusters(&vis, Some(&l))
        .contains(&"outbound|9080||ratings.shop.svc.cluster.local".to_string())
}

#[test]
fn a_tilde_in_a_virtual_service_export_hides_it_unless_star_is_there() {
    for (export, seen) in [
        ("  exportTo: [\"~\", \".\"]\n", false),
        ("  exportTo: [\"~\", \"web\"]\n", false),
        ("  exportTo: [\"~\"]\n", false),
        ("  exportTo: [\"~\", \"*\"]\n", true),
        ("  exportTo: [\".\"]\n", true),
    ] {
        assert_eq!(has_ratings(&routed(export, ""), "web"), seen, "{export}");
    }
}

#[test]
fn a_route_naming_another_source_namespace_is_not_rescued_by_a_match_without_one() {
    let both = "match:\n    - sourceNamespace: api\n    - uri: {prefix: /}\n    ";
    assert!(!has_ratings(&routed("", both), "web"));
    let own = "match:\n    - sourceNamespace: web\n    - uri: {prefix: /}\n    ";
    assert!(has_ratings(&routed("", own), "web"));
}

#[test]
fn a_delegate_virtual_services_destinations_are_pulled_in() {
    let y = services()
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: default\n  namespace: web\nspec:\n  egress:\n  - hosts: [\"./*\"]\n"
        + &format!("---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: front\n  namespace: web\nspec:\n  hosts: [{R}]\n  http:\n  - delegate: {{name: d, namespace: shop}}\n")
        + "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: d\n  namespace: shop\nspec:\n  http:\n  - route:\n    - destination:\n        host: ratings.shop.svc.cluster.local\n        port: {number: 9080}\n";
    assert!(has_ratings(&snap(&y), "web"));
}

#[test]
fn a_namespace_cap_makes_a_tilde_list_naming_the_own_namespace_visible_there() {
    let mesh = "rootNamespace: istio-system\nserviceEntryVisibility:\n  defaultVisibility: NAMESPACE\n  applyToSidecars: true\n";
    let mut y = String::new();
    for (name, export) in [
        ("a", "[\"~\", \"sandbox\"]"),
        ("b", "[\"~\", \".\"]"),
        ("c", "[\"~\"]"),
        ("d", "[\"~\", \"*\"]"),
    ] {
        y += &format!("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: ext-{name}\n  namespace: sandbox\nspec:\n  hosts: [{name}.example.com]\n  ports:\n  - {{number: 80, name: http, protocol: HTTP}}\n  resolution: DNS\n  exportTo: {export}\n");
    }
    let seen = |s: &MeshSnapshot, ns: &str| -> Vec<String> {
        let l = Labels::new();
        let sel = s.select_sidecar(ns, &l);
        let vis = s.visible(ns, &s.listeners_of(sel.source));
        s.outbound_clusters(&vis, None)
            .into_iter()
            .filter(|c| c.ends_with(".example.com"))
            .collect()
    };
    let s = snap_with(&y, mesh);
    assert_eq!(
        seen(&s, "sandbox"),
        set(&[
            "outbound|80||a.example.com",
            "outbound|80||b.example.com",
            "outbound|80||d.example.com"
        ])
    );
    assert!(seen(&s, "web").is_empty());
    // Without applyToSidecars only `*` shows one, everywhere.
    let s = snap_with(&y, &mesh.replace("true", "false"));
    assert_eq!(seen(&s, "sandbox"), set(&["outbound|80||d.example.com"]));
    assert_eq!(seen(&s, "web"), set(&["outbound|80||d.example.com"]));
}

#[test]
fn a_dns_entry_gets_subset_clusters_only_where_an_endpoint_has_the_labels() {
    let entry = |name: &str, endpoints: &str| {
        format!("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: {name}\n  namespace: ext\nspec:\n  hosts: [{name}.example.com]\n  ports:\n  - {{number: 9080, name: http, protocol: HTTP}}\n  resolution: DNS\n{endpoints}")
    };
    let y = entry("bare", "")
        + &entry(
            "listed",
            "  endpoints:\n  - address: 192.0.2.1\n    labels: {version: v1}\n",
        )
        + &dr("ext", "bare", "bare.example.com", 1, &["v1"], "")
        + &dr("ext", "listed", "listed.example.com", 1, &["v1", "v2"], "")
        + "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: any\n  namespace: ext\nspec:\n  host: any.example.com\n  subsets:\n  - name: all\n"
        + &entry("any", "");
    let s = snap(&y);
    // The host's own endpoint has no labels: no v1 cluster.
    assert!(subsets(&s, "web", "client", "bare.example.com").is_empty());
    assert_eq!(
        subsets(&s, "web", "client", "listed.example.com"),
        set(&["v1"])
    );
    // A subset without labels takes every endpoint.
    assert_eq!(
        subsets(&s, "web", "client", "any.example.com"),
        set(&["all"])
    );
}

#[test]
fn a_dynamic_dns_wildcard_entry_gets_forward_proxy_clusters_on_http_and_tls_ports_only() {
    let y = "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: dyn\n  namespace: ext\nspec:\n  hosts: [\"*.dyn.example.com\"]\n  ports:\n  - {number: 80, name: http, protocol: HTTP}\n  - {number: 443, name: tls, protocol: TLS}\n  - {number: 8443, name: https, protocol: HTTPS}\n  - {number: 5432, name: tcp, protocol: TCP}\n  resolution: DYNAMIC_DNS\n".to_string()
        + &dr("ext", "dyn", "*.dyn.example.com", 1, &["v1"], "");
    let s = snap(&y);
    let l = Labels::new();
    let vis = s.visible("web", &s.listeners_of(s.select_sidecar("web", &l).source));
    let dyn_clusters: Vec<String> = s
        .outbound_clusters(&vis, None)
        .into_iter()
        .filter(|c| c.ends_with("dyn.example.com"))
        .collect();
    assert_eq!(
        dyn_clusters,
        set(&[
            "outbound|443||*.dyn.example.com",
            "outbound|80||*.dyn.example.com"
        ])
    );
}
