//! Ctrl-C (SIGINT) and SIGTERM while a command writes to the cluster.
//!
//! The first signal asks the command to start no more writes and to finish
//! those in flight, so that it can say what it wrote and what it did not;
//! the second ends the process as the signal normally would. Outside the
//! writing part of a command the signals keep their default action.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::SigId;

const SIGNALS: [i32; 2] = [SIGINT, SIGTERM];

/// The handlers that give the signals their default action back once a
/// command's writes are over (signal handlers, once installed, cannot be
/// uninstalled: these emulate the default). Taken out while an
/// [`Interrupt`] is installed, since handlers run in the order installed.
static RESTORERS: Mutex<Vec<SigId>> = Mutex::new(Vec::new());

/// Whether SIGINT or SIGTERM arrived since [`Interrupt::install`], and
/// how many writes to the cluster are in flight.
pub struct Interrupt {
    flag: Arc<AtomicBool>,
    in_flight: Arc<AtomicUsize>,
    ids: Vec<SigId>,
}

/// A write to the cluster in flight, from [`Interrupt::writing`] until
/// dropped: what a bounded stop ([`StopHandle`]) waits for.
pub struct Writing {
    in_flight: Arc<AtomicUsize>,
}

impl Drop for Writing {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What another thread sees of an [`Interrupt`]: whether a signal came,
/// and whether a write is in flight.
#[derive(Clone)]
pub struct StopHandle {
    flag: Arc<AtomicBool>,
    in_flight: Arc<AtomicUsize>,
}

impl StopHandle {
    pub fn requested(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    pub fn writing(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) > 0
    }
}

impl Interrupt {
    pub fn install() -> Interrupt {
        let mut restorers = RESTORERS.lock().unwrap_or_else(|e| e.into_inner());
        for id in restorers.drain(..) {
            signal_hook::low_level::unregister(id);
        }
        let flag = Arc::new(AtomicBool::new(false));
        let mut ids = Vec::new();
        for sig in SIGNALS {
            // In this order: a second signal finds the flag set by the
            // first and takes the default action.
            ids.extend(signal_hook::flag::register_conditional_default(sig, flag.clone()).ok());
            ids.extend(signal_hook::flag::register(sig, flag.clone()).ok());
        }
        Interrupt {
            flag,
            in_flight: Arc::new(AtomicUsize::new(0)),
            ids,
        }
    }

    pub fn requested(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Marks writes to the cluster in flight until the guard is dropped.
    pub fn writing(&self) -> Writing {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Writing {
            in_flight: self.in_flight.clone(),
        }
    }

    /// For a thread that bounds how long a stop takes.
    pub fn handle(&self) -> StopHandle {
        StopHandle {
            flag: self.flag.clone(),
            in_flight: self.in_flight.clone(),
        }
    }

    /// Resolves once a signal has arrived.
    pub async fn wait(&self) {
        while !self.requested() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        let mut restorers = RESTORERS.lock().unwrap_or_else(|e| e.into_inner());
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
        let always = Arc::new(AtomicBool::new(true));
        for sig in SIGNALS {
            restorers
                .extend(signal_hook::flag::register_conditional_default(sig, always.clone()).ok());
        }
    }
}
