//! `recommend --exports`: the exportTo each object needs, from observed
//! callers and the uses traffic does not show; the findings that go with
//! it (MS0018, MS0019) and the discoverySelectors advice (MS0020).

use meshscope_test_support::access_log;
use meshscope_test_support::fixtures::{observe, snap};

use meshscope_shared::audit::{audit, AuditScope, Finding};
use meshscope_shared::discovery;
use meshscope_shared::exports::{
    recommend_exports, ExportAction, ExportKind, ExportOptions, ExportRec,
};
use meshscope_shared::observe::Observations;
use meshscope_shared::snapshot::MeshSnapshot;

fn namespace(ns: &str, injected: bool) -> String {
    let labels = if injected {
        "{istio-injection: enabled}"
    } else {
        "{}"
    };
    format!("---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {labels}\n")
}

/// A bare pod with the proxy (`proxy`) or without.
fn pod(ns: &str, name: &str, labels: &str, ip: &str, proxy: bool) -> String {
    let sidecar = if proxy {
        ", {name: istio-proxy, image: proxyv2}"
    } else {
        ""
    };
    format!("---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {labels}\nspec:\n  containers: [{{name: c, image: x}}{sidecar}]\nstatus:\n  podIP: {ip}\n")
}

fn service(ns: &str, name: &str, port: &str, export: Option<&str>) -> String {
    let ann = export
        .map(|e| format!("  annotations: {{networking.istio.io/exportTo: \"{e}\"}}\n"))
        .unwrap_or_default();
    format!("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\n{ann}spec:\n  selector: {{app: {name}}}\n  ports: [{port}]\n")
}

const MESH: &str = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: istio, namespace: istio-system}\ndata:\n  mesh: |\n    extensionProviders:\n    - name: zipkin\n      zipkin: {service: zipkin.ops.svc.cluster.local, port: 9411}\n    defaultProviders:\n      tracing: [zipkin]\n";

/// shop/web calls pay/api; pay/api calls data/db (whose owner exported it
/// to `.` only); ingress's gateway routes api.example.com to pay/api;
/// other's Sidecar imports data/db by name; ops runs the tracing
/// collector every proxy calls; idle holds an uncalled Service.
fn mesh() -> String {
    let mut y = String::new();
    for (ns, inj) in [
        ("istio-system", false),
        ("istio-control", false),
        ("shop", true),
        ("pay", true),
        ("data", true),
        ("ops", false),
        ("ingress", false),
        ("other", true),
        ("idle", false),
    ] {
        y += &namespace(ns, inj);
    }
    y += MESH;
    y += &pod(
        "istio-control",
        "istiod-1",
        "{app: istiod}",
        "10.9.0.1",
        false,
    );
    y += &pod("shop", "web", "{app: web}", "10.0.0.1", true);
    y += &pod("pay", "api", "{app: api}", "10.0.1.1", true);
    y += &pod("data", "db", "{app: db}", "10.0.2.1", true);
    y += &pod("ops", "zipkin", "{app: zipkin}", "10.0.5.1", false);
    y += &pod("ingress", "gw", "{istio: ingressgateway}", "10.0.3.1", true);
    y += &pod("other", "client", "{app: client}", "10.0.4.1", true);
    y += &service("pay", "api", "{name: http, port: 8080}", None);
    y += &service("data", "db", "{name: tcp-pg, port: 5432}", Some("."));
    y += &service("ops", "zipkin", "{name: http, port: 9411}", None);
    y += &service("idle", "stale", "{name: http, port: 80}", None);
    y += "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: api-routes, namespace: pay}\nspec:\n  hosts: [api.pay.svc.cluster.local]\n  http:\n  - route:\n    - destination: {host: api.pay.svc.cluster.local, subset: v1}\n";
    y += "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: api-public, namespace: pay}\nspec:\n  hosts: [api.example.com]\n  gateways: [ingress/public]\n  http:\n  - route:\n    - destination: {host: api.pay.svc.cluster.local}\n";
    y += "---\napiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: public, namespace: ingress}\nspec:\n  selector: {istio: ingressgateway}\n";
    y += "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: api, namespace: pay}\nspec:\n  host: api.pay.svc.cluster.local\n  subsets: [{name: v1, labels: {app: api}}]\n";
    y += "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: other}\nspec:\n  egress:\n  - hosts: [\"./*\", \"data/db.data.svc.cluster.local\"]\n";
    y
}

