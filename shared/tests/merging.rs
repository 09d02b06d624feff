//! istiod's rules for several copies of one hostname, VirtualService
//! destinations, exclusions against VirtualService hosts and the exportTo
//! annotation (`shared/src/imports.rs`; each also a case of
//! `tests/src/upstream_cases.rs`, held to a real istiod).

use meshscope_shared::snapshot::{Labels, MeshSnapshot};
use meshscope_shared::{IstioVersion, Options};
use meshscope_test_support::fixtures::{inputs, labels};

fn snap_v(yaml: &str, minor: u32) -> MeshSnapshot {
    let options = Options {
        istio: IstioVersion { major: 1, minor },
        ..Options::default()
    };
    MeshSnapshot::build(&inputs(yaml), options).unwrap()
}

/// The outbound clusters of a proxy in `ns` with labels `app=<app>`.
fn clusters(s: &MeshSnapshot, ns: &str, app: &str) -> Vec<String> {
    let l: Labels = labels(&[("app", app)]);
    let sel = s.select_sidecar(ns, &l);
    let vis = s.visible(ns, &s.listeners_of(sel.source));
    s.outbound_clusters(&vis, None)
}

fn entry(ns: &str, name: &str, host: &str, ports: &[(u32, &str)], extra: &str) -> String {
    let p: String = ports
        .iter()
        .map(|(n, proto)| format!("  - number: {n}\n    name: p{n}\n    protocol: {proto}\n"))
        .collect();
    format!("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: {name}\n  namespace: {ns}\n{extra}spec:\n  hosts: [\"{host}\"]\n  ports:\n{p}  resolution: DNS\n")
}

fn service(ns: &str, name: &str, port: u32, annotation: Option<&str>) -> String {
    let ann = annotation
        .map(|a| format!("  annotations:\n    networking.istio.io/exportTo: \"{a}\"\n"))
        .unwrap_or_default();
    format!("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\n{ann}spec:\n  ports:\n  - name: tcp-{port}\n    port: {port}\n")
}

/// A Sidecar for `app=<app>` in `ns`: listeners of (optional port, hosts).
fn sidecar(ns: &str, app: &str, listeners: &[(Option<u32>, &[&str])]) -> String {
    let mut l = String::new();
    for (port, hosts) in listeners {
        l.push_str("  - ");
        if let Some(p) = port {
            l.push_str(&format!(
                "port:\n      number: {p}\n      protocol: HTTP\n      name: h{p}\n    "
            ));
        }
        let h: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
        l.push_str(&format!("hosts: [{}]\n", h.join(", ")));
    }
    format!("---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: {app}\n  namespace: {ns}\nspec:\n  workloadSelector:\n    labels:\n      app: {app}\n  egress:\n{l}")
}

fn virtual_service(ns: &str, name: &str, hosts: &[&str], dest: &str) -> String {
    let h: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    format!("---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  hosts: [{}]\n  http:\n  - route:\n    - destination:\n        host: {dest}\n", h.join(", "))
}

fn has(c: &[String], name: &str) -> bool {
    c.iter().any(|x| x == name)
}

#[test]
fn like_entries_of_one_hostname_merge_their_ports_and_unlike_ones_do_not() {
    let like = entry("ext", "a", "api.example.com", &[(80, "HTTP")], "")
        + &entry("ext", "b", "api.example.com", &[(443, "TLS")], "");
    for minor in [30, 31] {
        let c = clusters(&snap_v(&like, minor), "app", "sleep");
        assert!(
            has(&c, "outbound|80||api.example.com") && has(&c, "outbound|443||api.example.com"),
            "{minor}: {c:?}"
        );
    }
    // Labels that differ keep the entries apart: the first one alone.
    let unlike = entry(
        "ext",
        "a",
        "api.example.com",
        &[(80, "HTTP")],
        "  creationTimestamp: \"2024-01-01T00:00:00Z\"\n",
    ) + &entry(
        "ext",
        "b",
        "api.example.com",
        &[(443, "TLS")],
        "  creationTimestamp: \"2024-01-02T00:00:00Z\"\n  labels: {team: x}\n",
    );
    let c = clusters(&snap_v(&unlike, 31), "app", "sleep");
    assert!(
        has(&c, "outbound|80||api.example.com") && !has(&c, "outbound|443||api.example.com"),
        "{c:?}"
    );
    // Read in the other order, the older entry is still the one kept.
    let docs: Vec<&str> = unlike.split("---\n").filter(|d| !d.is_empty()).collect();
    let reversed: String = docs.iter().rev().map(|d| format!("---\n{d}")).collect();
    let c = clusters(&snap_v(&reversed, 31), "app", "sleep");
    assert!(
        has(&c, "outbound|80||api.example.com") && !has(&c, "outbound|443||api.example.com"),
        "reversed: {c:?}"
    );
    // A Kubernetes Service and an entry of its hostname never merge.
    let kube = service("shop", "web", 8080, None)
        + &entry(
            "shop",
            "web-se",
            "web.shop.svc.cluster.local",
            &[(9090, "TCP")],
            "",
        );
    let c = clusters(&snap_v(&kube, 31), "app", "sleep");
    assert!(
        has(&c, "outbound|8080||web.shop.svc.cluster.local")
            && !has(&c, "outbound|9090||web.shop.svc.cluster.local"),
        "{c:?}"
    );
}

