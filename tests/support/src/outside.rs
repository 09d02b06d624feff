//! Inputs that live outside the repository, in the directory next to it
//! (`<repo>/../shared`, or `$MESHSCOPE_SHARED_DIR`): Istio's CRDs
//! (`crds/istio-crds.yaml`, which the test control plane installs) and
//! Istio's own test inputs (`istio-testdata/`, copied from istio/istio
//! 1.31). A plain clone has neither; the tests that need them say on stderr
//! that they were skipped and why, and pass, except under `CI=true`, where
//! a missing input fails the test with its path and what provides it: a CI
//! run never counts a test that did not run as passed (issue #32).

use std::path::{Path, PathBuf};

/// The directory next to the repository that holds Istio's CRDs and test
/// data.
pub fn shared_dir() -> PathBuf {
    std::env::var_os("MESHSCOPE_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let root = repo_root();
            match root.parent() {
                Some(parent) => parent.join("shared"),
                None => root.join("../shared"),
            }
        })
}

/// The repository's root (without `..` in it, so that messages name it
/// plainly).
pub fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// `rel` under `istio-testdata/`, or `None` (with a line on stderr naming
/// the missing directory) when Istio's test inputs are not there.
pub fn istio_testdata(test: &str, rel: &str) -> Option<PathBuf> {
    let dir = shared_dir().join("istio-testdata");
    if !dir.is_dir() {
        skipped(test, &dir);
        return None;
    }
    crate::ledger::record(crate::ledger::Component::IstioTestdata);
    Some(dir.join(rel))
}

/// `rel` in the source of the `istio.io/istio` Go module that
/// `tests/istiod/mod` pins (downloaded by `tests/istiod/build`, which
/// builds istiod from it): Istio's own golden files, such as the
/// Deployments istiod renders for a Gateway. `None` (with a line on
/// stderr; under `CI=true` a failure) when the module is not in the Go
/// module cache.
pub fn istio_module(test: &str, rel: &str) -> Option<PathBuf> {
    let modfile = repo_root().join("tests/istiod/mod");
    let go = std::env::var_os("GO")
        .map(PathBuf::from)
        .or_else(|| program_on_path("go"))
        .unwrap_or_else(|| PathBuf::from("/usr/local/go/bin/go"));
    let dir = std::process::Command::new(go)
        .args(["list", "-m", "-f", "{{.Dir}}", "istio.io/istio"])
        .current_dir(&modfile)
        .env("GOFLAGS", "-mod=readonly")
        .env("GOTOOLCHAIN", "local")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|d| d.is_dir());
    let Some(dir) = dir else {
        let why = format!("the istio.io/istio module {} pins is not in the Go module cache (tests/istiod/build downloads it)", modfile.display());
        skipped_because(test, why);
        return None;
    };
    crate::ledger::record(crate::ledger::Component::IstioTestdata);
    Some(dir.join(rel))
}

/// Istio's CRDs, or `None` (with a line on stderr) when they are not there.
pub fn istio_crds(test: &str) -> Option<PathBuf> {
    let file = shared_dir().join("crds/istio-crds.yaml");
    if !file.is_file() {
        skipped(test, &file);
        return None;
    }
    Some(file)
}

/// A program a test runs as users would (Graphviz's `dot`), from PATH, or
/// `None` (with a line on stderr; under `CI=true` a failure) when it is not
/// installed. `scripts/setup` installs them.
pub fn program(test: &str, name: &str) -> Option<PathBuf> {
    let found = program_on_path(name);
    if found.is_none() {
        let why = format!("{name} is not on PATH (scripts/setup installs it)");
        if in_ci() {
            panic!("{test}: {why}; under CI=true a test whose program is missing fails instead of skipping");
        }
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "skipped {test}: {why}");
    }
    found
}

fn program_on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// Whether this is a CI run (`CI=true`, as CI sets it, or `CI=1`): there a
/// test never skips for a missing input or component, it fails.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Says on stderr that `test` was skipped, or, under CI, fails it. Written
/// to the stderr handle, not with `eprintln!`, which the test harness
/// captures and shows only for failing tests: a skip must show in a passing
/// run.
fn skipped(test: &str, missing: &Path) {
    skipped_because(
        test,
        format!(
            "{} is missing (Istio's inputs live outside the repository, in ../shared beside it as CI lays it out; or set MESHSCOPE_SHARED_DIR to the directory holding crds/ and istio-testdata/)",
            missing.display()
        ),
    );
}

fn skipped_because(test: &str, why: String) {
    use std::io::Write as _;
    if in_ci() {
        panic!(
            "{test}: {why}; under CI=true a test whose input is missing fails instead of skipping"
        );
    }
    let _ = writeln!(std::io::stderr(), "skipped {test}: {why}");
}
