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
use crate::xds::{ClusterChange, Proxy};

pub struct Watcher {
    pub child: Child,
    events: mpsc::Receiver<(Instant, Value)>,
    /// Every event read so far, in order.
    pub seen: Vec<Value>,
    /// When each of [`Watcher::seen`] came off the watcher's stdout.
    pub arrived: Vec<Instant>,
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
                if tx.send((Instant::now(), v)).is_err() {
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
            arrived: Vec::new(),
            stderr,
        }
    }

    /// What it printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The next event within `timeout`, if one comes.
    pub fn next(&mut self, timeout: Duration) -> Option<Value> {
        let (at, e) = self.events.recv_timeout(timeout).ok()?;
        self.seen.push(e.clone());
        self.arrived.push(at);
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

    /// Sends SIGTERM and waits for the exit (panicking after `limit`):
    /// the `stopped` event, the exit status, and how long it took.
    pub fn terminate(&mut self, limit: Duration) -> (Value, ExitStatus, Duration) {
        let t = Instant::now();
        self.sigterm();
        let stopped = self.until("stopped", limit, |e| e["event"] == "stopped");
        loop {
            if let Some(st) = self.child.try_wait().ok().flatten() {
                return (stopped, st, t.elapsed());
            }
            assert!(t.elapsed() < limit, "still running {limit:?} after SIGTERM");
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

// ---------------------------------------------------------------------------
// Write order, as the sidecars saw it

/// What a Sidecar write did, as the watcher's event names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    Create,
    Widen,
    Narrow,
}

/// One Sidecar write the watcher reported (or one a test made in its place).
#[derive(Clone, Debug)]
pub struct WriteEvent {
    /// When the event came: after the write was confirmed, if it was.
    pub at: Instant,
    pub kind: WriteKind,
    pub namespace: String,
    pub sidecar: String,
    /// Hosts added or removed, as the event gives them (`ns/fqdn`).
    pub hosts: Vec<String>,
}

impl WriteEvent {
    /// The write a `created`, `widened` or `narrowed` event reports.
    pub fn from_event(at: Instant, e: &Value) -> Option<WriteEvent> {
        let kind = match e["event"].as_str()? {
            "created" => WriteKind::Create,
            "widened" => WriteKind::Widen,
            "narrowed" => WriteKind::Narrow,
            _ => return None,
        };
        Some(WriteEvent {
            at,
            kind,
            namespace: e["namespace"].as_str()?.to_string(),
            sidecar: e["sidecar"].as_str()?.to_string(),
            hosts: e["hosts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|h| h.as_str().map(str::to_string))
                .collect(),
        })
    }
}

/// One pass of the watcher: the writes it reported from `began` on.
#[derive(Clone, Debug)]
pub struct Pass {
    pub began: Instant,
    pub writes: Vec<WriteEvent>,
}

/// Groups the writes among `events` (which came at `arrived`) into
/// passes, one beginning at each of `starts` (ascending): a write belongs
/// to the last pass that began before its event came. Writes before the
/// first start are left out.
pub fn passes(events: &[Value], arrived: &[Instant], starts: &[Instant]) -> Vec<Pass> {
    let mut out: Vec<Pass> = starts
        .iter()
        .map(|&began| Pass {
            began,
            writes: Vec::new(),
        })
        .collect();
    for (e, &at) in events.iter().zip(arrived) {
        let Some(w) = WriteEvent::from_event(at, e) else {
            continue;
        };
        let i = starts.partition_point(|s| *s <= at);
        if i > 0 {
            out[i - 1].writes.push(w);
        }
    }
    out
}

/// What [`check_order`] found.
#[derive(Clone, Debug, Default)]
pub struct OrderReport {
    /// Passes that both widened and narrowed.
    pub both: usize,
    /// Of those, the ones where at least one widening's cluster push and
    /// one narrowing's cluster-dropping push were found, so compared.
    pub checked: usize,
    /// Widened hosts whose cluster the proxy never received, and narrowed
    /// hosts whose cluster the proxy kept (a VirtualService that imports
    /// it, say): nothing to compare.
    pub unresolved: Vec<String>,
    /// A proxy received a push dropping a narrowed host's cluster before a
    /// widened proxy of the same pass had ACKed its new cluster.
    pub violations: Vec<String>,
}

/// Whether a cluster name is one of `fqdn`'s (`outbound|port|subset|fqdn`).
fn cluster_of(cluster: &str, fqdn: &str) -> bool {
    let parts: Vec<&str> = cluster.split('|').collect();
    parts.len() == 4 && parts[0] == "outbound" && parts[3] == fqdn
}

/// `ns/fqdn` → `fqdn`; `None` for a wildcard.
fn fqdn_of(host: &str) -> Option<&str> {
    let f = host.rsplit_once('/').map_or(host, |(_, f)| f);
    (!f.contains('*')).then_some(f)
}

/// The push that gave the proxy `fqdn`'s cluster, as of `at`: the last
/// change touching it by then if that added it, else the first addition
/// after (a late one).
fn gain<'a>(changes: &'a [ClusterChange], fqdn: &str, at: Instant) -> Option<&'a ClusterChange> {
    let adds = |c: &ClusterChange| c.added.iter().any(|n| cluster_of(n, fqdn));
    let removes = |c: &ClusterChange| c.removed.iter().any(|n| cluster_of(n, fqdn));
    let last = changes
        .iter()
        .filter(|c| c.at <= at)
        .rfind(|c| adds(c) || removes(c));
    match last {
        Some(c) if adds(c) => Some(c),
        _ => changes.iter().filter(|c| c.at > at).find(|c| adds(c)),
    }
}

/// The push that dropped `fqdn`'s cluster from the proxy between `since`
/// and `at`: the last change touching it by `at`, if it removed it.
fn drop_of<'a>(
    changes: &'a [ClusterChange],
    fqdn: &str,
    since: Instant,
    at: Instant,
) -> Option<&'a ClusterChange> {
    let touches = |c: &ClusterChange| {
        c.added
            .iter()
            .chain(c.removed.iter())
            .any(|n| cluster_of(n, fqdn))
    };
    changes
        .iter()
        .filter(|c| c.at <= at)
        .rfind(|c| touches(c))
        .filter(|c| c.at >= since && c.removed.iter().any(|n| cluster_of(n, fqdn)))
}

