//! Access-log lines in Istio's default TEXT format, for tests that feed
//! traffic to the ingest.

/// One client-side line: the proxy at `src` sent a `GET /` with `authority`
/// through `cluster`, answered by `dst` (`ip:port`). Ports of the source
/// are fixed (1 and 2), the time is 2026-01-01T00:00:00Z.
pub fn line(src: &str, authority: &str, cluster: &str, dst: &str) -> String {
    format!("[2026-01-01T00:00:00.000Z] \"GET / HTTP/1.1\" 200 - via_upstream - \"-\" 0 1 1 1 \"-\" \"x\" \"id\" \"{authority}\" \"{dst}\" {cluster} {src}:1 {dst} {src}:2 - default\n")
}
