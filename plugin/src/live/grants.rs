//! The RBAC files in `deploy/rbac/` (and `deploy/watch/`), and which one
//! grants what. A leaf: failures and the permission check both name them.

/// The RBAC files in `deploy/rbac/`, by what they grant.
pub const READER_FILE: &str = "deploy/rbac/meshscope-reader.yaml";
pub const APPLIER_FILE: &str = "deploy/rbac/meshscope-applier.yaml";
pub const VERIFIER_FILE: &str = "deploy/rbac/meshscope-verifier.yaml";
/// What `apply --watch` runs with in the cluster, Lease included.
pub const WATCH_FILE: &str = "deploy/watch/rbac.yaml";

/// The review of what a command needs.
pub(super) const REVIEW: &str = "selfsubjectaccessreviews.authorization.k8s.io";

/// The file in `deploy/rbac/` that grants `verb` on `resource`.
pub fn rbac_file(verb: &str, resource: &str) -> &'static str {
    let read = matches!(verb, "get" | "list" | "watch");
    if resource.starts_with("leases") {
        WATCH_FILE
    } else if resource.starts_with("pods/portforward") {
        VERIFIER_FILE
    } else if resource.starts_with("sidecars") && !read {
        APPLIER_FILE
    } else {
        READER_FILE
    }
}
