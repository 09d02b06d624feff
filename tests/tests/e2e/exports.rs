//! `recommend --exports` and `apply --exports` against the API server: the
//! exportTo of each object in the owner's namespace from an access-log
//! file, written as a server-side apply of that one field (or the
//! Service's annotation) under field manager kubectl-meshscope; an
//! exportTo its owner set is left alone without `--force-exports`.

use kubectl_meshscope::Outcome;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::run::meshscope_at as meshscope;
use meshscope_test_support::access_log;
use serde_json::Value;

/// A bare pod running the proxy (no kubelet: its IP is patched in).
fn proxied_pod(ns: &str, name: &str) -> String {
    format!("---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{app: {name}}}\nspec:\n  containers: [{{name: c, image: example/{name}:1}}, {{name: istio-proxy, image: istio/proxyv2:1.31.0}}]\n")
}

/// In `owner`: Service api (with a VirtualService and a DestinationRule
/// for it), Service owned (exportTo "." set by its owner) and a
/// VirtualService pinned whose owner set exportTo ["."].
fn owner_objects(owner: &str) -> String {
    let host = format!("api.{owner}.svc.cluster.local");
    let mut y = proxied_pod(owner, "api");
    y += &format!("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: api\n  namespace: {owner}\n  labels: {{team: payments}}\n  annotations: {{owner.example/ticket: PAY-1}}\nspec:\n  selector: {{app: api}}\n  ports: [{{name: http, port: 8080}}]\n");
    y += &format!("---\napiVersion: v1\nkind: Service\nmetadata:\n  name: owned\n  namespace: {owner}\n  annotations: {{networking.istio.io/exportTo: \".\"}}\nspec:\n  selector: {{app: api}}\n  ports: [{{name: http, port: 80}}]\n");
    y += &format!("---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: api-routes\n  namespace: {owner}\nspec:\n  hosts: [{host}]\n  http:\n  - timeout: 3s\n    route:\n    - destination: {{host: {host}, subset: v1}}\n");
    y += &format!("---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: api\n  namespace: {owner}\nspec:\n  host: {host}\n  subsets: [{{name: v1, labels: {{app: api}}}}]\n");
    y += &format!("---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: pinned\n  namespace: {owner}\nspec:\n  hosts: [owned.{owner}.svc.cluster.local]\n  exportTo: [\".\"]\n  http:\n  - route:\n    - destination: {{host: owned.{owner}.svc.cluster.local}}\n");
    y
}

fn get(c: &Cluster, ns: &str, kind: &str, name: &str) -> Value {
    let out = c.kubectl_ok(
        &[
            "get",
            kind,
            name,
            "-n",
            ns,
            "-o",
            "json",
            "--show-managed-fields",
        ],
        None,
    );
    serde_json::from_str(&out).unwrap()
}

/// The object without what the server changes on every write, and
/// without the fields meshscope may write.
fn untouched_part(mut v: Value) -> Value {
    let meta = v["metadata"].as_object_mut().unwrap();
    for k in ["managedFields", "resourceVersion", "generation"] {
        meta.remove(k);
    }
    if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        a.remove("networking.istio.io/exportTo");
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    if let Some(s) = v.get_mut("spec").and_then(Value::as_object_mut) {
        s.remove("exportTo");
    }
    v
}

/// The fields field manager kubectl-meshscope owns, as the server lists
/// them (`None`: it owns nothing).
fn meshscope_fields(v: &Value) -> Option<Value> {
    v["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["manager"] == "kubectl-meshscope")
        .map(|m| m["fieldsV1"].clone())
}

/// Pod IPs of this run: every namespace's pods are read, so no other
/// run's (a failed one's namespaces may linger) may share them:
/// 10.<100..199>.<0..249>.<n>, from the process id and the clock.
fn pod_ip(n: u8) -> String {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let seed = *SEED.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        u64::from(std::process::id()) * 7919 + u64::from(nanos)
    });
    format!("10.{}.{}.{n}", 100 + seed % 100, (seed / 100) % 250)
}

/// Deletes the test's namespaces when it ends, passed or not (without
/// waiting): a later run reads every namespace's pods.
struct CleanUp<'a>(&'a Cluster, Vec<String>);

impl Drop for CleanUp<'_> {
    fn drop(&mut self) {
        for ns in &self.1 {
            let _ = self
                .0
                .kubectl(&["delete", "namespace", ns, "--wait=false"], None);
        }
    }
}

