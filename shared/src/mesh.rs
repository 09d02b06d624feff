//! Mesh-wide settings: the `mesh` key of ConfigMap `istio`, and the
//! environment options (Istio version, cluster DNS domain).

use serde::Deserialize;

use crate::error::Error;
pub use crate::version::IstioVersion;

/// The parts of `meshConfig` that scoping depends on. Missing fields take
/// Istio's defaults (`istio/api mesh/v1alpha1/config.proto`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeshConfig {
    pub root_namespace: String,
    pub outbound_traffic_policy: OutboundPolicy,
    pub default_service_export_to: Vec<String>,
    pub default_virtual_service_export_to: Vec<String>,
    pub default_destination_rule_export_to: Vec<String>,
    /// `extensionProviders`: the services Envoy itself calls (tracing
    /// collectors, ext_authz servers, access-log services), in order.
    pub extension_providers: Vec<ExtensionProvider>,
    /// `defaultProviders`: the provider names used where no Telemetry
    /// names one.
    pub default_providers: DefaultProviders,
    /// `serviceEntryVisibility` (read by istiod 1.31+); `None` when absent.
    pub service_entry_visibility: Option<crate::visibility::ServiceEntryVisibility>,
    /// `defaultConfig.proxyMetadata.ISTIO_META_DNS_CAPTURE`: the agent
    /// answers the workload's DNS from a name table built from its scope.
    /// A pod's `proxy.istio.io/config` annotation can override it.
    pub dns_capture: bool,
    /// `discoverySelectors`: istiod watches only the namespaces one of
    /// them selects (ORed; empty: every namespace).
    /// `pkg/kube/namespace/filter.go` (1.31).
    pub discovery_selectors: Vec<crate::visibility::NamespaceSelector>,
    /// `accessLogFile`: where every proxy writes its access log (`None`:
    /// unset or empty, no log unless a Telemetry or the default providers
    /// turn it on).
    pub access_log_file: Option<String>,
}

impl MeshConfig {
    /// The mesh with its Service and VirtualService exportTo defaults as
    /// `istio` reads them. From 1.30 a default is a list like any other;
    /// before, istiod honours only `.` (looked for first) or `*`, and any
    /// other default leaves what takes it visible to no one
    /// (`pilot/pkg/model/push_context.go`, 1.29.6, `initDefaultExportMaps`
    /// and `IsServiceVisible`).
    pub fn export_defaults_for(&self, istio: crate::IstioVersion) -> MeshConfig {
        if istio.at_least(30) {
            return self.clone();
        }
        let legacy = |d: &[String]| -> Vec<String> {
            let pick = if d.iter().any(|v| v == ".") {
                "."
            } else if d.iter().any(|v| v == "*") {
                "*"
            } else {
                "~"
            };
            vec![pick.to_string()]
        };
        MeshConfig {
            default_service_export_to: legacy(&self.default_service_export_to),
            default_virtual_service_export_to: legacy(&self.default_virtual_service_export_to),
            ..self.clone()
        }
    }
}

/// One entry of `meshConfig.extensionProviders`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtensionProvider {
    pub name: String,
    /// Its type: the key under which it is configured (`zipkin`,
    /// `envoyExtAuthzGrpc`, `prometheus`, ...).
    pub kind: String,
    /// The service Envoy calls, as written: `<fqdn>` or `<ns>/<fqdn>`.
    /// `None` for providers that call no service (`prometheus`,
    /// `envoyFileAccessLog`, `stackdriver`).
    pub service: Option<String>,
    pub port: Option<u32>,
}

/// `meshConfig.defaultProviders`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DefaultProviders {
    pub tracing: Vec<String>,
    pub metrics: Vec<String>,
    pub access_logging: Vec<String>,
}

impl MeshConfig {
    /// The provider of that name (istiod compares names without case).
    pub fn provider(&self, name: &str) -> Option<&ExtensionProvider> {
        self.extension_providers
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OutboundPolicy {
    AllowAny,
    RegistryOnly,
    /// `ALLOW_ANY_DYNAMIC_DNS` (mesh level only; Istio 1.31+): plaintext
    /// HTTP to unknown hosts goes to Envoy's dynamic forward proxy, other
    /// traffic to PassthroughCluster.
    AllowAnyDynamicDns,
}

impl OutboundPolicy {
    /// The mode as Istio spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            OutboundPolicy::AllowAny => "ALLOW_ANY",
            OutboundPolicy::RegistryOnly => "REGISTRY_ONLY",
            OutboundPolicy::AllowAnyDynamicDns => "ALLOW_ANY_DYNAMIC_DNS",
        }
    }
}

