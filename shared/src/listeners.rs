//! The outbound listeners istiod builds for one proxy, by name, as
//! `buildSidecarOutboundListeners` and `buildSidecarOutboundListener` do
//! (`pilot/pkg/networking/core/listener.go`, release-1.31).
//!
//! istiod keys each listener by its address and port and walks the scope's
//! egress listeners in order, each over its own services
//! ([`crate::scope::EgressServices`]):
//!
//! - a port-specific egress listener builds every one of its services on
//!   its own port with the protocol it declares, at the service's address
//!   (`0.0.0.0` for HTTP, and for a service with none), never per
//!   endpoint;
//! - the catch-all then locks every key built so far: a service port whose
//!   key is locked gets nothing more. Each of its services' ports is built
//!   with the port's own protocol, and a TCP or sniffed port of a
//!   passthrough service without an address gets one listener per
//!   endpoint IP (except the proxy's own), or none when it has no
//!   endpoint (a Kubernetes Service, or an entry that selects workloads),
//!   or `0.0.0.0` (any other entry);
//! - a second service on a key shares the listener: HTTP and TCP together
//!   make it sniffed. UDP ports, and `ExternalName` aliases, get none.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::scope::Visible;
use crate::snapshot::{MeshSnapshot, Protocol, Resolution, ServiceInfo, SvcKind};

/// Where an outbound listener listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bind {
    /// `0.0.0.0`.
    Wildcard,
    Addr(IpAddr),
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// An HTTP service port is on it: it names a route (a sniffed
    /// listener at a service address names its own; not counted).
    http: bool,
    locked: bool,
}

/// One proxy's outbound listeners (the virtual ones aside).
#[derive(Clone, Debug, Default)]
pub struct OutboundListeners {
    entries: BTreeMap<(Bind, u32), Entry>,
    /// (service, port) pairs an HTTP listener serves: the virtual hosts
    /// of its route.
    pub virtual_hosts: u64,
}

impl OutboundListeners {
    /// How many there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Their names as istiod gives them (`10.96.0.10_5432`,
    /// `0.0.0.0_80`), sorted.
    pub fn names(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .entries
            .keys()
            .map(|(bind, port)| match bind {
                Bind::Wildcard => format!("0.0.0.0_{port}"),
                Bind::Addr(ip) => format!("{ip}_{port}"),
            })
            .collect();
        out.sort();
        out
    }

    /// How many an HTTP service port is on (each names a route).
    pub fn http(&self) -> usize {
        self.entries.values().filter(|e| e.http).count()
    }

    /// Adds `port` of `svc` with `protocol` at `bind` (`None`: the
    /// service's own address).
    fn build(&mut self, svc: &ServiceInfo, port: u32, protocol: Protocol, bind: Option<Bind>) {
        if svc.resolution == Resolution::Alias {
            return;
        }
        let binds: Vec<Bind> = match (bind, protocol) {
            (_, Protocol::Udp) => return,
            (Some(b), _) => vec![b],
            (None, Protocol::Http) => vec![Bind::Wildcard],
            // A ServiceEntry is one service per address in istiod.
            (None, _) if svc.kind == SvcKind::Entry && !svc.addresses.is_empty() => {
                svc.addresses.iter().map(|a| Bind::Addr(*a)).collect()
            }
            (None, _) => vec![svc
                .addresses
                .first()
                .map_or(Bind::Wildcard, |a| Bind::Addr(*a))],
        };
        for b in binds {
            if self.entries.get(&(b, port)).is_some_and(|e| e.locked) {
                continue;
            }
            self.add((b, port), protocol == Protocol::Http);
            if protocol == Protocol::Http {
                self.virtual_hosts += 1;
            }
        }
    }

    /// A new listener, or a second service on one (HTTP and TCP
    /// together make it sniffed).
    fn add(&mut self, key: (Bind, u32), http: bool) {
        let e = self.entries.entry(key).or_insert(Entry {
            http,
            locked: false,
        });
        e.http |= http;
    }

    fn lock(&mut self) {
        for e in self.entries.values_mut() {
            e.locked = true;
        }
    }

    /// The catch-all's listeners for one port of `svc`.
    fn build_catch_all(
        &mut self,
        svc: &ServiceInfo,
        port: u32,
        proto: Protocol,
        own: Option<IpAddr>,
    ) {
        let per_endpoint = svc.resolution == Resolution::Passthrough
            && svc.addresses.is_empty()
            && matches!(proto, Protocol::Tcp | Protocol::Auto);
        if !per_endpoint {
            return self.build(svc, port, proto, None);
        }
        if svc.passthrough_endpoints.is_empty() {
            // No endpoint: a Kubernetes Service, or an entry that selects
            // workloads, may get some later; any other entry listens on
            // `0.0.0.0`.
            if svc.kind == SvcKind::Entry && svc.workload_selector.is_none() {
                self.build(svc, port, proto, None);
            }
            return;
        }
        for ip in svc.passthrough_endpoints.iter().flatten() {
            if Some(*ip) != own {
                self.build(svc, port, proto, Some(Bind::Addr(*ip)));
            }
        }
    }
}

impl MeshSnapshot {
    /// The outbound listeners of a proxy with scope `vis` whose pod has
    /// the first IP `own` (`None`: any proxy of the scope).
    pub fn outbound_listeners(&self, vis: &Visible, own: Option<IpAddr>) -> OutboundListeners {
        let mut out = OutboundListeners::default();
        for l in &vis.egress {
            match l.port {
                Some(port) => {
                    for &id in &l.services {
                        let s = &self.services[id];
                        let proto = l.protocol.unwrap_or(Protocol::Auto);
                        out.build(s, port, proto, None);
                    }
                }
                None => {
                    out.lock();
                    for &id in &l.services {
                        let s = &self.services[id];
                        for p in &s.ports {
                            out.build_catch_all(s, p.number, p.protocol, own);
                        }
                    }
                }
            }
        }
        out
    }
}
