//! Hosts a workload needs that its traffic never shows: the services of
//! the mesh config's extension providers that Envoy itself calls (tracing
//! collectors, ext_authz servers, access-log services).
//!
//! Envoy's own calls appear in no access log and no Istio metric, and
//! istiod does not add a provider's service to a proxy's SidecarScope: a
//! Sidecar that does not import it leaves the provider's cluster out of
//! CDS, and span export, ext_authz or access-log streaming fail. So each
//! recommendation adds the provider services that apply to its workload,
//! resolved the way istiod resolves them:
//!
//! - tracing: `defaultProviders.tracing` (its first name), then the
//!   `tracing` entries of the root namespace's namespace-wide Telemetry,
//!   the workload namespace's namespace-wide Telemetry and the Telemetries
//!   there whose selector matches the workload, in that order; an entry
//!   naming providers replaces the provider (its first name) for its mode
//!   (client, server or both), and `disableSpanReporting` turns its mode
//!   off or on again;
//! - access logging: `defaultProviders.accessLogging`, replaced by the
//!   providers the Telemetries name, each turned off by `disabled: true`
//!   of a later entry, per mode;
//! - metrics: `defaultProviders.metrics` and the providers Telemetries
//!   name (metrics providers, Prometheus and Stackdriver, call no service
//!   in the mesh, so these add nothing unless one names a service);
//! - ext_authz: the provider of every AuthorizationPolicy with
//!   `action: CUSTOM` in the root namespace or the workload's namespace
//!   whose selector matches the workload (none: every workload).
//!
//! Policies with `targetRef`/`targetRefs` attach to gateways and waypoints,
//! never to sidecars, and are skipped, as istiod does. Only one
//! namespace-wide Telemetry per namespace counts: the oldest (then the
//! first by name). Simplifications: a provider referred to by name but
//! missing from `extensionProviders` is ignored (istiod turns the feature
//! off for it); the legacy `defaultConfig.tracing` addresses (bootstrap
//! clusters, outside any Sidecar's scope) are not read.
//!
//! A provider's `service` is looked up as istiod does: `<ns>/<fqdn>` names
//! the service in that namespace; a bare `<fqdn>` must name a service in
//! exactly one namespace. The egress host written is `<ns>/<fqdn>` of that
//! service (`*/<fqdn>` when the inputs do not hold it).

use std::collections::BTreeMap;

use crate::istio::{ModeMatch, ProviderRef};
use crate::labels::{selector_matches, Labels};
use crate::mesh::{ExtensionProvider, MeshConfig};
use crate::snapshot::MeshSnapshot;
pub use crate::telemetry::{custom_authz, telemetries, CustomAuthz, TelemetryInfo};

/// The annotation that records, per host added without observed traffic,
/// why it was added.
pub const REQUIRED_BY_ANNOTATION: &str = "meshscope.io/required-by";

/// A host meshscope adds to a workload's egress without observed traffic,
/// and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Required {
    /// The egress entry that imports it (`<ns>/<fqdn>`, `*/<fqdn>`).
    pub host: String,
    /// The service's hostname.
    pub service: String,
    pub port: Option<u32>,
    /// Each reason, such as `required by mesh config: defaultProviders.tracing zipkin`.
    pub why: Vec<String>,
    /// Why importing it does not help, when that is so (a service the
    /// inputs do not hold, a bare hostname found in several namespaces, a
    /// service not exported to the workload's namespace). Such a host is
    /// reported, never written into a Sidecar.
    pub problem: Option<String>,
}

impl Required {
    /// `<service>[:<port>]: <reasons>`, one line of the annotation.
    pub fn line(&self) -> String {
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        format!("{}{port}: {}", self.service, self.why.join("; "))
    }
}

