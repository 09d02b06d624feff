//! A mesh written straight into the test API server for a real istiod:
//! Services, Pods that carry an `istio-proxy` container, and the
//! EndpointSlices and pod status a kubelet and the EndpointSlice controller
//! would write (there is neither here). Istio kinds go in as raw YAML.
//!
//! Pods are bare (not bound to a Node), so kube-controller-manager never
//! touches their endpoints: the slices written here, labelled
//! `endpointslice.kubernetes.io/managed-by: meshscope-test`, are the only
//! ones, and they stay Ready for as long as the test runs.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{bail, Result};

use crate::cluster::Cluster;
use crate::json_str;

pub type Labels = BTreeMap<String, String>;

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[derive(Clone, Debug)]
pub struct SvcPort {
    pub name: String,
    pub port: u32,
    pub target_port: u32,
    pub app_protocol: Option<String>,
    /// `TCP` or `UDP`.
    pub protocol: &'static str,
}

impl SvcPort {
    pub fn new(name: &str, port: u32) -> Self {
        SvcPort {
            name: name.into(),
            port,
            target_port: port,
            app_protocol: None,
            protocol: if name.starts_with("udp") {
                "UDP"
            } else {
                "TCP"
            },
        }
    }
}

#[derive(Clone, Debug)]
pub struct Service {
    pub namespace: String,
    pub name: String,
    pub selector: Labels,
    pub ports: Vec<SvcPort>,
    pub headless: bool,
    pub annotations: Labels,
    /// Its labels (`istio.io/use-waypoint`, a waypoint's own).
    pub labels: Labels,
    /// `type: ExternalName` naming this host (no selector then).
    pub external_name: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    pub ip: String,
    pub service_account: String,
    /// What the kubelet reports: Ready (its EndpointSlice entries are
    /// ready too), or running but not ready.
    pub ready: bool,
    /// Being deleted: a finalizer holds it in Terminating (there is no
    /// kubelet to finish it), and its EndpointSlice entries say so.
    pub terminating: bool,
    /// Carries an `istio-proxy` container (injected); `false`: a plain
    /// pod outside the mesh.
    pub proxied: bool,
    /// Its `istio-proxy` runs `proxy router` (a gateway pod, as istiod's
    /// deployment controller renders one for a Gateway) or `proxy
    /// waypoint`: it connects as that proxy type, and istiod applies no
    /// Sidecar to it.
    pub gateway: Option<meshscope_shared::inject::Gateway>,
}

/// The finalizer that holds a terminating test pod.
const HOLD: &str = "meshscope.io/test-hold";

#[derive(Clone, Debug, Default)]
pub struct World {
    /// Namespaces and their labels.
    pub namespaces: Vec<(String, Labels)>,
    pub services: Vec<Service>,
    pub pods: Vec<Pod>,
    /// Istio objects (ServiceEntry, VirtualService, DestinationRule,
    /// Sidecar), one YAML document each, applied in order.
    pub istio: Vec<String>,
    /// The Istio objects from this index on are applied in a second wave,
    /// over a second after the rest: the API server stamps creation times
    /// to the second, so they are newer (istiod breaks a tie by map
    /// order).
    pub later_from: Option<usize>,
}

fn map_yaml(out: &mut String, indent: &str, m: &Labels) {
    if m.is_empty() {
        out.push_str(" {}\n");
        return;
    }
    out.push('\n');
    for (k, v) in m {
        let _ = writeln!(out, "{indent}{}: {}", json_str(k), json_str(v));
    }
}

impl Pod {
    /// The simulated sidecar that stands for this pod: its labels and
    /// service account, and its `app` label (else its name) as workload.
    pub fn proxy_spec(&self) -> crate::xds::ProxySpec {
        let mut s = crate::xds::ProxySpec::new(&self.namespace, &self.name, &self.ip);
        s.labels = self.labels.clone();
        s.service_account = self.service_account.clone();
        s.workload_name = self
            .labels
            .get("app")
            .cloned()
            .unwrap_or_else(|| self.name.clone());
        s.gateway = self.gateway;
        s
    }
}

impl World {
    pub fn namespace(&mut self, name: &str, l: Labels) {
        self.namespaces.push((name.to_string(), l));
    }

