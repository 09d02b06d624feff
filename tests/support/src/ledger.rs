//! Which tests ran against a real component, so that a green run says what
//! it exercised (issue #32). Each use of the test control plane, istiod,
//! Prometheus, Istio's own test inputs, krew or helm appends one line,
//! `test\tcomponent`, to `<target>/meshscope-ledger/<test binary>.tsv`;
//! `scripts/test` clears
//! the directory before `cargo test` and `scripts/real-components` prints a
//! line per test binary from it afterwards (and, under `CI=true`, fails
//! when a test that said it needs the control plane never reached it).
//!
//! The test's name is its thread's: libtest runs each test on a thread
//! named after it. Writes are single `O_APPEND` lines, so the tests of one
//! binary, running in parallel, do not interleave them.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// What a test ran against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// The test declared that it needs the test control plane
    /// (`needs_cluster!`): counted so that a declared need that never
    /// reached the API server shows.
    NeedsControlPlane,
    /// The real kube-apiserver and etcd that `tests/cluster/up` starts.
    ApiServer,
    /// A real istiod (`tests/istiod/up`).
    Istiod,
    /// A real Prometheus (`tests/prometheus/up`).
    Prometheus,
    /// Istio's own test inputs (`../shared/istio-testdata`).
    IstioTestdata,
    /// The real krew (`tests/tools/build`), installing a release.
    Krew,
    /// The real helm (`tests/tools/build`), rendering or installing
    /// `deploy/helm/meshscope`.
    Helm,
}

impl Component {
    /// The ledger's (and `scripts/real-components`') name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Component::NeedsControlPlane => "needs-control-plane",
            Component::ApiServer => "api-server",
            Component::Istiod => "istiod",
            Component::Prometheus => "prometheus",
            Component::IstioTestdata => "istio-testdata",
            Component::Krew => "krew",
            Component::Helm => "helm",
        }
    }
}

/// Records that the current test used `c`. Never fails a test: a ledger
/// that cannot be written shows as a missing count in the summary.
pub fn record(c: Component) {
    let Some(file) = ledger_file() else { return };
    let test = std::thread::current()
        .name()
        .unwrap_or("(unnamed thread)")
        .to_string();
    if let Some(dir) = file.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let line = format!("{test}\t{}\n", c.as_str());
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&file)
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// `<target>/meshscope-ledger/<binary>.tsv`: the target directory from the
/// test binary's own path (`<target>/<profile>/deps/<binary>-<hash>`), or
/// `$MESHSCOPE_LEDGER_DIR` when set. `None` for a program that is not a
/// test binary (a benchmark using the same harness): it keeps no ledger.
fn ledger_file() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    if deps.file_name()? != "deps" {
        return None;
    }
    let dir = match std::env::var_os("MESHSCOPE_LEDGER_DIR") {
        Some(d) => PathBuf::from(d),
        None => deps.parent()?.parent()?.join("meshscope-ledger"),
    };
    Some(dir.join(format!("{}.tsv", binary_name(&exe))))
}

/// The test binary's name without cargo's `-<hash>` suffix.
fn binary_name(exe: &Path) -> String {
    let stem = exe
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            name.to_string()
        }
        _ => stem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_names_lose_cargos_hash_only() {
        let n = |p: &str| binary_name(Path::new(p));
        assert_eq!(n("/t/debug/deps/e2e-0123456789abcdef"), "e2e");
        assert_eq!(
            n("/t/debug/deps/webhook_hostile-fedcba9876543210"),
            "webhook_hostile"
        );
        assert_eq!(n("/t/debug/deps/meshscope_e2e-0123"), "meshscope_e2e-0123");
        assert_eq!(n("/t/debug/deps/plain"), "plain");
    }
}
