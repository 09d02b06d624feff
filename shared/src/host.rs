//! Egress host entries (`<ns>/<dnsName>`), host matching, and exportTo sets.
//!
//! `docs/istio-semantics.md` §2 and §3: no short-name expansion, left-most
//! wildcards match any number of labels, a wildcard service host is
//! imported only by the same or a broader wildcard, and `~` changed meaning
//! in 1.31.

use std::collections::BTreeSet;

use crate::error::Error;
use crate::version::IstioVersion;

/// The namespace part of an egress host entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NsSel {
    /// `*`
    Any,
    /// `.`: the namespace the scope is computed for.
    Current,
    /// A namespace name. On ≤1.30 `~` is such a name, one that never exists.
    Named(String),
}

impl NsSel {
    pub fn matches(&self, scope_ns: &str, object_ns: &str) -> bool {
        match self {
            NsSel::Any => true,
            NsSel::Current => scope_ns == object_ns,
            NsSel::Named(n) => n == object_ns,
        }
    }
}

/// One parsed egress `hosts` entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostEntry {
    pub ns: NsSel,
    pub host: String,
    /// 1.31+: a `~` prefix subtracts what it matches.
    pub exclude: bool,
}

impl HostEntry {
    pub fn parse(raw: &str, version: IstioVersion) -> Result<Self, Error> {
        let err = |reason: &str| Error::Host {
            host: raw.to_string(),
            reason: reason.to_string(),
        };
        let mut parts = raw.split('/');
        let (ns, host) = match (parts.next(), parts.next(), parts.next()) {
            (Some(ns), Some(host), None) => (ns, host),
            _ => return Err(err("must have the form <namespace>/<dnsName>")),
        };
        if host.is_empty() {
            return Err(err("the host part is empty"));
        }
        if host.contains('*')
            && !(host == "*" || (host.starts_with("*.") && host[2..].find('*').is_none()))
        {
            return Err(err(
                "only a left-most wildcard (*.example.com) or * is allowed",
            ));
        }
        let (exclude, ns) = match ns.strip_prefix('~') {
            Some(rest) if version.tilde_excludes() => (true, rest),
            Some("") => (false, "~"),
            Some(_) => {
                return Err(err(
                    "a namespace starting with ~ is only valid as ~/* before Istio 1.31",
                ))
            }
            None => (false, ns),
        };
        let ns = match ns {
            "*" => NsSel::Any,
            "." => NsSel::Current,
            // 1.31: a bare `~` prefix means every namespace.
            "" if exclude => NsSel::Any,
            "~" => NsSel::Named("~".into()),
            n if is_dns1123_label(n) => NsSel::Named(n.to_string()),
            _ => return Err(err("the namespace must be *, ., or a DNS-1123 label")),
        };
        Ok(Self {
            ns,
            host: host.to_string(),
            exclude,
        })
    }

    /// The namespace this entry names, as text (`*`, `.`, or a name).
    pub fn ns_text(&self) -> &str {
        match &self.ns {
            NsSel::Any => "*",
            NsSel::Current => ".",
            NsSel::Named(n) => n,
        }
    }

    pub fn is_everything(&self) -> bool {
        !self.exclude && self.ns == NsSel::Any && self.host == "*"
    }

    /// `~/*` before 1.31 (or alone on 1.31+): imports nothing.
    pub fn is_closed(&self) -> bool {
        self.host == "*"
            && (self.ns == NsSel::Named("~".into()) || (self.exclude && self.ns == NsSel::Any))
    }
}

impl std::fmt::Display for HostEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.exclude {
            f.write_str("~")?;
            if self.ns == NsSel::Any {
                return write!(f, "/{}", self.host);
            }
        }
        write!(f, "{}/{}", self.ns_text(), self.host)
    }
}

pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Does service hostname `svc` fall within entry host `entry`?
/// (`pkg/config/host/name.go` `SubsetOf`.)
pub fn host_subset_of(svc: &str, entry: &str) -> bool {
    if entry == "*" {
        return true;
    }
    match (svc.strip_prefix('*'), entry.strip_prefix('*')) {
        // Both wildcards: the service's suffix must end with the entry's.
        (Some(s_suffix), Some(e_suffix)) => s_suffix.ends_with(e_suffix),
        // A wildcard service is never inside an exact entry.
        (Some(_), None) => svc == entry,
        (None, Some(e_suffix)) => svc.len() > e_suffix.len() && svc.ends_with(e_suffix),
        (None, None) => svc == entry,
    }
}

/// Classic VirtualService host matching: either side may contain the other.
pub fn hosts_overlap(a: &str, b: &str) -> bool {
    host_subset_of(a, b) || host_subset_of(b, a)
}

/// Who may see an object, after exportTo and the mesh default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Export {
    Public,
    Hidden,
    /// Named namespaces; the object's own namespace is included when `.` or
    /// its name was listed.
    Namespaces(BTreeSet<String>),
}

impl Export {
    /// Set semantics for Services and ServiceEntries
    /// (`docs/istio-semantics.md` §3).
    pub fn for_service(export_to: Option<&[String]>, default: &[String], own_ns: &str) -> Self {
        let list = match export_to {
            Some(l) if !l.is_empty() => l,
            _ => default,
        };
        Self::from_list(list, own_ns, true)
    }

    /// [`Export::for_service`] as istiod's `IsServiceVisible` reads it:
    /// `*`, `.` and namespaces, a `~` among them hiding nothing.
    pub fn listed(export_to: Option<&[String]>, default: &[String], own_ns: &str) -> Self {
        match Self::for_service(export_to, default, own_ns) {
            Export::Hidden => {
                let list = match export_to {
                    Some(l) if !l.is_empty() => l,
                    _ => default,
                };
                Self::from_list(list, own_ns, false)
            }
            other => other,
        }
    }

    /// VirtualServices: `*` makes one public; else a `~` anywhere in the
    /// list hides it from every namespace, its own included, whatever else
    /// the list names (validation rejects `~` there, but istiod acts on
    /// what reaches it: `pilot/pkg/model/push_context.go`
    /// `initVirtualServices`, 1.31).
    pub fn for_virtual_service(
        export_to: Option<&[String]>,
        default: &[String],
        own_ns: &str,
    ) -> Self {
        let list = match export_to {
            Some(l) if !l.is_empty() => l,
            _ => default,
        };
        Self::from_list(list, own_ns, true)
    }

    /// DestinationRules: the mesh default honours only `.` versus non-`.`.
    pub fn for_destination_rule(
        export_to: Option<&[String]>,
        default: &[String],
        own_ns: &str,
    ) -> Self {
        match export_to {
            Some(l) if !l.is_empty() => Self::from_list(l, own_ns, false),
            _ if default.iter().any(|d| d == ".") => {
                Self::Namespaces(BTreeSet::from([own_ns.to_string()]))
            }
            _ => Self::Public,
        }
    }

    fn from_list(list: &[String], own_ns: &str, tilde_hides: bool) -> Self {
        let items: Vec<&str> = list.iter().map(|s| s.trim()).collect();
        if items.contains(&"*") {
            return Self::Public;
        }
        if tilde_hides && items.contains(&"~") {
            return Self::Hidden;
        }
        let set = items
            .into_iter()
            .filter(|s| !s.is_empty() && *s != "~")
            .map(|s| if s == "." { own_ns } else { s })
            .map(str::to_string)
            .collect();
        Self::Namespaces(set)
    }

    pub fn visible_to(&self, ns: &str) -> bool {
        match self {
            Export::Public => true,
            Export::Hidden => false,
            Export::Namespaces(set) => set.contains(ns),
        }
    }

    pub fn is_public(&self) -> bool {
        matches!(self, Export::Public)
    }
}

