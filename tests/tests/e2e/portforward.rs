//! Port-forward through the real kube-apiserver: kube's client
//! (`Api::<Pod>::portforward`, WebSocket subprotocol `v4.channel.k8s.io`)
//! reaches a server on this machine through the API server and the stand-in
//! kubelet of the pod's Node (`meshscope_e2e::kubelet`).

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::kubelet::{Forwards, StandInKubelet};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::time::timeout;

const NS: &str = "pf-test";
const POD: &str = "target-0";
const PORT: u16 = 15014;
/// A port of the pod with no forward registered.
const UNREGISTERED: u16 = 15000;
/// A port whose forward points at an address nobody listens on.
const DEAD: u16 = 15015;
const T: Duration = Duration::from_secs(30);

/// A tiny HTTP/1.1 server on loopback: answers every request with a body
/// naming its path, keeps the connection unless asked to close it, and
/// reports what happened on each connection.
fn http_server() -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut out = conn.try_clone().unwrap();
                let mut reader = BufReader::new(conn);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        let _ = tx.send("eof".to_string());
                        return;
                    }
                    let path = line.split(' ').nth(1).unwrap_or("").to_string();
                    let mut close = false;
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                        close |= h.eq_ignore_ascii_case("connection: close\r\n");
                    }
                    let body = format!("hello from the local server: {path}");
                    let _ = write!(
                        out,
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n{body}",
                        body.len(),
                        if close { "Connection: close\r\n" } else { "" }
                    );
                    let _ = tx.send(format!("served {path}"));
                    if close {
                        let _ = out.shutdown(Shutdown::Both);
                        let _ = tx.send("closed".to_string());
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

/// Reads one HTTP response with a Content-Length.
async fn read_response(s: &mut (impl AsyncRead + Unpin)) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .expect("Content-Length")
                .parse()
                .unwrap();
            if body.len() >= len {
                return text;
            }
        }
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "the stream ended mid-response: {text:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// Removes the test's objects. The pod is bound to a node with no real
/// kubelet to confirm its deletion, so it goes with grace period 0.
fn clean(c: &Cluster, node: Option<&str>) -> bool {
    c.force_delete_pod(NS, POD);
    let ns = c.kubectl(
        &[
            "delete",
            "namespace",
            NS,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=90s",
        ],
        None,
    );
    if let Some(node) = node {
        let _ = c.kubectl(&["delete", "node", node, "--ignore-not-found"], None);
    }
    ns.status.success()
}

struct Cleanup<'a> {
    c: &'a Cluster,
    node: Option<String>,
    done: bool,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if !self.done {
            clean(self.c, self.node.as_deref());
        }
    }
}