/// meshscope's write order, checked on the pushes the simulated sidecars
/// received (not on the watcher's own claims): in every pass that both
/// widened and narrowed, no proxy received the CDS push that dropped a
/// narrowed host's cluster before every widened proxy of the pass had
/// ACKed the push that gave it its new cluster. `changes_of(namespace,
/// sidecar)` gives each proxy the Sidecar selects, by key, with its
/// [`Proxy::cluster_changes`] (which need
/// [`crate::xds::SimOptions::references`]); times in the messages are
/// from `t0`.
pub fn check_order(
    passes: &[Pass],
    changes_of: impl Fn(&str, &str) -> Vec<(String, Vec<ClusterChange>)>,
    t0: Instant,
) -> OrderReport {
    let mut r = OrderReport::default();
    let secs = |t: Instant| t.saturating_duration_since(t0).as_secs_f64();
    for pass in passes {
        let of = |k: WriteKind| pass.writes.iter().filter(move |w| w.kind == k);
        if of(WriteKind::Widen).next().is_none() || of(WriteKind::Narrow).next().is_none() {
            continue;
        }
        r.both += 1;
        // The last ACK of a widened proxy's new cluster (None: never ACKed).
        let mut ready: Option<(Option<Instant>, String)> = None;
        for w in of(WriteKind::Widen) {
            for (proxy, ch) in changes_of(&w.namespace, &w.sidecar) {
                for h in &w.hosts {
                    let Some(f) = fqdn_of(h) else { continue };
                    let Some(c) = gain(&ch, f, w.at) else {
                        r.unresolved.push(format!(
                            "widened {}/{} +{h}: {proxy} never received its cluster",
                            w.namespace, w.sidecar
                        ));
                        continue;
                    };
                    let what = format!(
                        "{proxy} ACKed the push giving it {f} (widened {}/{}, received at {:.3} s) at {}",
                        w.namespace,
                        w.sidecar,
                        secs(c.at),
                        c.acked_at.map_or("never".to_string(), |a| format!("{:.3} s", secs(a)))
                    );
                    let later = match (&ready, c.acked_at) {
                        (None, _) => true,
                        (Some((Some(a), _)), Some(b)) => b > *a,
                        (Some((Some(_), _)), None) => true,
                        (Some((None, _)), _) => false,
                    };
                    if later {
                        ready = Some((c.acked_at, what));
                    }
                }
            }
        }
        let mut drops = Vec::new();
        for n in of(WriteKind::Narrow) {
            for (proxy, ch) in changes_of(&n.namespace, &n.sidecar) {
                for h in &n.hosts {
                    let Some(f) = fqdn_of(h) else { continue };
                    match drop_of(&ch, f, pass.began, n.at) {
                        Some(c) => drops.push((proxy.clone(), f.to_string(), n, c.at)),
                        None => r.unresolved.push(format!(
                            "narrowed {}/{} -{h}: {proxy} kept its cluster",
                            n.namespace, n.sidecar
                        )),
                    }
                }
            }
        }
        let Some((ready_at, what)) = ready else {
            continue;
        };
        if drops.is_empty() {
            continue;
        }
        r.checked += 1;
        for (proxy, f, n, at) in drops {
            if ready_at.is_none_or(|a| at <= a) {
                r.violations.push(format!(
                    "pass from {:.3} s: {proxy} received the push dropping {f} (narrowed {}/{}) at {:.3} s, but {what}",
                    secs(pass.began),
                    n.namespace,
                    n.sidecar,
                    secs(at)
                ));
            }
        }
    }
    r
}

