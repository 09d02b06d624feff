//! The export findings: MS0016 (a catch-all ServiceEntry address exported
//! beyond its namespace), MS0017 (a wildcard-host ServiceEntry exported to
//! the whole mesh), MS0018 (a wildcard DestinationRule that shadows other
//! namespaces' rules) and MS0019 (an exportTo that hides an object from a
//! namespace that calls it).

use crate::codes::Code;
use crate::finding::{finding, Finding};
use crate::host::{host_subset_of, Export};
use crate::snapshot::{DrId, MeshSnapshot, SeInfo};

use super::{export_list, ExportAction, ExportRec};

/// Addresses that, as a ServiceEntry CIDR, match every destination.
pub const CATCH_ALL_RANGES: &[&str] = &["0.0.0.0/0", "::/0"];

/// The parts of a ServiceEntry these rules read, from a snapshot or from
/// the object being admitted.
pub struct EntryFacts<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub hosts: &'a [String],
    pub addresses: &'a [String],
    pub catch_all_ports: &'a [u32],
    pub export_to: Option<&'a [String]>,
}

impl<'a> EntryFacts<'a> {
    pub fn of(se: &'a SeInfo) -> Self {
        EntryFacts {
            namespace: &se.namespace,
            name: &se.name,
            hosts: &se.hosts,
            addresses: &se.addresses,
            catch_all_ports: &se.catch_all_ports,
            export_to: se.export_to.as_deref(),
        }
    }

    /// Who sidecars let see it: exportTo or the mesh default, capped by
    /// `serviceEntryVisibility`.
    fn export(&self, snap: &MeshSnapshot) -> Export {
        let d = snap.mesh.export_defaults_for(snap.options.istio);
        let e = Export::for_service(self.export_to, &d.default_service_export_to, self.namespace);
        let listed = Export::listed(self.export_to, &d.default_service_export_to, self.namespace);
        match snap.service_entry_visibility(self.namespace) {
            Some(v) => v.for_sidecars().cap(e, &listed, self.namespace),
            None => e,
        }
    }

    fn fix(&self) -> String {
        format!(
            "set spec.exportTo to the namespaces that call it ({})",
            super::exports_command(self.namespace)
        )
    }

    /// The rules that need only the object and the mesh config: MS0016
    /// and MS0017 (the webhook's, besides `audit`'s).
    pub fn findings(&self, snap: &MeshSnapshot) -> Vec<Finding> {
        [catch_all_entry(snap, self), wildcard_entry(snap, self)]
            .into_iter()
            .flatten()
            .collect()
    }
}

/// Beyond its own namespace: `None` when the export is narrow.
fn wide(e: &Export, own: &str) -> Option<String> {
    match e {
        Export::Public => Some("every namespace".into()),
        Export::Hidden => None,
        Export::Namespaces(set) => {
            let others: Vec<&str> = set
                .iter()
                .map(String::as_str)
                .filter(|n| *n != own)
                .collect();
            (!others.is_empty()).then(|| format!("namespaces {}", others.join(", ")))
        }
    }
}

/// MS0016: a catch-all address on a TCP-like port, seen beyond its
/// namespace.
pub fn catch_all_entry(snap: &MeshSnapshot, se: &EntryFacts<'_>) -> Option<Finding> {
    let cidrs: Vec<&str> = se
        .addresses
        .iter()
        .map(|a| a.trim())
        .filter(|a| CATCH_ALL_RANGES.contains(a))
        .collect();
    if cidrs.is_empty() || se.catch_all_ports.is_empty() {
        return None;
    }
    let to = wide(&se.export(snap), se.namespace)?;
    let ports: Vec<String> = se.catch_all_ports.iter().map(u32::to_string).collect();
    Some(finding(
        Code::CatchAllServiceEntryExported,
        "ServiceEntry",
        se.namespace,
        se.name,
        format!(
            "ServiceEntry {}/{} has address {} and is exported to {to}: every TCP connection on port {} of their proxies that no other listener claims goes to it (REGISTRY_ONLY bypassed, or hijacked with STATIC); {}",
            se.namespace,
            se.name,
            cidrs.join(", "),
            ports.join(", "),
            se.fix()
        ),
    ))
}

