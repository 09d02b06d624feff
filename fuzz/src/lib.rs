//! The bodies of meshscope's fuzz targets, one plain function per target.
//!
//! Nothing here depends on libFuzzer: `fuzz/fuzz_targets/*.rs` call these
//! functions from `fuzz_target!`, and the workspace's regression test
//! (`tests/tests/e2e/fuzz_regressions.rs`) includes this file with `#[path]`
//! and replays every committed seed and every input that ever crashed
//! through them on stable Rust. A body returns normally on any input; a
//! panic is a finding. Besides "does not panic", some bodies check
//! properties that must hold for every input (a trailing newline changes
//! no parse, a parsed egress host prints back to itself, splitting a log
//! between two workers changes no count).
//!
//! The fixed mesh is examples/bookinfo plus `fuzz/fixtures/cluster.yaml`,
//! compiled into the binary and loaded once.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use kubectl_meshscope::input::{add_documents, ingest_chunk, SHOWN_MALFORMED};
use kubectl_meshscope::selector::Selector;
use meshscope_shared::accesslog::{parse_line, Line};
use meshscope_shared::admission::{self as policy, Config, Endpoint, Policy, Request};
use meshscope_shared::audit::{self, AuditScope};
use meshscope_shared::detect::{self, Evidence, KNOWN_MINORS};
use meshscope_shared::host::{self, HostEntry};
use meshscope_shared::observe::{LogIngest, Observations};
use meshscope_shared::recommend::{self, RecommendOptions};
use meshscope_shared::{Inputs, IstioVersion, MeshConfig, MeshSnapshot, Options};
use meshscope_webhook::admission::{operation, read_request, respond};

const BOOKINFO: &str = include_str!("../../examples/bookinfo/manifests.yaml");
const CLUSTER: &str = include_str!("../fixtures/cluster.yaml");

/// The objects of the fixed mesh.
fn fixed_inputs() -> &'static Inputs {
    static INPUTS: OnceLock<Inputs> = OnceLock::new();
    INPUTS.get_or_init(|| {
        let mut inputs = Inputs::default();
        for text in [BOOKINFO, CLUSTER] {
            add_documents(&mut inputs, text).expect("the fuzz fixtures load");
        }
        inputs
    })
}

/// The fixed mesh as a snapshot, built once.
pub fn snapshot() -> &'static MeshSnapshot {
    static SNAP: OnceLock<MeshSnapshot> = OnceLock::new();
    SNAP.get_or_init(|| {
        MeshSnapshot::build(fixed_inputs(), Options::default()).expect("the fuzz fixtures build")
    })
}

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

// === accesslog_line ===

/// `parse_line` on one arbitrary line (text layouts, JSON, shipper records).
pub fn accesslog_line(data: &[u8]) {
    let Some(line) = text(data) else { return };
    let parsed = parse_line(line);
    // Line ends are not part of the line.
    let with_newline = format!("{line}\r\n");
    assert_eq!(
        parse_line(&with_newline),
        parsed,
        "a trailing CRLF changed the parse of {line:?}"
    );
    if let Line::Access(rec) = &parsed {
        // `-` and "" mean "no value" in every layout.
        for v in [
            &rec.authority,
            &rec.upstream_host,
            &rec.downstream_local,
            &rec.downstream_remote,
            &rec.start_time,
        ]
        .into_iter()
        .flatten()
        {
            assert!(!v.is_empty() && v != "-", "{v:?} kept as a value");
        }
    }
}

// === ingest ===

/// What must not depend on how a log is cut between workers (what the
/// plugin's own chunking test compares).
fn summary(obs: &Observations) -> String {
    let mut unregistered = obs.unregistered.clone();
    unregistered.sort_by(|a, b| {
        b.requests
            .cmp(&a.requests)
            .then(a.address.cmp(&b.address))
            .then(a.workload.cmp(&b.workload))
    });
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}",
        obs.stats, obs.traffic, unregistered, obs.window
    )
}