/// For [`check_order`]: the proxies among `proxies` whose labels hold
/// every label of `selector` (a Sidecar's workloadSelector), each with its
/// cluster changes.
pub fn selected_changes(
    proxies: &[Proxy],
    namespace: &str,
    selector: &serde_json::Map<String, Value>,
) -> Vec<(String, Vec<ClusterChange>)> {
    proxies
        .iter()
        .filter(|p| p.spec().namespace == namespace)
        .filter(|p| {
            selector
                .iter()
                .all(|(k, v)| v.as_str() == p.spec().labels.get(k).map(String::as_str))
        })
        .map(|p| (p.key().to_string(), p.cluster_changes()))
        .collect()
}

// ---------------------------------------------------------------------------
// Pass boundaries

/// When a file was read: each close of a read-only open of it (inotify's
/// `IN_CLOSE_NOWRITE`), timed by a thread that waits for them. `apply
/// --watch --access-log FILE` opens FILE once a pass to tail it, after it
/// has listed the cluster and before it writes, and the test that appends
/// to FILE never opens it to read: each read begins a pass.
pub struct FileReads {
    at: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FileReads {
    pub fn watch(path: &Path) -> std::io::Result<FileReads> {
        use std::os::unix::ffi::OsStrExt;
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        if unsafe { libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_CLOSE_NOWRITE) } < 0 {
            let e = std::io::Error::last_os_error();
            unsafe { libc::close(fd) };
            return Err(e);
        }
        let at: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let stop: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let (sink, halt) = (at.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let header = std::mem::size_of::<libc::inotify_event>();
            while !halt.load(std::sync::atomic::Ordering::SeqCst) {
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
                    continue;
                }
                let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                let now = Instant::now();
                if n <= 0 {
                    continue;
                }
                let mut off = 0usize;
                while off + header <= n as usize {
                    // SAFETY: the kernel wrote whole events; read_unaligned
                    // as the buffer has no alignment.
                    let ev: libc::inotify_event =
                        unsafe { std::ptr::read_unaligned(buf.as_ptr().add(off).cast()) };
                    if ev.mask & libc::IN_CLOSE_NOWRITE != 0 {
                        sink.lock().unwrap().push(now);
                    }
                    off += header + ev.len as usize;
                }
            }
            unsafe { libc::close(fd) };
        });
        Ok(FileReads {
            at,
            stop,
            thread: Some(thread),
        })
    }

    /// The reads so far, oldest first.
    pub fn times(&self) -> Vec<Instant> {
        self.at.lock().unwrap().clone()
    }
}