/// The annotation value: one line per host, sorted.
pub fn annotation(required: &[Required]) -> Option<String> {
    let mut lines: Vec<String> = required.iter().map(Required::line).collect();
    lines.sort();
    lines.dedup();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// Adds `r` to `out`, merging the reasons of one host.
pub fn merge(out: &mut Vec<Required>, r: Required) {
    match out
        .iter_mut()
        .find(|o| o.host == r.host && o.port == r.port)
    {
        Some(o) => {
            for w in r.why {
                if !o.why.contains(&w) {
                    o.why.push(w);
                }
            }
            if o.problem.is_none() {
                o.problem = r.problem;
            }
        }
        None => out.push(r),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Client,
    Server,
}

fn applies_to(m: &Option<ModeMatch>, mode: Mode) -> bool {
    match m.as_ref().and_then(|m| m.mode.as_deref()) {
        None | Some("CLIENT_AND_SERVER") | Some("") => true,
        Some("CLIENT") => mode == Mode::Client,
        Some("SERVER") => mode == Mode::Server,
        Some(_) => true,
    }
}

fn names(p: &[ProviderRef]) -> Vec<String> {
    p.iter()
        .map(|r| r.name.clone())
        .filter(|n| !n.is_empty())
        .collect()
}

/// The Telemetries that apply to a workload in `ns` with `labels`, in the
/// order istiod merges them: root namespace-wide, namespace-wide, then
/// selecting ones.
fn applicable<'a>(
    snap: &'a MeshSnapshot,
    ns: &str,
    labels: Option<&Labels>,
) -> Vec<&'a TelemetryInfo> {
    let root = &snap.mesh.root_namespace;
    let wide = |n: &str| {
        snap.telemetries
            .iter()
            .find(|t| t.namespace == n && t.selector.is_empty() && !t.targeted)
    };
    let mut out: Vec<&TelemetryInfo> = Vec::new();
    out.extend(wide(root));
    if ns != root {
        out.extend(wide(ns));
    }
    if let Some(labels) = labels {
        out.extend(snap.telemetries.iter().filter(|t| {
            t.namespace == ns
                && !t.selector.is_empty()
                && !t.targeted
                && selector_matches(&t.selector, labels)
        }));
    }
    out
}

fn tel_key(t: &TelemetryInfo) -> String {
    format!("Telemetry {}/{}", t.namespace, t.name)
}

/// Provider name -> where it came from, for tracing.
fn tracing(mesh: &MeshConfig, tels: &[&TelemetryInfo]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for mode in [Mode::Client, Mode::Server] {
        let mut provider: Option<(String, String)> = mesh
            .default_providers
            .tracing
            .first()
            .map(|p| (p.clone(), format!("defaultProviders.tracing {p}")));
        let mut disabled = false;
        for t in tels {
            for e in &t.spec.tracing {
                if !applies_to(&e.matches, mode) {
                    continue;
                }
                if let Some(first) = names(&e.providers).into_iter().next() {
                    provider = Some((first.clone(), format!("{} tracing {first}", tel_key(t))));
                }
                if let Some(d) = e.disable_span_reporting {
                    disabled = d;
                }
            }
        }
        if let (Some((p, why)), false) = (provider, disabled) {
            out.entry(p).or_insert(why);
        }
    }
    out
}

/// Provider name -> where it came from, for access logging.
fn access_logging(mesh: &MeshConfig, tels: &[&TelemetryInfo]) -> BTreeMap<String, String> {
    let defaults = &mesh.default_providers.access_logging;
    let from_default = |p: &str| format!("defaultProviders.accessLogging {p}");
    let logs: Vec<&&TelemetryInfo> = tels
        .iter()
        .filter(|t| !t.spec.access_logging.is_empty())
        .collect();
    let mut out = BTreeMap::new();
    if logs.is_empty() {
        for p in defaults {
            out.entry(p.clone()).or_insert_with(|| from_default(p));
        }
        return out;
    }
    for mode in [Mode::Client, Mode::Server] {
        // The providers in scope: those the last Telemetry naming any
        // names, else the defaults.
        let mut in_scope: Vec<String> = defaults.clone();
        for t in &logs {
            let mut named: Vec<String> = Vec::new();
            for e in &t.spec.access_logging {
                if applies_to(&e.matches, mode) {
                    named.extend(names(&e.providers));
                }
            }
            if !named.is_empty() {
                in_scope = named;
            }
        }
        let mut state: BTreeMap<String, (bool, String)> = BTreeMap::new();
        let mut parent: Vec<String> = defaults.clone();
        let mut parent_why: Option<String> = None;
        for t in &logs {
            for e in &t.spec.access_logging {
                let mut ps = names(&e.providers);
                let explicit = !ps.is_empty();
                if !explicit {
                    ps = parent.clone();
                }
                parent = ps.clone();
                let why_of = |p: &str| {
                    if explicit {
                        format!("{} accessLogging {p}", tel_key(t))
                    } else {
                        parent_why.clone().unwrap_or_else(|| from_default(p))
                    }
                };
                for p in &ps {
                    if !in_scope.contains(p) || !applies_to(&e.matches, mode) {
                        continue;
                    }
                    let why = why_of(p);
                    state.insert(p.clone(), (e.disabled == Some(true), why));
                }
                if explicit {
                    parent_why = ps.first().map(|p| why_of(p));
                }
            }
        }
        for (p, (disabled, why)) in state {
            if !disabled {
                out.entry(p).or_insert(why);
            }
        }
    }
    out
}

