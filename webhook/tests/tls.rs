//! The HTTPS server on loopback with rcgen certificates: a real TLS
//! round trip, a certificate swap picked up without a restart, the TLS
//! versions on offer, and draining on shutdown.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use meshscope_shared::admission::Config;
use meshscope_shared::{Inputs, MeshConfig, MeshSnapshot, Options};
use meshscope_webhook::tls::{self, CertReloader};
use meshscope_webhook::{router, State};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ProtocolVersion, RootCertStore, SupportedProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

// === certificates ===

struct Pki {
    ca: CertificateDer<'static>,
    cert_pem: String,
    key_pem: String,
    leaf: CertificateDer<'static>,
}

/// A fresh CA and a serving certificate for 127.0.0.1 signed by it.
fn pki(name: &str) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{name} CA"));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    Pki {
        ca: ca.der().clone(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        leaf: cert.der().clone(),
    }
}

/// Writes the pair the way the kubelet updates a Secret volume: new files,
/// then an atomic rename.
fn install(dir: &Path, pki: &Pki) {
    for (name, text) in [("tls.key", &pki.key_pem), ("tls.crt", &pki.cert_pem)] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
}

// === server ===

struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    state: Arc<State>,
    _dir: tempfile::TempDir,
    dir: PathBuf,
}

async fn start(first: &Pki) -> Server {
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), first);
    let snap = MeshSnapshot::build_with_mesh(
        &Inputs::default(),
        Options::default(),
        MeshConfig::default(),
    );
    let state = Arc::new(State::with_snapshot(Config::default(), snap));
    let certs = Arc::new(CertReloader::new(
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(tls::serve(
        listener,
        certs,
        state.clone(),
        router(state.clone()),
        async {
            let _ = stopped.await;
        },
    ));
    Server {
        addr,
        stop: Some(stop),
        task,
        state,
        dir: dir.path().to_path_buf(),
        _dir: dir,
    }
}

// === client ===

fn client(
    ca: &CertificateDer<'static>,
    versions: &[&'static SupportedProtocolVersion],
) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

async fn connect(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    versions: &[&'static SupportedProtocolVersion],
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    client(ca, versions).connect(name, tcp).await
}

const BOTH: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];

fn review() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/admission/deployment-create.json");
    std::fs::read_to_string(path).unwrap()
}

fn request_head(body_len: usize) -> String {
    format!(
        "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {body_len}\r\nConnection: close\r\n\r\n"
    )
}

/// Sends one AdmissionReview and returns the status line and the body.
async fn admit(stream: &mut TlsStream<TcpStream>) -> (String, serde_json::Value) {
    let body = review();
    stream
        .write_all(format!("{}{body}", request_head(body.len())).as_bytes())
        .await
        .unwrap();
    read_response(stream).await
}

async fn read_response(stream: &mut TlsStream<TcpStream>) -> (String, serde_json::Value) {
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.lines().next().unwrap().to_string();
    (status, serde_json::from_str(body).expect("a JSON body"))
}

fn peer_cert(stream: &TlsStream<TcpStream>) -> CertificateDer<'static> {
    stream.get_ref().1.peer_certificates().unwrap()[0].clone()
}

// === tests ===

#[tokio::test]
async fn admission_reviews_round_trip_over_tls() {
    let a = pki("first");
    let server = start(&a).await;
    let mut s = connect(server.addr, &a.ca, BOTH).await.unwrap();
    assert_eq!(peer_cert(&s), a.leaf);
    let (status, body) = admit(&mut s).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(
        body["response"]["uid"],
        "7d1c2e0a-1b4f-4a43-9c1e-0e6f5a2b9c01"
    );
}

#[tokio::test]
async fn a_swapped_certificate_is_served_without_a_restart() {
    let a = pki("first");
    let b = pki("second");
    let server = start(&a).await;
    let s = connect(server.addr, &a.ca, BOTH).await.unwrap();
    assert_eq!(peer_cert(&s), a.leaf);
    drop(s);

    install(&server.dir, &b);
    let mut s = connect(server.addr, &b.ca, BOTH).await.unwrap();
    assert_eq!(peer_cert(&s), b.leaf, "the new certificate is served");
    let (status, _) = admit(&mut s).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    let old = connect(server.addr, &a.ca, BOTH).await;
    assert!(old.is_err(), "the old CA no longer verifies the server");

    // A broken file (a rotation half done, a bad Secret) never replaces the
    // last good pair.
    std::fs::write(server.dir.join("tls.crt"), "not a certificate").unwrap();
    let s = connect(server.addr, &b.ca, BOTH).await.unwrap();
    assert_eq!(peer_cert(&s), b.leaf);
    let metrics = server.state.render_metrics();
    assert!(
        metrics.contains("meshscope_webhook_tls_reloads_total 2\n"),
        "{metrics}"
    );
    assert!(!metrics.contains("meshscope_webhook_tls_reload_errors_total 0\n"));
}

#[tokio::test]
async fn tls_1_2_and_1_3_are_offered_and_nothing_older() {
    let a = pki("versions");
    let server = start(&a).await;
    for (versions, expected) in [
        (&[&rustls::version::TLS12][..], ProtocolVersion::TLSv1_2),
        (&[&rustls::version::TLS13][..], ProtocolVersion::TLSv1_3),
    ] {
        let s = connect(server.addr, &a.ca, versions).await.unwrap();
        assert_eq!(s.get_ref().1.protocol_version(), Some(expected));
    }
    // rustls cannot speak TLS 1.1; ask openssl when it is installed.
    let addr = server.addr.to_string();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("openssl")
            .args(["s_client", "-connect", &addr, "-tls1_1"])
            .stdin(std::process::Stdio::null())
            .output()
    })
    .await
    .unwrap();
    match out {
        Ok(o) => assert!(
            !o.status.success() || String::from_utf8_lossy(&o.stdout).contains("Cipher is (NONE)"),
            "a TLS 1.1 handshake succeeded: {}",
            String::from_utf8_lossy(&o.stdout)
        ),
        Err(e) => eprintln!("openssl not run ({e}); TLS 1.1 not checked"),
    }
}

#[tokio::test]
async fn shutdown_drains_the_request_in_flight_then_stops_accepting() {
    let a = pki("drain");
    let mut server = start(&a).await;
    let mut s = connect(server.addr, &a.ca, BOTH).await.unwrap();
    let body = review();
    let (first, rest) = body.split_at(body.len() / 2);
    s.write_all(request_head(body.len()).as_bytes())
        .await
        .unwrap();
    s.write_all(first.as_bytes()).await.unwrap();
    s.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    server.stop.take().unwrap().send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        TcpStream::connect(server.addr).await.is_err(),
        "no new connections after shutdown"
    );
    s.write_all(rest.as_bytes()).await.unwrap();
    let (status, body) = read_response(&mut s).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(body["response"]["allowed"], true);
    tokio::time::timeout(Duration::from_secs(5), server.task)
        .await
        .expect("the server stops once drained")
        .unwrap();
}

#[tokio::test]
async fn a_missing_certificate_is_an_error_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let certs = CertReloader::new(dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let state = State::new(
        Config::default(),
        Options::default(),
        None,
        Duration::from_secs(60),
    );
    let err = certs.config(&state.metrics).await.unwrap_err();
    assert!(err.to_string().contains("tls.crt"), "{err}");
}
