//! What the soak knows and counts of the edges, the Sidecars and the
//! replicas' writes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::settings::{host, DESTS, PRUNE_AFTER, REMEMBERED, UNSEEN};

/// One client → destination edge, as the soak drives and sees it.
#[derive(Default)]
pub struct Edge {
    pub active: bool,
    pub first_call: Option<Instant>,
    pub last_call: Option<Instant>,
    /// Its calls of the last [`REMEMBERED`], oldest first.
    pub calls: Vec<Instant>,
    /// Its host is in the client's Sidecar, as last polled.
    pub present: bool,
    pub ever_present: bool,
    /// How often a poll saw its host leave the Sidecar.
    pub left: usize,
    /// `left` when a replica last reported widening with it.
    pub widened_at_left: Option<usize>,
}

/// What the soak knows and counts, apart from the components: the edges,
/// the Sidecars as polled, the replicas' events; no I/O, so that each
/// count is tested on its own (tests.rs).
#[derive(Default)]
pub struct Book {
    pub ns: String,
    pub edges: BTreeMap<(usize, usize), Edge>,
    /// A managed Sidecar's name → its client, as polled.
    pub sidecar_client: BTreeMap<String, usize>,
    pub lost: Vec<String>,
    pub wrong_narrowings: Vec<String>,
    /// Hosts narrowed as their edge was called again after over
    /// `--prune-after` of silence, too late for the narrowing pass to
    /// read: not a target (no watcher can know a call made after its
    /// read), reported.
    pub resumed: Vec<String>,
    /// Per client, its Sidecar's last writes as the replicas reported
    /// them, to say with a wrong narrowing.
    pub recent: BTreeMap<usize, Vec<String>>,
    pub double_writes: Vec<String>,
    pub missed_narrowings: Vec<String>,
    pub writes: usize,
    /// Hosts added to and removed from Sidecars, by the replicas' events.
    pub widened: usize,
    pub narrowed: usize,
}

impl Book {
    /// Client `c` called destination `d` at `at`.
    pub fn called(&mut self, c: usize, d: usize, at: Instant) {
        let e = self.edges.entry((c, d)).or_default();
        e.first_call.get_or_insert(at);
        e.last_call = Some(at);
        e.calls
            .retain(|t| at.saturating_duration_since(*t) < REMEMBERED);
        e.calls.push(at);
    }

    /// A poll of the Sidecars at `now`: `held` is each client's hosts.
    /// A host that left less than `--prune-after` after a call the
    /// narrowing pass could have read (one made over [`UNSEEN`] before the
    /// poll) is a wrong narrowing: an edge called every 3 s all along has
    /// such calls. Returns the wrong narrowings it found.
    pub fn polled(&mut self, held: &BTreeMap<usize, BTreeSet<usize>>, now: Instant) -> Vec<String> {
        let mut found = Vec::new();
        for ((c, d), e) in self.edges.iter_mut() {
            let present = held.get(c).is_some_and(|h| h.contains(d));
            if e.present && !present {
                e.left += 1;
                let ago = |t: &Instant| now.saturating_duration_since(*t);
                let readable = e.calls.iter().rev().map(ago).find(|a| *a >= UNSEEN);
                let early = readable.is_some_and(|a| a + Duration::from_secs(1) < PRUNE_AFTER);
                let last = e.calls.last().map(ago);
                let writes = self.recent.get(c).map(|w| w.join("; ")).unwrap_or_default();
                if early {
                    found.push(format!(
                        "client-{c} lost dst-{d} {readable:?} after the last call its narrowing pass could have read (last call {last:?} ago, still called: {}; the Sidecar's last writes: {writes})",
                        e.active
                    ));
                } else if last.is_some_and(|a| a < UNSEEN) {
                    self.resumed.push(format!(
                        "client-{c} lost dst-{d} as it called it again {last:?} before, after over --prune-after without calls"
                    ));
                }
            }
            e.present = present;
            e.ever_present |= present;
        }
        self.wrong_narrowings.extend(found.iter().cloned());
        found
    }

    /// A replica's write event (`leading`: what it last said of the
    /// Lease). A write while following, or a widening with a host whose
    /// previous widening no narrowing followed, is a double write.
    pub fn wrote(&mut self, replica: &str, leading: bool, e: &Value) {
        let kind = e["event"].as_str().unwrap_or("");
        if !matches!(kind, "created" | "widened" | "narrowed") {
            return;
        }
        self.writes += 1;
        if !leading {
            self.double_writes
                .push(format!("{replica} wrote while following: {e}"));
        }
        let sidecar = e["sidecar"].as_str().unwrap_or("");
        let Some(&c) = self.sidecar_client.get(sidecar) else {
            return;
        };
        let recent = self.recent.entry(c).or_default();
        recent.push(format!("{replica} {kind} {}", e["hosts"]));
        if recent.len() > 4 {
            recent.remove(0);
        }
        for h in e["hosts"].as_array().into_iter().flatten() {
            let h = h.as_str().unwrap_or("");
            let Some(d) = (0..DESTS).find(|d| h.ends_with(&format!("/{}", host(&self.ns, *d))))
            else {
                continue;
            };
            let edge = self.edges.entry((c, d)).or_default();
            if kind == "narrowed" {
                self.narrowed += 1;
                edge.widened_at_left = None;
                continue;
            }
            self.widened += 1;
            if edge.widened_at_left == Some(edge.left) {
                self.double_writes.push(format!(
                    "{replica}: {sidecar} widened with dst-{d} again, no narrowing between"
                ));
            }
            edge.widened_at_left = Some(edge.left);
        }
    }

    /// At the end: every edge called got its host at some point, every
    /// edge still called has it now (`has_cluster`: in the client's
    /// sidecar's clusters too), and no edge that stopped before the
    /// fault-free time keeps its host.
    pub fn settle(&mut self, has_cluster: impl Fn(usize, usize) -> bool) {
        for ((c, d), e) in &self.edges {
            if e.first_call.is_none() {
                continue;
            }
            if !e.active && e.present {
                self.missed_narrowings.push(format!(
                    "client-{c} → dst-{d}: not called since the faults ended, still in its Sidecar"
                ));
            }
            if !e.ever_present {
                self.lost
                    .push(format!("client-{c} → dst-{d}: never in its Sidecar"));
                continue;
            }
            if e.active {
                let has = has_cluster(*c, *d);
                if !e.present || !has {
                    self.lost.push(format!(
                        "client-{c} → dst-{d}: still called, in the Sidecar: {}, in the sidecar's clusters: {has}",
                        e.present
                    ));
                }
            }
        }
    }

    /// The counts that must be 0: (what, what was found).
    pub fn rows(&self) -> [(&'static str, &[String]); 4] {
        [
            ("lost edges", &self.lost),
            ("wrong narrowings", &self.wrong_narrowings),
            ("double writes", &self.double_writes),
            ("missed narrowings", &self.missed_narrowings),
        ]
    }

    /// What a run must have exercised for its zeros to mean anything: a
    /// widening and a narrowing at least.
    pub fn unexercised(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.widened == 0 {
            out.push("no host was widened");
        }
        if self.narrowed == 0 {
            out.push("no host was narrowed");
        }
        out
    }
}