/// Provider name -> where it came from, for metrics.
fn metrics(mesh: &MeshConfig, tels: &[&TelemetryInfo]) -> BTreeMap<String, String> {
    let mut chosen: Vec<(String, String)> = mesh
        .default_providers
        .metrics
        .iter()
        .map(|p| (p.clone(), format!("defaultProviders.metrics {p}")))
        .collect();
    for t in tels {
        for e in &t.spec.metrics {
            let ps = names(&e.providers);
            if !ps.is_empty() {
                chosen = ps
                    .into_iter()
                    .map(|p| {
                        let why = format!("{} metrics {p}", tel_key(t));
                        (p, why)
                    })
                    .collect();
            }
        }
    }
    chosen.into_iter().collect()
}

/// The ext_authz providers of the CUSTOM AuthorizationPolicies that apply
/// to a workload.
fn ext_authz(snap: &MeshSnapshot, ns: &str, labels: Option<&Labels>) -> BTreeMap<String, String> {
    let root = &snap.mesh.root_namespace;
    let mut out = BTreeMap::new();
    for p in &snap.custom_authz {
        if p.targeted || (p.namespace != *root && p.namespace != ns) {
            continue;
        }
        let selects =
            p.selector.is_empty() || labels.is_some_and(|l| selector_matches(&p.selector, l));
        if selects {
            out.entry(p.provider.clone()).or_insert_with(|| {
                format!(
                    "AuthorizationPolicy {}/{} (action CUSTOM) {}",
                    p.namespace, p.name, p.provider
                )
            });
        }
    }
    out
}

/// How a provider's `service` is found: the egress host that imports it,
/// its hostname, and a problem when importing it cannot help.
fn lookup(
    snap: &MeshSnapshot,
    p: &ExtensionProvider,
    scope_ns: &str,
) -> Option<(String, String, Option<String>)> {
    let service = p.service.as_deref()?;
    let (ns, host) = match service.split_once('/') {
        Some((ns, host)) => (Some(ns), host),
        None => (None, service),
    };
    let ids = snap.services_named(host);
    let found = match ns {
        Some(ns) => ids
            .iter()
            .copied()
            .find(|i| snap.services[*i].namespace == ns),
        None => {
            let mut nss: Vec<&str> = ids
                .iter()
                .map(|i| snap.services[*i].namespace.as_str())
                .collect();
            nss.sort();
            nss.dedup();
            if nss.len() > 1 {
                return Some((
                    format!("*/{host}"),
                    host.to_string(),
                    Some(format!(
                        "istiod cannot use provider {}: {host} is in several namespaces ({}); write its service as <namespace>/{host}",
                        p.name,
                        nss.join(", ")
                    )),
                ));
            }
            ids.first().copied()
        }
    };
    match found {
        Some(id) => {
            let s = &snap.services[id];
            let problem = (s.namespace != scope_ns && !s.export.visible_to(scope_ns)).then(|| {
                format!(
                    "{}/{} is not exported to namespace {scope_ns}, so no Sidecar there can import it",
                    s.namespace, s.hostname
                )
            });
            Some((format!("{}/{}", s.namespace, s.hostname), s.hostname.clone(), problem))
        }
        None => Some((
            format!("{}/{host}", ns.unwrap_or("*")),
            host.to_string(),
            Some(format!(
                "no Service or ServiceEntry in the input defines {service}, the service of provider {}; istiod cannot find it either",
                p.name
            )),
        )),
    }
}