#[test]
fn the_first_listeners_copy_of_a_hostname_is_the_scopes() {
    let yaml = entry("x", "a", "api.example.com", &[(80, "HTTP")], "")
        + &entry("y", "a", "api.example.com", &[(8080, "HTTP")], "")
        + &sidecar(
            "app",
            "sleep",
            &[
                (Some(8080), &["y/api.example.com"]),
                (None, &["x/api.example.com"]),
            ],
        );
    let c = clusters(&snap_v(&yaml, 31), "app", "sleep");
    assert!(has(&c, "outbound|8080||api.example.com"), "{c:?}");
    assert!(!has(&c, "outbound|80||api.example.com"), "{c:?}");
}

#[test]
fn a_kubernetes_destination_replaces_an_entry_an_egress_host_imported() {
    let yaml = virtual_service(
        "vh",
        "front",
        &["front.example.com"],
        "db.data.svc.cluster.local",
    ) + &service("data", "db", 5432, None)
        + &entry("x", "db", "db.data.svc.cluster.local", &[(5433, "TCP")], "")
        + &sidecar(
            "app",
            "pulls",
            &[(
                None,
                &["vh/front.example.com", "x/db.data.svc.cluster.local"],
            )],
        );
    let c = clusters(&snap_v(&yaml, 31), "app", "pulls");
    assert_eq!(
        c.iter()
            .filter(|n| n.contains("db.data"))
            .collect::<Vec<_>>(),
        ["outbound|5432||db.data.svc.cluster.local"]
    );
}

#[test]
fn an_exclusion_drops_a_virtual_service_only_through_the_host_it_covers() {
    let yaml = virtual_service("v", "r", &["a.com", "b.com"], "dest.example.com")
        + &virtual_service("v", "r2", &["*.w.com"], "dest2.example.com")
        + &entry("z", "d", "dest.example.com", &[(80, "HTTP")], "")
        + &entry("z", "d2", "dest2.example.com", &[(80, "HTTP")], "")
        + &sidecar("app", "excl", &[(None, &["v/*", "~v/a.com"])])
        + &sidecar("app", "excl2", &[(None, &["v/*", "~/a.w.com"])])
        + &sidecar("app", "both", &[(None, &["v/*", "~v/a.com", "~v/b.com"])]);
    let s = snap_v(&yaml, 31);
    for app in ["excl", "excl2"] {
        let c = clusters(&s, "app", app);
        assert!(
            has(&c, "outbound|80||dest.example.com") && has(&c, "outbound|80||dest2.example.com"),
            "{app}: {c:?}"
        );
    }
    // Every host of r excluded: r is not imported; r2 still is.
    let c = clusters(&s, "app", "both");
    assert!(
        !has(&c, "outbound|80||dest.example.com") && has(&c, "outbound|80||dest2.example.com"),
        "{c:?}"
    );
}

#[test]
fn the_export_annotation_reads_as_istiod_reads_it() {
    let yaml = service("b", "empty", 80, Some(""))
        + &service("b", "star-tilde", 80, Some("~,*"))
        + &service("b", "tilde-app", 80, Some("~,app"))
        + &sidecar(
            "app",
            "exact",
            &[(None, &["b/tilde-app.b.svc.cluster.local"])],
        );
    let s = snap_v(&yaml, 31);
    let c = clusters(&s, "c", "sleep");
    // An empty annotation is no annotation; `*` beats `~`.
    assert!(has(&c, "outbound|80||empty.b.svc.cluster.local"), "{c:?}");
    assert!(
        has(&c, "outbound|80||star-tilde.b.svc.cluster.local"),
        "{c:?}"
    );
    // `~,app` hides it from app's default scope, but 1.31's lookup by
    // name checks only the names listed.
    assert!(!has(
        &clusters(&s, "app", "sleep"),
        "outbound|80||tilde-app.b.svc.cluster.local"
    ));
    assert!(has(
        &clusters(&s, "app", "exact"),
        "outbound|80||tilde-app.b.svc.cluster.local"
    ));
    let s30 = snap_v(&yaml, 30);
    assert!(!has(
        &clusters(&s30, "app", "exact"),
        "outbound|80||tilde-app.b.svc.cluster.local"
    ));
}