/// A chunk of access log through the whole ingest path: `LogIngest` line by
/// line, the plugin's chunk ingestion (whole, and cut in two between two
/// workers, then merged), then recommend and audit on what was observed.
pub fn ingest(data: &[u8]) {
    let snap = snapshot();
    // Line by line, as `ingest_chunk` splits them.
    let lossy = String::from_utf8_lossy(data);
    let mut by_line = LogIngest::new(snap, "fuzz");
    let mut lines = 0u64;
    for line in lossy.split_terminator('\n') {
        lines += 1;
        if !line.is_empty() {
            by_line.line(line);
        }
    }
    let by_line = by_line.finish();

    // The plugin's path, in one chunk.
    let mut whole = LogIngest::new(snap, "fuzz");
    let mut malformed = Vec::new();
    let n = ingest_chunk(&mut whole, data, &mut malformed);
    assert_eq!(n, lines, "line count");
    assert!(malformed.len() <= SHOWN_MALFORMED);
    assert!(malformed.iter().all(|(n, _, _)| (1..=lines).contains(n)));
    let whole = whole.finish();
    assert_eq!(summary(&whole), summary(&by_line), "chunk vs lines");

    // Two workers, each with a whole-line half.
    let cut = memchr_from(data, data.len() / 2).map_or(data.len(), |i| i + 1);
    let (a, b) = data.split_at(cut);
    let mut first = LogIngest::new(snap, "fuzz");
    let mut second = LogIngest::new(snap, "fuzz");
    let (mut ma, mut mb) = (Vec::new(), Vec::new());
    let na = ingest_chunk(&mut first, a, &mut ma);
    let nb = ingest_chunk(&mut second, b, &mut mb);
    assert_eq!(na + nb, lines, "line count over two chunks");
    let mut merged = first.finish();
    merged.merge(second.finish());
    assert_eq!(summary(&merged), summary(&whole), "two workers vs one");

    // What the commands make of it.
    let workloads: Vec<_> = snap.sidecar_workloads().collect();
    let _ = recommend::recommend(snap, &whole, &workloads, &RecommendOptions::default());
    let _ = audit::audit(
        snap,
        Some(&whole),
        &AuditScope {
            namespaces: None,
            workloads: None,
        },
    );
}

fn memchr_from(data: &[u8], from: usize) -> Option<usize> {
    data.get(from..)?
        .iter()
        .position(|b| *b == b'\n')
        .map(|i| i + from)
}

// === manifests ===

/// The manifest loader on one file's text, then what the plugin does with
/// what it loaded: options from the pods, the snapshot, audit, recommend.
pub fn manifests(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let mut inputs = Inputs::default();
    if add_documents(&mut inputs, text).is_err() || inputs.is_empty() {
        return;
    }
    // As World::load without flags: the version and cluster domain the pods
    // show, istiod's pods among the inputs.
    let istiod = detect::istiod_pods(&inputs.pods);
    let evidence = Evidence::from_pods(&inputs.pods, &istiod);
    let (istio, _notes) = evidence.version(None);
    let (cluster_domain, _note) = evidence.cluster_domain(None);
    let options = Options {
        istio,
        cluster_domain,
        inject_by_default: false,
    };
    let Ok(snap) = MeshSnapshot::build(&inputs, options) else {
        return;
    };
    let _ = audit::audit(
        &snap,
        None,
        &AuditScope {
            namespaces: None,
            workloads: None,
        },
    );
    let workloads: Vec<_> = snap.sidecar_workloads().collect();
    let opts = RecommendOptions {
        allow_idle: true,
        ..RecommendOptions::default()
    };
    let _ = recommend::recommend(&snap, &Observations::default(), &workloads, &opts);
}

// === mesh_config ===

/// `MeshConfig::from_yaml` on the text of ConfigMap `istio`'s `mesh` key;
/// what parses, the fixed mesh is rebuilt with.
pub fn mesh_config(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let Ok(mesh) = MeshConfig::from_yaml(text) else {
        return;
    };
    assert!(!mesh.root_namespace.is_empty());
    let snap = MeshSnapshot::build_with_mesh(fixed_inputs(), Options::default(), mesh);
    let _ = audit::audit(
        &snap,
        None,
        &AuditScope {
            namespaces: None,
            workloads: None,
        },
    );
}