/// The provider services a workload in `ns` with pod labels `labels`
/// needs (`None`: any workload of the namespace, for a namespace-wide
/// Sidecar: only namespace-wide policies count).
pub fn required_for(snap: &MeshSnapshot, ns: &str, labels: Option<&Labels>) -> Vec<Required> {
    let mesh = &snap.mesh;
    if mesh.extension_providers.is_empty() {
        return Vec::new();
    }
    let tels = applicable(snap, ns, labels);
    let mut uses: Vec<(String, String)> = Vec::new();
    uses.extend(tracing(mesh, &tels));
    uses.extend(access_logging(mesh, &tels));
    uses.extend(metrics(mesh, &tels));
    uses.extend(ext_authz(snap, ns, labels));
    let mut out = Vec::new();
    for (name, why) in uses {
        let Some(p) = mesh.provider(&name) else {
            continue;
        };
        let Some((host, service, problem)) = lookup(snap, p, ns) else {
            continue;
        };
        merge(
            &mut out,
            Required {
                host,
                service,
                port: p.port,
                why: vec![format!("required by mesh config: {why}")],
                problem,
            },
        );
    }
    out.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Inputs, MeshConfig, Options};
    use serde_json::json;

    const MESH: &str = r#"
extensionProviders:
- name: zipkin
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
- name: otel
  opentelemetry: {service: "observability/otel.observability.svc.cluster.local", port: 4317}
- name: authz
  envoyExtAuthzGrpc: {service: authz.auth.svc.cluster.local, port: 9000}
- name: als
  envoyHttpAls: {service: als.istio-system.svc.cluster.local, port: 15000}
- name: prom
  prometheus: {}
- name: twice
  zipkin: {service: dup.svc, port: 1}
