//! A [`Topology`] on the test control plane: the mesh config, its
//! objects, and the pods' IPs, status and EndpointSlices.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::topology::Topology;
use crate::cluster::Cluster;
use crate::fidelity::{DEFAULT_MESH, ROOT_NS};
use crate::world::{server_side_apply_parallel, Labels, Pod, World};

/// The mesh config ConfigMap with `mesh` as its `mesh` key.
pub fn set_mesh(c: &Cluster, mesh: &str) {
    let indented: String = mesh.lines().map(|l| format!("    {l}\n")).collect();
    c.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: istio\n  namespace: {ROOT_NS}\ndata:\n  mesh: |-\n{indented}"
    ));
}

/// Creates the topology (its mesh config, namespaces, workloads, Services
/// and Istio objects; the controllers make the pods), gives each pod its
/// IP and status, writes the EndpointSlices, and returns every pod with
/// its workload's index.
pub fn deploy(c: &Cluster, t: &Topology) -> Result<Vec<(usize, Pod)>> {
    let yaml = t.yaml();
    let (ns_docs, rest): (Vec<&str>, Vec<&str>) = yaml
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .partition(|d| d.contains("\nkind: Namespace\n") || d.contains("\nkind: ConfigMap\n"));
    c.apply(&ns_docs.join("---\n"));
    c.apply(&rest.join("---\n"));
    let want: usize = t.workloads.iter().map(|w| w.replicas).sum();
    let ours: BTreeSet<&str> = t.namespaces.iter().map(|(n, _)| n.as_str()).collect();
    // Namespace, name and labels only: at 20k pods the whole objects as
    // JSON would take kubectl gigabytes on every poll.
    let columns = "jsonpath={range .items[?(@.metadata.labels.app)]}{.metadata.namespace}{\"\\t\"}{.metadata.name}{\"\\t\"}{.metadata.deletionTimestamp}{\"\\t\"}{.status.podIP}{\"\\t\"}{.metadata.labels}{\"\\n\"}{end}";
    let deadline = Instant::now() + Duration::from_secs(600 + want as u64 / 10);
    let items = loop {
        let o = c.kubectl(&["get", "pods", "-A", "-o", columns], None);
        if !o.status.success() {
            bail!("kubectl get pods: {}", String::from_utf8_lossy(&o.stderr));
        }
        let items: Vec<(String, String, bool, Labels)> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| {
                let mut f = l.splitn(5, '\t');
                let (ns, name, deleted, ip) = (f.next()?, f.next()?, f.next()?, f.next()?);
                let labels = serde_json::from_str(f.next()?).ok()?;
                (ours.contains(ns) && deleted.is_empty())
                    .then(|| (ns.to_string(), name.to_string(), !ip.is_empty(), labels))
            })
            .collect();
        if items.len() >= want {
            break items;
        }
        if Instant::now() > deadline {
            bail!("only {} of {want} pods were created", items.len());
        }
        std::thread::sleep(Duration::from_secs(if want > 2_000 { 5 } else { 1 }));
    };
    // (namespace, app) -> (pod name, labels)
    let mut by_app: BTreeMap<(String, String), Vec<(String, Labels)>> = BTreeMap::new();
    // Pods that all have their IPs were given them by an earlier deploy
    // of this topology (the same names in the same order get the same
    // IPs): their status is not written again.
    let have_status = items.iter().all(|i| i.2);
    for (ns, name, _, l) in items {
        let app = l.get("app").cloned().unwrap_or_default();
        by_app.entry((ns, app)).or_default().push((name, l));
    }
    let mut world = World::default();
    let mut out = Vec::new();
    for (w, wl) in t.workloads.iter().enumerate() {
        let mut pods = by_app
            .remove(&(wl.namespace.clone(), wl.name.clone()))
            .unwrap_or_default();
        pods.sort();
        let ips = t.pod_ips(w);
        if pods.len() != ips.len() {
            bail!(
                "{}/{}: {} pods, expected {}",
                wl.namespace,
                wl.name,
                pods.len(),
                ips.len()
            );
        }
        for ((name, l), ip) in pods.into_iter().zip(ips) {
            let pod = Pod {
                namespace: wl.namespace.clone(),
                name,
                labels: l,
                ip,
                service_account: "default".into(),
                ready: true,
                terminating: false,
                proxied: true,
                gateway: wl
                    .router
                    .as_ref()
                    .map(|_| meshscope_shared::inject::Gateway::Router),
            };
            world.pods.push(pod.clone());
            out.push((w, pod));
        }
    }
    world.services = t.services();
    // In parallel: one kubectl writes a few hundred objects a second.
    let ssa =
        |args: &[&str], yaml: &str| server_side_apply_parallel(c, "meshscope-bench", args, yaml, 8);
    if !have_status {
        ssa(&["--subresource=status"], &world.status_yaml())?;
    }
    ssa(&[], &world.endpoint_slices_yaml())?;
    Ok(out)
}

/// Deletes the topology's namespaces (and waits until they are gone) and
/// puts the default mesh config back.
pub fn cleanup(c: &Cluster, t: &Topology) {
    let mut args = vec![
        "delete",
        "namespace",
        "--ignore-not-found",
        "--wait=true",
        "--timeout=300s",
    ];
    args.extend(t.namespaces.iter().map(|(n, _)| n.as_str()));
    let o = c.kubectl(&args, None);
    if !o.status.success() {
        eprintln!(
            "[bench] deleting the namespaces: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    set_mesh(c, DEFAULT_MESH);
}
