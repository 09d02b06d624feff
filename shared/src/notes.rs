//! The notes and warnings meshscope derives itself, worded once: the
//! plugin prints them, and the webhook and future commands get the same
//! text. Pure functions of the inputs, the snapshot and the results; each
//! returns the text without its `note:`/`warning:` prefix unless it says
//! otherwise.

use crate::audit::{Code, Finding};
use crate::host::HostEntry;
use crate::inputs::{InputKinds, DUMP_KINDS};
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
pub fn empty_pod_logs(snap: &MeshSnapshot, empty: &[String], read: usize) -> String {
    let shown: Vec<&str> = empty.iter().take(5).map(String::as_str).collect();
    let more = empty.len().saturating_sub(shown.len());
    let cause = match access_logging_on(snap) {
        Some(why) => format!("access logging is on ({why}), so these pods served and sent nothing within --since, or their logs were rotated away"),
        None => "access logging is off: the mesh config sets no accessLogFile and no Telemetry or defaultProviders.accessLogging turns it on (set meshConfig.accessLogFile: /dev/stdout, or add a Telemetry with accessLogging, then read again after traffic)".to_string(),
    };
    format!(
        "the istio-proxy logs of {} of {read} pods were empty ({}{}): {cause}",
        empty.len(),
        shown.join(", "),
        if more > 0 {
            format!(", +{more} more")
        } else {
            String::new()
        }
    )
}

/// What turns the proxies' access logs on, as the mesh config and the
/// Telemetries read say, or `None` when nothing does.
fn access_logging_on(snap: &MeshSnapshot) -> Option<String> {
    if let Some(f) = &snap.mesh.access_log_file {
        return Some(format!("meshConfig.accessLogFile is {f}"));
    }
    if let Some(p) = snap.mesh.default_providers.access_logging.first() {
        return Some(format!(
            "meshConfig.defaultProviders.accessLogging names {p}"
        ));
    }
    snap.telemetries
        .iter()
        .find(|t| {
            t.spec
                .access_logging
                .iter()
                .any(|a| a.disabled != Some(true))
        })
        .map(|t| format!("Telemetry {}/{} has accessLogging", t.namespace, t.name))
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

/// The `kubectl get` that dumps every kind the findings read, piped into
/// `kubectl meshscope COMMAND`.
pub fn dump_command(command: &str) -> String {
    format!("kubectl get -A -o yaml {DUMP_KINDS} | kubectl meshscope {command} --manifests -")
}

/// One warning per kind the results depend on that an offline input
/// lacks, each naming the `kubectl get` resource to add. Namespaces,
/// Services and the mesh config exist in every cluster with workloads,
/// so their absence always means an incomplete input. ServiceEntries,
/// VirtualServices, Telemetries and AuthorizationPolicies may really be
/// absent, so they are named only when `findings` (audit's) hold an
/// MS0007 their absence may have caused, or (the last two) when the mesh
/// config names extension providers. Sidecars are never named: a mesh
/// without any is what a new user audits.
pub fn missing_kinds(
    kinds: &InputKinds,
    snap: &MeshSnapshot,
    findings: Option<&[Finding]>,
) -> Vec<String> {
    let mut out = Vec::new();
    if !(kinds.workloads || kinds.sidecars || kinds.service_entries) {
        return out;
    }
    let found = |code: Code| findings.is_some_and(|f| f.iter().any(|f| f.code == code));
    // Namespace labels decide injection, and which ServiceEntries
    // serviceEntryVisibility caps (MS0002).
    if !kinds.namespaces && (kinds.workloads || kinds.service_entries) {
        out.push("the input holds no Namespaces: namespace injection labels unknown (only the pods' own containers and labels say which run a sidecar, and serviceEntryVisibility's namespace selectors match nothing); add namespaces to the kubectl get list".to_string());
    }
    if !kinds.services && (kinds.workloads || kinds.sidecars) {
        out.push("the input holds no Services: egress hosts of Kubernetes Services match nothing (MS0007) and traffic to them is not attributed; add services to the kubectl get list".to_string());
    }
    if !kinds.mesh_config {
        out.push(format!("the input holds no mesh config (ConfigMap istio with key mesh): Istio's defaults are assumed (root namespace {}, outbound policy ALLOW_ANY, no extension providers); add configmaps to the kubectl get list, or pass --mesh-config", snap.mesh.root_namespace));
    }
    if !kinds.service_entries && found(Code::EgressHostMatchesNothing) {
        out.push("the input holds no ServiceEntries: egress hosts that only a ServiceEntry defines match nothing, so MS0007 may be false; add serviceentries to the kubectl get list".to_string());
    }
    if !kinds.virtual_services && found(Code::EgressHostMatchesNothing) {
        out.push("the input holds no VirtualServices: egress hosts that only a VirtualService names match nothing, so MS0007 may be false; add virtualservices to the kubectl get list".to_string());
    }
    if !kinds.telemetry_or_authz && !snap.mesh.extension_providers.is_empty() {
        out.push("the input holds no Telemetries or AuthorizationPolicies: which Envoys call the mesh config's extension providers (MS0013) is read from its defaultProviders alone; add telemetries,authorizationpolicies to the kubectl get list".to_string());
    }
    out
}
