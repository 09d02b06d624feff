//! A stand-in for Istio's sidecar injector.
//!
//! The test control plane runs no istiod injector, so without one the
//! pods that the controllers create in an injected namespace would run
//! only their own containers, as in a cluster whose injector was down
//! when they started, and meshscope rightly counts such pods as having no
//! proxy. This mutating webhook does what istiod's does, as far as
//! meshscope reads it: to a Pod created in a namespace labelled
//! `istio-injection=enabled`, unless the pod is labelled
//! `sidecar.istio.io/inject=false`, runs on the host network or already
//! has the proxy, it adds the `istio-proxy` container and the
//! `sidecar.istio.io/status` annotation. Its selectors are those of
//! istiod's `namespace.sidecar-injector.istio.io` webhook for the default
//! revision (istio/istio 1.31,
//! `manifests/charts/istio-control/istio-discovery/templates/mutatingwebhook.yaml`);
//! revision labels are not mirrored, since no test uses them.
//!
//! It is a webhook like any other: the API server calls it over TLS for
//! every pod CREATE that the selectors match, so a pod created before its
//! namespace was labelled keeps running without the proxy, as in a real
//! cluster. One runs per test process (test binaries run one after
//! another); each registers itself under one configuration name, so the
//! latest process's injector is the cluster's. `failurePolicy: Ignore`
//! keeps a finished process's stale registration from blocking pod
//! creation in the cluster it leaves behind.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::ByteString;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use serde_json::{json, Value};

/// Runs kubectl against the test cluster (`Cluster::kubectl`); taken as a
/// function so that this module does not depend on `cluster`, which starts it.
pub type Kubectl<'a> = &'a dyn Fn(&[&str], Option<&str>) -> std::process::Output;

/// The MutatingWebhookConfiguration every test process registers under.
pub const CONFIGURATION: &str = "meshscope-test-injector";

/// The proxy image the stand-in injects (the Istio release the engine
/// models by default).
pub const PROXY_IMAGE: &str = "docker.io/istio/proxyv2:1.31.0";

/// The namespace a probe pod is created in (server-side dry run) to see
/// that the registration took effect.
const PROBE_NAMESPACE: &str = "meshscope-injector-probe";

type Tls = StreamOwned<ServerConnection, TcpStream>;

/// Starts the injector on loopback and registers it with the cluster;
/// returns once the API server calls it. It serves until the process ends.
pub fn start(c: Kubectl<'_>) -> Result<()> {
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?.self_signed(&key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )?;
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").context("bind the stand-in injector")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let config = Arc::clone(&config);
            // A failed connection only fails the review it carried, which
            // the API server then ignores (failurePolicy: Ignore).
            std::thread::spawn(move || serve(conn, config));
        }
    });
    register(c, port, cert.pem().as_bytes())?;
    wait_until_called(c)
}

