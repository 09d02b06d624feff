//! The Helm chart (`deploy/helm/meshscope`) as the real helm (built by
//! `tests/tools/build`, cached by version) renders and installs it, and the
//! kustomize bases it must agree with (`deploy/base`, `deploy/watch`,
//! rendered by kubectl's built-in kustomize).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use meshscope_test_support::fixtures::yaml_docs;
use meshscope_test_support::ledger::{self, Component};
use serde_json::Value;

use crate::cluster::repo_root;

/// The chart's directory.
pub fn chart() -> PathBuf {
    repo_root().join("deploy/helm/meshscope")
}

/// The labels the chart adds to every object's metadata on top of the
/// kustomize bases' (Helm's standard labels).
pub const HELM_LABELS: [&str; 4] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
];

/// The real helm, with its configuration, cache and data in a directory of
/// its own (no user's repositories or plugins).
pub struct Helm {
    pub bin: PathBuf,
    home: tempfile::TempDir,
}

impl Helm {
    /// Builds helm with `tests/tools/build` (cached by version), or fails
    /// the test saying why (also outside CI: it needs only Go).
    pub fn build() -> Helm {
        let bin = crate::tools::bin_dir().join("helm");
        assert!(bin.is_file(), "{} missing", bin.display());
        Helm {
            bin,
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// Runs helm with `args` (and `--kubeconfig`, when given).
    pub fn run(&self, args: &[&str], kubeconfig: Option<&Path>) -> Output {
        ledger::record(Component::Helm);
        let h = self.home.path();
        let mut c = Command::new(&self.bin);
        c.args(args)
            .env("HELM_CONFIG_HOME", h.join("config"))
            .env("HELM_CACHE_HOME", h.join("cache"))
            .env("HELM_DATA_HOME", h.join("data"))
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null());
        if let Some(k) = kubeconfig {
            c.arg("--kubeconfig").arg(k);
        }
        c.output().expect("helm runs")
    }

    /// Runs helm and fails with its output when it fails; its stdout.
    pub fn ok(&self, args: &[&str], kubeconfig: Option<&Path>) -> String {
        let o = self.run(args, kubeconfig);
        assert!(
            o.status.success(),
            "helm {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }

    /// `helm template` of the chart into `namespace`, with `extra`
    /// arguments (`--set ...`), as objects.
    pub fn template(&self, namespace: &str, extra: &[&str]) -> Vec<Value> {
        let chart = chart();
        let mut args = vec![
            "template",
            "meshscope",
            chart.to_str().unwrap(),
            "--namespace",
            namespace,
        ];
        args.extend_from_slice(extra);
        yaml_docs(&self.ok(&args, None))
            .into_iter()
            .filter(|d| !d.is_null())
            .collect()
    }
}

/// `kubectl kustomize` of `dir` (relative to the repository), as objects.
pub fn kustomize(dir: &str) -> Vec<Value> {
    let o = Command::new("kubectl")
        .arg("kustomize")
        .arg(repo_root().join(dir))
        .stdin(Stdio::null())
        .output()
        .expect("kubectl runs");
    assert!(
        o.status.success(),
        "kubectl kustomize {dir} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    yaml_docs(&String::from_utf8(o.stdout).unwrap())
}

/// kind, namespace, name.
pub fn key(d: &Value) -> (String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    (
        s(&d["kind"]),
        s(&d["metadata"]["namespace"]),
        s(&d["metadata"]["name"]),
    )
}

/// The chart's object with Helm's standard labels taken off its metadata
/// and the webhook configurations' caBundles taken out: what the
/// comparison with the kustomize bases ignores of it.
pub fn without_helm_additions(d: &Value) -> Value {
    let mut d = d.clone();
    // (`get_mut`, not `[]`: indexing a Value mutably inserts a null.)
    if let Some(labels) = d
        .get_mut("metadata")
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_object_mut)
    {
        for l in HELM_LABELS {
            labels.remove(l);
        }
    }
    if let Some(hooks) = d.get_mut("webhooks").and_then(Value::as_array_mut) {
        for h in hooks {
            if let Some(c) = h.get_mut("clientConfig").and_then(Value::as_object_mut) {
                c.remove("caBundle");
            }
        }
    }
    d
}

/// Every difference between the chart's objects and the kustomize bases',
/// object by object; `ignored` keys (kind, namespace, name) are left out of
/// both sides.
pub fn differences(
    chart: &[Value],
    bases_all: &[Value],
    ignored: &[(&str, &str, &str)],
) -> Vec<String> {
    let skip = |d: &&Value| {
        let k = key(d);
        !ignored
            .iter()
            .any(|i| (i.0, i.1, i.2) == (k.0.as_str(), k.1.as_str(), k.2.as_str()))
    };
    let chart: Vec<&Value> = chart.iter().filter(skip).collect();
    // deploy/base and deploy/watch may share objects (the Namespace).
    let mut bases: Vec<&Value> = Vec::new();
    for b in bases_all.iter().filter(skip) {
        if !bases.contains(&b) {
            bases.push(b);
        }
    }
    let mut out = Vec::new();
    for b in &bases {
        match chart.iter().find(|c| key(c) == key(b)) {
            None => out.push(format!("the chart lacks {:?}", key(b))),
            Some(c) => {
                let c = without_helm_additions(c);
                if &c != *b {
                    out.push(format!(
                        "{:?} differs:\n--- kustomize\n{}\n--- chart\n{}",
                        key(b),
                        serde_yaml::to_string(b).unwrap(),
                        serde_yaml::to_string(&c).unwrap()
                    ));
                }
            }
        }
    }
    for c in &chart {
        if !bases.iter().any(|b| key(b) == key(c)) {
            out.push(format!("the kustomize bases lack {:?}", key(c)));
        }
    }
    out
}

/// A release installed by a test: uninstalled, and its namespace deleted,
/// when dropped (also when the test fails before its own uninstall).
pub struct Installed<'a> {
    pub helm: &'a Helm,
    pub kubeconfig: &'a Path,
    pub release: String,
    pub namespace: String,
}

impl Drop for Installed<'_> {
    fn drop(&mut self) {
        let args = [
            "uninstall",
            &self.release,
            "-n",
            &self.namespace,
            "--ignore-not-found",
        ];
        let _ = self.helm.run(&args, Some(self.kubeconfig));
        let _ = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.kubeconfig)
            .args([
                "delete",
                "namespace",
                &self.namespace,
                "--wait=false",
                "--ignore-not-found",
            ])
            .stdin(Stdio::null())
            .output();
    }
}
