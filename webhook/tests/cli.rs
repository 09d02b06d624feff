//! The binary's command line: `--version` names the version and the commit
//! the build came from.

use std::path::Path;
use std::process::Command;

#[test]
fn version_names_the_commit() {
    let o = Command::new(env!("CARGO_BIN_EXE_meshscope-webhook"))
        .arg("--version")
        .output()
        .expect("meshscope-webhook runs");
    assert!(o.status.success());
    let commit = meshscope_test_support::build_info::commit(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!(
            "meshscope-webhook {} (commit {commit})\n",
            env!("CARGO_PKG_VERSION")
        )
    );
}
