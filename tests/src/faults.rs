//! A TCP proxy that misbehaves on demand, in front of a real component
//! (the API server, istiod's debug endpoint, Prometheus), for the tests
//! and the soak that put `apply --watch` through faults. The component
//! itself keeps running; what the client meets is one of [`Mode`]:
//!
//! - `Pass`: bytes flow both ways, as without the proxy;
//! - `Down`: new connections are accepted and closed at once, and open
//!   ones are cut (what a restarting or crashed server looks like);
//! - `Hang`: new connections are accepted and never answered, and open
//!   ones stop moving bytes (a server stuck in a GC pause, a blackholed
//!   route), until the mode changes;
//! - `Error`: each new connection is answered `HTTP/1.1 500` and closed
//!   (for HTTP components: Prometheus answering an error), open ones are
//!   cut.
//!
//! TLS passes through untouched: a client that trusts the server's
//! certificate for 127.0.0.1 trusts it through the proxy too.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    Pass = 0,
    Down = 1,
    Hang = 2,
    Error = 3,
}

impl Mode {
    fn from_u8(v: u8) -> Mode {
        match v {
            1 => Mode::Down,
            2 => Mode::Hang,
            3 => Mode::Error,
            _ => Mode::Pass,
        }
    }
}

/// How often a connection's copy loop looks at the mode.
const TICK: Duration = Duration::from_millis(100);

pub struct FaultProxy {
    /// `127.0.0.1:PORT` the clients dial.
    pub addr: String,
    mode: Arc<AtomicU8>,
    /// Bumped on every change to `Down` or `Error`: open connections
    /// opened before it are cut.
    epoch: Arc<AtomicU64>,
}

impl FaultProxy {
    /// A proxy on a free local port forwarding to `upstream` (`host:port`).
    pub fn start(upstream: &str) -> Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").context("bind a local port")?;
        let addr = listener.local_addr()?.to_string();
        let mode = Arc::new(AtomicU8::new(Mode::Pass as u8));
        let epoch = Arc::new(AtomicU64::new(0));
        let (m, e, up) = (mode.clone(), epoch.clone(), upstream.to_string());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (m, e, up) = (m.clone(), e.clone(), up.clone());
                std::thread::spawn(move || serve(conn, &up, m, e));
            }
        });
        Ok(FaultProxy { addr, mode, epoch })
    }

    pub fn set(&self, mode: Mode) {
        if matches!(mode, Mode::Down | Mode::Error) {
            self.epoch.fetch_add(1, Ordering::SeqCst);
        }
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    pub fn mode(&self) -> Mode {
        Mode::from_u8(self.mode.load(Ordering::SeqCst))
    }
}

/// The API server URL of `kubeconfig` as `host:port`.
pub fn api_server(kubeconfig: &Path) -> Result<String> {
    let text = std::fs::read_to_string(kubeconfig)?;
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .context("a server in the kubeconfig")?;
    Ok(server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string())
}

/// Writes to `out` a copy of `kubeconfig` whose server is reached through
/// `proxy` (a [`FaultProxy`] in front of that server).
pub fn kubeconfig_through(kubeconfig: &Path, proxy: &FaultProxy, out: &Path) -> Result<()> {
    let text = std::fs::read_to_string(kubeconfig)?;
    let server = format!("https://{}", api_server(kubeconfig)?);
    std::fs::write(
        out,
        text.replace(&server, &format!("https://{}", proxy.addr)),
    )?;
    Ok(())
}