fn access_log(caller_ip: &str, owner: &str, owner_ip: &str) -> String {
    let call = |svc: &str, port: u32, dst: &str| {
        access_log::line(
            caller_ip,
            &format!("{svc}.{owner}.svc.cluster.local:{port}"),
            &format!("outbound|{port}||{svc}.{owner}.svc.cluster.local"),
            dst,
        )
    };
    let dst = format!("{owner_ip}:8080");
    call("api", 8080, &dst) + &call("owned", 80, &dst)
}

#[test]
fn apply_exports_writes_only_export_to_and_leaves_owner_set_ones_alone() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let caller = c.namespace("exp-caller", &[]);
    let owner = c.namespace("exp-owner", &[]);
    let _clean = CleanUp(c, vec![caller.clone(), owner.clone()]);
    c.apply(&(proxied_pod(&caller, "web") + &owner_objects(&owner)));
    c.set_pod_ip(&caller, "web", &pod_ip(1)).unwrap();
    c.set_pod_ip(&owner, "api", &pod_ip(2)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    std::fs::write(&log, access_log(&pod_ip(1), &owner, &pod_ip(2))).unwrap();
    let log = log.to_str().unwrap();

    let r = meshscope(
        &c.kubeconfig,
        &[
            "recommend",
            "--exports",
            "-n",
            &owner,
            "--access-log",
            log,
            "-o",
            "table",
        ],
    );
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    let dot_caller = format!(".,{caller}");
    for (kind, name) in [
        ("Service", "api"),
        ("VirtualService", "api-routes"),
        ("DestinationRule", "api"),
    ] {
        let row = r.stdout.lines().find(|l| {
            l.contains(&format!(" {kind} ")) && l.split_whitespace().nth(2) == Some(name)
        });
        let row = row.unwrap_or_else(|| panic!("no row for {kind} {name}:\n{}", r.stdout));
        assert!(
            row.contains(" narrow ") && row.contains(&dot_caller),
            "{row}"
        );
    }
    // The owner's "." hides Service owned (and VirtualService pinned) from
    // the namespace that calls them.
    assert!(
        r.stderr.contains(&format!(
            "error MS0019: Service {owner}/owned is called from {caller}"
        )),
        "{}",
        r.stderr
    );

    let before = [
        ("service", "api"),
        ("virtualservice", "api-routes"),
        ("destinationrule", "api"),
        ("service", "owned"),
        ("virtualservice", "pinned"),
    ]
    .map(|(k, n)| (k, n, get(c, &owner, k, n)));
    let r = meshscope(
        &c.kubeconfig,
        &["apply", "--exports", "-n", &owner, "--access-log", log],
    );
    assert_eq!(r.ok(), Outcome::Ok, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(&format!("virtualservice.networking.istio.io/api-routes configured (namespace {owner}): exportTo [., {caller}]")), "{}", r.stdout);
    assert!(
        r.stderr.contains(&format!("VirtualService {owner}/pinned")),
        "{}",
        r.stderr
    );
    // One summary line counts what the lines above report.
    let configured = r.stdout.matches(" configured (namespace ").count();
    assert!(configured > 0, "{}", r.stdout);
    assert!(
        r.stderr
            .lines()
            .any(|l| l == format!("apply --exports: {configured} configured")),
        "{}",
        r.stderr
    );

    for (kind, name, old) in &before {
        let now = get(c, &owner, kind, name);
        // Nothing but exportTo (the annotation) changed, and no label was added.
        assert_eq!(
            untouched_part(now.clone()),
            untouched_part(old.clone()),
            "{kind}/{name}"
        );
        let fields = meshscope_fields(&now);
        match (*kind, *name) {
            ("service", "api") => {
                assert_eq!(
                    now["metadata"]["annotations"]["networking.istio.io/exportTo"],
                    dot_caller.as_str()
                );
                assert_eq!(
                    fields.unwrap(),
                    serde_json::json!({"f:metadata": {"f:annotations": {"f:networking.istio.io/exportTo": {}}}})
                );
            }
            ("virtualservice", _) | ("destinationrule", _) if *name != "pinned" => {
                assert_eq!(
                    now["spec"]["exportTo"],
                    serde_json::json!([".", caller]),
                    "{kind}/{name}"
                );
                assert_eq!(
                    fields.unwrap(),
                    serde_json::json!({"f:spec": {"f:exportTo": {}}}),
                    "{kind}/{name}"
                );
            }
            // Owner-set: untouched, and meshscope owns nothing there.
            _ => {
                assert_eq!(now, *old, "{kind}/{name}");
                assert_eq!(fields, None, "{kind}/{name}");
            }
        }
    }

    // Again: every object is as recommended, nothing is written.
    let r = meshscope(
        &c.kubeconfig,
        &[
            "recommend",
            "--exports",
            "-n",
            &owner,
            "--access-log",
            log,
            "-o",
            "name",
        ],
    );
    assert_eq!(
        (r.ok(), r.stdout.as_str()),
        (Outcome::Ok, ""),
        "{}",
        r.stderr
    );

    // --force-exports recommends for the owner-set ones too; the owner's
    // client-side apply owns the field, so the write is a conflict until
    // --force-conflicts takes it over.
    let force = [
        "apply",
        "--exports",
        "--force-exports",
        "-n",
        &owner,
        "--access-log",
        log,
    ];
    let r = meshscope(&c.kubeconfig, &force);
    assert_eq!(r.ok(), Outcome::Ok, "{}\n{}", r.stdout, r.stderr);
    let conflict = format!("service/owned skipped (namespace {owner}): conflict: ");
    assert!(r.stdout.contains(&conflict), "{}", r.stdout);
    let owned = get(c, &owner, "service", "owned");
    assert_eq!(
        owned["metadata"]["annotations"]["networking.istio.io/exportTo"],
        "."
    );
    let r = meshscope(
        &c.kubeconfig,
        &[&force[..], &["--force-conflicts"]].concat(),
    );
    assert_eq!(r.ok(), Outcome::Ok, "{}\n{}", r.stdout, r.stderr);
    let owned = get(c, &owner, "service", "owned");
    assert_eq!(
        owned["metadata"]["annotations"]["networking.istio.io/exportTo"],
        dot_caller.as_str()
    );
    let pinned = get(c, &owner, "virtualservice", "pinned");
    assert_eq!(pinned["spec"]["exportTo"], serde_json::json!([".", caller]));
}

