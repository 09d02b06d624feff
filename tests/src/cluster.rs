//! The real control plane for end-to-end tests: etcd, kube-apiserver and
//! kube-controller-manager, built from Go modules and started on loopback by
//! `tests/cluster/up` (once per test binary; `up` is idempotent), with a
//! stand-in sidecar injector ([`crate::injector`]) per test process. Each
//! test works in namespaces of its own.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use meshscope_test_support::ledger;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The directory holding the workspace's built binaries (kubectl-meshscope).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> -> target/<profile>; a binary of this
    // crate (a soak, a benchmark) is in target/<profile> itself.
    let dir = exe.parent().expect("target/<profile>");
    match dir.file_name() {
        Some(n) if n == "deps" => dir.parent().expect("target/<profile>").to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

pub fn plugin_binary() -> PathBuf {
    let p = bin_dir().join("kubectl-meshscope");
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (scripts/setup, or cargo build --workspace)",
        p.display()
    );
    p
}

pub struct Cluster {
    pub kubeconfig: PathBuf,
}

static SHARED: OnceLock<Cluster> = OnceLock::new();

/// A control plane of one test's own (`tests/cluster/up` in a state
/// directory of its own), for a test that changes what the whole API
/// server serves, as deleting a CRD does; stopped and removed when
/// dropped. No stand-in injector runs for it: its pods are not injected.
pub struct PrivateCluster {
    pub cluster: &'static Cluster,
    state: PathBuf,
}

