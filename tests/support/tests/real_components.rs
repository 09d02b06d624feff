//! `scripts/real-components`, which ends the README's test command: a line
//! per test binary saying how many tests ran against a real component, and,
//! under `CI=true`, a failure when a test that needs the control plane did
//! not reach it or no test reached a component at all (issue #32). Runs the
//! script on a cargo test output and a ledger written here.

use std::path::Path;
use std::process::Command;

use meshscope_test_support::outside::repo_root;

const CARGO_OUTPUT: &str = "\
     Running unittests src/lib.rs (target/debug/deps/meshscope_shared-ef0820223d271151)

running 2 tests
test result: ok. 90 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s

     Running tests/istiod.rs (target/debug/deps/istiod-0123456789abcdef)
skipped a line a test printed
test result: ok. 10 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 900.01s

   Doc-tests meshscope_shared
test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
";

/// Every component reached (by istiod's tests, and a krew and a helm test); `extra` appended to its ledger.
fn ledger(dir: &Path, extra: &str) {
    let mut istiod = String::new();
    for t in ["fixed_scenarios_match_istiod", "commit_seeds_match_istiod"] {
        for c in ["needs-control-plane", "api-server", "istiod"] {
            istiod += &format!("{t}\t{c}\n");
        }
    }
    istiod += "prometheus_test\tprometheus\nupstream_case\tistio-testdata\n";
    istiod += "release_test\tkrew\nhelm_test\thelm\n";
    istiod += extra;
    std::fs::write(dir.join("istiod.tsv"), istiod).unwrap();
}

/// Runs the script: (exit code, stdout, stderr).
fn run(dir: &Path, ci: bool) -> (i32, String, String) {
    let out = dir.join("cargo-test.txt");
    std::fs::write(&out, CARGO_OUTPUT).unwrap();
    let mut cmd = Command::new(repo_root().join("scripts/real-components"));
    cmd.arg(&out).arg(dir);
    if ci {
        cmd.env("CI", "true");
    } else {
        cmd.env_remove("CI");
    }
    let o = cmd.output().expect("scripts/real-components runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_line_per_test_binary_counts_the_tests_that_reached_each_component() {
    let dir = tempfile_dir("meshscope-real-ok");
    ledger(&dir, "");
    let (code, out, err) = run(&dir, true);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(
            "real components: meshscope_shared: 90 passed, 0 failed; none against a real component"
        ),
        "{out}"
    );
    assert!(
        out.contains("real components: istiod: 10 passed, 0 failed; 2 against the API server; 2 against istiod; 1 against Prometheus; 1 against Istio's test inputs"),
        "{out}"
    );
    assert!(
        out.contains("real components: doc-tests meshscope_shared: 0 passed"),
        "{out}"
    );
}

#[test]
fn under_ci_a_declared_need_that_never_reached_the_api_server_fails() {
    let dir = tempfile_dir("meshscope-real-declared");
    ledger(&dir, "returned_early\tneeds-control-plane\n");
    let (code, _, err) = run(&dir, true);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("FAILED: istiod: returned_early needs the control plane but never reached its API server"),
        "{err}"
    );
    // Outside CI the same run warns and passes.
    let (code, _, err) = run(&dir, false);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning: istiod: returned_early"), "{err}");
}

#[test]
fn under_ci_a_run_that_reached_no_component_fails() {
    let dir = tempfile_dir("meshscope-real-none");
    let (code, out, err) = run(&dir, true);
    assert_eq!(code, 1, "{out}{err}");
    for c in [
        "the API server",
        "istiod",
        "Prometheus",
        "Istio's test inputs",
        "krew",
        "helm",
    ] {
        assert!(
            err.contains(&format!("FAILED: no test ran against {c}")),
            "{err}"
        );
    }
}

/// A fresh directory under the system's temporary directory.
fn tempfile_dir(prefix: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
