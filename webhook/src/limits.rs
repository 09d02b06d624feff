//! Limits of the HTTPS server, and the bookkeeping that enforces the
//! connection cap and the idle timeout.
//!
//! ```text
//!  accept ─► cap (semaphore) ─► handshake ─► HTTP/1.1 or HTTP/2 ─► request ─► body ─► decision
//!            │ full: close the     ≤ handshake   ≤ header read       ≤ body read
//!            │ longest-idle one,   timeout       timeout (HTTP/1.1)  timeout, ≤ max body
//!            │ else refuse                        ≤ idle timeout with no request in flight
//! ```
//!
//! Every open connection has an [`Activity`]: how many of its requests are
//! in flight and when the last one ended. A connection with none in flight
//! (handshaking, idle between requests, or trickling a request head) is
//! "idle"; only idle connections are closed by the idle timeout or to make
//! room under the cap, so a request that has reached the handler always
//! gets its answer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The API server caps objects at 3 MiB (etcd's limit is 1.5 MiB); an
/// AdmissionReview of an UPDATE carries two.
pub const DEFAULT_MAX_BODY_BYTES: usize = 7 * 1024 * 1024;

/// What a client may cost the server. The defaults are the flags' defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Open HTTPS connections, handshaking ones included.
    pub max_connections: usize,
    pub handshake_timeout: Duration,
    /// HTTP/1.1: from the connection's start, or the end of the previous
    /// response, until the request head is complete.
    pub header_read_timeout: Duration,
    /// From the handler's start until the body is read in full.
    pub body_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    pub idle_timeout: Duration,
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1000,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

/// One connection's requests in flight and the time it last went idle.
pub struct Activity {
    epoch: Instant,
    in_flight: AtomicUsize,
    /// Microseconds since `epoch` at which the last request ended (or the
    /// connection was accepted).
    idle_since_us: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            epoch: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since_us: AtomicU64::new(0),
        }
    }

    /// Marks a request in flight until the guard is dropped.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// `None` while a request is in flight, else since when it has been idle.
    pub fn idle_since(&self) -> Option<Instant> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        Some(self.epoch + Duration::from_micros(self.idle_since_us.load(Ordering::SeqCst)))
    }
}

/// A request in flight on a connection.
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let a = &self.0;
        let now = a.epoch.elapsed().as_micros() as u64;
        a.idle_since_us.store(now, Ordering::SeqCst);
        a.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Entry {
    activity: Arc<Activity>,
    close: Arc<Notify>,
}

/// The open connections, for the cap's choice of which idle one to close.
#[derive(Default)]
pub struct Connections {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Entry>>,
}

/// A registered connection; unregisters itself on drop.
pub struct Registration {
    id: u64,
    pub activity: Arc<Activity>,
    /// Notified when the cap wants this connection closed.
    pub close: Arc<Notify>,
    connections: Arc<Connections>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.connections.open).remove(&self.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Connections {
    pub fn register(self: &Arc<Self>) -> Registration {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity::new());
        let close = Arc::new(Notify::new());
        lock(&self.open).insert(
            id,
            Entry {
                activity: activity.clone(),
                close: close.clone(),
            },
        );
        Registration {
            id,
            activity,
            close,
            connections: self.clone(),
        }
    }

    pub fn len(&self) -> usize {
        lock(&self.open).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Asks the connection that has been idle the longest to close;
    /// `false` when every connection has a request in flight.
    ///
    /// The connection leaves the registry at once, so that the next call
    /// picks another one even before this one's task has run.
    pub fn close_longest_idle(&self) -> bool {
        let mut open = lock(&self.open);
        let oldest = open
            .iter()
            .filter_map(|(id, e)| e.activity.idle_since().map(|t| (t, *id)))
            .min_by_key(|(t, _)| *t);
        match oldest.and_then(|(_, id)| open.remove(&id)) {
            Some(e) => {
                // notify_one keeps the permit if the task is not waiting yet.
                e.close.notify_one();
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_idle_connection_is_the_one_closed_and_busy_ones_never() {
        let c = Arc::new(Connections::default());
        let busy = c.register();
        let _req = busy.activity.begin();
        assert!(!c.close_longest_idle(), "a busy connection is not idle");
        std::thread::sleep(Duration::from_millis(2));
        let old = c.register();
        std::thread::sleep(Duration::from_millis(2));
        let new = c.register();
        // A request that ended makes `new` idle since later than `old`.
        drop(new.activity.begin());
        assert!(c.close_longest_idle());
        let closed = |r: &Registration| {
            let n = r.close.clone();
            let f = n.notified();
            futures::pin_mut!(f);
            futures::FutureExt::now_or_never(f).is_some()
        };
        assert!(closed(&old));
        assert!(!closed(&new));
        assert!(!closed(&busy));
        assert_eq!(c.len(), 2, "the closed one is no candidate any more");
        assert!(c.close_longest_idle());
        assert!(closed(&new));
        assert!(!c.close_longest_idle(), "only the busy one is left");
        drop(old);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn a_connection_is_idle_only_without_requests_in_flight() {
        let c = Arc::new(Connections::default());
        let r = c.register();
        assert!(r.activity.idle_since().is_some());
        let a = r.activity.begin();
        let b = r.activity.begin();
        drop(a);
        assert!(r.activity.idle_since().is_none());
        drop(b);
        assert!(r.activity.idle_since().unwrap() <= Instant::now());
    }
}