// === admission_review ===

/// The webhook's settings the fuzzer tries every request with.
fn configs() -> [Config; 3] {
    [
        Config::default(),
        Config {
            default_policy: Policy::Enforce,
            mutate_service_entry_export_to: true,
        },
        Config {
            default_policy: Policy::Off,
            mutate_service_entry_export_to: true,
        },
    ]
}

/// An AdmissionReview body through the webhook's decoder, then the rules
/// on both endpoints as the webhook calls them (with and without a looked-up
/// namespace), then the response.
pub fn admission_review(data: &[u8]) {
    let Ok(req) = read_request(data) else { return };
    let snap = snapshot();
    let ns = req.namespace();
    let looked_up = snap.namespace("shop").cloned();
    for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
        for cfg in &configs() {
            for fallback in [None, looked_up.as_ref()] {
                let request = Request {
                    endpoint,
                    operation: operation(&req.operation),
                    group: &req.kind.group,
                    kind: &req.kind.kind,
                    namespace: ns,
                    name: &req.name,
                    object: req.object,
                    namespace_fallback: if snap.namespace(ns).is_none() {
                        fallback
                    } else {
                        None
                    },
                };
                let decision = policy::review(&request, snap, cfg);
                if !policy::in_scope(&request, cfg) {
                    assert!(decision.allowed && decision.patch.is_none());
                }
                if endpoint == Endpoint::Validate {
                    assert!(decision.patch.is_none(), "/validate patched");
                }
                let _ = decision.outcome();
                let _ = respond(&req.uid, &decision);
            }
        }
    }
}

// === selector ===

/// Label sets every selector is matched against.
fn label_sets() -> &'static [BTreeMap<String, String>] {
    static SETS: OnceLock<Vec<BTreeMap<String, String>>> = OnceLock::new();
    SETS.get_or_init(|| {
        let set = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        vec![
            set(&[]),
            set(&[("app", "web")]),
            set(&[("app", "web"), ("version", "v1"), ("tier", "3")]),
            set(&[("app.kubernetes.io/name", "x"), ("replicas", "-12")]),
            set(&[("", ""), ("a", "")]),
        ]
    })
}

/// `-l` selectors: parse, then match against fixed label sets.
pub fn selector(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let Ok(sel) = Selector::parse(text) else {
        return;
    };
    for labels in label_sets() {
        let _ = sel.matches(labels);
    }
    // The empty selector matches everything.
    if text.trim().is_empty() {
        assert!(label_sets().iter().all(|l| sel.matches(l)));
    }
}

// === egress_host ===

/// Egress `hosts` entries under every Istio release meshscope knows: what
/// parses prints back to itself, and matches like its host.
pub fn egress_host(data: &[u8]) {
    let Some(raw) = text(data) else { return };
    for minor in KNOWN_MINORS {
        let version = IstioVersion { major: 1, minor };
        let Ok(entry) = HostEntry::parse(raw, version) else {
            continue;
        };
        let printed = entry.to_string();
        let again = HostEntry::parse(&printed, version)
            .unwrap_or_else(|e| panic!("{raw:?} printed as {printed:?}, which fails: {e}"));
        assert_eq!(again, entry, "{raw:?} printed as {printed:?}");
        let _ = entry.is_everything();
        let _ = entry.is_closed();
        let _ = entry.ns.matches("bookinfo", "istio-system");
        for svc in [
            "details.bookinfo.svc.cluster.local",
            "*.example.com",
            "api.example.com",
            "*",
        ] {
            let _ = host::host_subset_of(svc, &entry.host);
            let _ = host::hosts_overlap(svc, &entry.host);
        }
    }
}

/// A target's body.
pub type Body = fn(&[u8]);

/// Every target, by name: what the regression test iterates over.
pub const TARGETS: &[(&str, Body)] = &[
    ("accesslog_line", accesslog_line),
    ("ingest", ingest),
    ("manifests", manifests),
    ("mesh_config", mesh_config),
    ("admission_review", admission_review),
    ("selector", selector),
    ("egress_host", egress_host),
];