impl Drop for FileReads {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn change(
        t0: Instant,
        at_ms: u64,
        ack_ms: u64,
        added: &[&str],
        removed: &[&str],
    ) -> ClusterChange {
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        ClusterChange {
            at: t0 + Duration::from_millis(at_ms),
            acked_at: Some(t0 + Duration::from_millis(ack_ms)),
            nonce: format!("n{at_ms}"),
            added: set(added),
            removed: set(removed),
        }
    }

    fn write(t0: Instant, at_ms: u64, kind: WriteKind, sc: &str, host: &str) -> WriteEvent {
        WriteEvent {
            at: t0 + Duration::from_millis(at_ms),
            kind,
            namespace: "ns".into(),
            sidecar: sc.into(),
            hosts: vec![format!("ns/{host}")],
        }
    }

    /// Proxy `a` gains b.ns at 100 ms (ACKed 110), proxy `c` loses d.ns at
    /// `drop_ms`; a pass from 0 widened a and narrowed c.
    fn check(drop_ms: u64) -> OrderReport {
        let t0 = Instant::now();
        let a = vec![change(t0, 100, 110, &["outbound|80||b.ns"], &[])];
        let c = vec![
            change(t0, 0, 1, &["outbound|80||d.ns"], &[]),
            change(t0, drop_ms, drop_ms + 5, &[], &["outbound|80||d.ns"]),
        ];
        let pass = Pass {
            began: t0 + Duration::from_millis(50),
            writes: vec![
                write(t0, 150, WriteKind::Widen, "a", "b.ns"),
                write(t0, 400, WriteKind::Narrow, "c", "d.ns"),
            ],
        };
        check_order(
            &[pass],
            |_, sc| match sc {
                "a" => vec![("ns/a".into(), a.clone())],
                _ => vec![("ns/c".into(), c.clone())],
            },
            t0,
        )
    }

    #[test]
    fn a_narrowing_after_the_widenings_ack_is_in_order() {
        let r = check(300);
        assert_eq!((r.both, r.checked), (1, 1), "{r:?}");
        assert!(r.violations.is_empty(), "{r:?}");
    }

    #[test]
    fn a_narrowing_pushed_before_the_widenings_ack_is_caught() {
        let r = check(105);
        assert_eq!(r.checked, 1, "{r:?}");
        assert_eq!(r.violations.len(), 1, "{r:?}");
        assert!(
            r.violations[0].contains("ns/c received the push dropping d.ns"),
            "{r:?}"
        );
    }

    #[test]
    fn writes_fall_into_the_pass_they_came_in() {
        let t0 = Instant::now();
        let ms = |m| t0 + Duration::from_millis(m);
        let ev = |e: &str| serde_json::json!({"event": e, "namespace": "ns", "sidecar": "s", "hosts": ["ns/h"]});
        let events = [
            ev("widened"),
            ev("narrowed"),
            ev("not-confirmed"),
            ev("narrowed"),
            ev("widened"),
        ];
        let arrived = [ms(5), ms(20), ms(21), ms(30), ms(40)];
        let p = passes(&events, &arrived, &[ms(10), ms(25)]);
        let kinds: Vec<Vec<WriteKind>> = p
            .iter()
            .map(|p| p.writes.iter().map(|w| w.kind).collect())
            .collect();
        assert_eq!(
            kinds,
            [
                vec![WriteKind::Narrow],
                vec![WriteKind::Narrow, WriteKind::Widen]
            ]
        );
    }
}
