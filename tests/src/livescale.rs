//! The reference scenario on the live test control plane, at benchmark
//! scale, in namespace `default`: created through the controllers (the
//! harness writes the pods' IPs and status and the EndpointSlices), and
//! removed again. Shared by `meshscope-bench-istiod` and
//! `meshscope-bench-watch`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::cluster::Cluster;
use crate::world::{labels, server_side_apply, Labels, Pod, Service, SvcPort, World};
use crate::Scenario;

/// The benchmarks' namespace.
pub const NS: &str = "default";

pub fn kubectl_json(c: &Cluster, args: &[&str]) -> Result<serde_json::Value> {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    let out = c.kubectl(&a, None);
    if !out.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Removes the scenario's objects from `NS` (Deployments and
/// Services named `httpbin-*` and `sleep-*`, their slices, the managed
/// Sidecars and the VirtualService) and waits until its pods are gone.
pub fn cleanup(c: &Cluster) {
    let ours = |name: &str| {
        let n = name.rsplit('/').next().unwrap_or(name);
        n.starts_with("httpbin-") || n.starts_with("sleep-")
    };
    for kind in ["deployments", "services"] {
        let names: Vec<String> = c
            .kubectl_ok(&["get", kind, "-n", NS, "-o", "name"], None)
            .lines()
            .filter(|l| ours(l))
            .map(String::from)
            .collect();
        for chunk in names.chunks(200) {
            let mut args = vec!["delete", "-n", NS, "--wait=false", "--ignore-not-found"];
            args.extend(chunk.iter().map(String::as_str));
            let _ = c.kubectl(&args, None);
        }
    }
    for (what, selector) in [
        ("endpointslices", "app=meshscope-bench"),
        (
            "sidecars.networking.istio.io",
            "app.kubernetes.io/managed-by=kubectl-meshscope",
        ),
    ] {
        let _ = c.kubectl(
            &[
                "delete",
                what,
                "-n",
                NS,
                "-l",
                selector,
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        );
    }
    let _ = c.kubectl(
        &[
            "delete",
            "virtualservice",
            "httpbin-0-timeout",
            "-n",
            NS,
            "--ignore-not-found",
        ],
        None,
    );
    // Pods go with their ReplicaSets; wait until none is left. A pod
    // bound to a node (meshscope-bench-watch's stand-in) stays Terminating
    // until its kubelet confirms, and there is none: those are removed
    // at once, as `kubectl delete --force` does.
    let deadline = Instant::now() + Duration::from_secs(300);
    while Instant::now() < deadline {
        let v = kubectl_json(c, &["get", "pods", "-n", NS]).unwrap_or_default();
        let items = v["items"].as_array().cloned().unwrap_or_default();
        let left: Vec<&serde_json::Value> = items
            .iter()
            .filter(|i| ours(i["metadata"]["name"].as_str().unwrap_or("")))
            .collect();
        if left.is_empty() {
            return;
        }
        let stuck: Vec<String> = left
            .iter()
            .filter(|i| !i["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|i| i["metadata"]["name"].as_str().map(String::from))
            .collect();
        for chunk in stuck.chunks(200) {
            let mut args = vec![
                "delete",
                "pods",
                "-n",
                NS,
                "--grace-period=0",
                "--force",
                "--ignore-not-found",
            ];
            args.extend(chunk.iter().map(String::as_str));
            let _ = c.kubectl(&args, None);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    eprintln!("[bench] pods of an earlier run are still terminating after 300 s");
}

/// Creates the scenario (Deployments and Services; the controllers make
/// the pods), gives each pod the scenario's IP and status, and writes the
/// EndpointSlices. Returns the pods.
pub fn deploy(c: &Cluster, s: &Scenario) -> Result<Vec<Pod>> {
    deploy_with(c, s, |m| m)
}

/// As [`deploy`], with the Deployments and Services edited first.
pub fn deploy_with(c: &Cluster, s: &Scenario, edit: impl Fn(String) -> String) -> Result<Vec<Pod>> {
    // The pods carry their istio-proxy container, in an injected
    // namespace, as the reference scenario says: the stand-in injector
    // (crate::injector) adds it as the controllers create them.
    c.kubectl_ok(
        &[
            "label",
            "namespace",
            NS,
            "istio-injection=enabled",
            "--overwrite",
        ],
        None,
    );
    c.apply(&edit(s.live_manifests()));
    let want = s.httpbins * s.httpbin_replicas + s.sleeps;
    let deadline = Instant::now() + Duration::from_secs(600);
    let items = loop {
        let v = kubectl_json(c, &["get", "pods", "-n", NS, "-l", "app"])?;
        let items = v["items"].as_array().cloned().unwrap_or_default();
        if items.len() >= want {
            break items;
        }
        if Instant::now() > deadline {
            bail!("only {} of {want} pods were created", items.len());
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    // app label -> (pod name, labels)
    let mut by_app: BTreeMap<String, Vec<(String, Labels)>> = BTreeMap::new();
    for it in &items {
        let name = it["metadata"]["name"].as_str().unwrap_or("").to_string();
        let l: Labels =
            serde_json::from_value(it["metadata"]["labels"].clone()).unwrap_or_default();
        let app = l.get("app").cloned().unwrap_or_default();
        by_app.entry(app).or_default().push((name, l));
    }
    let mut world = World::default();
    for (app, ips) in s.pod_ips() {
        let mut pods = by_app.remove(&app).unwrap_or_default();
        pods.sort();
        if pods.len() != ips.len() {
            bail!("{app}: {} pods, expected {}", pods.len(), ips.len());
        }
        for ((name, l), ip) in pods.into_iter().zip(ips) {
            world.pods.push(Pod {
                namespace: NS.into(),
                name,
                labels: l,
                ip: ip.to_string(),
                service_account: "default".into(),
                ready: true,
                terminating: false,
                proxied: true,
                gateway: None,
            });
        }
        if app.starts_with("httpbin-") {
            let mut port = SvcPort::new("http", 8000);
            port.target_port = 80;
            world.services.push(Service {
                namespace: NS.into(),
                name: app.clone(),
                selector: labels(&[("app", &app)]),
                ports: vec![port],
                headless: false,
                annotations: Default::default(),
                labels: Labels::new(),
                external_name: None,
            });
        }
    }
    let ssa = |args: &[&str], yaml: &str| server_side_apply(c, "meshscope-bench", args, yaml);
    ssa(&["--subresource=status"], &world.status_yaml())?;
    // Our slices carry the app label too, for cleanup.
    let slices = world.endpoint_slices_yaml().replace(
        "    kubernetes.io/service-name: ",
        "    app: meshscope-bench\n    kubernetes.io/service-name: ",
    );
    ssa(&[], &slices)?;
    Ok(world.pods)
}
