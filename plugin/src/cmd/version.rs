//! `kubectl meshscope version`: the client's version and, from the cluster
//! (or `--manifests`), the Istio versions istiod and the proxies run, and
//! the one whose semantics meshscope applies.

use std::collections::BTreeMap;

use anyhow::Result;
use meshscope_shared::detect::{DomainSource, Evidence};
use meshscope_shared::inputs::Pod as ObservedPod;
use meshscope_shared::installed::WebhookState;
use serde::Serialize;

use meshscope_shared::IstioVersion;

use crate::args::VersionOutput;
use crate::detect;
use crate::input;
use crate::live::{ConnectOptions, FailureKind, Live, Select};
use crate::outcome::Outcome;
use crate::output::{self, Printer};
use crate::request::{VersionRequest, VersionSource};

#[derive(Serialize)]
struct Report {
    client: String,
    /// The commit the client was built from.
    commit: &'static str,
    /// istiod pods per Istio version.
    istiod: BTreeMap<String, usize>,
    /// Injected proxies per Istio version.
    proxies: BTreeMap<String, usize>,
    /// The version whose semantics the other commands apply.
    semantics: String,
    /// The cluster domain the other commands use.
    cluster_domain: String,
    /// Where it comes from: `flag`, `cluster` (istiod's or the proxies'
    /// `--domain`) or `default`.
    cluster_domain_source: &'static str,
    /// meshscope's validating webhooks, from the cluster (`None`: not
    /// read, offline or not allowed).
    #[serde(skip_serializing_if = "Option::is_none")]
    webhooks: Option<Vec<WebhookState>>,
    notes: Vec<String>,
}

/// The client's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit the client was built from (`plugin/build.rs`): `unknown`
/// for a build outside a git checkout.
pub const COMMIT: &str = env!("MESHSCOPE_COMMIT");

/// The client line every form of `version` prints first.
fn client_line(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(out, "Client Version: {VERSION} (commit {COMMIT})")
}

pub fn run(r: &VersionRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    let out = &mut *p.out;
    let evidence = match &r.source {
        VersionSource::Client => {
            match r.output {
                None => client_line(out)?,
                Some(VersionOutput::Json) => output::json(
                    out,
                    &serde_json::json!({"client": VERSION, "commit": COMMIT}),
                )?,
                Some(VersionOutput::Yaml) => output::yaml(
                    out,
                    &serde_json::json!({"client": VERSION, "commit": COMMIT}),
                )?,
            }
            return Ok(Outcome::Ok);
        }
        VersionSource::Cluster(connect) => {
            // The client's version comes first, as kubectl prints it before
            // it asks the server.
            if r.output.is_none() {
                client_line(out)?;
            }
            let (evidence, webhooks) = live_evidence(connect, p.err)?;
            let mut report = report(&evidence, r.istio_version, r.cluster_domain.as_deref());
            report.webhooks = webhooks;
            return print(&report, r.output, p);
        }
        VersionSource::Manifests(paths) => {
            let inputs = input::load_manifests(paths)?;
            let istiod = meshscope_shared::detect::istiod_pods(&inputs.pods);
            if r.output.is_none() {
                client_line(out)?;
            }
            Evidence::from_pods(&inputs.pods, &istiod)
        }
    };
    let report = report(&evidence, r.istio_version, r.cluster_domain.as_deref());
    print(&report, r.output, p)
}

/// What the evidence says, with `--istio-version` and `--cluster-domain`
/// when given.
fn report(evidence: &Evidence, flag: Option<IstioVersion>, domain_flag: Option<&str>) -> Report {
    let (semantics, mut notes) = evidence.version(flag);
    let (cluster_domain, note) = evidence.cluster_domain(domain_flag);
    notes.extend(note);
    let cluster_domain_source = match evidence.domain_source(domain_flag) {
        DomainSource::Flag => "flag",
        DomainSource::Cluster => "cluster",
        DomainSource::Default => "default",
    };
    let count = |m: &BTreeMap<meshscope_shared::IstioVersion, usize>| {
        m.iter()
            .map(|(v, n)| (v.to_string(), *n))
            .collect::<BTreeMap<_, _>>()
    };
    Report {
        client: VERSION.to_string(),
        commit: COMMIT,
        istiod: count(&evidence.istiod),
        proxies: count(&evidence.proxies),
        semantics: semantics.to_string(),
        cluster_domain,
        cluster_domain_source,
        webhooks: None,
        notes,
    }
}

