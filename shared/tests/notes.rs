//! The notes both binaries print, where they depend on what the mesh says.

use meshscope_shared::notes::empty_pod_logs;
use meshscope_test_support::fixtures::{snap, snap_with_mesh};

const PODS: [&str; 1] = ["shop/web-0"];

/// issue #35 item 21: empty pod logs are explained from the mesh config
/// and the Telemetries read, not guessed.
#[test]
fn empty_pod_logs_say_whether_the_mesh_logs_access_at_all() {
    let ns = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n";
    let pods: Vec<String> = PODS.iter().map(|p| p.to_string()).collect();
    let off = empty_pod_logs(&snap(ns), &pods, 1);
    assert!(
        off.ends_with("access logging is off: the mesh config sets no accessLogFile and no Telemetry or defaultProviders.accessLogging turns it on (set meshConfig.accessLogFile: /dev/stdout, or add a Telemetry with accessLogging, then read again after traffic)"),
        "{off}"
    );
    let file = snap_with_mesh(ns, "1.31", "accessLogFile: /dev/stdout\n");
    let on = empty_pod_logs(&file, &pods, 1);
    assert!(
        on.contains("access logging is on (meshConfig.accessLogFile is /dev/stdout), so these pods served and sent nothing"),
        "{on}"
    );
    let telemetry = format!("{ns}---\napiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata:\n  name: logs\n  namespace: istio-system\nspec:\n  accessLogging:\n  - providers: [{{name: envoy}}]\n");
    let on = empty_pod_logs(&snap(&telemetry), &pods, 1);
    assert!(
        on.contains("access logging is on (Telemetry istio-system/logs has accessLogging)"),
        "{on}"
    );
}