#[test]
fn dry_runs_and_diff_exports_ask_the_server_and_write_nothing() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let caller = c.namespace("exp-dry-caller", &[]);
    let owner = c.namespace("exp-dry-owner", &[]);
    let _clean = CleanUp(c, vec![caller.clone(), owner.clone()]);
    c.apply(&(proxied_pod(&caller, "web") + &owner_objects(&owner)));
    c.set_pod_ip(&caller, "web", &pod_ip(3)).unwrap();
    c.set_pod_ip(&owner, "api", &pod_ip(4)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    std::fs::write(&log, access_log(&pod_ip(3), &owner, &pod_ip(4))).unwrap();
    let log = log.to_str().unwrap();
    let r = meshscope(
        &c.kubeconfig,
        &[
            "apply",
            "--exports",
            "--dry-run=server",
            "-n",
            &owner,
            "--access-log",
            log,
        ],
    );
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    assert!(
        r.stdout.contains("configured (server dry run)"),
        "{}",
        r.stdout
    );
    let vs = get(c, &owner, "virtualservice", "api-routes");
    assert_eq!(
        (meshscope_fields(&vs), &vs["spec"]["exportTo"]),
        (None, &Value::Null)
    );
    // diff --exports: a unified diff per object, exit 1 for differences.
    let r = meshscope(
        &c.kubeconfig,
        &["diff", "--exports", "-n", &owner, "--access-log", log],
    );
    assert_eq!(r.ok(), Outcome::Findings, "{}", r.stderr);
    let added = |needle: &str| {
        r.stdout
            .lines()
            .any(|l| l.starts_with('+') && l.contains(needle))
    };
    assert!(added(&format!("- {caller}")), "{}", r.stdout);
    assert!(added("networking.istio.io/exportTo"), "{}", r.stdout);
    let svc = get(c, &owner, "service", "api");
    assert_eq!(
        svc["metadata"]["annotations"]["networking.istio.io/exportTo"],
        Value::Null
    );
}