fn serve(client: TcpStream, upstream: &str, mode: Arc<AtomicU8>, epoch: Arc<AtomicU64>) {
    let born = epoch.load(Ordering::SeqCst);
    let now = || Mode::from_u8(mode.load(Ordering::SeqCst));
    match now() {
        Mode::Down => return,
        Mode::Error => return answer_500(client),
        Mode::Hang => {
            // Held open, unanswered, until the mode moves on.
            while now() == Mode::Hang {
                std::thread::sleep(TICK);
            }
            return;
        }
        Mode::Pass => {}
    }
    let Ok(server) = TcpStream::connect(upstream) else {
        return;
    };
    let (c2, s2) = match (client.try_clone(), server.try_clone()) {
        (Ok(c), Ok(s)) => (c, s),
        _ => return,
    };
    let live = move || {
        let m = Mode::from_u8(mode.load(Ordering::SeqCst));
        (m, epoch.load(Ordering::SeqCst) != born)
    };
    let up = std::thread::spawn({
        let live = live.clone();
        move || pump(client, server, &live)
    });
    pump(s2, c2, &live);
    let _ = up.join();
}

/// Copies `from` to `to` while the proxy passes, pausing while it hangs,
/// until either side closes or the connection is cut.
fn pump(mut from: TcpStream, mut to: TcpStream, live: &dyn Fn() -> (Mode, bool)) {
    let _ = from.set_read_timeout(Some(TICK));
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match live() {
            (_, true) | (Mode::Down | Mode::Error, _) => break,
            (Mode::Hang, false) => {
                std::thread::sleep(TICK);
                continue;
            }
            (Mode::Pass, false) => {}
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

fn answer_500(mut client: TcpStream) {
    let _ = client.set_read_timeout(Some(Duration::from_secs(2)));
    let mut buf = [0u8; 4096];
    let _ = client.read(&mut buf);
    let body = "{\"status\":\"error\",\"errorType\":\"internal\",\"error\":\"injected by the test's fault proxy\"}";
    let _ = write!(
        client,
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    /// An echo server: each line it reads comes back.
    fn echo() -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for c in l.incoming().map_while(Result::ok) {
                std::thread::spawn(move || {
                    let mut w = c.try_clone().unwrap();
                    for line in io::BufReader::new(c).lines().map_while(Result::ok) {
                        if writeln!(w, "{line}").is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn roundtrip(c: &mut TcpStream, text: &str) -> io::Result<String> {
        writeln!(c, "{text}")?;
        let mut r = io::BufReader::new(c.try_clone()?);
        let mut line = String::new();
        r.read_line(&mut line)?;
        Ok(line.trim_end().to_string())
    }

    #[test]
    fn each_mode_does_what_it_says_and_pass_restores_the_flow() {
        let p = FaultProxy::start(&echo()).unwrap();
        let mut c = TcpStream::connect(&p.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(800)))
            .unwrap();
        assert_eq!(roundtrip(&mut c, "one").unwrap(), "one");

        p.set(Mode::Hang);
        assert!(roundtrip(&mut c, "held").is_err(), "a hung proxy answered");
        p.set(Mode::Pass);
        // What was sent while it hung arrives once it passes again.
        let mut r = io::BufReader::new(c.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert_eq!(line.trim_end(), "held");

        p.set(Mode::Down);
        let _ = writeln!(c, "cut");
        let mut rest = String::new();
        assert!(matches!(r.read_line(&mut rest), Ok(0) | Err(_)), "{rest}");
        let mut fresh = TcpStream::connect(&p.addr).unwrap();
        fresh
            .set_read_timeout(Some(Duration::from_millis(800)))
            .unwrap();
        let got = roundtrip(&mut fresh, "refused");
        assert!(!matches!(&got, Ok(l) if l == "refused"), "{got:?}");

        p.set(Mode::Error);
        let mut h = TcpStream::connect(&p.addr).unwrap();
        write!(h, "GET /api/v1/query HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut answer = String::new();
        h.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 500 "), "{answer}");

        p.set(Mode::Pass);
        let mut again = TcpStream::connect(&p.addr).unwrap();
        again
            .set_read_timeout(Some(Duration::from_millis(800)))
            .unwrap();
        assert_eq!(roundtrip(&mut again, "back").unwrap(), "back");
    }
}