#[test]
fn before_1_30_a_destination_takes_the_first_namespace_kubernetes_or_not() {
    let yaml = virtual_service(
        "vh",
        "front",
        &["front.example.com"],
        "api.zz.svc.cluster.local",
    ) + &service("zz", "api", 80, None)
        + &entry("aa", "x", "api.zz.svc.cluster.local", &[(9999, "TCP")], "")
        + &sidecar("app", "pulls", &[(None, &["vh/front.example.com"])]);
    let pick = |minor| {
        clusters(&snap_v(&yaml, minor), "app", "pulls")
            .into_iter()
            .filter(|n| n.contains("api.zz"))
            .collect::<Vec<_>>()
    };
    assert_eq!(pick(30), ["outbound|80||api.zz.svc.cluster.local"]);
    assert_eq!(pick(29), ["outbound|9999||api.zz.svc.cluster.local"]);
}

#[test]
fn a_destination_namespace_offers_only_the_copy_its_index_holds() {
    // The older copy, exported to its own namespace only, holds the slot:
    // the newer public one does not stand in for it.
    let yaml = virtual_service("vh", "front", &["front.example.com"], "multi.example.com")
        + &entry(
            "a",
            "multi-a",
            "multi.example.com",
            &[(8080, "HTTP")],
            "  creationTimestamp: \"2024-01-01T00:00:00Z\"\n",
        )
        .replace(
            "  resolution: DNS\n",
            "  resolution: DNS\n  exportTo: [\".\"]\n",
        )
        + &entry(
            "a",
            "multi-b",
            "multi.example.com",
            &[(9090, "HTTP")],
            "  creationTimestamp: \"2024-01-02T00:00:00Z\"\n",
        )
        + &sidecar("b", "pulls", &[(None, &["vh/front.example.com"])]);
    let s = snap_v(&yaml, 31);
    let c = clusters(&s, "b", "pulls");
    assert!(!c.iter().any(|n| n.contains("multi.example.com")), "{c:?}");
    // In its own namespace the slot's copy is taken.
    let c = clusters(&s, "a", "sleep");
    assert!(has(&c, "outbound|8080||multi.example.com"), "{c:?}");
}

#[test]
fn before_1_30_the_export_defaults_honour_only_dot_or_star() {
    let mesh = "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: istio\n  namespace: istio-system\ndata:\n  mesh: |\n    defaultServiceExportTo: [\"app\"]\n    defaultVirtualServiceExportTo: [\".\", \"*\"]\n";
    let yaml = mesh.to_string()
        + &service("b", "s", 80, None)
        + &virtual_service("v", "r", &["front.example.com"], "dest.example.com")
        + &entry(
            "z",
            "d",
            "dest.example.com",
            &[(80, "HTTP")],
            "  annotations: {}\n",
        )
        .replace(
            "  resolution: DNS\n",
            "  resolution: DNS\n  exportTo: [\"*\"]\n",
        )
        + &sidecar("app", "pulls", &[(None, &["v/*"])]);
    // 1.30: the Service is visible in app only; the VirtualService is public.
    let s30 = snap_v(&yaml, 30);
    assert!(has(
        &clusters(&s30, "app", "sleep"),
        "outbound|80||s.b.svc.cluster.local"
    ));
    assert!(!has(
        &clusters(&s30, "b", "sleep"),
        "outbound|80||s.b.svc.cluster.local"
    ));
    assert!(has(
        &clusters(&s30, "app", "pulls"),
        "outbound|80||dest.example.com"
    ));
    // 1.29: a default of namespaces hides the Service everywhere, and
    // `.` first makes the VirtualService private to v.
    let s29 = snap_v(&yaml, 29);
    assert!(!has(
        &clusters(&s29, "app", "sleep"),
        "outbound|80||s.b.svc.cluster.local"
    ));
    assert!(!has(
        &clusters(&s29, "app", "pulls"),
        "outbound|80||dest.example.com"
    ));
}