"#;

    fn svc(ns: &str, name: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": ns},
               "spec": {"ports": [{"port": 80}]}})
    }

    fn snap(mesh: &str, extra: Vec<serde_json::Value>) -> MeshSnapshot {
        let mut inputs = Inputs::default();
        for v in [
            svc("istio-system", "zipkin"),
            svc("observability", "otel"),
            svc("auth", "authz"),
            svc("istio-system", "als"),
        ] {
            inputs.add(v).unwrap();
        }
        for v in extra {
            inputs.add(v).unwrap();
        }
        MeshSnapshot::build_with_mesh(
            &inputs,
            Options::default(),
            MeshConfig::from_yaml(mesh).unwrap(),
        )
    }

    fn tel(ns: &str, name: &str, spec: serde_json::Value) -> serde_json::Value {
        json!({"apiVersion": "telemetry.istio.io/v1", "kind": "Telemetry",
               "metadata": {"name": name, "namespace": ns}, "spec": spec})
    }

    fn hosts(r: &[Required]) -> Vec<String> {
        r.iter()
            .map(|r| format!("{}:{}", r.host, r.port.unwrap_or(0)))
            .collect()
    }

    fn app(a: &str) -> Labels {
        [("app".to_string(), a.to_string())].into()
    }

    #[test]
    fn default_tracing_provider_is_required_in_the_ns_host_form() {
        let s = snap(
            &format!("{MESH}defaultProviders: {{tracing: [zipkin]}}"),
            vec![],
        );
        let r = required_for(&s, "shop", Some(&app("web")));
        assert_eq!(
            hosts(&r),
            ["istio-system/zipkin.istio-system.svc.cluster.local:9411"]
        );
        assert_eq!(
            r[0].line(),
            "zipkin.istio-system.svc.cluster.local:9411: required by mesh config: defaultProviders.tracing zipkin"
        );
        // No providers, nothing required.
        assert!(required_for(&snap("", vec![]), "shop", Some(&app("web"))).is_empty());
        // Only the first default tracing provider is used; metrics
        // providers call no service.
        let s = snap(
            &format!("{MESH}defaultProviders: {{tracing: [otel, zipkin], metrics: [prom]}}"),
            vec![],
        );
        assert_eq!(
            hosts(&required_for(&s, "shop", None)),
            ["observability/otel.observability.svc.cluster.local:4317"]
        );
    }

    #[test]
    fn telemetry_resolution_follows_root_namespace_and_selector_order() {
        let root = tel(
            "istio-system",
            "mesh",
            json!({"tracing": [{"providers": [{"name": "zipkin"}]}]}),
        );
        let ns_off = tel(
            "shop",
            "quiet",
            json!({"tracing": [{"disableSpanReporting": true}]}),
        );
        let web_on = tel(
            "shop",
            "web",
            json!({"selector": {"matchLabels": {"app": "web"}},
                   "tracing": [{"providers": [{"name": "otel"}], "disableSpanReporting": false}]}),
        );
        let s = snap(MESH, vec![root.clone()]);
        let r = required_for(&s, "shop", Some(&app("db")));
        assert_eq!(
            hosts(&r),
            ["istio-system/zipkin.istio-system.svc.cluster.local:9411"]
        );
        assert_eq!(
            r[0].why,
            ["required by mesh config: Telemetry istio-system/mesh tracing zipkin"]
        );
        // The namespace's Telemetry turns it off; one selecting web names
        // another provider and turns reporting on again.
        let s = snap(MESH, vec![root.clone(), ns_off, web_on]);
        assert!(required_for(&s, "shop", Some(&app("db"))).is_empty());
        assert_eq!(
            hosts(&required_for(&s, "shop", Some(&app("web")))),
            ["observability/otel.observability.svc.cluster.local:4317"]
        );
        // Other namespaces keep the root's; a namespace-wide Sidecar sees
        // only namespace-wide Telemetries.
        assert_eq!(required_for(&s, "other", Some(&app("web"))).len(), 1);
        assert!(required_for(&s, "shop", None).is_empty());
        // A Telemetry with targetRefs never applies to a sidecar, nor does a
        // selector Telemetry of the root namespace outside it.
        let gw = tel(
            "shop",
            "gw",
            json!({"targetRefs": [{"kind": "Gateway", "name": "g"}],
                   "tracing": [{"providers": [{"name": "zipkin"}]}]}),
        );
        let root_sel = tel(
            "istio-system",
            "sel",
            json!({"selector": {"matchLabels": {"app": "web"}},
                   "tracing": [{"providers": [{"name": "zipkin"}]}]}),
        );
        let s = snap(MESH, vec![gw, root_sel]);
        assert!(required_for(&s, "shop", Some(&app("web"))).is_empty());
        // Client-only tracing still needs the collector.
        let client = tel(
            "shop",
            "client",
            json!({"tracing": [{"match": {"mode": "CLIENT"}, "providers": [{"name": "zipkin"}]}]}),
        );
        assert_eq!(
            required_for(&snap(MESH, vec![client]), "shop", None).len(),
            1
        );
    }

    #[test]
    fn access_logging_providers_and_their_disabling() {
        let s = snap(
            &format!("{MESH}defaultProviders: {{accessLogging: [als]}}"),
            vec![],
        );
        assert_eq!(
            hosts(&required_for(&s, "shop", None)),
            ["istio-system/als.istio-system.svc.cluster.local:15000"]
        );
        let off = tel(
            "shop",
            "off",
            json!({"accessLogging": [{"disabled": true}]}),
        );
        let s = snap(
            &format!("{MESH}defaultProviders: {{accessLogging: [als]}}"),
            vec![off],
        );
        assert!(required_for(&s, "shop", None).is_empty());
        let on = tel(
            "istio-system",
            "on",
            json!({"accessLogging": [{"providers": [{"name": "als"}]}]}),
        );
        let r = required_for(&snap(MESH, vec![on]), "shop", None);
        assert_eq!(
            r[0].why,
            ["required by mesh config: Telemetry istio-system/on accessLogging als"]
        );
    }

    #[test]
    fn custom_authorization_policies_require_their_provider() {
        let ap = |ns: &str, name: &str, sel: Option<&str>, action: &str| {
            let mut spec = json!({"action": action, "provider": {"name": "authz"}});
            if let Some(a) = sel {
                spec["selector"] = json!({"matchLabels": {"app": a}});
            }
            json!({"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
                   "metadata": {"name": name, "namespace": ns}, "spec": spec})
        };
        let s = snap(
            MESH,
            vec![
                ap("shop", "web-authz", Some("web"), "CUSTOM"),
                ap("shop", "deny", None, "DENY"),
            ],
        );
        let r = required_for(&s, "shop", Some(&app("web")));
        assert_eq!(hosts(&r), ["auth/authz.auth.svc.cluster.local:9000"]);
        assert_eq!(
            r[0].line(),
            "authz.auth.svc.cluster.local:9000: required by mesh config: AuthorizationPolicy shop/web-authz (action CUSTOM) authz"
        );
        assert!(required_for(&s, "shop", Some(&app("db"))).is_empty());
        assert!(required_for(&s, "other", Some(&app("web"))).is_empty());
        // A root-namespace policy without a selector applies everywhere.
        let s = snap(MESH, vec![ap("istio-system", "all", None, "CUSTOM")]);
        assert_eq!(required_for(&s, "anywhere", Some(&app("x"))).len(), 1);
    }

    #[test]
    fn provider_services_are_looked_up_as_istiod_does() {
        // Unknown to the inputs: reported, with no host to write.
        let s = snap(
            "extensionProviders:\n- name: z\n  zipkin: {service: zipkin.tracing.example, port: 9411}\ndefaultProviders: {tracing: [z]}",
            vec![],
        );
        let r = required_for(&s, "shop", None);
        assert!(
            r[0].problem
                .as_deref()
                .unwrap()
                .contains("no Service or ServiceEntry"),
            "{r:?}"
        );
        // A bare hostname in two namespaces: istiod cannot use it.
        let s = snap(
            "extensionProviders:\n- name: z\n  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}\ndefaultProviders: {tracing: [z]}",
            vec![json!({"apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry",
                        "metadata": {"name": "z", "namespace": "copy"},
                        "spec": {"hosts": ["zipkin.istio-system.svc.cluster.local"],
                                 "ports": [{"number": 9411, "name": "http"}], "resolution": "DNS"}})],
        );
        let r = required_for(&s, "shop", None);
        assert!(
            r[0].problem
                .as_deref()
                .unwrap()
                .contains("several namespaces (copy, istio-system)"),
            "{r:?}"
        );
        // Not exported to the workload's namespace.
        let hidden = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "hidden", "namespace": "istio-system",
                         "annotations": {"networking.istio.io/exportTo": "."}},
            "spec": {"ports": [{"port": 80}]}});
        let s = snap(
            "extensionProviders:\n- name: h\n  zipkin: {service: hidden.istio-system.svc.cluster.local, port: 80}\ndefaultProviders: {tracing: [h]}",
            vec![hidden],
        );
        let r = required_for(&s, "shop", None);
        assert!(
            r[0].problem.as_deref().unwrap().contains("not exported"),
            "{r:?}"
        );
        assert!(required_for(&s, "istio-system", None)[0].problem.is_none());
    }

    #[test]
    fn the_annotation_is_sorted_and_merges_reasons() {
        let mut v = Vec::new();
        let r = |host: &str, why: &str| Required {
            host: format!("ns/{host}"),
            service: host.into(),
            port: Some(1),
            why: vec![why.into()],
            problem: None,
        };
        merge(&mut v, r("b", "x"));
        merge(&mut v, r("a", "y"));
        merge(&mut v, r("b", "z"));
        assert_eq!(annotation(&v).unwrap(), "a:1: y\nb:1: x; z");
        assert_eq!(annotation(&[]), None);
    }
}
