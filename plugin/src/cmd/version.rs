//! `kubectl meshscope version`: the client's version and, from the cluster
//! (or `--manifests`), the Istio versions istiod and the proxies run, and
//! the one whose semantics meshscope applies.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Result;
use meshscope_shared::detect::Evidence;
use meshscope_shared::inputs::Pod as ObservedPod;
use serde::Serialize;

use crate::args::{VersionArgs, VersionOutput};
use crate::live::{Live, Select};
use crate::{detect, input, output, version_flag, Outcome, VERSION};

#[derive(Serialize)]
struct Report {
    client: String,
    /// istiod pods per Istio version.
    istiod: BTreeMap<String, usize>,
    /// Injected proxies per Istio version.
    proxies: BTreeMap<String, usize>,
    /// The version whose semantics the other commands apply.
    semantics: String,
    cluster_domain: Option<String>,
    notes: Vec<String>,
}

pub fn cmd_version(a: VersionArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<Outcome> {
    if a.client {
        match a.output {
            None => writeln!(out, "Client Version: {VERSION}")?,
            Some(VersionOutput::Json) => {
                output::json(out, &serde_json::json!({"client": VERSION}))?
            }
            Some(VersionOutput::Yaml) => {
                output::yaml(out, &serde_json::json!({"client": VERSION}))?
            }
        }
        return Ok(Outcome::Ok);
    }
    let flag = version_flag(&a.common)?;
    let evidence = if a.common.manifests.is_empty() {
        // The client's version comes first, as kubectl prints it before it
        // asks the server.
        if a.output.is_none() {
            writeln!(out, "Client Version: {VERSION}")?;
        }
        live_evidence(&a.common)?
    } else {
        let inputs = input::load_manifests(&a.common.manifests)?;
        let istiod = meshscope_shared::detect::istiod_pods(&inputs.pods);
        if a.output.is_none() {
            writeln!(out, "Client Version: {VERSION}")?;
        }
        Evidence::from_pods(&inputs.pods, &istiod)
    };
    let (semantics, notes) = evidence.version(flag);
    let count = |m: &BTreeMap<meshscope_shared::IstioVersion, usize>| {
        m.iter()
            .map(|(v, n)| (v.to_string(), *n))
            .collect::<BTreeMap<_, _>>()
    };
    let r = Report {
        client: VERSION.to_string(),
        istiod: count(&evidence.istiod),
        proxies: count(&evidence.proxies),
        semantics: semantics.to_string(),
        cluster_domain: evidence.domain().map(String::from),
        notes,
    };
    match a.output {
        Some(VersionOutput::Json) => output::json(out, &r)?,
        Some(VersionOutput::Yaml) => output::yaml(out, &r)?,
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
            if let Some(d) = &r.cluster_domain {
                writeln!(out, "Cluster domain: {d}")?;
            }
            for n in &r.notes {
                writeln!(err, "note: {n}")?;
            }
        }
    }
    Ok(Outcome::Ok)
}

/// Every pod's images (lean, page by page) and istiod's.
fn live_evidence(c: &crate::args::Common) -> Result<Evidence> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let live = Live::connect(&c.connect_options()).await?;
        // Reachability and RBAC first, with the usual one-line errors.
        live.probe().await?;
        let all: Vec<ObservedPod> = live.list(None, Select::ALL).await?;
        let istiod = detect::istiod_pods(&live).await;
        Ok(Evidence::from_pods(&all, &istiod))
    })
}
