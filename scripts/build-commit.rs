// The commit a binary is built from, for `kubectl meshscope version` and
// `meshscope-webhook --version`. Included by plugin/build.rs and
// webhook/build.rs. It sets MESHSCOPE_COMMIT for the crate to, in order:
// MESHSCOPE_COMMIT from the environment (scripts/release sets it), the
// checkout's `git rev-parse HEAD`, or "unknown" (a build outside a git
// checkout, such as from a source archive).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=MESHSCOPE_COMMIT");
    let commit = std::env::var("MESHSCOPE_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(git_head)
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=MESHSCOPE_COMMIT={commit}");
}

/// `git rev-parse HEAD`, asking cargo to build again when HEAD moves: when
/// HEAD names another ref, or the ref it names gets a new commit.
fn git_head() -> Option<String> {
    let head = git(&["rev-parse", "HEAD"])?;
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &r]));
        watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    }
    // A path that does not exist would make cargo run this on every build.
    for p in watched.into_iter().flatten() {
        if std::path::Path::new(&p).exists() {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    Some(head)
}

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(o.stdout).ok()?.trim().to_string();
    (o.status.success() && !s.is_empty()).then_some(s)
}