/// `recommend --exports` from files: patches of exportTo only (the
/// annotation for a Service), to apply server-side; no traffic, no
/// recommendation.
#[test]
fn offline_recommend_exports_prints_export_to_patches_and_needs_traffic() {
    let root = meshscope_test_support::outside::repo_root();
    let manifests = root.join("examples/bookinfo/manifests.yaml");
    let manifests = manifests.to_str().unwrap();
    let log = root.join("examples/bookinfo/access.log");
    let args = ["recommend", "--exports", "-A", "--manifests", manifests];
    let r = meshscope_e2e::run::meshscope(
        &[&args[..], &["--access-log", log.to_str().unwrap()]].concat(),
    );
    assert_eq!(r.ok(), Outcome::Ok, "{}", r.stderr);
    assert!(
        r.stdout
            .starts_with("# exportTo patches: apply them server-side"),
        "{}",
        r.stdout
    );
    let mut kinds = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&r.stdout) {
        let v: Value = serde::Deserialize::deserialize(doc).unwrap();
        if v.is_null() {
            continue;
        }
        let meta: Vec<&String> = v["metadata"].as_object().unwrap().keys().collect();
        match v["kind"].as_str().unwrap() {
            "Service" => {
                assert_eq!(meta, ["annotations", "name", "namespace"], "{v}");
                assert_eq!(
                    v["metadata"]["annotations"].as_object().unwrap().len(),
                    1,
                    "{v}"
                );
                assert!(v.get("spec").is_none(), "{v}");
            }
            _ => {
                assert_eq!(meta, ["name", "namespace"], "{v}");
                let spec: Vec<&String> = v["spec"].as_object().unwrap().keys().collect();
                assert_eq!(spec, ["exportTo"], "{v}");
            }
        }
        kinds.push(v["kind"].as_str().unwrap().to_string());
    }
    for kind in [
        "Service",
        "ServiceEntry",
        "VirtualService",
        "DestinationRule",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "{kind}: {kinds:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.log");
    std::fs::write(&empty, "").unwrap();
    let r = meshscope_e2e::run::meshscope(
        &[&args[..], &["--access-log", empty.to_str().unwrap()]].concat(),
    );
    assert!(
        r.error().starts_with("--exports needs observed traffic"),
        "{}",
        r.error()
    );
}

/// `recommend --exports -f FILE` (issue #35 item 3): a DNS ServiceEntry
/// that is not in the cluster yet gets its exportTo planned into its
/// manifest, from the traffic that calls its host, every other field as
/// written; the manifest applies as printed. apply --exports refuses -f.
#[test]
fn recommend_exports_plans_the_export_to_of_a_manifest_not_applied_yet() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let caller = c.namespace("expf-caller", &[]);
    let owner = c.namespace("expf-owner", &[]);
    let _clean = CleanUp(c, vec![caller.clone(), owner.clone()]);
    c.apply(&proxied_pod(&caller, "web"));
    c.set_pod_ip(&caller, "web", &pod_ip(11)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let call = access_log::line(
        &pod_ip(11),
        "api.payments.example:443",
        "outbound|443||api.payments.example",
        "203.0.113.10:443",
    );
    std::fs::write(&log, call).unwrap();
    let file = dir.path().join("entry.yaml");
    std::fs::write(
        &file,
        format!("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: payments\n  namespace: {owner}\n  labels: {{team: payments}}\nspec:\n  hosts: [api.payments.example]\n  location: MESH_EXTERNAL\n  resolution: DNS\n  ports:\n  - {{number: 443, name: tls, protocol: TLS}}\n  subjectAltNames: [spiffe://payments.example/api]\n"),
    )
    .unwrap();
    let (log, file) = (log.to_str().unwrap(), file.to_str().unwrap());
    let r = meshscope(
        &c.kubeconfig,
        &[
            "recommend",
            "--exports",
            "-f",
            file,
            "-n",
            &owner,
            "--access-log",
            log,
        ],
    );
    assert_eq!(r.outcome.unwrap(), Outcome::Ok, "{}", r.stderr);
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&r.stdout)
        .filter_map(|d| serde::Deserialize::deserialize(d).ok())
        .filter(|v: &Value| v.is_object())
        .collect();
    assert_eq!(docs.len(), 1, "{}", r.stdout);
    let se = &docs[0];
    assert_eq!(
        se["spec"]["exportTo"],
        serde_json::json!([".", caller]),
        "{}",
        r.stdout
    );
    assert_eq!(
        se["spec"]["subjectAltNames"][0],
        "spiffe://payments.example/api"
    );
    assert_eq!(se["metadata"]["labels"]["team"], "payments");
    // It applies as printed (the API server validates it whole).
    c.kubectl_ok(&["apply", "--dry-run=server", "-f", "-"], Some(&r.stdout));
    let r = meshscope(
        &c.kubeconfig,
        &[
            "apply",
            "--exports",
            "-f",
            file,
            "-n",
            &owner,
            "--access-log",
            log,
        ],
    );
    let e = format!("{:#}", r.outcome.unwrap_err());
    assert!(
        e.contains("plan their exportTo with `kubectl meshscope recommend --exports -f FILE`"),
        "{e}"
    );
}
