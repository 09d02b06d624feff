//! `kubectl meshscope apply --watch` as a child process, for the tests
//! that drive it: its events (`-o json`, one object per stdout line) as
//! they arrive, and its stderr, kept for failure messages.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cluster::plugin_binary;

pub struct Watcher {
    pub child: Child,
    events: mpsc::Receiver<Value>,
    /// Every event read so far, in order.
    pub seen: Vec<Value>,
    stderr: Arc<Mutex<String>>,
}

impl Watcher {
    /// `kubectl-meshscope apply --watch ARGS -o json --kubeconfig KUBECONFIG`.
    pub fn start(kubeconfig: &Path, args: &[&str]) -> Watcher {
        let mut child = Command::new(plugin_binary())
            .args(["apply", "--watch"])
            .args(args)
            .args(["-o", "json", "--kubeconfig"])
            .arg(kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl-meshscope starts");
        let (tx, events) = mpsc::channel();
        let out = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("an event is one JSON object per line ({e}): {line}")
                });
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (err, sink) = (child.stderr.take().expect("piped stderr"), stderr.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                sink.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Watcher {
            child,
            events,
            seen: Vec::new(),
            stderr,
        }
    }

    /// What it printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The next event within `timeout`, if one comes.
    pub fn next(&mut self, timeout: Duration) -> Option<Value> {
        let e = self.events.recv_timeout(timeout).ok()?;
        self.seen.push(e.clone());
        Some(e)
    }

    /// The first event from now that `want` accepts, within `limit`;
    /// panics with every event and the stderr otherwise.
    pub fn until(&mut self, what: &str, limit: Duration, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            match self.next(deadline.saturating_duration_since(Instant::now())) {
                Some(e) if want(&e) => return e,
                Some(_) => {}
                None => panic!(
                    "no {what} event within {limit:?}; events: {:#?}\nstderr:\n{}",
                    self.seen,
                    self.stderr()
                ),
            }
        }
    }

    /// Every event that arrives within `d`.
    pub fn during(&mut self, d: Duration) -> Vec<Value> {
        let deadline = Instant::now() + d;
        let mut out = Vec::new();
        while let Some(e) = self.next(deadline.saturating_duration_since(Instant::now())) {
            out.push(e);
        }
        out
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        let st = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(st.success(), "kill -TERM {}", self.child.id());
    }

    /// Sends SIGTERM and waits (20 s at most) for the exit; the events
    /// printed meanwhile are in [`Watcher::seen`] after [`Watcher::during`].
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.sigterm();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait().ok().flatten() {
                return Some(st);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The exit status, if it has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