    /// Pods of `svc` in its namespace: those its selector matches.
    pub fn endpoints_of<'a>(&'a self, svc: &'a Service) -> impl Iterator<Item = &'a Pod> + 'a {
        self.pods.iter().filter(move |p| {
            p.namespace == svc.namespace
                && !svc.selector.is_empty()
                && svc.selector.iter().all(|(k, v)| p.labels.get(k) == Some(v))
        })
    }

    /// Namespaces, Services, Pods, EndpointSlices and the Istio objects, as
    /// one multi-document YAML stream.
    pub fn spec_yaml(&self) -> String {
        self.spec_yaml_until(self.istio.len())
    }

    /// [`World::spec_yaml`] with the first `istio` Istio objects only.
    fn spec_yaml_until(&self, istio: usize) -> String {
        let mut out = String::new();
        for (ns, l) in &self.namespaces {
            let _ = write!(
                out,
                "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:"
            );
            map_yaml(&mut out, "    ", l);
        }
        for s in &self.services {
            service_yaml(&mut out, s);
        }
        for p in &self.pods {
            let _ = write!(
                out,
                "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {}\n  namespace: {}\n  labels:",
                p.name, p.namespace
            );
            map_yaml(&mut out, "    ", &p.labels);
            if p.terminating {
                let _ = writeln!(out, "  finalizers:\n  - {HOLD}");
            }
            let _ = writeln!(
                out,
                "spec:\n  serviceAccountName: {sa}\n  automountServiceAccountToken: false\n  containers:\n  - name: app\n    image: registry.invalid/app:1",
                sa = p.service_account
            );
            if p.proxied {
                out.push_str("  - name: istio-proxy\n    image: docker.io/istio/proxyv2:1.31.0\n");
                if let Some(g) = p.gateway {
                    let _ = writeln!(out, "    args: [proxy, {}]", g.as_str());
                }
            }
        }
        out.push_str(&self.endpoint_slices_yaml());
        for doc in &self.istio[..istio] {
            out.push_str("---\n");
            out.push_str(doc.trim_start_matches("---\n"));
            if !doc.ends_with('\n') {
                out.push('\n');
            }
        }
        out
    }

    /// One EndpointSlice per Service with endpoints: what the EndpointSlice
    /// controller would write for the pods its selector matches.
    pub fn endpoint_slices_yaml(&self) -> String {
        let mut out = String::new();
        for s in &self.services {
            let eps: Vec<&Pod> = self.endpoints_of(s).collect();
            if eps.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-meshscope\n  namespace: {ns}\n  labels:\n    kubernetes.io/service-name: {name}\n    endpointslice.kubernetes.io/managed-by: meshscope-test\naddressType: IPv4\nendpoints:",
                name = s.name,
                ns = s.namespace
            );
            for p in eps {
                let _ = writeln!(
                    out,
                    "- addresses: [\"{}\"]\n  conditions: {{ready: {}, serving: {}, terminating: {}}}\n  targetRef: {{kind: Pod, name: {}, namespace: {}}}",
                    p.ip,
                    p.ready && !p.terminating,
                    p.ready,
                    p.terminating,
                    p.name,
                    p.namespace,
                );
            }
            out.push_str("ports:\n");
            for p in &s.ports {
                let _ = writeln!(
                    out,
                    "- name: {}\n  port: {}\n  protocol: {}",
                    json_str(&p.name),
                    p.target_port,
                    p.protocol
                );
                if let Some(a) = &p.app_protocol {
                    let _ = writeln!(out, "  appProtocol: {a}");
                }
            }
        }
        out
    }

    /// What a kubelet would report for every pod: Running, Ready (or not),
    /// its IP.
    pub fn status_yaml(&self) -> String {
        let mut out = String::new();
        for p in &self.pods {
            let _ = writeln!(
                out,
                "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {}\n  namespace: {}\nstatus:\n  phase: Running\n  podIP: {ip}\n  podIPs:\n  - ip: {ip}\n  conditions:\n  - type: Ready\n    status: \"{r}\"\n  - type: ContainersReady\n    status: \"{r}\"",
                p.name,
                p.namespace,
                ip = p.ip,
                r = if p.ready { "True" } else { "False" }
            );
        }
        out
    }

    /// Writes the whole world into the API server: objects first, then the
    /// pods' status (server-side apply on the status subresource).
    pub fn apply(&self, cluster: &Cluster) -> Result<()> {
        let ssa =
            |args: &[&str], yaml: &str| server_side_apply(cluster, "meshscope-test", args, yaml);
        // Namespaces first: the rest of the stream needs them.
        let first_wave = self
            .later_from
            .unwrap_or(self.istio.len())
            .min(self.istio.len());
        let spec = self.spec_yaml_until(first_wave);
        let (ns_docs, rest): (Vec<&str>, Vec<&str>) = spec
            .split("---\n")
            .filter(|d| !d.trim().is_empty())
            .partition(|d| d.contains("\nkind: Namespace\n"));
        if !ns_docs.is_empty() {
            ssa(&[], &ns_docs.join("---\n"))?;
        }
        ssa(&[], &rest.join("---\n"))?;
        if let Some(from) = self.later_from.filter(|f| *f < self.istio.len()) {
            std::thread::sleep(std::time::Duration::from_millis(1100));
            ssa(&[], &self.istio[from..].join("---\n"))?;
        }
        if !self.pods.is_empty() {
            ssa(&["--subresource=status"], &self.status_yaml())?;
        }
        for p in self.pods.iter().filter(|p| p.terminating) {
            let o = cluster.kubectl(
                &["delete", "pod", &p.name, "-n", &p.namespace, "--wait=false"],
                None,
            );
            if !o.status.success() {
                bail!(
                    "delete pod {}/{}: {}",
                    p.namespace,
                    p.name,
                    String::from_utf8_lossy(&o.stderr)
                );
            }
        }
        Ok(())
    }

    /// Deletes the world's namespaces and waits until they are gone.
    pub fn delete(&self, cluster: &Cluster) -> Result<()> {
        if self.namespaces.is_empty() {
            return Ok(());
        }
        // Release the pods held in Terminating, or the namespaces never go.
        for p in self.pods.iter().filter(|p| p.terminating) {
            let _ = cluster.kubectl(
                &[
                    "patch",
                    "pod",
                    &p.name,
                    "-n",
                    &p.namespace,
                    "--type=json",
                    "-p",
                    "[{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}]",
                ],
                None,
            );
        }
        let mut args = vec!["delete", "namespace", "--wait=true", "--timeout=120s"];
        let names: Vec<&str> = self.namespaces.iter().map(|(n, _)| n.as_str()).collect();
        args.extend(names);
        let o = cluster.kubectl(&args, None);
        if !o.status.success() {
            bail!(
                "kubectl delete namespace: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        Ok(())
    }
}

/// `kubectl apply --server-side --force-conflicts` of a YAML stream, with a
/// field manager and extra arguments (such as `--subresource=status`).
pub fn server_side_apply(
    cluster: &Cluster,
    manager: &str,
    args: &[&str],
    yaml: &str,
) -> Result<()> {
    let field_manager = format!("--field-manager={manager}");
    let mut a = vec![
        "apply",
        "--server-side",
        "--force-conflicts",
        &field_manager,
    ];
    a.extend_from_slice(args);
    a.extend(["-f", "-"]);
    let o = cluster.kubectl(&a, Some(yaml));
    if !o.status.success() {
        bail!("kubectl apply: {}", String::from_utf8_lossy(&o.stderr));
    }
    Ok(())
}

/// [`server_side_apply`] of `yaml`'s documents in batches of at most 100,
/// `procs` kubectl processes at once: for thousands of objects (one
/// kubectl given thousands of documents spends minutes before its first
/// write).
pub fn server_side_apply_parallel(
    cluster: &Cluster,
    manager: &str,
    args: &[&str],
    yaml: &str,
    procs: usize,
) -> Result<()> {
    let docs: Vec<&str> = yaml
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .collect();
    if docs.len() <= 100 || procs < 2 {
        return server_side_apply(cluster, manager, args, yaml);
    }
    let batches: Vec<String> = docs.chunks(100).map(|c| c.join("---\n")).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..procs)
            .map(|_| {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(batch) = batches.get(i) else {
                        return Ok(());
                    };
                    server_side_apply(cluster, manager, args, batch)?;
                })
            })
            .collect();
        workers.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("kubectl apply thread panicked"))?
        })
    })
}

