//! The Go tools the release and chart tests use (krew,
//! validate-krew-manifest, actionlint, helm), built by `tests/tools/build`
//! at pinned versions and cached outside the repository.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::cluster::repo_root;

/// The directory holding the tools: builds them when they are not cached,
/// or fails the test saying why (also outside CI: it needs only Go).
pub fn bin_dir() -> PathBuf {
    let o = Command::new(repo_root().join("tests/tools/build"))
        .stderr(Stdio::inherit())
        .output()
        .expect("tests/tools/build runs");
    assert!(o.status.success(), "tests/tools/build failed (above)");
    let out = String::from_utf8(o.stdout).unwrap();
    PathBuf::from(
        out.lines()
            .last()
            .expect("tests/tools/build prints its directory"),
    )
}