/// Expands a short name the way istiod resolves VirtualService and
/// DestinationRule hosts: a name without dots is relative to the object's
/// namespace.
pub fn resolve_short_name(host: &str, ns: &str, domain: &str) -> String {
    if host.contains('.') || host.contains('*') {
        host.to_string()
    } else {
        format!("{host}.{ns}.svc.{domain}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(minor: u32) -> IstioVersion {
        IstioVersion { major: 1, minor }
    }

    #[test]
    fn no_short_name_expansion_in_egress_hosts() {
        let e = HostEntry::parse("prod/reviews", v(30)).unwrap();
        assert!(!host_subset_of("reviews.prod.svc.cluster.local", &e.host));
    }

    #[test]
    fn left_most_wildcard_matches_many_labels_but_not_the_apex() {
        assert!(host_subset_of("a.example.com", "*.example.com"));
        assert!(host_subset_of("a.b.example.com", "*.example.com"));
        assert!(!host_subset_of("example.com", "*.example.com"));
        assert!(host_subset_of("anything.at.all", "*"));
    }

    #[test]
    fn wildcard_service_host_needs_an_equal_or_broader_wildcard() {
        assert!(!host_subset_of("*.wikipedia.org", "en.wikipedia.org"));
        assert!(host_subset_of("*.wikipedia.org", "*.wikipedia.org"));
        assert!(host_subset_of("*.wikipedia.org", "*.org"));
        assert!(host_subset_of("*.wikipedia.org", "*"));
        assert!(!host_subset_of("*.org", "*.wikipedia.org"));
    }

    #[test]
    fn virtual_service_hosts_match_in_both_directions() {
        assert!(hosts_overlap("*.com", "a.com"));
        assert!(hosts_overlap("a.com", "*.com"));
        assert!(!hosts_overlap("a.com", "b.com"));
    }

    #[test]
    fn tilde_is_a_namespace_that_never_exists_before_1_31() {
        let e = HostEntry::parse("~/*", v(30)).unwrap();
        assert_eq!(e.ns, NsSel::Named("~".into()));
        assert!(!e.exclude);
        assert!(e.is_closed());
        assert!(HostEntry::parse("~foo/*", v(30)).is_err());
    }

    #[test]
    fn tilde_prefix_excludes_from_1_31() {
        let e = HostEntry::parse("~/foo.com", v(31)).unwrap();
        assert!(e.exclude);
        assert_eq!(e.ns, NsSel::Any);
        let e = HostEntry::parse("~./x.com", v(31)).unwrap();
        assert_eq!((e.ns, e.exclude), (NsSel::Current, true));
        let e = HostEntry::parse("~prod/x.com", v(31)).unwrap();
        assert_eq!(e.ns, NsSel::Named("prod".into()));
        assert!(HostEntry::parse("~/*", v(31)).unwrap().is_closed());
    }

    #[test]
    fn entries_need_exactly_one_slash() {
        assert!(HostEntry::parse("reviews.prod.svc.cluster.local", v(30)).is_err());
        assert!(HostEntry::parse("a/b/c", v(30)).is_err());
        assert!(HostEntry::parse("./*", v(30)).is_ok());
    }

    #[test]
    fn export_sets_follow_istio() {
        let d = vec!["*".to_string()];
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(Export::for_service(None, &d, "a").is_public());
        assert_eq!(
            Export::for_service(Some(&s(&["~"])), &d, "a"),
            Export::Hidden
        );
        // `*` wins over everything else
        assert!(Export::for_service(Some(&s(&["~", "*"])), &d, "a").is_public());
        let e = Export::for_service(Some(&s(&[".", "b"])), &d, "a");
        assert!(e.visible_to("a") && e.visible_to("b") && !e.visible_to("c"));
        // mesh default `.` makes unset services private
        let e = Export::for_service(None, &s(&["."]), "a");
        assert!(e.visible_to("a") && !e.visible_to("b"));
        // DR default honours only `.` versus non-`.`
        assert!(Export::for_destination_rule(None, &s(&["foo"]), "a").is_public());
        assert!(!Export::for_destination_rule(None, &s(&["."]), "a").visible_to("b"));
        // annotation items are trimmed
        let e = Export::for_service(Some(&s(&[" b "])), &d, "a");
        assert!(e.visible_to("b"));
    }
}
