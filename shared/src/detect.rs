//! What the inputs say about the environment: the Istio version the
//! proxies and istiod run (from their images) and the cluster DNS domain
//! (from the `--domain` argument the injector and istiod's chart pass). The
//! binaries ask this before falling back to a default, and say when a flag
//! disagrees with what the cluster runs.

use std::collections::BTreeMap;

use crate::inputs::Pod;
use crate::version::IstioVersion;
use crate::Error;

/// The Istio minor releases whose semantics meshscope knows.
pub const KNOWN_MINORS: std::ops::RangeInclusive<u32> = 28..=32;

/// The version without any evidence.
pub const DEFAULT_VERSION: IstioVersion = IstioVersion::DEFAULT;

/// istiod's container in its pod.
pub const ISTIOD_CONTAINER: &str = "discovery";

/// Parses a user's `--istio-version`, refusing releases meshscope does not
/// know.
pub fn known_version(s: &str) -> Result<IstioVersion, Error> {
    let v: IstioVersion = s.parse()?;
    if v.major != 1 || !KNOWN_MINORS.contains(&v.minor) {
        return Err(Error::UnknownVersion {
            version: v.to_string(),
            known: KNOWN_MINORS
                .map(|m| format!("1.{m}"))
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    Ok(v)
}

/// `docker.io/istio/proxyv2:1.31.2-distroless` → 1.31. Tags that do not
/// start with a version (`latest`, a digest only) say nothing.
pub fn version_of_image(image: &str) -> Option<IstioVersion> {
    let image = image.split('@').next().unwrap_or(image);
    let (repo, tag) = image.rsplit_once(':')?;
    if tag.contains('/') || repo.is_empty() {
        return None; // a registry port, not a tag
    }
    let mut parts = tag.trim_start_matches('v').split(['.', '-']);
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    (major == 1).then_some(IstioVersion { major, minor })
}

/// What the pods say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Evidence {
    /// Injected proxies per Istio version of their `istio-proxy` image.
    pub proxies: BTreeMap<IstioVersion, usize>,
    /// istiod pods per version of their `discovery` image.
    pub istiod: BTreeMap<IstioVersion, usize>,
    /// Cluster domains in istiod's `--domain` argument, with counts:
    /// istiod builds the service hostnames, so it decides.
    pub istiod_domains: BTreeMap<String, usize>,
    /// Cluster domains in the proxies' `--domain` arguments, with counts.
    pub domains: BTreeMap<String, usize>,
    /// Injected proxies seen (with a version or not).
    pub proxy_count: usize,
}

/// The pods labelled `app=istiod` among `pods` (offline dumps hold
/// istiod's own pods).
pub fn istiod_pods(pods: &[Pod]) -> Vec<Pod> {
    pods.iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .is_some_and(|a| a == "istiod")
        })
        .cloned()
        .collect()
}

impl Evidence {
    /// Reads proxies from `pods`, and istiod from `istiod_pods` (the pods
    /// labelled `app=istiod`, which may also be among `pods`).
    pub fn from_pods(pods: &[Pod], istiod_pods: &[Pod]) -> Evidence {
        let mut e = Evidence::default();
        for p in pods {
            // One proxy per pod that runs one: the same test as injection's.
            let Some(c) = p.spec.as_ref().and_then(|s| s.proxy()) else {
                continue;
            };
            e.proxy_count += 1;
            if let Some(v) = version_of_image(&c.image) {
                *e.proxies.entry(v).or_default() += 1;
            }
            // `$(POD_NAMESPACE).svc.cluster.local`
            if let Some(d) = c.domain.as_deref().and_then(|d| d.split_once(".svc.")) {
                *e.domains.entry(d.1.to_string()).or_default() += 1;
            }
        }
        for p in istiod_pods {
            let Some(spec) = &p.spec else { continue };
            for c in spec
                .containers
                .iter()
                .filter(|c| c.name == ISTIOD_CONTAINER)
            {
                if let Some(v) = version_of_image(&c.image) {
                    *e.istiod.entry(v).or_default() += 1;
                }
                if let Some(d) = &c.domain {
                    *e.istiod_domains.entry(d.clone()).or_default() += 1;
                }
            }
        }
        e
    }