/// Prints the report: JSON, YAML, or text (its notes on stderr).
fn print(r: &Report, format: Option<VersionOutput>, p: &mut Printer<'_>) -> Result<Outcome> {
    let (out, err) = (&mut *p.out, &mut *p.err);
    match format {
        Some(VersionOutput::Json) => output::json(out, r)?,
        Some(VersionOutput::Yaml) => output::yaml(out, r)?,
        None => {
            let list = |m: &BTreeMap<String, usize>, one: &str, many: &str| {
                if m.is_empty() {
                    "not found".to_string()
                } else {
                    m.iter()
                        .map(|(v, n)| format!("{v} ({})", output::plural(*n, one, many)))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            };
            writeln!(
                out,
                "Istio control plane (istiod): {}",
                list(&r.istiod, "pod", "pods")
            )?;
            writeln!(
                out,
                "Istio data plane (istio-proxy): {}",
                list(&r.proxies, "proxy", "proxies")
            )?;
            writeln!(out, "Semantics applied: Istio {}", r.semantics)?;
            let from = match r.cluster_domain_source {
                "flag" => " (--cluster-domain)",
                "cluster" => "",
                _ => " (the default: neither istiod nor the proxies name one)",
            };
            writeln!(out, "Cluster domain: {}{from}", r.cluster_domain)?;
            if let Some(w) = &r.webhooks {
                print_webhooks(w, out)?;
            }
            for n in &r.notes {
                writeln!(err, "note: {n}")?;
            }
        }
    }
    Ok(Outcome::Ok)
}

/// One line per webhook: where it calls and whether anything answers
/// there. With `failurePolicy: Ignore` and no ready endpoint the API
/// server skips it, so it enforces nothing.
fn print_webhooks(w: &[WebhookState], out: &mut dyn std::io::Write) -> Result<()> {
    if w.is_empty() {
        writeln!(out, "Admission webhook: not installed")?;
    }
    for s in w {
        let at = s.service.as_deref().unwrap_or("a URL");
        let state = match (s.unserved(), s.ready_endpoints) {
            (Some(what), _) => format!(": no ready endpoint, so {what}; check its pods"),
            (None, Some(n)) => format!(
                ", {}",
                output::plural(n, "ready endpoint", "ready endpoints")
            ),
            (None, None) => String::new(),
        };
        writeln!(
            out,
            "Admission webhook: {} ({}) calls {at}{state}",
            s.configuration, s.webhook
        )?;
    }
    Ok(())
}

/// Every pod's images (lean, page by page) and istiod's; for a user who
/// may not list pods in all namespaces, those of the context's namespace,
/// said on stderr, as the other commands narrow. And meshscope's
/// webhooks, when the user may read them.
fn live_evidence(
    connect: &ConnectOptions,
    err: &mut dyn std::io::Write,
) -> Result<(Evidence, Option<Vec<WebhookState>>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let live = Live::connect(connect).await?;
        // Reachability and credentials first, with the usual one-line
        // errors; a denied namespace list is not one.
        if let Err(f) = live.probe().await {
            if !matches!(f.kind, FailureKind::Forbidden(_)) {
                return Err(f.into());
            }
        }
        let (all, home): (Vec<ObservedPod>, _) = live.list_everywhere_or_home(Select::ALL).await?;
        if let Some(ns) = home {
            writeln!(
                err,
                "warning: other namespaces' proxies unknown: cannot list pods in all namespaces, so only namespace {ns:?}'s are counted; grant {} for the rest",
                crate::live::READER_FILE
            )?;
        }
        let istiod = detect::istiod_pods(&live).await;
        let webhooks = match live.meshscope_webhooks().await {
            Ok(w) => Some(w),
            Err(f) => {
                writeln!(err, "note: the admission webhook's state unknown: {f}")?;
                None
            }
        };
        Ok((Evidence::from_pods(&all, &istiod), webhooks))
    })
}
