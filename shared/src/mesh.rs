//! Mesh-wide settings: the `mesh` key of ConfigMap `istio`, the Istio version,
//! and the cluster DNS domain.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

use crate::error::Error;

/// The parts of `meshConfig` that scoping depends on. Missing fields take
/// Istio's defaults (`istio/api mesh/v1alpha1/config.proto`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeshConfig {
    pub root_namespace: String,
    pub outbound_traffic_policy: OutboundPolicy,
    pub default_service_export_to: Vec<String>,
    pub default_virtual_service_export_to: Vec<String>,
    pub default_destination_rule_export_to: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutboundPolicy {
    AllowAny,
    RegistryOnly,
}

impl Default for MeshConfig {
    fn default() -> Self {
        Self {
            root_namespace: "istio-system".into(),
            outbound_traffic_policy: OutboundPolicy::AllowAny,
            default_service_export_to: vec!["*".into()],
            default_virtual_service_export_to: vec!["*".into()],
            default_destination_rule_export_to: vec!["*".into()],
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
                other => {
                    return Err(Error::MeshConfig(format!(
                        "unknown outboundTrafficPolicy.mode {other:?} (expected ALLOW_ANY or REGISTRY_ONLY)"
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
        Ok(out)
    }
}

/// An Istio minor release. Behaviour that changed between releases is keyed
/// on this (semantics doc, "version markers").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct IstioVersion {
    pub major: u32,
    pub minor: u32,
}

impl IstioVersion {
    /// The version without any evidence (see [`crate::detect`]).
    pub const DEFAULT: IstioVersion = IstioVersion {
        major: 1,
        minor: 31,
    };

    pub fn at_least(self, minor: u32) -> bool {
        self.major > 1 || self.minor >= minor
    }

    /// 1.31 turned a `~` prefix in egress hosts into an exclusion.
    pub fn tilde_excludes(self) -> bool {
        self.at_least(31)
    }
}

impl Default for IstioVersion {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for IstioVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for IstioVersion {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let t = s.trim().trim_start_matches('v');
        let mut parts = t.split('.');
        let bad = || Error::Version(s.to_string());
        let major = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let minor = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        if major != 1 {
            return Err(bad());
        }
        Ok(Self { major, minor })
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
    fn versions_parse_with_or_without_patch() {
        assert_eq!("1.24.3".parse::<IstioVersion>().unwrap().minor, 24);
        assert_eq!("v1.31".parse::<IstioVersion>().unwrap().minor, 31);
        assert!("2".parse::<IstioVersion>().is_err());
        // The default (1.31) reads `~` as an exclusion.
        assert!(IstioVersion::DEFAULT.tilde_excludes());
    }
}
