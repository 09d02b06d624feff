//! What `apply --watch` says as it goes: one line per change on stderr,
//! or with `-o json` one JSON object per line on stdout.

use anyhow::Result;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::args::EventOutput;
use crate::output::Printer;

/// What happened since the last `heartbeat` event, for the next one.
#[derive(Debug)]
pub struct Heartbeat {
    every: std::time::Duration,
    since: std::time::Instant,
    passes: u64,
    failed: u64,
    /// The writes counted when the last heartbeat was said.
    writes_before: u64,
}

impl Heartbeat {
    pub fn new(every: std::time::Duration, now: std::time::Instant) -> Heartbeat {
        Heartbeat {
            every,
            since: now,
            passes: 0,
            failed: 0,
            writes_before: 0,
        }
    }

    pub fn pass(&mut self, ok: bool) {
        self.passes += 1;
        self.failed += u64::from(!ok);
    }

    /// The `heartbeat` event once `every` has passed since the last one
    /// (`writes`: the Sidecar writes so far; `leading`: whether this
    /// replica writes), and the counts start again.
    pub fn due(&mut self, now: std::time::Instant, writes: u64, leading: bool) -> Option<Event> {
        let took = now.duration_since(self.since);
        if took < self.every {
            return None;
        }
        let mut m = format!(
            "{} in the last {}",
            crate::output::plural(self.passes as usize, "pass", "passes"),
            crate::duration::show_duration(took)
        );
        if self.failed > 0 {
            m += &format!(" ({} failed)", self.failed);
        }
        m += &format!(
            ", {} written",
            crate::output::plural(
                (writes - self.writes_before) as usize,
                "Sidecar",
                "Sidecars"
            )
        );
        if !leading {
            m += "; following: another replica holds the Lease";
        }
        *self = Heartbeat {
            writes_before: writes,
            ..Heartbeat::new(self.every, now)
        };
        Some(Event::new("heartbeat").message(m))
    }
}

/// One thing the watcher did or saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Event {
    pub time: String,
    /// `started`, `leading`, `following`, `created`, `widened`,
    /// `narrowed`, `not-confirmed`, `failed`, `skipped`, `user-owned`,
    /// `conflict`, `pass-error`, `heartbeat`, `stopped`.
    pub event: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The Sidecar.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sidecar: Option<String>,
    /// Hosts added, removed, or missing (user-owned).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// What the calls that made it widen met: `passthrough: a:80`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub met: Vec<String>,
    /// Seconds from the write to istiod's confirmation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmed_in: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Event {
    pub fn new(event: &'static str) -> Event {
        Event {
            time: Timestamp::now()
                .round(k8s_openapi::jiff::Unit::Millisecond)
                .map(|t| t.to_string())
                .unwrap_or_default(),
            event,
            ..Event::default()
        }
    }

    pub fn sidecar(mut self, ns: &str, name: &str) -> Event {
        self.namespace = Some(ns.to_string());
        self.sidecar = Some(name.to_string());
        self
    }

    pub fn message(mut self, m: impl Into<String>) -> Event {
        self.message = Some(m.into());
        self
    }

    /// The text line.
    fn line(&self) -> String {
        let mut l = format!("{} {}", self.time, self.event);
        if let (Some(ns), Some(name)) = (&self.namespace, &self.sidecar) {
            l += &format!(" sidecar {ns}/{name}");
        }
        if !self.hosts.is_empty() {
            let sign = match self.event {
                "created" | "widened" => "+",
                "narrowed" => "-",
                _ => "",
            };
            let hosts: Vec<String> = self.hosts.iter().map(|h| format!("{sign}{h}")).collect();
            l += &format!(" {}", hosts.join(" "));
        }
        if !self.met.is_empty() {
            l += &format!(" (calls met {})", self.met.join("; "));
        }
        if let Some(s) = self.confirmed_in {
            l += &format!(", confirmed by istiod in {s:.2} s");
        }
        if let Some(m) = &self.message {
            l += &format!(": {m}");
        }
        l
    }
}

/// Prints `e` as `output` says.
pub fn emit(e: &Event, output: EventOutput, p: &mut Printer<'_>) -> Result<()> {
    match output {
        EventOutput::Text => writeln!(p.err, "{}", e.line())?,
        EventOutput::Json => {
            serde_json::to_writer(&mut *p.out, e)?;
            writeln!(p.out)?;
            p.out.flush()?;
        }
    }
    Ok(())
}

/// Prints `e` as `output` says, straight to the process's standard output
/// or error, for a thread that has no [`Printer`] (the bounded stop). The
/// main thread holds the locks of `std::io::stdout()` and `stderr()` while
/// it runs, so the line goes through a descriptor of its own
/// (`/dev/stdout`, `/dev/stderr`, opened to append: a redirect to a file
/// keeps what is there), in one write.
pub fn emit_now(e: &Event, output: EventOutput) {
    use std::io::Write as _;
    let (path, line) = match output {
        EventOutput::Text => ("/dev/stderr", e.line()),
        EventOutput::Json => match serde_json::to_string(e) {
            Ok(json) => ("/dev/stdout", json),
            Err(_) => return,
        },
    };
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(path) {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeat_says_the_passes_failures_and_writes_since_the_last() {
        let t0 = std::time::Instant::now();
        let mut h = Heartbeat::new(std::time::Duration::from_secs(600), t0);
        for ok in [true, false, true] {
            h.pass(ok);
        }
        assert!(h
            .due(t0 + std::time::Duration::from_secs(599), 4, true)
            .is_none());
        let e = h
            .due(t0 + std::time::Duration::from_secs(600), 4, true)
            .unwrap();
        assert_eq!(e.event, "heartbeat");
        assert_eq!(
            e.message.as_deref(),
            Some("3 passes in the last 10m (1 failed), 4 Sidecars written")
        );
        // The counts start again; a follower says so.
        let e = h
            .due(t0 + std::time::Duration::from_secs(1200), 4, false)
            .unwrap();
        assert_eq!(
            e.message.as_deref(),
            Some("0 passes in the last 10m, 0 Sidecars written; following: another replica holds the Lease")
        );
    }

    #[test]
    fn lines_say_the_change() {
        let mut e = Event::new("widened").sidecar("shop", "web-deployment");
        e.time = "T".into();
        e.hosts = vec!["shop/pay.shop.svc.cluster.local".into()];
        e.met = vec!["passthrough: pay.shop.svc.cluster.local:80".into()];
        e.confirmed_in = Some(1.234);
        assert_eq!(
            e.line(),
            "T widened sidecar shop/web-deployment +shop/pay.shop.svc.cluster.local (calls met passthrough: pay.shop.svc.cluster.local:80), confirmed by istiod in 1.23 s"
        );
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["event"], "widened");
        assert!(json.get("message").is_none());
    }
}