fn traffic(s: &MeshSnapshot) -> Observations {
    let logs = access_log::line(
        "10.0.0.1",
        "api.pay.svc.cluster.local:8080",
        "outbound|8080||api.pay.svc.cluster.local",
        "10.0.1.1:8080",
    ) + &access_log::line(
        "10.0.1.1",
        "-",
        "outbound|5432||db.data.svc.cluster.local",
        "10.0.2.1:5432",
    );
    observe(s, &logs)
}

fn recs(s: &MeshSnapshot, force: bool) -> Vec<ExportRec> {
    recommend_exports(s, &traffic(s), ExportOptions { force })
}

fn find<'a>(recs: &'a [ExportRec], kind: ExportKind, key: &str) -> &'a ExportRec {
    recs.iter()
        .find(|r| r.kind == kind && r.key() == key)
        .unwrap_or_else(|| panic!("no {kind:?} {key}"))
}

#[test]
fn a_service_keeps_its_callers_its_gateways_and_its_own_namespace() {
    let s = snap(&mesh());
    let r = recs(&s, false);
    let api = find(&r, ExportKind::Service, "pay/api");
    assert_eq!(api.action, ExportAction::Write);
    assert_eq!(api.recommended, [".", "ingress", "shop"]);
    assert!(api.hidden_from.is_empty());
}

#[test]
fn an_uncalled_service_is_kept_to_its_own_namespace() {
    let s = snap(&mesh());
    let stale = find(&recs(&s, false), ExportKind::Service, "idle/stale").clone();
    assert_eq!(
        (stale.action, stale.recommended),
        (ExportAction::Write, vec![".".to_string()])
    );
}

#[test]
fn virtual_services_keep_the_callers_of_their_hosts_and_their_gateways_pods() {
    let s = snap(&mesh());
    let r = recs(&s, false);
    assert_eq!(
        find(&r, ExportKind::VirtualService, "pay/api-routes").recommended,
        [".", "shop"]
    );
    // The gateway pods run in ingress: the VirtualService bound to the
    // Gateway must be exported there (not to every namespace).
    assert_eq!(
        find(&r, ExportKind::VirtualService, "pay/api-public").recommended,
        [".", "ingress"]
    );
}

#[test]
fn a_destination_rule_keeps_every_namespace_that_calls_its_host() {
    let s = snap(&mesh());
    let dr = find(&recs(&s, false), ExportKind::DestinationRule, "pay/api").clone();
    assert_eq!(dr.recommended, [".", "ingress", "shop"]);
}

#[test]
fn mesh_config_providers_stay_exported_to_every_namespace_whose_proxies_call_them() {
    let s = snap(&mesh());
    let zipkin = find(&recs(&s, false), ExportKind::Service, "ops/zipkin").clone();
    for ns in ["shop", "pay", "data", "other", "ingress"] {
        assert!(
            zipkin.recommended.iter().any(|n| n == ns),
            "{ns}: {:?}",
            zipkin.recommended
        );
    }
}

#[test]
fn an_owner_set_export_is_left_alone_and_reported_when_it_hides_the_object_from_callers() {
    let s = snap(&mesh());
    let r = recs(&s, false);
    let db = find(&r, ExportKind::Service, "data/db");
    assert_eq!(db.action, ExportAction::OwnerSet);
    assert_eq!(db.hidden_from, ["pay"]);
    let f = meshscope_shared::exports::findings::hidden_from_callers(db).unwrap();
    assert_eq!(
        (f.code.as_str(), f.kind.as_str(), f.name.as_str()),
        ("MS0019", "Service", "db")
    );
    assert!(
        f.message.contains("export it to [., other, pay]"),
        "{}",
        f.message
    );
}

