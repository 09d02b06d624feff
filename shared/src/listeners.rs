//! The outbound listeners istiod builds for one proxy, by name, as
//! `buildSidecarOutboundListeners` and `buildSidecarOutboundListener` do
//! (`pilot/pkg/networking/core/listener.go`, release-1.31).
//!
//! istiod keys each listener by its address and port and walks the scope's
//! egress listeners in order, each over its own services
//! ([`EgressServices`]):
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

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::snapshot::{MeshSnapshot, Protocol, Resolution, ServiceInfo, SvcId, SvcKind};

/// One egress listener's services, as istiod keeps them for it
/// (`IstioEgressListenerWrapper.services`): the copy of each hostname it
/// selects and the other copies in that copy's namespace, whether or not
/// the scope keeps them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressServices {
    pub port: Option<u32>,
    /// The protocol a port-specific listener declares.
    pub protocol: Option<Protocol>,
    /// The port-specific listener declares TLS or HTTPS.
    pub tls: bool,
    pub services: Vec<SvcId>,
}

/// Where an outbound listener listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bind {
    /// `0.0.0.0`.
    Wildcard,
    Addr(IpAddr),
}

#[derive(Clone, Debug, Default)]
struct Entry {
    /// An HTTP filter chain (an HTTP or sniffed port is on it).
    http: bool,
    /// A TCP filter chain (a TCP or sniffed port is on it).
    tcp: bool,
    locked: bool,
    /// The services built here with a TCP or TLS filter chain, and which.
    streams: Vec<(SvcId, Stream)>,
    /// The services built here with an HTTP filter chain (an HTTP or
    /// sniffed port): their virtual hosts are in its route configuration.
    http_services: Vec<SvcId>,
}

/// The kind of filter chain a TCP or TLS route of a service sits in: a
/// TCP port's (or a sniffed one's) TCP proxy, or a TLS or HTTPS port's
/// SNI chain (`buildSidecarOutboundTCPFilterChainOpts` and
/// `buildSidecarOutboundTLSFilterChainOpts`,
/// `pilot/pkg/networking/core/tls.go`, istio 1.31).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Tcp,
    Tls,
}

impl Stream {
    /// The chain a port built with `protocol` (TLS or HTTPS when `tls`)
    /// gets, if any: an HTTP port gets none.
    fn of(protocol: Protocol, tls: bool) -> Option<Stream> {
        match (tls, protocol) {
            (true, _) => Some(Stream::Tls),
            (false, Protocol::Tcp | Protocol::Auto) => Some(Stream::Tcp),
            _ => None,
        }
    }
}

/// What a listener carries, for its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carries {
    Http,
    Tcp,
    /// Both: istiod sniffs the protocol.
    Sniffed,
}

