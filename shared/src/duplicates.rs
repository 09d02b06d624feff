//! One hostname, several definitions: Services and ServiceEntries of the
//! same name in several namespaces. A proxy gets one copy of a hostname,
//! the one istiod takes for its namespace; an egress host
//! `<namespace>/<fqdn>` imports only that namespace's copy, so it must name
//! the namespace the traffic's copy came from.

use std::collections::{BTreeMap, BTreeSet};

use crate::scope::Visible;
use crate::snapshot::{MeshSnapshot, PortInfo, Protocol, SvcId};

impl MeshSnapshot {
    /// The copy of `host` a proxy in `ns` gets when it imports the hostname
    /// from every namespace (`*/*`, the implicit scope): among the copies
    /// exported to `ns`, its own namespace's, else (1.24+) a Kubernetes
    /// Service's over a ServiceEntry's, else the first of those exported
    /// to `ns` by name, else the oldest.
    pub fn imported_copy(&self, host: &str, ns: &str) -> Option<SvcId> {
        let unified = self.options.istio.at_least(24);
        let mut best: Option<SvcId> = None;
        for &id in self.services_named(host) {
            if !self.services[id].export.visible_to(ns) {
                continue;
            }
            best = match best {
                Some(b) if !self.prefer(id, b, ns, unified) => Some(b),
                _ => Some(id),
            };
        }
        best
    }
}

/// The service an observed call to `host` from a proxy in `ns` used: the
/// copy its Sidecar's import set holds (`current`), else the one the
/// implicit scope would take.
pub fn used_service(
    snap: &MeshSnapshot,
    host: &str,
    ns: &str,
    current: Option<&Visible>,
) -> Option<SvcId> {
    current
        .and_then(|v| {
            snap.services_named(host)
                .iter()
                .copied()
                .find(|s| v.imports_service(*s))
        })
        .or_else(|| snap.imported_copy(host, ns))
}

/// A hostname whose definitions disagree on ports or protocols.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub hostname: String,
    /// One definition per namespace (the copy that namespace keeps).
    pub definitions: Vec<SvcId>,
    /// For each definition, the namespaces with proxies that get it.
    pub gets: BTreeMap<SvcId, Vec<String>>,
    /// Namespaces with proxies to which no copy is exported.
    pub none: Vec<String>,
}

fn port_key(ports: &[PortInfo]) -> BTreeSet<(u32, &'static str)> {
    ports
        .iter()
        .map(|p| (p.number, protocol_name(p.protocol)))
        .collect()
}

pub fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Http => "HTTP",
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
        Protocol::Auto => "auto-detected",
    }
}

/// The ports of a definition as `443/TLS`-style text, by number.
pub fn ports_text(snap: &MeshSnapshot, svc: SvcId) -> String {
    let keys = port_key(&snap.services[svc].ports);
    if keys.is_empty() {
        return "no ports".into();
    }
    keys.iter()
        .map(|(n, p)| format!("{n}/{p}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every hostname defined in more than one namespace whose definitions
/// differ in ports or protocols, with which copy the proxies of each
/// namespace (those that run a sidecar) get.
pub fn conflicts(snap: &MeshSnapshot) -> Vec<Conflict> {
    let proxy_ns: BTreeSet<&str> = snap
        .sidecar_workloads()
        .map(|w| snap.workloads[w].namespace.as_str())
        .collect();
    let mut hostnames: Vec<&str> = snap
        .services
        .iter()
        .map(|s| s.hostname.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    hostnames.retain(|h| {
        let ids = snap.services_named(h);
        let first = &snap.services[ids[0]].namespace;
        ids.iter().any(|i| &snap.services[*i].namespace != first)
    });
    let mut out = Vec::new();
    for host in hostnames {
        // The copy each defining namespace keeps for itself.
        let mut by_ns: BTreeMap<&str, SvcId> = BTreeMap::new();
        for &id in snap.services_named(host) {
            let ns = snap.services[id].namespace.as_str();
            let keep = match by_ns.get(ns) {
                Some(&cur) => snap.prefer(id, cur, ns, snap.options.istio.at_least(24)),
                None => true,
            };
            if keep {
                by_ns.insert(ns, id);
            }
        }
        let keys: BTreeSet<_> = by_ns
            .values()
            .map(|id| port_key(&snap.services[*id].ports))
            .collect();
        if keys.len() < 2 {
            continue;
        }
        let mut gets: BTreeMap<SvcId, Vec<String>> = BTreeMap::new();
        let mut none = Vec::new();
        for ns in &proxy_ns {
            match snap.imported_copy(host, ns) {
                Some(id) => gets.entry(id).or_default().push(ns.to_string()),
                None => none.push(ns.to_string()),
            }
        }
        out.push(Conflict {
            hostname: host.to_string(),
            definitions: by_ns.into_values().collect(),
            gets,
            none,
        });
    }
    out
}