#[test]
fn force_exports_writes_over_an_owner_set_export_with_the_sidecar_importers_kept() {
    let s = snap(&mesh());
    let r = recs(&s, true);
    let db = find(&r, ExportKind::Service, "data/db");
    assert_eq!(db.action, ExportAction::Write);
    // `other` imports it by name in its Sidecar: no traffic, still kept.
    assert_eq!(db.recommended, [".", "other", "pay"]);
}

#[test]
fn an_export_that_already_gives_exactly_the_needed_namespaces_is_unchanged() {
    let y = mesh().replace(
        "  name: stale\n  namespace: idle\n",
        "  name: stale\n  namespace: idle\n  annotations: {networking.istio.io/exportTo: idle}\n",
    );
    let s = snap(&y);
    let stale = find(&recs(&s, true), ExportKind::Service, "idle/stale").clone();
    assert_eq!(stale.action, ExportAction::Unchanged);
}

#[test]
fn a_host_the_root_default_sidecar_imports_by_name_stays_exported_everywhere() {
    let y = mesh()
        + "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: ext, namespace: data}\nspec:\n  hosts: [ext.example.com]\n  resolution: DNS\n  ports: [{number: 443, name: tls, protocol: TLS}]\n"
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: istio-system}\nspec:\n  egress:\n  - hosts: [\"./*\", \"data/ext.example.com\"]\n";
    let s = snap(&y);
    let r = recs(&s, false);
    assert_eq!(
        find(&r, ExportKind::ServiceEntry, "data/ext").action,
        ExportAction::Everyone
    );
}

fn codes(f: &[Finding]) -> Vec<(&str, String)> {
    f.iter()
        .map(|f| (f.code.as_str(), format!("{}/{}", f.namespace, f.name)))
        .collect()
}

fn audit_all(s: &MeshSnapshot, obs: Option<&Observations>) -> Vec<Finding> {
    audit(
        s,
        obs,
        &AuditScope {
            namespaces: None,
            workloads: None,
        },
    )
}

#[test]
fn audit_reports_an_export_that_hides_an_object_from_a_caller() {
    let s = snap(&mesh());
    let obs = traffic(&s);
    let f = audit_all(&s, Some(&obs));
    assert!(
        codes(&f).contains(&("MS0019", "data/db".into())),
        "{:?}",
        codes(&f)
    );
    // Without traffic there is nothing to say it hides from.
    assert!(!audit_all(&s, None)
        .iter()
        .any(|f| f.code.as_str() == "MS0019"));
}

#[test]
fn a_wildcard_destination_rule_covering_other_namespaces_is_ms0018() {
    let y = mesh() + "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: all, namespace: shop}\nspec:\n  host: \"*.svc.cluster.local\"\n";
    let s = snap(&y);
    let f: Vec<Finding> = audit_all(&s, None)
        .into_iter()
        .filter(|f| f.code.as_str() == "MS0018")
        .collect();
    assert_eq!(codes(&f), [("MS0018", "shop/all".to_string())]);
    assert!(f[0].message.contains("shadows pay/api"), "{}", f[0].message);
    // In the root namespace it is only a fallback.
    let root = y.replace(
        "name: all, namespace: shop",
        "name: all, namespace: istio-system",
    );
    assert!(!audit_all(&snap(&root), None)
        .iter()
        .any(|f| f.code.as_str() == "MS0018"));
}

#[test]
fn discovery_selectors_drop_only_namespaces_nothing_uses() {
    let s = snap(&mesh());
    let a = discovery::advice(&s, &traffic(&s));
    // ops holds the tracing collector every proxy calls; ingress a gateway;
    // istio-system is the root, istio-control istiod's; data is called.
    assert_eq!(a.drop, ["idle"]);
    assert_eq!(
        a.yaml(),
        "discoverySelectors:\n- matchExpressions:\n  - {key: \"kubernetes.io/metadata.name\", operator: NotIn, values: [\"idle\"]}\n"
    );
    // Audit says it once per namespace, with the setting on one line.
    let f: Vec<Finding> = audit_all(&s, Some(&traffic(&s)))
        .into_iter()
        .filter(|f| f.code.as_str() == "MS0020")
        .collect();
    assert_eq!(codes(&f), [("MS0020", "/idle".to_string())]);
    let flow = "discoverySelectors: [{matchExpressions: [{key: \"kubernetes.io/metadata.name\", operator: NotIn, values: [\"idle\"]}]}]";
    assert!(f[0].message.contains(flow), "{}", f[0].message);
    let parsed: serde_yaml::Value = serde_yaml::from_str(flow).unwrap();
    assert_eq!(
        parsed["discoverySelectors"][0]["matchExpressions"][0]["operator"],
        "NotIn"
    );
}