/// One proxy's outbound listeners (the virtual ones aside), and the route
/// configurations their HTTP filter chains name.
#[derive(Clone, Debug, Default)]
pub struct OutboundListeners {
    entries: BTreeMap<(Bind, u32), Entry>,
    /// Route configuration name -> its services' virtual hosts: `<port>`
    /// for HTTP ports and sniffed ones on 0.0.0.0, `<host>:<port>` for a
    /// sniffed port at an address (`buildSidecarOutboundHTTPListenerOpts`).
    routes: BTreeMap<String, u64>,
    /// The ports of the scope's port-specific egress listeners: a route
    /// configuration `<port>` takes its virtual hosts from the one on its
    /// port (`GetEgressListenerForRDS`, `pilot/pkg/model/sidecar.go`,
    /// istio 1.31), so a service the catch-all builds on such a port at
    /// `0.0.0.0` gets none there (random seed 33 at 24c0573).
    claimed: BTreeSet<u32>,
    /// Set once the catch-all egress listener builds.
    catch_all: bool,
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
        let mut out: Vec<String> = self.entries.keys().map(name).collect();
        out.sort();
        out
    }

    /// The listeners (`port` only, when given) on which service `svc` was
    /// built with a `kind` filter chain, by name, sorted: where its TCP or
    /// TLS routes sit.
    pub fn streams_of(&self, svc: SvcId, kind: Stream, port: Option<u32>) -> Vec<String> {
        let mut out: Vec<String> = self
            .entries
            .iter()
            .filter(|((_, p), e)| port.is_none_or(|n| n == *p) && e.streams.contains(&(svc, kind)))
            .map(|(k, _)| name(k))
            .collect();
        out.sort();
        out
    }

    /// Whether a listener was built for `svc` with an HTTP filter chain
    /// (on `port`, when given): only then does a route configuration hold
    /// its virtual host (random fidelity seed 40010: a Sidecar whose only
    /// egress listeners declare TCP gives a parent's sniffed port none).
    pub fn serves_http(&self, svc: SvcId, port: Option<u32>) -> bool {
        self.entries
            .iter()
            .any(|((_, p), e)| port.is_none_or(|n| n == *p) && e.http_services.contains(&svc))
    }

    /// How many listeners carry what.
    pub fn count(&self, what: Carries) -> u64 {
        let kind = |e: &Entry| match (e.http, e.tcp) {
            (true, true) => Carries::Sniffed,
            (true, false) => Carries::Http,
            _ => Carries::Tcp,
        };
        self.entries.values().filter(|e| kind(e) == what).count() as u64
    }

    /// The route configurations the listeners name, sorted.
    pub fn route_names(&self) -> Vec<&str> {
        self.routes.keys().map(String::as_str).collect()
    }

    /// How many of those are a port's (`<port>`, shared by its services).
    pub fn port_routes(&self) -> u64 {
        self.routes.keys().filter(|n| !n.contains(':')).count() as u64
    }

    /// How many are one sniffed service port's (`<host>:<port>`), each
    /// with that service's virtual host.
    pub fn sniffed_routes(&self) -> u64 {
        self.routes.len() as u64 - self.port_routes()
    }

    /// The services' virtual hosts in the ports' routes (their catch-alls
    /// aside): one per HTTP or sniffed service port.
    pub fn virtual_hosts(&self) -> u64 {
        let own: u64 = self
            .routes
            .iter()
            .filter(|(n, _)| !n.contains(':'))
            .map(|(_, v)| v)
            .sum();
        // A sniffed service port with a route of its own is also a virtual
        // host of its port's route, when there is one.
        let shared = self
            .routes
            .keys()
            .filter_map(|n| n.rsplit_once(':'))
            .filter(|(_, port)| self.routes.contains_key(*port))
            .count() as u64;
        own + shared
    }

    /// Adds `port` of `svc` with `protocol` at `bind` (`None`: the
    /// service's own address); `stream`: the TCP or TLS chain it gets
    /// there, if any.
    fn build(&mut self, on: Built<'_>, port: u32, protocol: Protocol, bind: Option<Bind>) {
        let Built { id, svc, stream } = on;
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
            let e = self.entries.entry((b, port)).or_default();
            if e.locked {
                continue;
            }
            // A second service on a listener shares it.
            e.http |= matches!(protocol, Protocol::Http | Protocol::Auto);
            e.tcp |= matches!(protocol, Protocol::Tcp | Protocol::Auto);
            if let Some(kind) = stream {
                e.streams.push((id, kind));
            }
            let unrouted = self.catch_all && b == Bind::Wildcard && self.claimed.contains(&port);
            let sniffed_at_address = protocol == Protocol::Auto && b != Bind::Wildcard;
            if matches!(protocol, Protocol::Http | Protocol::Auto)
                && (!unrouted || sniffed_at_address)
            {
                e.http_services.push(id);
            }
            match (protocol, b) {
                (Protocol::Http, _) | (Protocol::Auto, Bind::Wildcard) => {
                    let vhosts = self.routes.entry(port.to_string()).or_default();
                    if !unrouted {
                        *vhosts += 1;
                    }
                }
                // One route per service port, whatever its listeners.
                (Protocol::Auto, Bind::Addr(_)) => {
                    self.routes
                        .entry(format!("{}:{port}", svc.hostname))
                        .or_insert(1);
                }
                _ => {}
            }
        }
    }

    fn lock(&mut self) {
        self.catch_all = true;
        for e in self.entries.values_mut() {
            e.locked = true;
        }
    }

    /// The catch-all's listeners for one port of `on.svc`.
    fn build_catch_all(&mut self, on: Built<'_>, port: u32, proto: Protocol, own: Option<IpAddr>) {
        let svc = on.svc;
        let per_endpoint = svc.resolution == Resolution::Passthrough
            && svc.addresses.is_empty()
            && matches!(proto, Protocol::Tcp | Protocol::Auto);
        if !per_endpoint {
            return self.build(on, port, proto, None);
        }
        if svc.passthrough_endpoints.is_empty() {
            // No endpoint: a Kubernetes Service, or an entry that selects
            // workloads, may get some later; any other entry listens on
            // `0.0.0.0`.
            if svc.kind == SvcKind::Entry && svc.workload_selector.is_none() {
                self.build(on, port, proto, None);
            }
            return;
        }
        for ip in svc.passthrough_endpoints.iter().flatten() {
            if Some(*ip) != own {
                self.build(on, port, proto, Some(Bind::Addr(*ip)));
            }
        }
    }
}

/// A listener's name from its key.
fn name((bind, port): &(Bind, u32)) -> String {
    match bind {
        Bind::Wildcard => format!("0.0.0.0_{port}"),
        Bind::Addr(ip) => format!("{ip}_{port}"),
    }
}

/// The service a listener is built for, and the TCP or TLS chain it gets.
#[derive(Clone, Copy)]
struct Built<'a> {
    id: SvcId,
    svc: &'a ServiceInfo,
    stream: Option<Stream>,
}

impl MeshSnapshot {
    /// The outbound listeners of a proxy whose scope's egress listeners
    /// hold `egress` ([`crate::scope::Visible::egress`]) and whose pod has
    /// the first IP `own` (`None`: any proxy of the scope).
    pub fn outbound_listeners(
        &self,
        egress: &[EgressServices],
        own: Option<IpAddr>,
    ) -> OutboundListeners {
        let mut out = OutboundListeners::default();
        for l in egress {
            match l.port {
                Some(port) => {
                    out.claimed.insert(port);
                    for &id in &l.services {
                        let svc = &self.services[id];
                        let proto = l.protocol.unwrap_or(Protocol::Auto);
                        // The route sits in the chain of the protocol the
                        // listener declares, else the service port's
                        // (seed 18 at 42f6b68: a TLS port under a listener
                        // declared TCP gets TCP chains, no TLS route).
                        let own_port = svc.ports.iter().find(|p| p.number == port);
                        let stream = own_port.and_then(|p| match l.protocol {
                            Some(declared) => Stream::of(declared, l.tls),
                            None => Stream::of(p.protocol, p.tls),
                        });
                        out.build(Built { id, svc, stream }, port, proto, None);
                    }
                }
                None => {
                    out.lock();
                    for &id in &l.services {
                        let svc = &self.services[id];
                        for p in &svc.ports {
                            let stream = Stream::of(p.protocol, p.tls);
                            let on = Built { id, svc, stream };
                            out.build_catch_all(on, p.number, p.protocol, own);
                        }
                    }
                }
            }
        }
        out
    }
}
