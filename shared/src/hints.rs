//! Manifest hints: the hosts a workload's own manifests name, for a scope
//! before its first request (`--from-manifest-hints`).
//!
//! ```text
//!  pod template: command, args, env[].value ──┐
//!  ConfigMaps:   envFrom, env[].valueFrom,    ├─► scan ─► resolve (registry) ─► Hint
//!                mounted (volumes, projected) ┘
//! ```
//!
//! What a string can name, and the rules that keep words from being hosts:
//! - `name:port`, `scheme://name[:port]/…` (`http`, `https`, `grpc`, any
//!   scheme; `user@` is dropped), and the value of a `--flag=…` or `KEY=…`;
//! - `name.ns`, `name.ns.svc`, `name.ns.svc.<cluster domain>`, a
//!   ServiceEntry host (`api.example.com`), a name a wildcard ServiceEntry
//!   host matches (`eu.api.example.com` for `*.api.example.com`, written
//!   as the ServiceEntry's host, as its traffic would be), a Service's
//!   ClusterIP, and `<pod>.<headless service>…`;
//! - a bare name (no dot, no port, no scheme) only when it is the whole
//!   value, and then as a Service of the workload's own namespace: in
//!   `log level info` nothing is a host, `info` alone is one only if a
//!   Service `info` exists there.
//!
//! Every candidate is looked up in the snapshot's registry (Services and
//! ServiceEntries): a hint is always a registered hostname, never a
//! `*/host`. Which copy a workload gets, and whether it is exported to the
//! workload's namespace at all, is decided later as for observed traffic
//! (`recommend`). What hints cannot find: names built at run time
//! (`$(VAR)` expansions, templated config), names in Secrets (never read),
//! bare names inside longer text, and hosts no Service or ServiceEntry
//! defines.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ConfigMap, PodSpec as TypedPodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::inputs::{ConfigMapRef, Inputs, PodSpec};
use crate::meta::{name_of, ns_of};
use crate::snapshot::{MeshSnapshot, Resolution, SvcKind, WorkloadId, WorkloadKind};

/// The name of the hints source in `meshscope.io/sources`.
pub const HINTS_SOURCE: &str = "manifest-hints";

/// One registered host a workload's manifests name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hint {
    /// The registry hostname: a Service's FQDN or a ServiceEntry host (a
    /// wildcard one for a name it matches).
    pub hostname: String,
    /// The port named, else the service's first port (0: none).
    pub port: u32,
    /// Where it was found: `container app`, `ConfigMap ns/cfg key url`.
    pub found_in: String,
}

/// The hints of every workload of a snapshot.
#[derive(Clone, Debug, Default)]
pub struct ManifestHints {
    by_workload: BTreeMap<WorkloadId, Vec<Hint>>,
}

impl ManifestHints {
    /// The hints of each workload in `snap`, from the pod templates of its
    /// controllers and pods in `inputs` and the ConfigMaps they read
    /// (`inputs.config_maps`; a ConfigMap not read names nothing).
    pub fn collect(inputs: &Inputs, snap: &MeshSnapshot) -> ManifestHints {
        let config_maps: BTreeMap<(String, String), &ConfigMap> = (inputs.config_maps.iter())
            .map(|c| ((ns_of(&c.metadata), name_of(&c.metadata)), c))
            .collect();
        let resolver = Resolver::new(snap);
        let mut out = ManifestHints::default();
        for t in templates(inputs) {
            let Some(w) = workload_of(snap, &t) else {
                continue;
            };
            let ns = snap.workloads[w].namespace.clone();
            let hints = out.by_workload.entry(w).or_default();
            let mut add = |value: &str, found_in: &str| {
                for (hostname, port) in resolver.scan(&ns, value) {
                    hints.push(Hint {
                        hostname,
                        port,
                        found_in: found_in.to_string(),
                    });
                }
            };
            for (container, value) in &t.refs.values {
                add(value, &format!("container {container}"));
            }
            for r in &t.refs.config_maps {
                let Some(cm) = config_maps.get(&(ns.clone(), r.name.clone())) else {
                    continue;
                };
                let data = cm.data.iter().flatten();
                for (key, value) in
                    data.filter(|(k, _)| r.key.as_ref().is_none_or(|want| want == *k))
                {
                    add(value, &format!("ConfigMap {ns}/{} key {key}", r.name));
                }
            }
        }
        for hints in out.by_workload.values_mut() {
            hints.sort();
            hints.dedup_by(|a, b| a.hostname == b.hostname && a.port == b.port);
        }
        out.by_workload.retain(|_, h| !h.is_empty());
        out
    }

    /// The hints of one workload.
    pub fn of(&self, w: WorkloadId) -> &[Hint] {
        self.by_workload.get(&w).map_or(&[], Vec::as_slice)
    }

    pub fn is_empty(&self) -> bool {
        self.by_workload.is_empty()
    }
}

// === what templates say ===

/// What one pod template names: its containers' strings and the ConfigMaps
/// it reads.
#[derive(Default)]
struct Refs {
    /// (container, value)
    values: Vec<(String, String)>,
    config_maps: Vec<ConfigMapRef>,
}