impl Default for MeshConfig {
    fn default() -> Self {
        Self {
            root_namespace: "istio-system".into(),
            outbound_traffic_policy: OutboundPolicy::AllowAny,
            default_service_export_to: vec!["*".into()],
            default_virtual_service_export_to: vec!["*".into()],
            default_destination_rule_export_to: vec!["*".into()],
            extension_providers: Vec::new(),
            default_providers: DefaultProviders::default(),
            service_entry_visibility: None,
            dns_capture: false,
            discovery_selectors: Vec::new(),
            access_log_file: None,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawMesh {
    root_namespace: Option<String>,
    outbound_traffic_policy: Option<RawPolicy>,
    default_service_export_to: Option<Vec<String>>,
    default_virtual_service_export_to: Option<Vec<String>>,
    default_destination_rule_export_to: Option<Vec<String>>,
    extension_providers: Option<Vec<serde_json::Map<String, serde_json::Value>>>,
    default_providers: Option<RawDefaults>,
    service_entry_visibility: Option<crate::visibility::RawServiceEntryVisibility>,
    discovery_selectors: Option<Vec<crate::visibility::RawSelector>>,
    default_config: Option<RawProxyConfig>,
    access_log_file: Option<String>,
}

/// The part of a ProxyConfig (`meshConfig.defaultConfig`, or a pod's
/// `proxy.istio.io/config` annotation) that scoping depends on.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawProxyConfig {
    #[serde(default)]
    proxy_metadata: Option<std::collections::BTreeMap<String, serde_yaml::Value>>,
}

impl RawProxyConfig {
    /// `ISTIO_META_DNS_CAPTURE`, when it is set (the agent reads it as a
    /// boolean: `true`, `1`, `t`, ...).
    fn dns_capture(&self) -> Option<bool> {
        let v = self
            .proxy_metadata
            .as_ref()?
            .get("ISTIO_META_DNS_CAPTURE")?;
        let text = match v {
            serde_yaml::Value::Bool(b) => return Some(*b),
            serde_yaml::Value::String(s) => s.clone(),
            serde_yaml::Value::Number(n) => n.to_string(),
            _ => return None,
        };
        parse_go_bool(&text)
    }
}

/// Go's `strconv.ParseBool`, which the agent's flags use.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// Whether a pod's `proxy.istio.io/config` annotation turns DNS capture on
/// or off (`None`: it says nothing, or is not valid YAML; the agent then
/// keeps the mesh default).
pub fn annotation_dns_capture(text: &str) -> Option<bool> {
    serde_yaml::from_str::<RawProxyConfig>(text)
        .ok()?
        .dns_capture()
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawDefaults {
    #[serde(default)]
    tracing: Option<Vec<String>>,
    #[serde(default)]
    metrics: Option<Vec<String>>,
    #[serde(default)]
    access_logging: Option<Vec<String>>,
}

/// One `extensionProviders` entry: `name` and one key naming its type,
/// whose `service` and `port` are read (the rest is the provider's own).
fn parse_provider(
    raw: &serde_json::Map<String, serde_json::Value>,
) -> Result<ExtensionProvider, Error> {
    let name = raw
        .get("name")
        .and_then(|v| v.as_str())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Error::MeshConfig("an extensionProviders entry has no name".into()))?;
    let Some((kind, body)) = raw.iter().find(|(k, _)| k.as_str() != "name") else {
        return Err(Error::MeshConfig(format!(
            "extensionProviders entry {name:?} has no provider type"
        )));
    };
    let service = body
        .get("service")
        .and_then(|v| v.as_str())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from);
    let port = match body.get("port") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                .filter(|p| (1..=65535).contains(p))
                .ok_or_else(|| {
                    Error::MeshConfig(format!(
                        "extensionProviders entry {name:?}: port {v} is not a port number"
                    ))
                })? as u32,
        ),
    };
    Ok(ExtensionProvider {
        name: name.to_string(),
        kind: kind.clone(),
        service,
        port,
    })
}

#[derive(Deserialize)]
struct RawPolicy {
    mode: Option<String>,
}