/// MS0017: a wildcard host exported to the whole mesh.
pub fn wildcard_entry(snap: &MeshSnapshot, se: &EntryFacts<'_>) -> Option<Finding> {
    let wild: Vec<&str> = se
        .hosts
        .iter()
        .map(String::as_str)
        .filter(|h| h.starts_with('*'))
        .collect();
    if wild.is_empty() || !se.export(snap).is_public() {
        return None;
    }
    let tcp = if se.addresses.is_empty() && !se.catch_all_ports.is_empty() {
        " (with TCP ports and no addresses, a catch-all on those ports too)"
    } else {
        ""
    };
    Some(finding(
        Code::WildcardServiceEntryMeshWide,
        "ServiceEntry",
        se.namespace,
        se.name,
        format!(
            "ServiceEntry {}/{} has wildcard host {} and is exported to the whole mesh: it is in every sidecar's scope{tcp}; {}",
            se.namespace,
            se.name,
            wild.join(", "),
            se.fix()
        ),
    ))
}

/// MS0018: a wildcard DestinationRule outside the root namespace that
/// covers services of other namespaces. For its namespace's proxies it is
/// the most specific match of every such service without an own-namespace
/// rule, so the owners' rules (their subsets, TLS, load balancing) never
/// apply there (`destinationRule`, push_context.go, 1.31, step 1).
pub fn wildcard_destination_rule(snap: &MeshSnapshot, d: DrId) -> Option<Finding> {
    let dr = &snap.destination_rules[d];
    if !dr.host.starts_with('*')
        || dr.selector.is_some()
        || dr.namespace == snap.mesh.root_namespace
    {
        return None;
    }
    if !dr.export.visible_to(&dr.namespace) {
        return None;
    }
    let mut hosts: Vec<&str> = snap
        .services
        .iter()
        .filter(|s| s.namespace != dr.namespace && host_subset_of(&s.hostname, &dr.host))
        .map(|s| s.hostname.as_str())
        .collect();
    hosts.sort();
    hosts.dedup();
    if hosts.is_empty() {
        return None;
    }
    let shadowed: Vec<String> = snap
        .destination_rules
        .iter()
        .filter(|o| o.namespace != dr.namespace && hosts.iter().any(|h| host_subset_of(h, &o.host)))
        .map(|o| format!("{}/{}", o.namespace, o.name))
        .collect();
    let shown = match hosts.len() {
        0..=5 => hosts.join(", "),
        n => format!("{}, +{} more", hosts[..5].join(", "), n - 5),
    };
    let shadow = if shadowed.is_empty() {
        String::new()
    } else {
        format!(" and shadows {}", shadowed.join(", "))
    };
    Some(finding(
        Code::WildcardDestinationRule,
        "DestinationRule",
        &dr.namespace,
        &dr.name,
        format!(
            "DestinationRule {}/{} has wildcard host {} that covers {} of other namespaces ({shown}): for proxies in {} it replaces their owners' rules{shadow}; narrow its host to the namespace's own services, or move it to the root namespace",
            dr.namespace,
            dr.name,
            dr.host,
            plural(hosts.len()),
            dr.namespace
        ),
    ))
}

fn plural(n: usize) -> String {
    format!("{n} {}", if n == 1 { "service" } else { "services" })
}

/// MS0019: the object's exportTo hides it from namespaces that call it.
pub fn hidden_from_callers(r: &ExportRec) -> Option<Finding> {
    if r.hidden_from.is_empty() || r.action == ExportAction::Exempt {
        return None;
    }
    let whom = r.hidden_from.join(", ");
    let mut keep = r.needs.keys().cloned().collect();
    if let Some(d) = &r.declared {
        keep = d
            .iter()
            .map(|n| {
                if n == "." {
                    r.namespace.clone()
                } else {
                    n.clone()
                }
            })
            .chain(keep)
            .collect();
    }
    let fixed = export_list(&r.namespace, &keep);
    // A ServiceEntry's export is also capped by serviceEntryVisibility.
    let cap = if r.kind == super::ExportKind::ServiceEntry {
        " (or meshConfig.serviceEntryVisibility)"
    } else {
        ""
    };
    let now = match &r.declared {
        Some(d) => format!("exportTo [{}]{cap}", d.join(", ")),
        None => format!("mesh default exportTo{cap}"),
    };
    Some(finding(
        Code::ExportHidesFromCaller,
        r.kind.as_str(),
        &r.namespace,
        &r.name,
        format!(
            "{} {} is called from {whom}, but its {now} hides it there: those calls get no route, cluster or policy from it; export it to [{}] (kubectl meshscope apply --exports --force-exports -n {} with the same traffic source)",
            r.kind.as_str(),
            r.key(),
            fixed.join(", "),
            r.namespace
        ),
    ))
}
