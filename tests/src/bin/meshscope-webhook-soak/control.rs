//! The soak's own control plane: started and stopped with
//! `tests/cluster/up` and `down`, set up for the webhook, its API server
//! killed and started again; `kubectl` against it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kubectl_meshscope::install::{generate_pki, render, Settings};
use meshscope_e2e::cluster::repo_root;
use meshscope_shared::admission::Policy;

use crate::settings::{NS_ENFORCE, NS_FLIP, NS_WARN};

fn proc_starttime(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit_once(") ")?.1;
    rest.split_whitespace().nth(19).map(String::from)
}

/// The running kube-apiserver of the soak's control plane: kill -9 it and
/// return how to start it again (its exe, arguments).
pub fn kill_apiserver(state: &Path) -> Result<(PathBuf, Vec<String>)> {
    let pidfile = std::fs::read_to_string(state.join("kube-apiserver.pid"))?;
    let pid: u32 = pidfile.split_whitespace().next().context("pid")?.parse()?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))?;
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .skip(1)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let st = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()?;
    if !st.success() {
        bail!("kill -9 {pid} failed");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while proc_starttime(pid).is_some_and(|_| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    }) {
        if Instant::now() > deadline {
            bail!("kube-apiserver {pid} survived SIGKILL");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((exe, args))
}

/// Starts kube-apiserver again with the same arguments, as tests/cluster/up
/// does (its own process group, output to its log, the pid file updated so
/// that tests/cluster/down stops it).
pub fn restart_apiserver(state: &Path, exe: &Path, args: &[String]) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(state.join("kube-apiserver.log"))?;
    let child = Command::new(exe)
        .args(args)
        .current_dir(state)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()?;
    let pid = child.id();
    let st = proc_starttime(pid).context("kube-apiserver exited at once")?;
    std::fs::write(state.join("kube-apiserver.pid"), format!("{pid} {st}\n"))?;
    // Not waited for: tests/cluster/down stops it.
    std::mem::forget(child);
    Ok(())
}

pub fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Result<String> {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn cluster_up(dir: &Path) -> Result<PathBuf> {
    let out = Command::new(repo_root().join("tests/cluster/up"))
        .env("MESHSCOPE_CLUSTER_DIR", dir)
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        bail!("tests/cluster/up failed");
    }
    let s = String::from_utf8_lossy(&out.stdout);
    Ok(PathBuf::from(
        s.lines().last().context("up prints the kubeconfig")?.trim(),
    ))
}

pub fn cluster_down(dir: &Path) {
    let _ = Command::new(repo_root().join("tests/cluster/down"))
        .env("MESHSCOPE_CLUSTER_DIR", dir)
        .stdout(Stdio::null())
        .status();
}

pub fn setup_cluster(kubeconfig: &Path) -> Result<()> {
    let args = Settings {
        namespace: "meshscope-system".into(),
        image: "meshscope-webhook:soak".into(),
        default_policy: Policy::Warn,
        mutate_serviceentry_exportto: false,
        istio_namespace: "istio-system".into(),
        validity_days: 1,
    };
    let pki = generate_pki(&["127.0.0.1".into()], 1)?;
    let keep = [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
    ];
    for d in render(&args, &pki)?
        .iter()
        .filter(|d| keep.contains(&d["kind"].as_str().unwrap_or_default()))
    {
        kubectl(
            kubeconfig,
            &["apply", "-f", "-"],
            Some(&serde_yaml::to_string(d)?),
        )?;
    }
    let mut yaml = String::new();
    for (ns, policy) in [
        (NS_ENFORCE, "enforce"),
        (NS_WARN, "warn"),
        (NS_FLIP, "warn"),
    ] {
        yaml.push_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    istio-injection: enabled\n    meshscope.io/policy: {policy}\n---\n"
        ));
    }
    // A Sidecar scoping app=scoped, and a few more objects for the caches.
    yaml.push_str(&format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: scoped\n  namespace: {NS_ENFORCE}\nspec:\n  workloadSelector:\n    labels:\n      app: scoped\n  egress:\n  - hosts: [\"./*\", \"istio-system/*\"]\n---\n"
    ));
    for i in 0..5 {
        yaml.push_str(&format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: svc-{i}\n  namespace: {NS_ENFORCE}\nspec:\n  workloadSelector:\n    labels:\n      app: svc-{i}\n  egress:\n  - hosts: [\"./*\"]\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\n  namespace: {NS_ENFORCE}\nspec:\n  selector:\n    app: svc-{i}\n  ports:\n  - port: 80\n---\n"
        ));
    }
    kubectl(kubeconfig, &["apply", "-f", "-"], Some(&yaml))?;
    Ok(())
}