    /// The version to apply and what to tell the user about it, once:
    /// the flag when given, else istiod's, else the proxies' most common,
    /// else [`DEFAULT_VERSION`].
    pub fn version(&self, flag: Option<IstioVersion>) -> (IstioVersion, Vec<String>) {
        let mut notes = Vec::new();
        let most = |m: &BTreeMap<IstioVersion, usize>| {
            m.iter().max_by_key(|(v, n)| (**n, **v)).map(|(v, _)| *v)
        };
        let list = |m: &BTreeMap<IstioVersion, usize>| {
            m.iter()
                .map(|(v, n)| format!("{v} ({n})"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let istiod = most(&self.istiod);
        let proxies = most(&self.proxies);
        if self.istiod.len() > 1 {
            notes.push(format!(
                "istiod runs several versions: {}",
                list(&self.istiod)
            ));
        }
        if let Some(d) = istiod {
            if self.proxies.keys().any(|v| *v != d) {
                notes.push(format!(
                    "proxies run Istio {} while istiod runs {d}; istiod's semantics apply",
                    list(&self.proxies)
                ));
            }
        }
        let cluster = istiod.or(proxies);
        let chosen = match (flag, cluster) {
            (Some(f), Some(c)) if f != c => {
                notes.push(format!(
                    "--istio-version {f} differs from the Istio {c} the cluster runs; using {f}"
                ));
                f
            }
            (Some(f), _) => f,
            (None, Some(c)) if KNOWN_MINORS.contains(&c.minor) => c,
            (None, Some(c)) => {
                let nearest = IstioVersion {
                    major: 1,
                    minor: c.minor.clamp(*KNOWN_MINORS.start(), *KNOWN_MINORS.end()),
                };
                notes.push(format!(
                    "the cluster runs Istio {c}, which meshscope does not know; using {nearest} semantics (pass --istio-version)"
                ));
                nearest
            }
            (None, None) => DEFAULT_VERSION,
        };
        (chosen, notes)
    }

    /// The cluster domain to apply and a note when the flag disagrees
    /// with the cluster: the flag, else [`Evidence::domain`], else
    /// `cluster.local`.
    pub fn cluster_domain(&self, flag: Option<&str>) -> (String, Option<String>) {
        match (flag, self.domain()) {
            (Some(f), Some(seen)) if f != seen => (
                f.to_string(),
                Some(format!(
                    "--cluster-domain {f} differs from the {seen} the pods were injected with; using {f}"
                )),
            ),
            (Some(f), _) => (f.to_string(), None),
            (None, Some(seen)) => (seen.to_string(), None),
            (None, None) => ("cluster.local".to_string(), None),
        }
    }

    /// Where [`Evidence::cluster_domain`] takes the domain from.
    pub fn domain_source(&self, flag: Option<&str>) -> DomainSource {
        match (flag, self.domain()) {
            (Some(_), _) => DomainSource::Flag,
            (None, Some(_)) => DomainSource::Cluster,
            (None, None) => DomainSource::Default,
        }
    }

    /// The cluster domain: istiod's `--domain`, else the one most of the
    /// proxies were injected with (a few odd pods do not decide it).
    pub fn domain(&self) -> Option<&str> {
        fn most(m: &BTreeMap<String, usize>) -> Option<(&str, usize)> {
            m.iter()
                .max_by_key(|(_, n)| **n)
                .map(|(d, n)| (d.as_str(), *n))
        }
        if let Some((d, _)) = most(&self.istiod_domains) {
            return Some(d);
        }
        most(&self.domains)
            .filter(|(_, n)| 2 * n > self.proxy_count)
            .map(|(d, _)| d)
    }
}

/// Where the cluster domain in use came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DomainSource {
    /// `--cluster-domain`.
    Flag,
    /// istiod's or the proxies' `--domain`.
    Cluster,
    /// Nothing said: `cluster.local`.
    Default,
}

/// What the traffic's service names say about the cluster domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrafficDomain {
    /// They agree with the domain in use, or say nothing.
    Agrees,
    /// Nothing chose the domain, and the traffic names another: use it.
    Adopt { domain: String, note: String },
    /// The flag or the cluster chose a domain the traffic does not use.
    Differs(String),
}

/// The cluster domain of a service FQDN `<name>.<namespace>.svc.<domain>`.
pub fn domain_of(host: &str) -> Option<&str> {
    let (name_ns, domain) = host.split_once(".svc.")?;
    let (name, ns) = name_ns.split_once('.')?;
    (!name.is_empty() && !ns.is_empty() && !ns.contains('.') && !domain.is_empty())
        .then_some(domain)
}

/// Compares the cluster domains of the observed service names (requests
/// per domain) with the domain in use.
pub fn traffic_domain(
    seen: &BTreeMap<String, u64>,
    chosen: &str,
    source: DomainSource,
) -> TrafficDomain {
    let total: u64 = seen.values().sum();
    let Some((domain, n)) = seen.iter().max_by_key(|(_, n)| **n) else {
        return TrafficDomain::Agrees;
    };
    if domain == chosen || 2 * n <= total {
        return TrafficDomain::Agrees;
    }
    let share = format!("{n} of {total} requests to services go to *.svc.{domain}");
    match source {
        DomainSource::Default => TrafficDomain::Adopt {
            domain: domain.clone(),
            note: format!(
                "cluster domain {domain}, from the traffic's service names ({share}); pass --cluster-domain to choose another"
            ),
        },
        DomainSource::Flag => TrafficDomain::Differs(format!(
            "the traffic's services are under svc.{domain} ({share}), not the svc.{chosen} of --cluster-domain {chosen}: those calls match no service and are left out of the recommendations; pass --cluster-domain {domain}"
        )),
        DomainSource::Cluster => TrafficDomain::Differs(format!(
            "the traffic's services are under svc.{domain} ({share}), not the svc.{chosen} this cluster's istiod and proxies use: logs from another cluster? Those calls match no service and are left out; pass --cluster-domain {domain} to read the input as that cluster's"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::PROXY_CONTAINER;

    #[test]
    fn the_traffic_domain_is_adopted_only_when_nothing_chose_one() {
        assert_eq!(
            domain_of("details.bookinfo.svc.corp.local"),
            Some("corp.local")
        );
        assert_eq!(
            domain_of("details.bookinfo.svc.cluster.local"),
            Some("cluster.local")
        );
        for h in [
            "api.example.com",
            "a.b.c.svc.cluster.local",
            ".ns.svc.x",
            "details.bookinfo.svc.",
        ] {
            assert_eq!(domain_of(h), None, "{h}");
        }
        let seen = BTreeMap::from([
            ("corp.local".to_string(), 90),
            ("cluster.local".to_string(), 10),
        ]);
        assert_eq!(
            traffic_domain(&seen, "cluster.local", DomainSource::Default),
            TrafficDomain::Adopt {
                domain: "corp.local".into(),
                note: "cluster domain corp.local, from the traffic's service names (90 of 100 requests to services go to *.svc.corp.local); pass --cluster-domain to choose another".into()
            }
        );
        assert!(matches!(
            traffic_domain(&seen, "cluster.local", DomainSource::Flag),
            TrafficDomain::Differs(w) if w.contains("pass --cluster-domain corp.local")
        ));
        assert!(matches!(
            traffic_domain(&seen, "cluster.local", DomainSource::Cluster),
            TrafficDomain::Differs(w) if w.contains("logs from another cluster?")
        ));
        assert_eq!(
            traffic_domain(&seen, "corp.local", DomainSource::Flag),
            TrafficDomain::Agrees
        );
        // No majority, or no service names: nothing to say.
        let split = BTreeMap::from([("a.local".to_string(), 5), ("b.local".to_string(), 5)]);
        assert_eq!(
            traffic_domain(&split, "cluster.local", DomainSource::Default),
            TrafficDomain::Agrees
        );
        assert_eq!(
            traffic_domain(&BTreeMap::new(), "x", DomainSource::Default),
            TrafficDomain::Agrees
        );
    }

    fn v(minor: u32) -> IstioVersion {
        IstioVersion { major: 1, minor }
    }

    fn pod(container: &str, image: &str, args: &[&str]) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "n"},
            "spec": {"containers": [{"name": container, "image": image, "args": args}]}
        }))
        .unwrap()
    }

    #[test]
    fn versions_come_from_image_tags() {
        assert_eq!(
            version_of_image("docker.io/istio/proxyv2:1.31.2"),
            Some(v(31))
        );
        assert_eq!(
            version_of_image("istio/proxyv2:1.30.0-distroless"),
            Some(v(30))
        );
        assert_eq!(
            version_of_image("gcr.io/istio-release/pilot:1.32-dev@sha256:ab"),
            Some(v(32))
        );
        assert_eq!(version_of_image("registry:5000/istio/proxyv2"), None);
        assert_eq!(version_of_image("istio/proxyv2:latest"), None);
        assert_eq!(version_of_image("istio/proxyv2@sha256:abcd"), None);
        assert_eq!(known_version("1.31").unwrap(), v(31));
        let e = known_version("1.20").unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown Istio version 1.20; meshscope knows 1.28, 1.29, 1.30, 1.31, 1.32"
        );
        assert!(known_version("2.0").is_err());
    }

    #[test]
    fn istiod_then_proxies_then_the_default_and_one_note_per_disagreement() {
        let proxy = |img| {
            pod(
                PROXY_CONTAINER,
                img,
                &[
                    "proxy",
                    "sidecar",
                    "--domain",
                    "$(POD_NAMESPACE).svc.corp.local",
                ],
            )
        };
        let istiod = pod(
            ISTIOD_CONTAINER,
            "istio/pilot:1.31.1",
            &["discovery", "--domain", "corp.local"],
        );
        let e = Evidence::from_pods(
            &[
                proxy("istio/proxyv2:1.30.2"),
                proxy("istio/proxyv2:1.31.1"),
                proxy("istio/proxyv2:1.31.1"),
            ],
            &[istiod],
        );
        assert_eq!(e.proxies, BTreeMap::from([(v(30), 1), (v(31), 2)]));
        assert_eq!(e.domain(), Some("corp.local"));
        let (chosen, notes) = e.version(None);
        assert_eq!(chosen, v(31));
        assert_eq!(
            notes,
            vec!["proxies run Istio 1.30 (1), 1.31 (2) while istiod runs 1.31; istiod's semantics apply"]
        );
        let (chosen, notes) = e.version(Some(v(30)));
        assert_eq!(chosen, v(30));
        assert!(
            notes
                .last()
                .unwrap()
                .starts_with("--istio-version 1.30 differs from the Istio 1.31"),
            "{notes:?}"
        );
        // Proxies only (offline dumps without istio-system): their version.
        let e = Evidence::from_pods(&[proxy("istio/proxyv2:1.29.0")], &[]);
        assert_eq!(e.version(None), (v(29), vec![]));
        // Nothing: the default, silently.
        assert_eq!(Evidence::default().version(None), (DEFAULT_VERSION, vec![]));
        // One odd proxy among many does not decide the domain.
        let mut pods: Vec<Pod> = (0..3)
            .map(|_| pod(PROXY_CONTAINER, "istio/proxyv2:1.31.1", &["proxy"]))
            .collect();
        pods.push(proxy("istio/proxyv2:1.31.1"));
        assert_eq!(Evidence::from_pods(&pods, &[]).domain(), None);
        // Most of them do.
        for _ in 0..3 {
            pods.push(proxy("istio/proxyv2:1.31.1"));
        }
        assert_eq!(Evidence::from_pods(&pods, &[]).domain(), Some("corp.local"));
        // Newer than known: the nearest, with a note.
        let e = Evidence::from_pods(&[proxy("istio/proxyv2:1.40.0")], &[]);
        let (chosen, notes) = e.version(None);
        assert_eq!(chosen, v(32));
        assert_eq!(notes.len(), 1);
        assert_eq!(
            pod("app", "x", &["--domain=a.b"]).spec.unwrap().containers[0]
                .domain
                .as_deref(),
            Some("a.b")
        );
    }
}
