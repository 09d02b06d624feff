//! A fake Kubernetes API server that knows one resource, Istio's Sidecar
//! (`networking.istio.io/v1`), in memory, over plain HTTP/1.1 on
//! loopback; and a kubeconfig that points at it.
//!
//! A mock, and said so: the plugin's write layer (`plugin/src/sidecars`)
//! is unit-tested against it, as kube-rs's controller-rs tests its
//! reconciler against a mocked API, to check what the layer sends in each
//! case (a conflict, another owner, a two-step write, a prune) and in what
//! order. The same writes run against a real kube-apiserver in the
//! end-to-end tests (`tests/tests/e2e`). What it does of server-side
//! apply is only what those cases need: a conflict is answered 409 unless
//! the apply forces it; otherwise the applied object replaces the stored
//! one (metadata kept), and a server dry run stores nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

const PREFIX: &str = "/apis/networking.istio.io/v1";

/// One request the fake answered.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query, decoded (`fieldManager=…&force=true`).
    pub query: String,
    pub body: Option<Value>,
}

#[derive(Default)]
struct State {
    /// Sidecars by (namespace, name).
    objects: BTreeMap<(String, String), Value>,
    /// Sidecars whose apply conflicts with another field manager.
    conflicts: BTreeSet<(String, String)>,
    seen: Vec<Seen>,
    version: u64,
}

/// The fake API server; it serves until the test process ends.
pub struct FakeApi {
    pub url: String,
    state: Arc<Mutex<State>>,
}

impl FakeApi {
    pub fn start() -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let state = shared.clone();
                std::thread::spawn(move || serve(conn, &state));
            }
        });
        FakeApi { url, state }
    }

    /// Stores a Sidecar (a JSON object with namespace and name).
    pub fn put(&self, sidecar: Value) {
        let key = key_of(&sidecar);
        self.state.lock().unwrap().objects.insert(key, sidecar);
    }

    /// Applies to `ns/name` conflict with another field manager from now.
    pub fn conflict_on(&self, ns: &str, name: &str) {
        let key = (ns.to_string(), name.to_string());
        self.state.lock().unwrap().conflicts.insert(key);
    }

    pub fn object(&self, ns: &str, name: &str) -> Option<Value> {
        let key = (ns.to_string(), name.to_string());
        self.state.lock().unwrap().objects.get(&key).cloned()
    }

    /// Every request answered so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// The requests with `method` so far.
    pub fn seen_with(&self, method: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == method)
            .collect()
    }

    /// A kubeconfig in `dir` whose one context points at the fake.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"{}\"}}\nusers:\n- name: fake\n  user: {{token: fake}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: fake, namespace: default}}\ncurrent-context: fake\n",
            self.url
        );
        std::fs::write(&path, text).expect("write the kubeconfig");
        path
    }
}

fn key_of(v: &Value) -> (String, String) {
    let s = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (s("/metadata/namespace"), s("/metadata/name"))
}

/// Answers requests on one connection until the client closes it.
fn serve(conn: TcpStream, state: &Mutex<State>) {
    let mut reader = BufReader::new(conn.try_clone().expect("clone the stream"));
    let mut out = conn;
    while let Some((method, target, body)) = read_request(&mut reader) {
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let query = decode(query);
        let body: Option<Value> = serde_json::from_slice(&body).ok();
        let (code, answer) = {
            let mut st = state.lock().unwrap();
            st.seen.push(Seen {
                method: method.clone(),
                path: path.to_string(),
                query: query.clone(),
                body: body.clone(),
            });
            answer(&mut st, &method, path, &query, body)
        };
        let text = answer.to_string();
        let head = format!(
            "HTTP/1.1 {code} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            if code < 300 { "OK" } else { "Error" },
            text.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}

/// The method, target and body of the next request (`None` at EOF).
fn read_request(r: &mut BufReader<TcpStream>) -> Option<(String, String, Vec<u8>)> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut length = 0;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body).ok()?;
    Some((method, target, body))
}

/// `%2F` and `+` in a query, decoded.
fn decode(q: &str) -> String {
    let mut out = Vec::new();
    let b = q.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

/// `(namespace, name)` of a Sidecar path; `name` is empty for a list.
fn parse_path(path: &str) -> Option<(Option<String>, String)> {
    let rest = path.strip_prefix(PREFIX)?;
    if rest == "/sidecars" {
        return Some((None, String::new()));
    }
    let rest = rest.strip_prefix("/namespaces/")?;
    let (ns, rest) = rest.split_once('/')?;
    let name = rest.strip_prefix("sidecars")?.trim_start_matches('/');
    Some((Some(ns.to_string()), name.to_string()))
}

fn answer(
    st: &mut State,
    method: &str,
    path: &str,
    query: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let Some((ns, name)) = parse_path(path) else {
        return status(
            404,
            "NotFound",
            &format!("the fake serves Sidecars only, not {path}"),
        );
    };
    if name.is_empty() {
        return (200, list(st, ns.as_deref(), query));
    }
    let key = (ns.unwrap_or_default(), name);
    match method {
        "GET" => match st.objects.get(&key) {
            Some(o) => (200, o.clone()),
            None => status(
                404,
                "NotFound",
                &format!("sidecars.networking.istio.io \"{}\" not found", key.1),
            ),
        },
        "PATCH" => apply(st, key, query, body.unwrap_or(Value::Null)),
        "DELETE" => match st.objects.remove(&key) {
            Some(o) => (200, o),
            None => status(
                404,
                "NotFound",
                &format!("sidecars.networking.istio.io \"{}\" not found", key.1),
            ),
        },
        _ => status(405, "MethodNotAllowed", method),
    }
}

fn list(st: &State, ns: Option<&str>, query: &str) -> Value {
    let selector = query
        .split('&')
        .find_map(|p| p.strip_prefix("labelSelector="))
        .and_then(|s| s.split_once('='));
    let items: Vec<Value> = st
        .objects
        .iter()
        .filter(|((n, _), _)| ns.is_none_or(|want| want == n))
        .filter(|(_, o)| {
            selector.is_none_or(|(k, v)| {
                o.pointer("/metadata/labels")
                    .and_then(|l| l.get(k))
                    .and_then(Value::as_str)
                    == Some(v)
            })
        })
        .map(|(_, o)| o.clone())
        .collect();
    json!({"apiVersion": "networking.istio.io/v1", "kind": "SidecarList",
           "metadata": {"resourceVersion": st.version.to_string()}, "items": items})
}

/// Server-side apply, as far as the write layer's cases need.
fn apply(st: &mut State, key: (String, String), query: &str, mut body: Value) -> (u16, Value) {
    let force = query.split('&').any(|p| p == "force=true");
    if st.conflicts.contains(&key) && !force {
        return status(
            409,
            "Conflict",
            "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using networking.istio.io/v1: .spec.egress",
        );
    }
    st.version += 1;
    let created = !st.objects.contains_key(&key);
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("namespace".into(), json!(key.0));
        meta.insert("resourceVersion".into(), json!(st.version.to_string()));
        meta.insert("uid".into(), json!(format!("uid-{}-{}", key.0, key.1)));
    }
    if !query.split('&').any(|p| p == "dryRun=All") {
        st.objects.insert(key, body.clone());
    }
    (if created { 201 } else { 200 }, body)
}
