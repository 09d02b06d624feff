//! A stand-in for the kubelet's container-log and port-forward endpoints.
//!
//! The test control plane has no kubelet: there is no container runtime on
//! these machines, so no real one can run. Pod logs reach a client through
//! the kube-apiserver, which looks up the pod's Node, dials the address and
//! port that Node reports, and proxies `GET /containerLogs/{ns}/{pod}/{container}`.
//! This server answers that request over TLS from memory.
//!
//! Port-forward takes the same path: for a WebSocket client (subprotocol
//! `v4.channel.k8s.io`, as kube-rs speaks it) the API server passes the
//! upgrade request on to `/portForward/{ns}/{pod}?port=P[,Q...]` and then
//! splices bytes. This server completes the upgrade and relays each port to
//! a TCP address on this machine registered for `ns/pod:port`, framing
//! bytes as the kubelet does (see [`StandInKubelet::start_with`]).
//! Everything else on the path is real: the API server's routing,
//! authorization and proxying, and the client.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use tungstenite::protocol::{Role, WebSocket};
use tungstenite::Message;

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

/// Logs that grow while the stand-in runs, keyed as [`Logs`]: each line
/// with the time it was written. They are served as the kubelet serves a
/// container's log: `sinceTime` (RFC 3339, lines at or after it) and
/// `sinceSeconds` filter, `timestamps=true` puts each line's time
/// (RFC 3339 with nanoseconds) and a space before it.
type TimedLogs = HashMap<String, Vec<(Timestamp, String)>>;

/// Port-forward targets keyed by `ns/pod:port`: where the stand-in connects
/// when a client forwards that port of that pod.
pub type Forwards = HashMap<String, SocketAddr>;

/// The WebSocket subprotocol the kubelet's port-forward speaks in binary.
const PORT_FORWARD_PROTOCOL: &str = "v4.channel.k8s.io";

type Tls = StreamOwned<ServerConnection, TcpStream>;

pub struct StandInKubelet {
    pub port: u16,
    requests: Arc<Mutex<Vec<String>>>,
    forwards: Arc<Mutex<Forwards>>,
    timed: Arc<Mutex<TimedLogs>>,
}

impl StandInKubelet {
    pub fn start(logs: Logs) -> Result<StandInKubelet> {
        Self::start_with(logs, Forwards::new())
    }

    /// Serves `logs`, and port-forwards each `ns/pod:port` in `forwards` to
    /// its address. A pod with no forward is unknown to this kubelet (404);
    /// a port of a known pod with no forward, or whose address cannot be
    /// dialled, gets its error on the port's error channel, as from a
    /// kubelet whose runtime cannot connect.
    pub fn start_with(logs: Logs, forwards: Forwards) -> Result<StandInKubelet> {
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
        let forwards = Arc::new(Mutex::new(forwards));
        let logs = Arc::new(logs);
        let timed: Arc<Mutex<TimedLogs>> = Arc::default();
        let (seen, fwd, grown) = (
            Arc::clone(&requests),
            Arc::clone(&forwards),
            Arc::clone(&timed),
        );
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (config, logs, seen, fwd, grown) = (
                    Arc::clone(&config),
                    Arc::clone(&logs),
                    Arc::clone(&seen),
                    Arc::clone(&fwd),
                    Arc::clone(&grown),
                );
                std::thread::spawn(move || {
                    // A failed connection only fails the request it carried.
                    let _ = serve(conn, config, &logs, &grown, &seen, &fwd);
                });
            }
        });
        Ok(StandInKubelet {
            port,
            requests,
            forwards,
            timed,
        })
    }

    /// Adds (or replaces) the target of `ns/pod:port` for later requests.
    pub fn forward(&self, ns_pod_port: &str, to: SocketAddr) {
        self.forwards
            .lock()
            .unwrap()
            .insert(ns_pod_port.to_string(), to);
    }

    /// Appends `line` to the growing log `ns/pod/container`, written now.
    pub fn append(&self, key: &str, line: &str) {
        self.timed
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_default()
            .push((Timestamp::now(), line.to_string()));
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
    timed: &Mutex<TimedLogs>,
    seen: &Mutex<Vec<String>>,
    forwards: &Mutex<Forwards>,
) -> Result<()> {
    let conn = ServerConnection::new(config)?;
    let mut tls = StreamOwned::new(conn, tcp);
    let mut reader = BufReader::new(&mut tls);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Header names lower-cased; a name may repeat.
    let mut headers: Vec<(String, String)> = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    // Whatever the client sent after the headers (nothing, for these
    // requests) belongs to the next protocol: keep it.
    let early = reader.buffer().to_vec();
    drop(reader);
    let path = request_line.split(' ').nth(1).unwrap_or("").to_string();
    seen.lock().unwrap().push(path.clone());
    let (route, query) = path.split_once('?').unwrap_or((&path, ""));
    if let Some(rest) = route.strip_prefix("/portForward/") {
        return port_forward(tls, early, rest, query, &headers, forwards);
    }
    let previous = query.split('&').any(|kv| kv == "previous=true");
    if let Some(key) = route.strip_prefix("/containerLogs/") {
        if let Some(lines) = timed.lock().unwrap().get(key) {
            let body = timed_log(lines, query);
            return respond(tls, 200, &body);
        }
    }
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
    respond(tls, status, &body)
}