impl MeshConfig {
    /// Parses the YAML text stored under the `mesh` key of ConfigMap `istio`.
    pub fn from_yaml(text: &str) -> Result<Self, Error> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let raw: RawMesh =
            serde_yaml::from_str(text).map_err(|e| Error::MeshConfig(e.to_string()))?;
        let mut out = Self::default();
        if let Some(ns) = raw.root_namespace.filter(|s| !s.is_empty()) {
            out.root_namespace = ns;
        }
        if let Some(mode) = raw.outbound_traffic_policy.and_then(|p| p.mode) {
            out.outbound_traffic_policy = match mode.as_str() {
                "REGISTRY_ONLY" => OutboundPolicy::RegistryOnly,
                "ALLOW_ANY" => OutboundPolicy::AllowAny,
                "ALLOW_ANY_DYNAMIC_DNS" => OutboundPolicy::AllowAnyDynamicDns,
                other => {
                    return Err(Error::MeshConfig(format!(
                        "unknown outboundTrafficPolicy.mode {other:?} (expected ALLOW_ANY, REGISTRY_ONLY or ALLOW_ANY_DYNAMIC_DNS)"
                    )))
                }
            };
        }
        let nonempty = |v: Option<Vec<String>>| v.filter(|v| !v.is_empty());
        if let Some(v) = nonempty(raw.default_service_export_to) {
            out.default_service_export_to = v;
        }
        if let Some(v) = nonempty(raw.default_virtual_service_export_to) {
            out.default_virtual_service_export_to = v;
        }
        if let Some(v) = nonempty(raw.default_destination_rule_export_to) {
            out.default_destination_rule_export_to = v;
        }
        for p in raw.extension_providers.iter().flatten() {
            out.extension_providers.push(parse_provider(p)?);
        }
        if let Some(d) = raw.default_providers {
            out.default_providers = DefaultProviders {
                tracing: d.tracing.unwrap_or_default(),
                metrics: d.metrics.unwrap_or_default(),
                access_logging: d.access_logging.unwrap_or_default(),
            };
        }
        if let Some(dns) = raw.default_config.as_ref().and_then(|c| c.dns_capture()) {
            out.dns_capture = dns;
        }
        out.discovery_selectors = raw
            .discovery_selectors
            .unwrap_or_default()
            .into_iter()
            .map(crate::visibility::RawSelector::parse)
            .collect();
        out.access_log_file = raw.access_log_file.filter(|f| !f.is_empty());
        if let Some(v) = raw.service_entry_visibility {
            out.service_entry_visibility =
                Some(crate::visibility::ServiceEntryVisibility::parse(v)?);
        }
        Ok(out)
    }
}

/// Everything about the environment the scope engine needs besides objects.
#[derive(Clone, Debug)]
pub struct Options {
    pub istio: IstioVersion,
    /// Kubernetes cluster DNS domain (`cluster.local` by default).
    pub cluster_domain: String,
    /// `sidecarInjectorWebhook.enableNamespacesByDefault`.
    pub inject_by_default: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            istio: IstioVersion::DEFAULT,
            cluster_domain: "cluster.local".into(),
            inject_by_default: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::from_pairs as labels;
    use crate::visibility::Visibility;

    #[test]
    fn missing_mesh_config_means_istio_defaults() {
        let m = MeshConfig::from_yaml("").unwrap();
        assert_eq!(m, MeshConfig::default());
        assert_eq!(m.root_namespace, "istio-system");
        assert_eq!(m.default_service_export_to, vec!["*"]);
    }

    #[test]
    fn mesh_config_fields_are_read() {
        let m = MeshConfig::from_yaml(
            "rootNamespace: mesh-root\noutboundTrafficPolicy:\n  mode: REGISTRY_ONLY\ndefaultServiceExportTo: [\".\"]\naccessLogFile: /dev/stdout\n",
        )
        .unwrap();
        assert_eq!(m.root_namespace, "mesh-root");
        assert_eq!(m.outbound_traffic_policy, OutboundPolicy::RegistryOnly);
        assert_eq!(m.default_service_export_to, vec!["."]);
        assert_eq!(m.default_virtual_service_export_to, vec!["*"]);
    }

    #[test]
    fn dynamic_dns_mode_and_dns_capture_are_read() {
        let m = MeshConfig::from_yaml(
            "outboundTrafficPolicy:\n  mode: ALLOW_ANY_DYNAMIC_DNS\ndefaultConfig:\n  proxyMetadata:\n    ISTIO_META_DNS_CAPTURE: \"true\"\n",
        )
        .unwrap();
        assert_eq!(
            m.outbound_traffic_policy,
            OutboundPolicy::AllowAnyDynamicDns
        );
        assert!(m.dns_capture);
        // Off unless set; a value Go's ParseBool rejects leaves the default.
        assert!(!MeshConfig::default().dns_capture);
        let m = MeshConfig::from_yaml(
            "defaultConfig:\n  proxyMetadata:\n    ISTIO_META_DNS_CAPTURE: \"yes\"\n",
        )
        .unwrap();
        assert!(!m.dns_capture);
        assert_eq!(
            annotation_dns_capture("proxyMetadata:\n  ISTIO_META_DNS_CAPTURE: \"false\"\n"),
            Some(false)
        );
        assert_eq!(
            annotation_dns_capture("holdApplicationUntilProxyStarts: true"),
            None
        );
        assert_eq!(annotation_dns_capture("{not yaml"), None);
        let e = MeshConfig::from_yaml("outboundTrafficPolicy:\n  mode: BLOCK\n").unwrap_err();
        assert!(e.to_string().contains("ALLOW_ANY_DYNAMIC_DNS"), "{e}");
    }

