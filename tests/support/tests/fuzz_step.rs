//! `fuzz/run-short`, the README test command's last step, on a machine
//! that cannot fuzz: it skips (exit 0, saying so) for a plain run and
//! fails under `CI=true` (issue #32). The machine is made one that cannot
//! fuzz by a `cargo` on PATH that knows no nightly toolchain or no
//! cargo-fuzz (a stand-in: the real cargo can fuzz here).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use meshscope_test_support::outside::repo_root;

/// A directory holding a `cargo` that fails for `+nightly` (no nightly),
/// or for `+nightly fuzz` only (no cargo-fuzz).
fn stand_in_cargo(name: &str, no_nightly: bool) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("meshscope-fuzz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let body = if no_nightly {
        "#!/bin/sh\necho \"error: toolchain 'nightly' is not installed\" >&2\nexit 1\n"
    } else {
        "#!/bin/sh\n[ \"$1\" = +nightly ] && [ \"$2\" = --version ] && { echo cargo 1.99.0-nightly; exit 0; }\necho \"error: no such command: fuzz\" >&2\nexit 101\n"
    };
    let cargo = dir.join("cargo");
    std::fs::write(&cargo, body).unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Runs fuzz/run-short with `bin` first on PATH: (exit code, stderr).
fn run_short(bin: &Path, ci: bool) -> (i32, String) {
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let mut cmd = Command::new(repo_root().join("fuzz/run-short"));
    cmd.env("PATH", path);
    if ci {
        cmd.env("CI", "true");
    } else {
        cmd.env_remove("CI");
    }
    let o = cmd.output().expect("fuzz/run-short runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn without_nightly_fuzzing_is_skipped_visibly_and_fails_under_ci() {
    let bin = stand_in_cargo("nightly", true);
    let (code, err) = run_short(&bin, false);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("fuzzing SKIPPED: no nightly toolchain"),
        "{err}"
    );
    let (code, err) = run_short(&bin, true);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("FAILED: no nightly toolchain, and under CI=true the fuzz step must run"),
        "{err}"
    );
}

#[test]
fn without_cargo_fuzz_fuzzing_fails_under_ci_naming_the_install() {
    let bin = stand_in_cargo("cargo-fuzz", false);
    let (code, err) = run_short(&bin, false);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("SKIPPED: cargo-fuzz is not installed"),
        "{err}"
    );
    let (code, err) = run_short(&bin, true);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("scripts/setup, or cargo install cargo-fuzz"),
        "{err}"
    );
}

/// A `cargo` that can fuzz one target, `t`, whose run fails with `run_err`
/// on stderr.
fn stand_in_fuzzer(name: &str, run_err: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("meshscope-fuzz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let body = format!(
        "#!/bin/sh\ncase \"$3\" in\n  list) echo t ;;\n  run) echo \"{run_err}\" >&2; exit 1 ;;\nesac\nexit 0\n"
    );
    let cargo = dir.join("cargo");
    std::fs::write(&cargo, body).unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[test]
fn a_target_that_no_longer_builds_is_a_failure_but_not_a_crash() {
    let bin = stand_in_fuzzer("unbuilt", "Error: failed to build fuzz script: cargo build");
    let (code, err) = run_short(&bin, true);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not built: t"), "{err}");
    assert!(!err.contains("crashes in"), "{err}");
    let bin = stand_in_fuzzer(
        "crash",
        "==1==ERROR: AddressSanitizer: heap-buffer-overflow",
    );
    let (code, err) = run_short(&bin, true);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("crashes in: t"), "{err}");
}