impl PrivateCluster {
    pub fn start(tag: &str) -> PrivateCluster {
        ledger::record(ledger::Component::ApiServer);
        let state = std::env::temp_dir().join(format!(
            "meshscope-cluster-{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let up = repo_root().join("tests/cluster/up");
        let out = Command::new(&up)
            .env("MESHSCOPE_CLUSTER_DIR", &state)
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", up.display()));
        let private = PrivateCluster {
            cluster: Box::leak(Box::new(Cluster {
                kubeconfig: PathBuf::from(
                    String::from_utf8_lossy(&out.stdout)
                        .lines()
                        .last()
                        .unwrap_or_default()
                        .trim(),
                ),
            })),
            state,
        };
        assert!(out.status.success(), "tests/cluster/up failed");
        private
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("tests/cluster/down"))
            .env("MESHSCOPE_CLUSTER_DIR", &self.state)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        // `tests/cluster/up`'s lock file, beside the state directory.
        let _ = std::fs::remove_file(self.state.with_extension("lock"));
    }
}

/// Whether Istio's CRDs, which `tests/cluster/up` installs, are next to
/// the repository (`../shared/crds/istio-crds.yaml`, or under
/// `$MESHSCOPE_SHARED_DIR`); when not, a line on stderr says that `test`
/// is skipped and names the missing file. Tests call it through
/// [`needs_cluster!`](crate::needs_cluster).
pub fn istio_crds_present(test: &str) -> bool {
    meshscope_test_support::outside::istio_crds(test).is_some()
}

/// The first line of every test that uses the test control plane: returns
/// from the test, saying so on stderr, when Istio's CRDs are not next to
/// the repository (a plain clone), so that `cargo test` still passes; under
/// `CI=true` it fails the test instead
/// ([`meshscope_test_support::outside::in_ci`]). A test that gets past it
/// is counted in the run's ledger as needing the control plane
/// ([`meshscope_test_support::ledger`]).
#[macro_export]
macro_rules! needs_cluster {
    () => {
        if !$crate::cluster::istio_crds_present(module_path!()) {
            return;
        }
        $crate::cluster::declare_need();
    };
}

/// Records that the current test needs the control plane (the ledger's
/// `needs-control-plane`), so that one that never reached it shows.
pub fn declare_need() {
    ledger::record(ledger::Component::NeedsControlPlane);
}
static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl Cluster {
    /// Starts (or reuses) the test control plane, with this process's
    /// stand-in sidecar injector ([`crate::injector`]) registered.
    pub fn shared() -> &'static Cluster {
        ledger::record(ledger::Component::ApiServer);
        SHARED.get_or_init(|| {
            let up = repo_root().join("tests/cluster/up");
            let out = Command::new(&up)
                .stderr(Stdio::inherit())
                .output()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", up.display()));
            assert!(out.status.success(), "tests/cluster/up failed");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let path = stdout
                .lines()
                .last()
                .expect("up prints the kubeconfig path")
                .trim();
            let c = Cluster {
                kubeconfig: PathBuf::from(path),
            };
            // No istiod injector runs here: this process's stand-in
            // injects the pods created in injected namespaces.
            crate::injector::start(&|a, i| c.kubectl(a, i)).expect("the stand-in injector starts");
            c
        })
    }

    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl runs");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("piped")
                .write_all(input.as_bytes())
                .expect("write to kubectl");
        }
        child.wait_with_output().expect("kubectl finishes")
    }

    /// Runs kubectl and fails with its stderr when it fails.
    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let o = self.kubectl(args, stdin);
        assert!(
            o.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Sets the egress hosts of Sidecar `ns/name` as a user would (`kubectl
    /// patch`, a field manager other than meshscope's).
    pub fn patch_sidecar_hosts(&self, ns: &str, name: &str, hosts: &[String]) {
        let patch =
            serde_json::json!([{"op": "replace", "path": "/spec/egress/0/hosts", "value": hosts}]);
        self.kubectl_ok(
            &[
                "patch",
                "sidecar",
                name,
                "-n",
                ns,
                "--type=json",
                "-p",
                &patch.to_string(),
            ],
            None,
        );
    }

    /// A JSONPath of Sidecar `ns/name`, as `kubectl get -o jsonpath=` prints it.
    pub fn sidecar_jsonpath(&self, ns: &str, name: &str, path: &str) -> String {
        let output = format!("jsonpath={path}");
        self.kubectl_ok(
            &[
                "get",
                "sidecars.networking.istio.io",
                name,
                "-n",
                ns,
                "-o",
                &output,
            ],
            None,
        )
    }

    /// The resourceVersion of Sidecar `ns/name`: what tells a test that
    /// an object was not written.
    pub fn sidecar_resource_version(&self, ns: &str, name: &str) -> String {
        self.sidecar_jsonpath(ns, name, "{.metadata.resourceVersion}")
    }

    /// The Sidecars of `ns`, as `kubectl get -o name` prints them.
    pub fn sidecar_names(&self, ns: &str) -> String {
        self.kubectl_ok(
            &[
                "get",
                "sidecars.networking.istio.io",
                "-n",
                ns,
                "-o",
                "name",
            ],
            None,
        )
    }

    /// Installs (or updates) the shipped read-only ClusterRole
    /// (`deploy/rbac/meshscope-reader.yaml`).
    pub fn install_reader(&self) {
        let reader = repo_root().join("deploy/rbac/meshscope-reader.yaml");
        let path = reader.to_str().expect("the repository path is UTF-8");
        self.kubectl_ok(&["apply", "-f", path], None);
    }

    /// [`Cluster::install_reader`], bound to `user`.
    pub fn bind_reader(&self, user: &str) {
        self.install_reader();
        let subject = format!("--user={user}");
        self.kubectl_ok(
            &[
                "create",
                "clusterrolebinding",
                user,
                "--clusterrole=meshscope-reader",
                &subject,
            ],
            None,
        );
        self.await_grant(user, &["list", "configmaps", "--all-namespaces"]);
    }

    /// Waits until the API server's authorizer grants `user` the access
    /// `can_i` names (`kubectl auth can-i` words): RBAC reads roles and
    /// bindings from a watch cache, so a binding just created may not be
    /// honoured yet, and a test using it at once fails now and then on a
    /// busy server.
    pub fn await_grant(&self, user: &str, can_i: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let as_user = format!("--as={user}");
        let mut args = vec!["auth", "can-i"];
        args.extend_from_slice(can_i);
        args.push(&as_user);
        loop {
            let o = self.kubectl(&args, None);
            if String::from_utf8_lossy(&o.stdout).trim() == "yes" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{user} was not granted {can_i:?} within 30 s: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Deletes pod `ns/name` at once (no kubelet will ever confirm a
    /// graceful stop here), ignoring whether it exists.
    pub fn force_delete_pod(&self, ns: &str, name: &str) {
        let _ = self.kubectl(
            &[
                "delete",
                "pod",
                name,
                "-n",
                ns,
                "--grace-period=0",
                "--force",
                "--ignore-not-found",
            ],
            None,
        );
    }

    /// Deletes Deployment `ns/name` and returns once its ReplicaSets and
    /// pods are gone too. `kubectl delete --wait` alone waits only for the
    /// Deployment: the garbage collector removes the rest afterwards, and
    /// until it has, the pods still run that workload (so `--prune` rightly
    /// keeps its Sidecar). Foreground deletion keeps the Deployment until
    /// its dependents are deleted, so the wait covers them.
    pub fn delete_deployment(&self, ns: &str, name: &str) {
        self.kubectl_ok(
            &[
                "delete",
                "deployment",
                name,
                "-n",
                ns,
                "--cascade=foreground",
                "--wait=true",
            ],
            None,
        );
    }

    pub fn apply(&self, yaml: &str) {
        self.kubectl_ok(&["apply", "-f", "-"], Some(yaml));
    }

    /// A fresh namespace name for one test.
    pub fn unique_ns(prefix: &str) -> String {
        format!(
            "{prefix}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        )
    }

    /// Creates a namespace with labels.
    pub fn namespace(&self, prefix: &str, labels: &[(&str, &str)]) -> String {
        let ns = Self::unique_ns(prefix);
        let labels: String = labels
            .iter()
            .map(|(k, v)| format!("\n    {k}: \"{v}\""))
            .collect();
        self.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:{labels}\n"
        ));
        ns
    }

    /// Waits until `count` pods with label `app=<app>` exist in `ns`, and
    /// returns their names (sorted).
    pub fn wait_pods(&self, ns: &str, app: &str, count: usize) -> Result<Vec<String>> {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let out = self.kubectl_ok(
                &[
                    "get",
                    "pods",
                    "-n",
                    ns,
                    "-l",
                    &format!("app={app}"),
                    "-o",
                    "jsonpath={.items[*].metadata.name}",
                ],
                None,
            );
            let mut names: Vec<String> = out.split_whitespace().map(String::from).collect();
            if names.len() >= count {
                names.sort();
                names.truncate(count);
                return Ok(names);
            }
            if Instant::now() > deadline {
                bail!(
                    "timed out waiting for {count} pods app={app} in {ns} (have {})",
                    names.len()
                );
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Merges `patch` into an object's status (`what`: kind, name and
    /// namespace flags as kubectl takes them); with no kubelet, tests write
    /// what it would.
    fn patch_status(&self, what: &[&str], patch: &str) -> Result<()> {
        let mut args = vec!["patch"];
        args.extend_from_slice(what);
        args.extend(["--subresource=status", "--type=merge", "-p", patch]);
        let o = self.kubectl(&args, None);
        if !o.status.success() {
            bail!(
                "patch status of {}: {}",
                what.join(" "),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        Ok(())
    }

    /// Sets a pod's phase and IP through the status subresource (there is
    /// no kubelet).
    pub fn set_pod_ip(&self, ns: &str, pod: &str, ip: &str) -> Result<()> {
        let patch = format!(
            "{{\"status\":{{\"phase\":\"Running\",\"podIP\":\"{ip}\",\"podIPs\":[{{\"ip\":\"{ip}\"}}]}}}}"
        );
        self.patch_status(&["pod", pod, "-n", ns], &patch)
    }

    /// A Node whose kubelet is the stand-in at 127.0.0.1:`port`
    /// (see `crate::kubelet`). Returns its name.
    pub fn stand_in_node(&self, prefix: &str, port: u16) -> Result<String> {
        let name = Self::unique_ns(prefix);
        self.apply(&format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n"
        ));
        let status = format!(
            "{{\"status\":{{\"addresses\":[{{\"type\":\"InternalIP\",\"address\":\"127.0.0.1\"}}],\"daemonEndpoints\":{{\"kubeletEndpoint\":{{\"Port\":{port}}}}}}}}}"
        );
        self.patch_status(&["node", &name], &status)?;
        Ok(name)
    }

    /// Reports node `name` Ready now, as a kubelet's status heartbeat does:
    /// repeated more often than the node-monitor grace period (40 s), it
    /// keeps the node lifecycle controller from marking the node's pods
    /// not ready on a node with no real kubelet.
    pub fn node_ready(&self, name: &str) -> Result<()> {
        let now = k8s_openapi::jiff::Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)
            .map(|t| t.to_string())
            .unwrap_or_default();
        let status = format!(
            "{{\"status\":{{\"conditions\":[{{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"KubeletReady\",\"message\":\"stand-in kubelet\",\"lastHeartbeatTime\":\"{now}\"}}]}}}}"
        );
        self.patch_status(&["node", name], &status)
    }

    /// Binds a pod to a node, as the scheduler does.
    pub fn bind_pod(&self, ns: &str, pod: &str, node: &str) -> Result<()> {
        let binding = format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"Binding\",\"metadata\":{{\"name\":\"{pod}\"}},\"target\":{{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"name\":\"{node}\"}}}}"
        );
        let path = format!("/api/v1/namespaces/{ns}/pods/{pod}/binding");
        let o = self.kubectl(&["create", "--raw", &path, "-f", "-"], Some(&binding));
        if !o.status.success() {
            bail!(
                "bind {ns}/{pod} to {node}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        Ok(())
    }

    /// Records that `container` of a pod has restarted once (its previous
    /// instance's log is then worth reading).
    pub fn set_restarted(&self, ns: &str, pod: &str, container: &str) -> Result<()> {
        let patch = format!(
            "{{\"status\":{{\"containerStatuses\":[{{\"name\":\"{container}\",\"image\":\"proxy\",\"imageID\":\"\",\"ready\":true,\"restartCount\":1,\"state\":{{\"running\":{{}}}}}}]}}}}"
        );
        self.patch_status(&["pod", pod, "-n", ns], &patch)
    }

    /// A kubeconfig that impersonates `user` (in no group but
    /// system:authenticated), for RBAC tests.
    pub fn impersonating(&self, user: &str, dir: &Path) -> Result<PathBuf> {
        let text = std::fs::read_to_string(&self.kubeconfig).context("read admin kubeconfig")?;
        let mut v: serde_yaml::Value = serde_yaml::from_str(&text)?;
        let users = v
            .get_mut("users")
            .and_then(|u| u.as_sequence_mut())
            .context("kubeconfig has users")?;
        for u in users {
            if let Some(m) = u.get_mut("user").and_then(|u| u.as_mapping_mut()) {
                m.insert("as".into(), user.into());
            }
        }
        let path = dir.join(format!("{user}.kubeconfig"));
        std::fs::write(&path, serde_yaml::to_string(&v)?)?;
        Ok(path)
    }
}

/// A real Prometheus loaded with backfilled samples, on loopback, stopped on
/// drop. Installed from Debian's package by `tests/prometheus/install`.
pub struct Prometheus {
    pub url: String,
    dir: PathBuf,
}

impl Prometheus {
    pub fn start(openmetrics: &str) -> Result<Prometheus> {
        Self::up(Some(openmetrics), None)
    }

    /// A Prometheus with no backfilled data that scrapes `target`
    /// (`host:port`, path `/metrics`) every `interval` (`5s`).
    pub fn scraping(target: &str, interval: &str) -> Result<Prometheus> {
        Self::up(None, Some((target, interval)))
    }

    fn up(openmetrics: Option<&str>, scrape: Option<(&str, &str)>) -> Result<Prometheus> {
        let root = repo_root().join("tests/prometheus");
        let st = Command::new(root.join("install"))
            .stdout(Stdio::null())
            .status()?;
        if !st.success() {
            bail!("tests/prometheus/install failed");
        }
        let data = tempfile::Builder::new().suffix(".om").tempfile()?;
        let mut up = Command::new(root.join("up"));
        if let Some(om) = openmetrics {
            std::fs::write(data.path(), om)?;
            up.arg(data.path());
        }
        if let Some((target, interval)) = scrape {
            up.env("MESHSCOPE_PROM_SCRAPE_TARGET", target)
                .env("MESHSCOPE_PROM_SCRAPE_INTERVAL", interval);
        }
        let out = up.stderr(Stdio::inherit()).output()?;
        if !out.status.success() {
            bail!("tests/prometheus/up failed");
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut lines = stdout.lines().rev();
        let url = lines
            .next()
            .context("up prints the URL")?
            .trim()
            .to_string();
        let dir = PathBuf::from(lines.next().context("up prints the state dir")?.trim());
        ledger::record(ledger::Component::Prometheus);
        Ok(Prometheus { url, dir })
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("tests/prometheus/down"))
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