#[test]
fn kube_port_forward_reaches_a_local_server_through_the_api_server_and_the_stand_in_kubelet() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    // A namespace left over by an interrupted run.
    clean(c, None);
    let mut cleanup = Cleanup {
        c,
        node: None,
        done: false,
    };

    let (addr, mut events) = http_server();
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut forwards = Forwards::new();
    forwards.insert(format!("{NS}/{POD}:{PORT}"), addr);
    forwards.insert(format!("{NS}/{POD}:{DEAD}"), dead);
    let kubelet = StandInKubelet::start_with(Default::default(), forwards).unwrap();

    c.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {POD}\n  namespace: {NS}\nspec:\n  containers:\n  - name: app\n    image: x\n"
    ));
    let node = c.stand_in_node("pf-node", kubelet.port).unwrap();
    cleanup.node = Some(node.clone());
    // All the API server needs to find the kubelet is the binding
    // (spec.nodeName): it does not look at the pod's phase or IP.
    c.bind_pod(NS, POD, &node).unwrap();

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let kubeconfig = Kubeconfig::read_from(&c.kubeconfig).unwrap();
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(Client::try_from(config).unwrap(), NS);
        let open = |ports: &'static [u16]| {
            let pods = pods.clone();
            async move {
                timeout(T, pods.portforward(POD, ports))
                    .await
                    .expect("port-forward opens in time")
                    .unwrap_or_else(|e| panic!("port-forward {ports:?}: {e}"))
            }
        };

        // The server closes: the client's stream ends.
        let mut pf = open(&[PORT]).await;
        let mut s = pf.take_stream(PORT).unwrap();
        let error = pf.take_error(PORT).unwrap();
        s.write_all(b"GET /first HTTP/1.1\r\nHost: target-0\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        timeout(T, s.read_to_end(&mut got))
            .await
            .expect("the server's close ends the stream")
            .unwrap();
        let got = String::from_utf8(got).unwrap();
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got:?}");
        assert!(
            got.ends_with("\r\n\r\nhello from the local server: /first"),
            "{got:?}"
        );
        drop(s);
        let _ = timeout(T, pf.join()).await.expect("the forward ends");
        assert_eq!(timeout(T, error).await.unwrap(), None, "no error");
        assert_eq!(events.recv().await.unwrap(), "served /first");
        assert_eq!(events.recv().await.unwrap(), "closed");

        // The client closes: the server's connection ends.
        let mut pf = open(&[PORT]).await;
        let mut s = pf.take_stream(PORT).unwrap();
        s.write_all(b"GET /second HTTP/1.1\r\nHost: target-0\r\n\r\n")
            .await
            .unwrap();
        let got = timeout(T, read_response(&mut s)).await.expect("an answer");
        assert!(
            got.ends_with("\r\n\r\nhello from the local server: /second"),
            "{got:?}"
        );
        drop(s);
        timeout(T, pf.join())
            .await
            .expect("the forward ends")
            .expect("it ends cleanly");
        assert_eq!(events.recv().await.unwrap(), "served /second");
        let eof = timeout(T, events.recv())
            .await
            .expect("the server sees the end");
        assert_eq!(eof.unwrap(), "eof");

        // A port with no forward: its error comes on its error channel, and
        // the connection ends.
        let mut pf = open(&[UNREGISTERED]).await;
        let error = pf.take_error(UNREGISTERED).unwrap();
        let mut s = pf.take_stream(UNREGISTERED).unwrap();
        let msg = timeout(T, error)
            .await
            .expect("the error comes, no hang")
            .expect("an error message");
        assert!(
            msg.starts_with(&format!(
                "error forwarding port {UNREGISTERED} to pod {NS}/{POD}: "
            )),
            "{msg}"
        );
        let mut rest = Vec::new();
        timeout(T, s.read_to_end(&mut rest))
            .await
            .expect("the stream ends, no hang")
            .unwrap();
        assert!(rest.is_empty());
        drop(s);
        let _ = timeout(T, pf.join()).await.expect("the forward ends");

        // Two ports on one connection: one works, the other's target
        // cannot be dialled; each gets its own channels.
        let mut pf = open(&[DEAD, PORT]).await;
        let dead_error = pf.take_error(DEAD).unwrap();
        let mut s = pf.take_stream(PORT).unwrap();
        let msg = timeout(T, dead_error)
            .await
            .expect("the error comes, no hang")
            .expect("an error message");
        assert!(
            msg.starts_with(&format!("error forwarding port {DEAD} to pod {NS}/{POD}: "))
                && msg.contains(&format!("dial {dead}")),
            "{msg}"
        );
        s.write_all(b"GET /third HTTP/1.1\r\nHost: target-0\r\n\r\n")
            .await
            .unwrap();
        let got = timeout(T, read_response(&mut s)).await.expect("an answer");
        assert!(
            got.ends_with("\r\n\r\nhello from the local server: /third"),
            "{got:?}"
        );
        drop(s);
        timeout(T, pf.join())
            .await
            .expect("the forward ends")
            .expect("it ends cleanly");
        assert_eq!(events.recv().await.unwrap(), "served /third");
    });

    // What the API server asked the kubelet.
    let asked = kubelet.requests();
    let path = |ports: &str| format!("/portForward/{NS}/{POD}?port={ports}");
    assert_eq!(
        asked,
        vec![
            path(&PORT.to_string()),
            path(&PORT.to_string()),
            path(&UNREGISTERED.to_string()),
            path(&format!("{DEAD}%2C{PORT}")),
        ],
    );

    cleanup.done = true;
    assert!(clean(c, Some(&node)), "the namespace is deleted");
}