#[test]
fn discovery_selectors_never_drop_the_root_istiod_or_gateway_namespaces_even_when_idle() {
    // No workloads at all besides istiod and a Gateway object: only the
    // namespaces with nothing in them go.
    let y = namespace("istio-system", false)
        + &namespace("istio-control", false)
        + &namespace("edge", false)
        + &namespace("empty", false)
        + &pod("istio-control", "istiod-1", "{app: istiod}", "10.9.0.1", false)
        + "---\napiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g, namespace: edge}\nspec:\n  selector: {istio: none}\n";
    let s = snap(&y);
    let a = discovery::advice(&s, &Observations::default());
    assert_eq!(a.drop, ["empty"]);
}

#[test]
fn discovery_selectors_extend_the_ones_already_set() {
    let y = mesh().replace(
        "    defaultProviders:",
        "    discoverySelectors:\n    - matchLabels: {mesh: \"on\"}\n    defaultProviders:",
    );
    let y = y.replace(
        "  name: idle\n  labels: {}",
        "  name: idle\n  labels: {mesh: \"on\"}",
    );
    let s = snap(&y);
    let a = discovery::advice(&s, &traffic(&s));
    assert_eq!(a.drop, ["idle"]);
    assert_eq!(a.selectors.len(), 1);
    assert_eq!(
        a.selectors[0].match_labels.get("mesh").map(String::as_str),
        Some("on")
    );
    assert_eq!(a.selectors[0].match_expressions[0].values, ["idle"]);
}

#[test]
fn an_export_meshscope_wrote_is_updated_without_force_and_anothers_is_the_owners() {
    let ours = mesh().replace(
        "metadata: {name: api-routes, namespace: pay}\nspec:\n",
        "metadata:\n  name: api-routes\n  namespace: pay\n  managedFields:\n  - {manager: kubectl-meshscope, operation: Apply, fieldsType: FieldsV1, fieldsV1: {\"f:spec\": {\"f:exportTo\": {}}}}\nspec:\n  exportTo: [\".\"]\n",
    );
    let s = snap(&ours);
    let vs = find(
        &recs(&s, false),
        ExportKind::VirtualService,
        "pay/api-routes",
    )
    .clone();
    assert_eq!(
        (vs.action, vs.recommended),
        (ExportAction::Write, vec![".".to_string(), "shop".into()])
    );
    let helm = ours.replace("manager: kubectl-meshscope", "manager: helm");
    let s = snap(&helm);
    let vs = find(
        &recs(&s, false),
        ExportKind::VirtualService,
        "pay/api-routes",
    )
    .clone();
    assert_eq!(vs.action, ExportAction::OwnerSet);
}

fn entry(ns: &str, name: &str, host: &str, extra: &str) -> String {
    format!("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  hosts: [{host}]\n  resolution: DNS\n  ports: [{{number: 443, name: tls, protocol: TLS}}]\n{extra}")
}

#[test]
fn service_entries_of_one_namespace_sharing_a_host_get_one_list() {
    // shop calls ext.example.com: istiod merges the two entries only when
    // their exportTo are equal, so both keep shop.
    let y = mesh()
        + &entry("data", "ext-a", "ext.example.com", "")
        + &entry(
            "data",
            "ext-b",
            "ext.example.com",
            "  endpoints: [{address: 1.2.3.4}]\n",
        );
    let s = snap(&y);
    let logs = access_log::line(
        "10.0.0.1",
        "ext.example.com:443",
        "outbound|443||ext.example.com",
        "1.2.3.4:443",
    );
    let r = recommend_exports(&s, &observe(&s, &logs), ExportOptions::default());
    let a = find(&r, ExportKind::ServiceEntry, "data/ext-a");
    let b = find(&r, ExportKind::ServiceEntry, "data/ext-b");
    assert_eq!(a.recommended, [".", "shop"]);
    assert_eq!(a.recommended, b.recommended);
}