    #[test]
    fn extension_providers_and_default_providers_are_read() {
        let m = MeshConfig::from_yaml(
            r#"
extensionProviders:
- name: zipkin
  zipkin:
    service: zipkin.istio-system.svc.cluster.local
    port: 9411
- name: ext-authz
  envoyExtAuthzGrpc:
    service: "auth/authz.auth.svc.cluster.local"
    port: "9000"
    timeout: 1s
- name: prom
  prometheus: {}
defaultProviders:
  tracing: [zipkin]
  metrics: [prom]
"#,
        )
        .unwrap();
        assert_eq!(m.extension_providers.len(), 3);
        let z = m.provider("Zipkin").unwrap();
        assert_eq!(
            (z.kind.as_str(), z.service.as_deref(), z.port),
            (
                "zipkin",
                Some("zipkin.istio-system.svc.cluster.local"),
                Some(9411)
            )
        );
        let a = m.provider("ext-authz").unwrap();
        assert_eq!(
            a.service.as_deref(),
            Some("auth/authz.auth.svc.cluster.local")
        );
        assert_eq!(a.port, Some(9000));
        assert_eq!(m.provider("prom").unwrap().service, None);
        assert_eq!(m.default_providers.tracing, ["zipkin"]);
        assert_eq!(m.default_providers.metrics, ["prom"]);
        assert!(m.default_providers.access_logging.is_empty());
        let bad = MeshConfig::from_yaml("extensionProviders:\n- zipkin: {service: z}\n");
        assert!(bad.unwrap_err().to_string().contains("no name"));
    }

    #[test]
    fn absent_means_none_and_the_engine_keeps_its_defaults() {
        assert_eq!(
            MeshConfig::from_yaml("").unwrap().service_entry_visibility,
            None
        );
        let m = MeshConfig::from_yaml("rootNamespace: istio-system\n").unwrap();
        assert_eq!(m.service_entry_visibility, None);
    }

    #[test]
    fn policies_are_read_and_the_first_match_wins() {
        let m = MeshConfig::from_yaml(
            r#"
serviceEntryVisibility:
  defaultVisibility: NAMESPACE
  applyToSidecars: true
  policies:
  - visibility: PUBLIC
    matchingRules:
    - namespaceSelector:
        matchLabels: {team: platform}
    - namespaceSelector:
        matchExpressions:
        - {key: env, operator: In, values: [prod, staging]}
  - visibility: NONE
    matchingRules:
    - namespaceSelector:
        matchExpressions:
        - {key: sandbox, operator: Exists}
  - visibility: PUBLIC
    matchingRules:
    - {}
"#,
        )
        .unwrap();
        let v = m.service_entry_visibility.unwrap();
        assert!(v.apply_to_sidecars);
        assert_eq!(v.default_visibility, Visibility::Namespace);
        assert_eq!(v.policies.len(), 3);
        // Both rules of the first policy must match.
        assert_eq!(
            v.for_namespace(&labels(&[("team", "platform"), ("env", "prod")])),
            Visibility::Public
        );
        assert_eq!(
            v.for_namespace(&labels(&[("team", "platform")])),
            Visibility::Namespace
        );
        assert_eq!(
            v.for_namespace(&labels(&[("team", "platform"), ("sandbox", "1")])),
            Visibility::None
        );
        // A rule without a known matcher never matches.
        assert_eq!(v.for_namespace(&labels(&[])), Visibility::Namespace);
        assert_eq!(v.policies[2].rules, vec![None]);
    }

    #[test]
    fn unspecified_is_public_and_numbers_are_read() {
        let m = MeshConfig::from_yaml(
            "serviceEntryVisibility:\n  defaultVisibility: VISIBILITY_UNSPECIFIED\n",
        )
        .unwrap();
        let v = m.service_entry_visibility.unwrap();
        assert_eq!(v.default_visibility, Visibility::Public);
        assert!(!v.apply_to_sidecars);
        let m = MeshConfig::from_yaml("serviceEntryVisibility:\n  defaultVisibility: 2\n").unwrap();
        assert_eq!(
            m.service_entry_visibility.unwrap().default_visibility,
            Visibility::Namespace
        );
        let e = MeshConfig::from_yaml("serviceEntryVisibility:\n  defaultVisibility: PRIVATE\n")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("\"PRIVATE\" is not PUBLIC, NAMESPACE or NONE"),
            "{e}"
        );
    }
}
