//! The notes and warnings meshscope derives itself, worded once: the
//! plugin prints them, and the webhook and future commands get the same
//! text. Pure functions of the inputs, the snapshot and the results; each
//! returns the text without its `note:`/`warning:` prefix unless it says
//! otherwise.

use crate::host::HostEntry;
use crate::observe::Observations;
use crate::recommend::{Outcome, Recommendation};
use crate::{Inputs, IstioVersion, MeshSnapshot};

/// The traffic sources, as the notes name them.
const SOURCES: &str = "--access-log, --from-pod-logs or --prometheus";

/// The level of [`Inputs::skipped_note`]: a typo or a wrong API group is
/// a mistake to fix (`warning`); other kinds (Secrets, Roles, ...) are
/// only not needed (`note`).
pub fn skipped_kinds_level(inputs: &Inputs) -> &'static str {
    if inputs.skipped_mistakes > 0 {
        "warning"
    } else {
        "note"
    }
}

/// What ingesting access logs counted: one line, and with unattributed
/// lines a second naming up to five of their sources.
pub fn ingest_summary(obs: &Observations) -> Vec<String> {
    let s = &obs.stats;
    let mut lines = vec![format!(
        "access logs: {} lines, {} access-log lines, {} other proxy output skipped, {} malformed, {} unattributed",
        s.lines, s.access_lines, s.not_access_log, s.malformed, s.unattributed
    )];
    if s.unattributed > 0 {
        let samples: Vec<String> = obs
            .unattributed_samples
            .iter()
            .take(5)
            .map(|(k, v)| format!("{k} ({v})"))
            .collect();
        lines.push(format!(
            "  lines whose source matched no pod in the snapshot: {}",
            samples.join(", ")
        ));
    }
    lines
}

/// The warning when a recommendation has no traffic to go on (with
/// `--allow-idle`, what that flag then does to every workload).
pub fn no_traffic_source(allow_idle: bool) -> String {
    if allow_idle {
        format!("no traffic source given ({SOURCES}); with --allow-idle every workload gets a closed scope (~/*)")
    } else {
        format!("no traffic source given ({SOURCES}); every workload is \"no evidence\" unless --allow-idle closes it")
    }
}

/// The warning when no pod log held an access-log line and `empty` (of
/// `read` pods) held no line at all: which pods, and the likely causes.
pub fn empty_pod_logs(empty: &[String], read: usize) -> String {
    let shown: Vec<&str> = empty.iter().take(5).map(String::as_str).collect();
    let more = empty.len().saturating_sub(shown.len());
    format!(
        "the istio-proxy logs of {} of {read} pods were empty ({}{}): access logging is likely off (meshConfig accessLogFile, or a Telemetry resource's accessLogging), or the pods served and sent nothing within --since",
        empty.len(),
        shown.join(", "),
        if more > 0 { format!(", +{more} more") } else { String::new() }
    )
}

/// The note when `impact` has no traffic, so no recommendations.
pub fn impact_without_traffic() -> String {
    format!("without a traffic source ({SOURCES}) there are no recommendations, so \"after\" equals \"now\"")
}

/// Why a recommendation for one workload gave no Sidecar, with what would
/// change that.
pub fn why_nothing(snap: &MeshSnapshot, recs: &[Recommendation]) -> String {
    match recs.first().map(|r| &r.outcome) {
        Some(o @ Outcome::Skipped(why)) if o.is_no_evidence() => {
            format!("{why}; give a traffic source ({SOURCES}), or --allow-idle for a closed scope")
        }
        Some(Outcome::Skipped(why)) => why.clone(),
        Some(Outcome::UserOwned { sidecar, .. }) => format!(
            "it is scoped by user-owned Sidecar {}, which meshscope never replaces",
            snap.sidecars[*sidecar].key()
        ),
        _ => "nothing was recommended".to_string(),
    }
}

/// An `--include` host checked for `version`, or the message that says
/// what is wrong with it.
pub fn check_include(host: &str, version: IstioVersion) -> Result<HostEntry, String> {
    HostEntry::parse(host, version).map_err(|e| format!("--include: {e}"))
}

/// The warning when the proxies run other Istio versions (`seen`, sorted,
/// not empty) than the one whose semantics the predictions use.
pub fn version_skew(seen: &[String], used: IstioVersion) -> Option<String> {
    let first = seen.first()?;
    Some(format!(
        "proxies run Istio {} but the predictions use Istio {used} semantics; pass --istio-version {first} for a like-for-like check",
        seen.join(", ")
    ))
}