/// A pod template, and the object it belongs to.
struct Template<'a> {
    kind: WorkloadKind,
    meta: &'a ObjectMeta,
    refs: Refs,
}

fn typed_refs(spec: Option<&TypedPodSpec>) -> Refs {
    let mut refs = Refs::default();
    let Some(spec) = spec else { return refs };
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in containers.filter(|c| c.name != crate::inject::PROXY_CONTAINER) {
        let strings = (c.command.iter().flatten())
            .chain(c.args.iter().flatten())
            .chain(c.env.iter().flatten().filter_map(|e| e.value.as_ref()));
        refs.values
            .extend(strings.map(|v| (c.name.clone(), v.clone())));
        for e in c.env.iter().flatten() {
            if let Some(r) = e
                .value_from
                .as_ref()
                .and_then(|f| f.config_map_key_ref.as_ref())
            {
                refs.config_maps.push(ConfigMapRef {
                    name: r.name.clone(),
                    key: Some(r.key.clone()),
                });
            }
        }
        let from = c.env_from.iter().flatten();
        refs.config_maps
            .extend(
                from.filter_map(|f| f.config_map_ref.as_ref())
                    .map(|r| ConfigMapRef {
                        name: r.name.clone(),
                        key: None,
                    }),
            );
    }
    for v in spec.volumes.iter().flatten() {
        let projected = v.projected.iter().flat_map(|p| p.sources.iter().flatten());
        let names = (v.config_map.iter().map(|c| &c.name)).chain(
            projected
                .filter_map(|s| s.config_map.as_ref())
                .map(|c| &c.name),
        );
        refs.config_maps.extend(names.map(|n| ConfigMapRef {
            name: n.clone(),
            key: None,
        }));
    }
    refs
}

fn pod_refs(spec: Option<&PodSpec>) -> Refs {
    let mut refs = Refs::default();
    let Some(spec) = spec else { return refs };
    for c in spec.containers.iter().chain(&spec.init_containers) {
        refs.values
            .extend(c.hint_values.iter().map(|v| (c.name.clone(), v.clone())));
        refs.config_maps.extend(c.config_maps.iter().cloned());
    }
    refs.config_maps
        .extend(spec.config_map_volumes.iter().map(|n| ConfigMapRef {
            name: n.clone(),
            key: None,
        }));
    refs
}

/// Every pod template of `inputs`: controllers' and pods'.
fn templates(inputs: &Inputs) -> Vec<Template<'_>> {
    let mut out = Vec::new();
    let mut add = |kind, meta, t: Option<&PodTemplateSpec>| {
        out.push(Template {
            kind,
            meta,
            refs: typed_refs(t.and_then(|t| t.spec.as_ref())),
        })
    };
    for d in &inputs.deployments {
        add(
            WorkloadKind::Deployment,
            &d.metadata,
            d.spec.as_ref().map(|s| &s.template),
        );
    }
    for d in &inputs.statefulsets {
        add(
            WorkloadKind::StatefulSet,
            &d.metadata,
            d.spec.as_ref().map(|s| &s.template),
        );
    }
    for d in &inputs.daemonsets {
        add(
            WorkloadKind::DaemonSet,
            &d.metadata,
            d.spec.as_ref().map(|s| &s.template),
        );
    }
    for d in &inputs.replicasets {
        let t = d.spec.as_ref().and_then(|s| s.template.as_ref());
        add(WorkloadKind::ReplicaSet, &d.metadata, t);
    }
    for d in &inputs.jobs {
        add(
            WorkloadKind::Job,
            &d.metadata,
            d.spec.as_ref().map(|s| &s.template),
        );
    }
    for d in &inputs.cronjobs {
        let t = d.spec.as_ref().and_then(|s| s.job_template.spec.as_ref());
        add(WorkloadKind::CronJob, &d.metadata, t.map(|s| &s.template));
    }
    for p in &inputs.pods {
        out.push(Template {
            kind: WorkloadKind::Pod,
            meta: &p.metadata,
            refs: pod_refs(p.spec.as_ref()),
        });
    }
    out
}

/// The snapshot's workload for a template: the object's own, else its
/// controller's (a Deployment's ReplicaSet, a CronJob's Job, a pod's
/// workload).
fn workload_of(snap: &MeshSnapshot, t: &Template<'_>) -> Option<WorkloadId> {
    let (ns, name) = (ns_of(t.meta), name_of(t.meta));
    if t.kind == WorkloadKind::Pod {
        return snap.find_pod(&ns, &name).map(|p| snap.pods[p].workload);
    }
    snap.find_workload(&t.kind, &ns, &name).or_else(|| {
        let owner =
            (t.meta.owner_references.iter().flatten()).find(|o| o.controller == Some(true))?;
        let kind = WorkloadKind::parse(&owner.kind)?;
        snap.find_workload(&kind, &ns, &owner.name)
    })
}

// === scanning and resolving ===

