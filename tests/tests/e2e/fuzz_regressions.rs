//! Replays the fuzz targets' committed seed corpora (fuzz/corpus/<target>)
//! and every input that ever crashed one (fuzz/regressions/<target>)
//! through the same target bodies the fuzzers run (fuzz/src/lib.rs), on
//! stable Rust and without libFuzzer. A body that panics on any of them
//! fails its test, naming the files. With `MESHSCOPE_FUZZ_CORPUS` set to a
//! directory of `<target>/` corpora, those are replayed too.

#[path = "../../../fuzz/src/lib.rs"]
mod bodies;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files of `dir`, sorted; none when it does not exist.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn replay(target: &str) {
    let body = bodies::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, body)| *body)
        .unwrap_or_else(|| panic!("no fuzz target {target}"));
    let seeds = inputs(&fuzz_dir().join("corpus").join(target));
    assert!(
        !seeds.is_empty(),
        "fuzz/corpus/{target} is empty or missing: run fuzz/seed and commit a minimized set"
    );
    let mut regressions = inputs(&fuzz_dir().join("regressions").join(target));
    // MESHSCOPE_FUZZ_CORPUS=~/.cache/meshscope/fuzz also replays a working
    // corpus (fuzz/run-long's), e.g. after a fix, without libFuzzer.
    if let Some(dir) = std::env::var_os("MESHSCOPE_FUZZ_CORPUS") {
        regressions.extend(inputs(&Path::new(&dir).join(target)));
    }
    let mut failed = Vec::new();
    for file in seeds.iter().chain(&regressions) {
        let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        if catch_unwind(AssertUnwindSafe(|| body(&data))).is_err() {
            failed.push(file.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: {} of {} inputs panicked:\n{}",
        failed.len(),
        seeds.len() + regressions.len(),
        failed.join("\n")
    );
}

#[test]
fn every_target_is_replayed() {
    let mut names: Vec<&str> = bodies::TARGETS.iter().map(|(n, _)| *n).collect();
    names.sort();
    let mut dirs: Vec<String> = inputs(&fuzz_dir().join("fuzz_targets"))
        .iter()
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
        .collect();
    dirs.sort();
    assert_eq!(
        names, dirs,
        "fuzz/fuzz_targets and bodies::TARGETS disagree"
    );
}

#[test]
fn accesslog_line() {
    replay("accesslog_line");
}

#[test]
fn ingest() {
    replay("ingest");
}

#[test]
fn manifests() {
    replay("manifests");
}

#[test]
fn mesh_config() {
    replay("mesh_config");
}

#[test]
fn admission_review() {
    replay("admission_review");
}

#[test]
fn selector() {
    replay("selector");
}

#[test]
fn egress_host() {
    replay("egress_host");
}