/// A growing log as the kubelet serves it for `query`.
fn timed_log(lines: &[(Timestamp, String)], query: &str) -> String {
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .map(unescape)
    };
    let since = match (param("sinceTime"), param("sinceSeconds")) {
        (Some(t), _) => t.parse::<Timestamp>().ok(),
        (None, Some(s)) => s.parse::<i64>().ok().and_then(|s| {
            Timestamp::now()
                .checked_sub(SignedDuration::from_secs(s))
                .ok()
        }),
        (None, None) => None,
    };
    let stamps = param("timestamps").as_deref() == Some("true");
    let mut out = String::new();
    for (t, line) in lines {
        if since.is_some_and(|s| *t < s) {
            continue;
        }
        if stamps {
            out.push_str(&format!("{t} "));
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A plain (non-upgrade) answer, then the end of the connection.
fn respond(mut tls: Tls, status: u16, body: &str) -> Result<()> {
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

fn header<'a>(headers: &'a [(String, String)], name: &'a str) -> impl Iterator<Item = &'a str> {
    headers
        .iter()
        .filter(move |(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Decodes the few percent-escapes a port list can carry (`%2C`).
/// A query value, percent-decoded (`+` is a space, as forms encode it).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                Ok(v) => {
                    out.push(v);
                    i += 3;
                    continue;
                }
                Err(_) => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET /portForward/{ns}/{pod}[/{uid}]?port=P[,Q...]`, upgraded to a
/// WebSocket as the kubelet does (its `portforward/websocket.go`): for the
/// i-th port, channel 2i carries data both ways and channel 2i+1 errors
/// from the kubelet; each channel first gets the port, little-endian; every
/// binary frame is `[channel, payload...]`.
fn port_forward(
    mut tls: Tls,
    early: Vec<u8>,
    pod_path: &str,
    query: &str,
    headers: &[(String, String)],
    forwards: &Mutex<Forwards>,
) -> Result<()> {
    let req = match forward_request(pod_path, query, headers, forwards) {
        Ok(req) => req,
        Err((status, why)) => return respond(tls, status, &why),
    };
    write!(
        tls,
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n{}\r\n",
        tungstenite::handshake::derive_accept_key(req.key.as_bytes()),
        req.protocol
    )?;
    tls.flush()?;
    let mut ws = WebSocket::from_partially_read(tls, early, Role::Server, None);
    for (i, port) in req.ports.iter().enumerate() {
        let [lo, hi] = port.to_le_bytes();
        let data = (2 * i) as u8;
        ws.send(Message::binary(vec![data, lo, hi]))?;
        ws.send(Message::binary(vec![data + 1, lo, hi]))?;
    }
    let (mut conns, rx) = dial(&mut ws, &req)?;

    // One thread drives the WebSocket: reads poll with a short timeout, and
    // in between, the targets' bytes go out.
    ws.get_ref()
        .sock
        .set_read_timeout(Some(Duration::from_millis(10)))?;
    let result = relay(&mut ws, &mut conns, &rx)?;
    for c in conns.iter_mut().filter_map(Option::take) {
        let _ = c.shutdown(Shutdown::Both);
    }
    let tls = ws.get_mut();
    tls.conn.send_close_notify();
    let _ = tls.flush();
    result
}

/// A port-forward request the stand-in takes.
struct ForwardRequest<'a> {
    ns: &'a str,
    pod: &'a str,
    /// `Sec-WebSocket-Key`.
    key: String,
    ports: Vec<u16>,
    /// Where each port goes (`None`: no forward registered).
    targets: Vec<Option<SocketAddr>>,
    /// The `Sec-WebSocket-Protocol` header line to answer with, or empty.
    protocol: String,
}

/// The request as the kubelet reads it, or the status and message it
/// answers instead.
fn forward_request<'a>(
    pod_path: &'a str,
    query: &str,
    headers: &[(String, String)],
    forwards: &Mutex<Forwards>,
) -> Result<ForwardRequest<'a>, (u16, String)> {
    let mut parts = pod_path.split('/');
    let (Some(ns), Some(pod)) = (parts.next(), parts.next()) else {
        return Err((404, "not found".into()));
    };
    let websocket = header(headers, "upgrade").any(|v| v.eq_ignore_ascii_case("websocket"));
    let Some(key) = header(headers, "sec-websocket-key")
        .next()
        .map(str::to_string)
    else {
        return Err((
            400,
            "the stand-in kubelet port-forwards over WebSocket only (not SPDY)".into(),
        ));
    };
    if !websocket {
        return Err((400, "expected an Upgrade: websocket request".into()));
    }
    // The kubelet takes its ports from `port` (comma-separated, repeatable).
    let mut ports: Vec<u16> = Vec::new();
    for kv in query.split('&') {
        let Some(list) = kv.strip_prefix("port=") else {
            continue;
        };
        for p in unescape(list).split(',') {
            match p.parse::<u16>() {
                Ok(n) if n > 0 => ports.push(n),
                _ => return Err((400, format!("unable to parse {p:?} as a port"))),
            }
        }
    }
    if ports.is_empty() {
        return Err((400, "query parameter \"port\" is required".into()));
    }
    let prefix = format!("{ns}/{pod}:");
    let targets: Vec<Option<SocketAddr>> = {
        let forwards = forwards.lock().unwrap();
        if !forwards.keys().any(|k| k.starts_with(&prefix)) {
            return Err((404, "pod does not exist".into()));
        }
        ports
            .iter()
            .map(|p| forwards.get(&format!("{prefix}{p}")).copied())
            .collect()
    };
    // The kubelet also accepts no subprotocol (same binary framing); it
    // would take v4.base64.channel.k8s.io too, which this stand-in does not.
    let offered: Vec<&str> = header(headers, "sec-websocket-protocol")
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    let protocol = if offered.is_empty() {
        String::new()
    } else if offered.contains(&PORT_FORWARD_PROTOCOL) {
        format!("Sec-WebSocket-Protocol: {PORT_FORWARD_PROTOCOL}\r\n")
    } else {
        return Err((
            400,
            format!("none of the offered subprotocols {offered:?} is {PORT_FORWARD_PROTOCOL}"),
        ));
    };
    Ok(ForwardRequest {
        ns,
        pod,
        key,
        ports,
        targets,
        protocol,
    })
}

/// Bytes from the `i`-th port's target (`None`: it closed).
type FromTarget = (usize, Option<Vec<u8>>);

/// Dials every port now, as the runtime does when the kubelet hands it
/// the stream: each connection, or `None` when the port could not be
/// dialled (its error channel says why). Bytes from the targets come back
/// through one channel.
fn dial(
    ws: &mut WebSocket<Tls>,
    req: &ForwardRequest<'_>,
) -> Result<(Vec<Option<TcpStream>>, mpsc::Receiver<FromTarget>)> {
    let (ns, pod) = (req.ns, req.pod);
    let (tx, rx) = mpsc::channel::<FromTarget>();
    let mut conns: Vec<Option<TcpStream>> = Vec::with_capacity(req.ports.len());
    for (i, (port, target)) in req.ports.iter().zip(&req.targets).enumerate() {
        let dialled = match target {
            None => Err(format!(
                "no forward for {ns}/{pod}:{port} in the stand-in kubelet"
            )),
            Some(addr) => TcpStream::connect_timeout(addr, Duration::from_secs(5))
                .map_err(|e| format!("dial {addr}: {e}")),
        };
        match dialled.and_then(|c| c.try_clone().map(|r| (c, r)).map_err(|e| e.to_string())) {
            Ok((conn, mut from)) => {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 32 * 1024];
                    loop {
                        match from.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if tx.send((i, Some(buf[..n].to_vec()))).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                    let _ = tx.send((i, None));
                });
                conns.push(Some(conn));
            }
            Err(why) => {
                // The kubelet's wording, with the runtime's reason.
                let msg = format!(
                    "error forwarding port {port} to pod {ns}/{pod}: failed to connect to localhost:{port} inside the pod's network namespace: {why}"
                );
                let mut frame = vec![(2 * i + 1) as u8];
                frame.extend_from_slice(msg.as_bytes());
                ws.send(Message::binary(frame))?;
                conns.push(None);
            }
        }
    }
    Ok((conns, rx))
}

/// Relays between the WebSocket and the targets until both sides are
/// done: the outer error is a frame that could not be sent (the
/// connection is dropped as it is), the inner result how the relay ended
/// (the targets are then closed, and the TLS session).
fn relay(
    ws: &mut WebSocket<Tls>,
    conns: &mut [Option<TcpStream>],
    rx: &mpsc::Receiver<FromTarget>,
) -> Result<Result<()>> {
    let mut closing: Option<Instant> = None;
    let result = loop {
        if closing.is_none() {
            while let Ok((i, bytes)) = rx.try_recv() {
                match bytes {
                    Some(b) => {
                        let mut frame = Vec::with_capacity(b.len() + 1);
                        frame.push((2 * i) as u8);
                        frame.extend_from_slice(&b);
                        ws.send(Message::binary(frame))?;
                    }
                    None => {
                        if let Some(c) = conns[i].take() {
                            let _ = c.shutdown(Shutdown::Both);
                        }
                    }
                }
            }
            // When every port is done, so is the connection.
            if conns.iter().all(Option::is_none) {
                closing = Some(Instant::now());
                ws.close(None)?;
            }
        } else if closing.is_some_and(|t| t.elapsed() > Duration::from_secs(5)) {
            break Ok(());
        }
        match ws.read() {
            Ok(Message::Binary(b)) => {
                let Some((&ch, payload)) = b.split_first() else {
                    continue;
                };
                let ch = ch as usize;
                if ch.is_multiple_of(2) && !payload.is_empty() {
                    if let Some(Some(c)) = conns.get_mut(ch / 2) {
                        if c.write_all(payload).is_err() {
                            let _ = c.shutdown(Shutdown::Both);
                            conns[ch / 2] = None;
                        }
                    }
                }
            }
            Ok(Message::Close(_)) => {
                // The client is done: so are the targets. Tungstenite
                // answers the close; the next read ends the connection.
                for c in conns.iter_mut().filter_map(Option::take) {
                    let _ = c.shutdown(Shutdown::Both);
                }
                closing.get_or_insert_with(Instant::now);
            }
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                break Ok(())
            }
            Err(e) => break Err(e.into()),
        }
    };
    Ok(result)
}