/// A host reference found in a string, before the registry is asked.
#[derive(Debug, PartialEq, Eq)]
struct Candidate {
    host: String,
    port: Option<u32>,
}

/// Characters that end a token: nothing of a host reference contains them.
fn separator(c: char) -> bool {
    c.is_whitespace() || "\"'`,;()<>{}[]|\\".contains(c)
}

/// The host references in `value`, by the rules of the module doc.
fn candidates(value: &str) -> Vec<Candidate> {
    let whole = value.trim();
    let mut out = Vec::new();
    for token in value.split(separator).filter(|t| !t.is_empty()) {
        let (rest, scheme) = match token.find("://") {
            Some(i) => (&token[i + 3..], true),
            None => (token.rsplit('=').next().unwrap_or(token), false),
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let authority = authority.rsplit('@').next().unwrap_or_default();
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => match p.parse::<u16>() {
                Ok(p) if p > 0 => (h, Some(u32::from(p))),
                _ => continue,
            },
            None => (authority, None),
        };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if !valid_host(&host) {
            continue;
        }
        // No dot, no port, no scheme: a name only when it is the whole value.
        let bare = !host.contains('.') && port.is_none() && !scheme;
        if bare && !whole.trim_end_matches('.').eq_ignore_ascii_case(&host) {
            continue;
        }
        out.push(Candidate { host, port });
    }
    out
}

/// DNS labels of letters, digits and `-`, none empty or longer than 63.
fn valid_host(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// Resolves candidates against a snapshot's registry.
pub struct Resolver<'s> {
    snap: &'s MeshSnapshot,
    /// Wildcard hosts (`*.example.com`), most specific first.
    wildcards: Vec<&'s str>,
}

impl<'s> Resolver<'s> {
    pub fn new(snap: &'s MeshSnapshot) -> Self {
        let mut wildcards: Vec<&str> = (snap.services.iter())
            .map(|s| s.hostname.as_str())
            .filter(|h| h.starts_with("*."))
            .collect();
        wildcards.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        wildcards.dedup();
        Resolver { snap, wildcards }
    }

    /// The registered hostnames (with ports) that `value`, a string of a
    /// workload in namespace `ns`, names.
    pub fn scan(&self, ns: &str, value: &str) -> Vec<(String, u32)> {
        let mut out: Vec<(String, u32)> = candidates(value)
            .into_iter()
            .filter_map(|c| self.resolve(ns, &c))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    fn resolve(&self, ns: &str, c: &Candidate) -> Option<(String, u32)> {
        let snap = self.snap;
        if let Ok(ip) = c.host.parse::<IpAddr>() {
            let at = snap.services_at(&ip).iter().map(|s| &snap.services[*s]);
            let mut at = at.filter(|s| {
                c.port
                    .is_none_or(|p| s.ports.iter().any(|sp| sp.number == p))
            });
            return at
                .next()
                .map(|s| (s.hostname.clone(), self.port(&s.hostname, c.port)));
        }
        let found = self
            .names(ns, &c.host)
            .into_iter()
            .find(|n| !snap.services_named(n).is_empty())
            .or_else(|| self.headless(ns, &c.host))
            .or_else(|| self.wildcard(&c.host));
        found.map(|h| {
            let port = self.port(&h, c.port);
            (h, port)
        })
    }

    /// The hostnames a name can mean from namespace `ns`, as the cluster's
    /// DNS search path expands it.
    fn names(&self, ns: &str, host: &str) -> Vec<String> {
        let domain = &self.snap.options.cluster_domain;
        if !host.contains('.') {
            return vec![format!("{host}.{ns}.svc.{domain}")];
        }
        let mut out = vec![host.to_string(), format!("{host}.svc.{domain}")];
        if host.ends_with(".svc") {
            out.push(format!("{host}.{domain}"));
        }
        out
    }

    /// `<pod>.<headless service>[.<ns>[.svc[.<domain>]]]`: the headless
    /// Service.
    fn headless(&self, ns: &str, host: &str) -> Option<String> {
        let (_, rest) = host.split_once('.')?;
        self.names(ns, rest).into_iter().find(|n| {
            self.snap.services_named(n).iter().any(|s| {
                let s = &self.snap.services[*s];
                s.kind == SvcKind::Kube && s.resolution == Resolution::Passthrough
            })
        })
    }

    /// The most specific wildcard host that matches a dotted name.
    fn wildcard(&self, host: &str) -> Option<String> {
        if !host.contains('.') {
            return None;
        }
        self.wildcards
            .iter()
            .find(|w| host.len() > w.len() - 1 && host.ends_with(&w[1..]))
            .map(|w| w.to_string())
    }

    /// The port named when a copy of `hostname` has it, else the first
    /// port of its first copy.
    fn port(&self, hostname: &str, named: Option<u32>) -> u32 {
        let copies = self.snap.services_named(hostname);
        let ports = || copies.iter().flat_map(|s| &self.snap.services[*s].ports);
        match named {
            Some(p) if ports().any(|sp| sp.number == p) => p,
            _ => ports().next().map_or(0, |p| p.number),
        }
    }
}
