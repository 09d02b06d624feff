//! A VirtualService change on one Service, held to the proxies of the
//! workloads that call it.

use std::collections::BTreeSet;

use meshscope_e2e::xdsbench::PushResult;
use serde::Serialize;

/// A VirtualService change on one Service: to whom it was pushed, before
/// and after, against the proxies of the workloads that call it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Probe {
    /// `hub` or `leaf`.
    pub role: String,
    pub host: String,
    pub callers: Vec<String>,
    pub before: PushResult,
    pub after: PushResult,
    /// Pushed after the apply although not a caller.
    pub after_outside: Vec<String>,
    /// Callers the change did not reach after the apply.
    pub after_missed: Vec<String>,
}

impl Probe {
    pub fn new(role: &str, host: String, callers: Vec<String>) -> Self {
        Probe {
            role: role.into(),
            host,
            callers,
            ..Probe::default()
        }
    }

    /// Compares the proxies pushed after the apply with the callers' (both
    /// are keys of connected proxies: every injected pod is simulated).
    pub fn finish(&mut self) {
        let callers: BTreeSet<&String> = self.callers.iter().collect();
        let pushed: BTreeSet<&String> = self.after.names.iter().collect();
        self.after_outside = pushed.difference(&callers).map(|n| (*n).clone()).collect();
        self.after_missed = callers.difference(&pushed).map(|n| (*n).clone()).collect();
    }

    /// The target: after the apply the change reaches exactly its callers'
    /// proxies (every one, and no other), fewer than before.
    pub fn row(&self, k: &str) -> [String; 5] {
        let ok = self.after_missed.is_empty()
            && self.after_outside.is_empty()
            && self.after.fanout < self.before.fanout;
        [
            k.to_string(),
            format!(
                "{} change ({}) pushed to, before / after",
                self.role, self.host
            ),
            format!(
                "{} / {}; callers missed: {}; pushed outside: {}",
                self.before.fanout,
                self.after.fanout,
                some(&self.after_missed),
                some(&self.after_outside)
            ),
            format!(
                "after = its callers' {} proxies (each reached, no other), fewer than before",
                self.callers.len()
            ),
            if ok { "yes" } else { "no" }.to_string(),
        ]
    }
}

/// `none`, the names, or how many and the first five.
pub fn some(names: &[String]) -> String {
    match names.len() {
        0 => "none".to_string(),
        n if n <= 5 => names.join(", "),
        n => format!("{n}: {}, ...", names[..5].join(", ")),
    }
}