/// One Service as the API server takes it (`---` first).
pub fn service_yaml(out: &mut String, s: &Service) {
    let _ = writeln!(
        out,
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {}\n  namespace: {}",
        s.name, s.namespace
    );
    // No empty map: applied, it would make the test the owner of
    // every annotation, and an exportTo annotation written later
    // by `apply --exports` a conflict.
    if !s.annotations.is_empty() {
        out.push_str("  annotations:");
        map_yaml(out, "    ", &s.annotations);
    }
    if !s.labels.is_empty() {
        out.push_str("  labels:");
        map_yaml(out, "    ", &s.labels);
    }
    out.push_str("spec:\n");
    if let Some(target) = &s.external_name {
        let _ = writeln!(out, "  type: ExternalName\n  externalName: {target}");
    } else {
        if s.headless {
            out.push_str("  clusterIP: None\n");
        }
        out.push_str("  selector:");
        map_yaml(out, "    ", &s.selector);
    }
    out.push_str("  ports:\n");
    for p in &s.ports {
        let _ = writeln!(
            out,
            "  - name: {}\n    port: {}\n    targetPort: {}\n    protocol: {}",
            // Quoted: a port named by its number ("9090") is a string.
            json_str(&p.name),
            p.port,
            p.target_port,
            p.protocol
        );
        if let Some(a) = &p.app_protocol {
            let _ = writeln!(out, "    appProtocol: {a}");
        }
    }
}