/// The webhook configuration, pointing at `port`, trusting `ca_pem`.
fn register(c: Kubectl<'_>, port: u16, ca_pem: &[u8]) -> Result<()> {
    let webhook = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION},
        "webhooks": [{
            "name": "namespace.sidecar-injector.meshscope.test",
            "clientConfig": {
                "url": format!("https://127.0.0.1:{port}/inject"),
                "caBundle": ByteString(ca_pem.to_vec()),
            },
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaceSelector": {"matchExpressions": [
                {"key": "istio-injection", "operator": "In", "values": ["enabled"]}
            ]},
            "objectSelector": {"matchExpressions": [
                {"key": "sidecar.istio.io/inject", "operator": "NotIn", "values": ["false"]}
            ]},
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 10,
            "reinvocationPolicy": "Never",
        }]
    });
    let probe_ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": PROBE_NAMESPACE, "labels": {"istio-injection": "enabled"}}});
    for doc in [webhook, probe_ns] {
        let o = c(&["apply", "-f", "-"], Some(&doc.to_string()));
        if !o.status.success() {
            bail!(
                "register the stand-in injector: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
    Ok(())
}

/// Waits until the API server uses the new registration: a probe pod
/// (server-side dry run, nothing is stored) comes back injected.
fn wait_until_called(c: Kubectl<'_>) -> Result<()> {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "probe", "namespace": PROBE_NAMESPACE},
        "spec": {"containers": [{"name": "app", "image": "example/probe:1"}]}})
    .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = c(
            &["create", "--dry-run=server", "-o", "json", "-f", "-"],
            Some(&pod),
        );
        let out: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        let containers = out["spec"]["containers"].as_array().cloned();
        if containers
            .iter()
            .flatten()
            .any(|c| c["name"] == "istio-proxy")
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the API server does not call the stand-in injector: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn serve(tcp: TcpStream, config: Arc<ServerConfig>) -> Result<()> {
    let conn = ServerConnection::new(config)?;
    let mut tls = StreamOwned::new(conn, tcp);
    let body = read_request(&mut tls)?;
    let review: Value = serde_json::from_slice(&body).context("an AdmissionReview")?;
    let response = review_response(&review);
    let text = response.to_string();
    write!(
        tls,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )?;
    tls.flush()?;
    tls.conn.send_close_notify();
    tls.flush()?;
    Ok(())
}

/// The body of one HTTP/1.1 request (the API server sends a
/// `Content-Length`).
fn read_request(tls: &mut Tls) -> Result<Vec<u8>> {
    let mut reader = BufReader::new(tls);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut length = 0;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.trim().eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().context("Content-Length")?;
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(body)
}

/// The AdmissionReview answering `review`: allowed, with the patch that
/// injects the proxy when the pod gets one.
pub fn review_response(review: &Value) -> Value {
    let request = &review["request"];
    let mut response = json!({"uid": request["uid"], "allowed": true});
    let patch = injection_patch(&request["object"]);
    if !patch.is_empty() {
        let bytes = serde_json::to_vec(&patch).expect("a JSON patch serializes");
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(ByteString(bytes));
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// The JSON patch that injects `pod`, empty when it gets no proxy (on the
/// host network, or it has one already). The selectors have already
/// checked the namespace and the pod's opt-out label.
fn injection_patch(pod: &Value) -> Vec<Value> {
    let spec = &pod["spec"];
    let has_proxy = ["containers", "initContainers"]
        .iter()
        .flat_map(|k| spec[*k].as_array().into_iter().flatten())
        .any(|c| c["name"] == "istio-proxy");
    if has_proxy || spec["hostNetwork"] == true {
        return Vec::new();
    }
    let status = json!({"containers": ["istio-proxy"]}).to_string();
    let annotation = if pod["metadata"]["annotations"].is_object() {
        json!({"op": "add", "path": "/metadata/annotations/sidecar.istio.io~1status", "value": status})
    } else {
        json!({"op": "add", "path": "/metadata/annotations", "value": {"sidecar.istio.io/status": status}})
    };
    vec![
        json!({"op": "add", "path": "/spec/containers/-",
               "value": {"name": "istio-proxy", "image": PROXY_IMAGE}}),
        annotation,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_gets_the_proxy_unless_it_has_one_or_runs_on_the_host_network() {
        let review = |spec: Value| json!({"request": {"uid": "u", "object": {"metadata": {"labels": {}}, "spec": spec}}});
        let r = review_response(&review(json!({"containers": [{"name": "app"}]})));
        assert_eq!(r["response"]["allowed"], true);
        assert_eq!(r["response"]["uid"], "u");
        assert_eq!(r["response"]["patchType"], "JSONPatch");
        let bytes: ByteString = serde_json::from_value(r["response"]["patch"].clone()).unwrap();
        let patch: Value = serde_json::from_slice(&bytes.0).unwrap();
        assert_eq!(patch[0]["value"]["name"], "istio-proxy");
        assert_eq!(patch[1]["path"], "/metadata/annotations");
        for spec in [
            json!({"containers": [{"name": "app"}, {"name": "istio-proxy"}]}),
            json!({"hostNetwork": true, "containers": [{"name": "app"}]}),
        ] {
            let r = review_response(&review(spec));
            assert!(r["response"].get("patch").is_none(), "{r}");
        }
    }
}
