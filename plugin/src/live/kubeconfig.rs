//! The kubeconfig, found as kubectl finds it, and its errors as one line
//! with the fix.

use std::path::{Path, PathBuf};

use kube::config::{Kubeconfig, KubeconfigError};

use super::failure::{clean_quotes, error_chain};

/// `KUBECONFIG`, `--kubeconfig` or `~/.kube/config`, for error texts.
fn read_kubeconfig(path: &Path, what: &str) -> anyhow::Result<Kubeconfig> {
    Kubeconfig::read_from(path).map_err(|e| match e {
        KubeconfigError::ReadConfig(io, _) => anyhow::anyhow!(
            "cannot read {what} {}: {}; point {what} at a kubeconfig file",
            path.display(),
            io_text(&io)
        ),
        KubeconfigError::Parse(p) => anyhow::anyhow!(
            "cannot parse {what} {}: {}; fix its YAML",
            path.display(),
            p.to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ")
        ),
        other => anyhow::anyhow!(
            "invalid {what} {}: {}",
            path.display(),
            clean_quotes(&other.to_string())
        ),
    })
}

/// `No such file or directory (os error 2)` as `no such file or directory`.
fn io_text(e: &std::io::Error) -> String {
    let t = e.to_string();
    let t = t.split(" (os error").next().unwrap_or_default();
    let mut c = t.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

/// The kubeconfig as kubectl finds it: `--kubeconfig`, else every file
/// of `KUBECONFIG` that exists, merged (the first to set a value wins),
/// else `~/.kube/config`; `None` when there is none.
pub fn load_kubeconfig(flag: Option<&Path>) -> anyhow::Result<Option<(Kubeconfig, String)>> {
    if let Some(p) = flag {
        let what = format!("--kubeconfig {}", p.display());
        return Ok(Some((read_kubeconfig(p, "--kubeconfig")?, what)));
    }
    if let Some(v) = std::env::var_os("KUBECONFIG") {
        let paths: Vec<PathBuf> = std::env::split_paths(&v)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if !paths.is_empty() {
            let existing: Vec<&PathBuf> = paths.iter().filter(|p| p.exists()).collect();
            if existing.is_empty() {
                anyhow::bail!(
                    "no file in KUBECONFIG exists ({}); set KUBECONFIG to your kubeconfig, or pass --kubeconfig",
                    paths
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            let mut merged = Kubeconfig::default();
            for p in &existing {
                let k = read_kubeconfig(p, "KUBECONFIG file")?;
                merged = merged.merge(k).map_err(|e| {
                    anyhow::anyhow!(
                        "cannot merge KUBECONFIG file {} with the ones before it: {e}",
                        p.display()
                    )
                })?;
            }
            let what = if existing.len() == 1 {
                format!("KUBECONFIG {}", existing[0].display())
            } else {
                format!(
                    "KUBECONFIG ({})",
                    existing
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Ok(Some((merged, what)));
        }
    }
    let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
        return Ok(None);
    };
    let default = PathBuf::from(home).join(".kube").join("config");
    if !default.exists() {
        return Ok(None);
    }
    let what = default.display().to_string();
    Ok(Some((read_kubeconfig(&default, "kubeconfig")?, what)))
}

/// A kubeconfig that does not name a usable context, cluster or URL, as
/// one line with the fix.
pub(super) fn kubeconfig_error(e: KubeconfigError, k: &Kubeconfig, from: &str) -> anyhow::Error {
    let contexts = || {
        let names: Vec<&str> = k.contexts.iter().map(|c| c.name.as_str()).collect();
        if names.is_empty() {
            "it has none".to_string()
        } else {
            format!("it has {}", names.join(", "))
        }
    };
    match e {
        KubeconfigError::CurrentContextNotSet => anyhow::anyhow!(
            "{from} sets no current-context ({}); pass --context, or run `kubectl config use-context NAME`",
            contexts()
        ),
        KubeconfigError::LoadContext(name) => anyhow::anyhow!(
            "context {name:?} is not in {from} ({}); pass one of them with --context",
            contexts()
        ),
        KubeconfigError::LoadClusterOfContext(cluster) => anyhow::anyhow!(
            "the context names cluster {cluster:?}, which {from} does not define; fix the context, or pass another --context"
        ),
        KubeconfigError::MissingClusterUrl => anyhow::anyhow!(
            "the context's cluster in {from} has no server URL; set clusters[].cluster.server"
        ),
        KubeconfigError::ParseClusterUrl(u) => anyhow::anyhow!(
            "the context's cluster in {from} has an invalid server URL ({u}); fix clusters[].cluster.server"
        ),
        KubeconfigError::LoadCertificateAuthority(e) => anyhow::anyhow!(
            "cannot load the certificate authority named in {from} ({}); fix the cluster's certificate-authority(-data)",
            error_chain(&e)
        ),
        KubeconfigError::LoadClientCertificate(e) | KubeconfigError::LoadClientKey(e) => {
            anyhow::anyhow!(
                "cannot load the client certificate or key named in {from} ({}); fix the user's client-certificate(-data) and client-key(-data)",
                error_chain(&e)
            )
        }
        other => anyhow::anyhow!("invalid {from}: {}", error_chain(&other)),
    }
}
