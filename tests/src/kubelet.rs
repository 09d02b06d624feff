//! A stand-in for the kubelet's container-log endpoint.
//!
//! The test control plane has no kubelet: there is no container runtime on
//! these machines, so no real one can run. Pod logs reach a client through
//! the kube-apiserver, which looks up the pod's Node, dials the address and
//! port that Node reports, and proxies `GET /containerLogs/{ns}/{pod}/{container}`.
//! This server answers that one request over TLS from memory. Everything
//! else on the path is real: the API server's routing, authorization and
//! proxying, and the plugin's client.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};

/// What the stand-in answers for one container log.
#[derive(Clone, Debug)]
pub enum LogReply {
    Text(String),
    /// An HTTP status the kubelet would send, with its message.
    Fail(u16, String),
}

/// Logs keyed by `ns/pod/container`, with `#previous` appended for the
/// previous instance of a restarted container.
pub type Logs = HashMap<String, LogReply>;

pub struct StandInKubelet {
    pub port: u16,
    requests: Arc<Mutex<Vec<String>>>,
}

impl StandInKubelet {
    pub fn start(logs: Logs) -> Result<StandInKubelet> {
        let key = rcgen::KeyPair::generate()?;
        let cert =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?.self_signed(&key)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )?;
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").context("bind the stand-in kubelet")?;
        let port = listener.local_addr()?.port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let logs = Arc::new(logs);
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (config, logs, seen) =
                    (Arc::clone(&config), Arc::clone(&logs), Arc::clone(&seen));
                std::thread::spawn(move || {
                    // A failed connection only fails the request it carried.
                    let _ = serve(conn, config, &logs, &seen);
                });
            }
        });
        Ok(StandInKubelet { port, requests })
    }

    /// Every request path (with its query) received so far.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(
    tcp: TcpStream,
    config: Arc<ServerConfig>,
    logs: &Logs,
    seen: &Mutex<Vec<String>>,
) -> Result<()> {
    let conn = ServerConnection::new(config)?;
    let mut tls = StreamOwned::new(conn, tcp);
    let mut reader = BufReader::new(&mut tls);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" {
            break;
        }
    }
    let path = request_line.split(' ').nth(1).unwrap_or("").to_string();
    seen.lock().unwrap().push(path.clone());
    let (route, query) = path.split_once('?').unwrap_or((&path, ""));
    let previous = query.split('&').any(|kv| kv == "previous=true");
    let reply = route.strip_prefix("/containerLogs/").and_then(|key| {
        let key = if previous {
            format!("{key}#previous")
        } else {
            key.to_string()
        };
        logs.get(&key).cloned()
    });
    let (status, body) = match reply {
        Some(LogReply::Text(t)) => (200, t),
        Some(LogReply::Fail(code, msg)) => (code, msg),
        None => (404, format!("no log for {route}")),
    };
    write!(
        tls,
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        if status == 200 { "OK" } else { "Error" },
        body.len()
    )?;
    tls.flush()?;
    tls.conn.send_close_notify();
    tls.flush()?;
    Ok(())
}
