//! What a build of this checkout says it was built from, to check the
//! binaries' `version` output against.

use std::path::Path;
use std::process::Command;

/// The commit a build of the checkout at `dir` names: `MESHSCOPE_COMMIT`
/// when the build is given one (scripts/release sets it), else git's HEAD
/// (plugin/build.rs and webhook/build.rs do the same).
pub fn commit(dir: &Path) -> String {
    if let Some(c) = std::env::var("MESHSCOPE_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
    {
        return c;
    }
    let o = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(o.status.success(), "the tests run in a git checkout");
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}
