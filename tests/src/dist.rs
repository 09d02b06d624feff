//! Per-proxy distributions for the benchmarks: p50, p95 and max of the xDS
//! a group of simulated sidecars holds, with the proxy at the max named.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::xds::ProxyConfig;

/// The xDS types a [`Dist`] splits by.
pub const TYPES: [&str; 4] = ["cds", "lds", "rds", "eds"];

/// The distribution of per-proxy xDS bytes over a group of proxies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    pub proxies: usize,
    pub p50: u64,
    pub p95: u64,
    pub max: u64,
    pub mean: f64,
    /// The proxy holding `max` (`ns/pod`).
    pub worst: String,
    /// type -> p50 bytes of that type alone.
    pub p50_by_type: BTreeMap<String, u64>,
}

/// The `q` quantile (0..=1) of sorted values, nearest rank.
pub fn pct(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

impl Dist {
    /// Of `(proxy key, config)` pairs.
    pub fn of<'a>(proxies: impl IntoIterator<Item = (&'a str, &'a ProxyConfig)>) -> Dist {
        let proxies: Vec<(&str, &ProxyConfig)> = proxies.into_iter().collect();
        let mut totals: Vec<u64> = proxies.iter().map(|(_, p)| p.total_bytes).collect();
        totals.sort_unstable();
        // The first proxy in key order among those at the max: stable.
        let worst = proxies
            .iter()
            .filter(|(_, p)| Some(&p.total_bytes) == totals.last())
            .map(|(k, _)| *k)
            .min()
            .unwrap_or_default();
        let mut d = Dist {
            proxies: proxies.len(),
            p50: pct(&totals, 0.5),
            p95: pct(&totals, 0.95),
            max: totals.last().copied().unwrap_or(0),
            mean: totals.iter().sum::<u64>() as f64 / totals.len().max(1) as f64,
            worst: worst.to_string(),
            ..Dist::default()
        };
        for t in TYPES {
            let mut v: Vec<u64> = proxies.iter().map(|(_, p)| p.total(t).bytes).collect();
            v.sort_unstable();
            d.p50_by_type.insert(t.into(), pct(&v, 0.5));
        }
        d
    }

    /// One distribution per role (as `role_of` names each proxy key), and
    /// `all`. Roles with no proxy are left out.
    pub fn by_role(
        proxies: &[(String, ProxyConfig)],
        role_of: impl Fn(&str) -> &'static str,
    ) -> BTreeMap<String, Dist> {
        let mut out = BTreeMap::new();
        out.insert(
            "all".to_string(),
            Dist::of(proxies.iter().map(|(k, p)| (k.as_str(), p))),
        );
        let roles: std::collections::BTreeSet<&'static str> =
            proxies.iter().map(|(k, _)| role_of(k)).collect();
        for role in roles {
            let of = proxies
                .iter()
                .filter(|(k, _)| role_of(k) == role)
                .map(|(k, p)| (k.as_str(), p));
            out.insert(role.to_string(), Dist::of(of));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::TypeTotal;

    fn proxy(key: &str, cds: u64, lds: u64) -> (String, ProxyConfig) {
        let mut p = ProxyConfig {
            proxy: key.into(),
            total_bytes: cds + lds,
            ..ProxyConfig::default()
        };
        p.totals.insert(
            "cds".into(),
            TypeTotal {
                count: 1,
                bytes: cds,
            },
        );
        p.totals.insert(
            "lds".into(),
            TypeTotal {
                count: 1,
                bytes: lds,
            },
        );
        (key.into(), p)
    }

    #[test]
    fn percentiles_by_role_name_the_worst_proxy() {
        let ps: Vec<_> = (1..=20)
            .map(|i| proxy(&format!("ns/p{i:02}"), 100 * i, 10))
            .collect();
        let d = Dist::by_role(&ps, |k| if k < "ns/p11" { "leaf" } else { "hub" });
        let all = &d["all"];
        assert_eq!(all.proxies, 20);
        assert_eq!(all.max, 2010);
        assert_eq!(all.worst, "ns/p20");
        assert_eq!(
            all.p50,
            pct(&(1..=20).map(|i| 100 * i + 10).collect::<Vec<_>>(), 0.5)
        );
        assert_eq!(all.p95, 1910);
        assert_eq!(d["leaf"].proxies, 10);
        assert_eq!(d["leaf"].max, 1010);
        assert_eq!(d["leaf"].worst, "ns/p10");
        assert_eq!(d["hub"].p50_by_type["lds"], 10);
        assert_eq!(d["hub"].p50_by_type["rds"], 0);
        assert!(!d.contains_key("caller"));
    }

    #[test]
    fn empty_group_is_all_zero() {
        let d = Dist::of(std::iter::empty());
        assert_eq!((d.proxies, d.p50, d.p95, d.max), (0, 0, 0, 0));
    }
}