#[test]
fn a_catch_all_entry_is_ms0016_unless_kept_to_its_namespace() {
    let catch_all = |export: &str| {
        entry(
            "data",
            "all-tcp",
            "any.tcp.internal",
            &format!("  addresses: [0.0.0.0/0]\n  exportTo: {export}\n"),
        )
        .replace("resolution: DNS", "resolution: NONE")
        .replace(
            "{number: 443, name: tls, protocol: TLS}",
            "{number: 5432, name: pg, protocol: TCP}",
        )
    };
    let ms0016 = |export: &str| {
        audit_all(&snap(&(mesh() + &catch_all(export))), None)
            .into_iter()
            .filter(|f| f.code.as_str() == "MS0016")
            .map(|f| f.message)
            .collect::<Vec<_>>()
    };
    let wide = ms0016("[\".\", shop]");
    assert_eq!(wide.len(), 1);
    assert!(
        wide[0].contains("exported to namespaces shop") && wide[0].contains("port 5432"),
        "{}",
        wide[0]
    );
    assert_eq!(ms0016("[\"*\"]").len(), 1);
    assert!(ms0016("[\".\"]").is_empty());
}

#[test]
fn a_service_behind_a_waypoint_stays_visible_to_the_waypoints_namespace() {
    // idle/stale names waypoint gw in namespace ingress; services of
    // namespace data inherit data's own waypoint (in data itself).
    let y = mesh().replace(
        "  name: stale\n  namespace: idle\n",
        "  name: stale\n  namespace: idle\n  labels: {istio.io/use-waypoint: gw, istio.io/use-waypoint-namespace: ingress}\n",
    );
    let s = snap(&y);
    let stale = find(&recs(&s, false), ExportKind::Service, "idle/stale").clone();
    assert_eq!(stale.recommended, [".", "ingress"]);
    // "none" on the Service wins over its namespace's label.
    let y = y
        .replace("istio.io/use-waypoint: gw,", "istio.io/use-waypoint: none,")
        .replace("  name: idle\n  labels: {}", "  name: idle\n  labels: {istio.io/use-waypoint: w, istio.io/use-waypoint-namespace: ops}");
    let s = snap(&y);
    let stale = find(&recs(&s, false), ExportKind::Service, "idle/stale").clone();
    assert_eq!(stale.recommended, ["."]);
    // Without its own label it takes its namespace's.
    let y = y.replace(
        "  labels: {istio.io/use-waypoint: none, istio.io/use-waypoint-namespace: ingress}\n",
        "",
    );
    let s = snap(&y);
    let stale = find(&recs(&s, false), ExportKind::Service, "idle/stale").clone();
    assert_eq!(stale.recommended, [".", "ops"]);
}

/// issue #33, found on the way: shop/web dials `front.pay:80`, whose
/// VirtualService routes it to pay/api. The host's own Service stays
/// exported to shop: Envoy's `front.pay` domain comes from it.
#[test]
fn a_virtual_service_hosts_own_service_stays_exported_to_its_callers() {
    let mut y = mesh();
    y += &service("pay", "front", "{name: http, port: 80}", None);
    y += "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: front, namespace: pay}\nspec:\n  hosts: [front.pay.svc.cluster.local]\n  http:\n  - route:\n    - destination: {host: api.pay.svc.cluster.local, port: {number: 8080}}\n";
    let s = snap(&y);
    let logs = access_log::line(
        "10.0.0.1",
        "front.pay:80",
        "outbound|8080||api.pay.svc.cluster.local",
        "10.0.1.1:8080",
    );
    let r = recommend_exports(&s, &observe(&s, &logs), ExportOptions { force: false });
    assert_eq!(
        find(&r, ExportKind::Service, "pay/front").recommended,
        [".", "shop"]
    );
    assert_eq!(
        find(&r, ExportKind::VirtualService, "pay/front").recommended,
        [".", "shop"]
    );
}
