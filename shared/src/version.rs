//! The Istio release the engine models: behaviour that changed between
//! minor releases is keyed on [`IstioVersion`].

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// An Istio minor release. Behaviour that changed between releases is keyed
/// on this: each place that depends on it asks [`IstioVersion::at_least`].
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

    /// 1.21 made an `ExternalName` Service an alias of the hostname it
    /// names (`ENABLE_EXTERNAL_NAME_ALIAS` on by default): no cluster,
    /// listener or route of its own (`pilot/pkg/serviceregistry/kube/conversion.go`,
    /// `buildOutboundClusters` in `pilot/pkg/networking/core/cluster.go`,
    /// `buildSidecarOutboundListener` in `listener.go`, 1.31).
    pub fn external_name_alias(self) -> bool {
        self.at_least(21)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_with_or_without_patch() {
        assert_eq!("1.24.3".parse::<IstioVersion>().unwrap().minor, 24);
        assert_eq!("v1.31".parse::<IstioVersion>().unwrap().minor, 31);
        assert!("2".parse::<IstioVersion>().is_err());
        // The default (1.31) reads `~` as an exclusion.
        assert!(IstioVersion::DEFAULT.tilde_excludes());
    }
}
