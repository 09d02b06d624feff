//! Renderers. Everything writes into a [`Printer`]'s writers or a
//! `&mut dyn Write`; nothing prints to the process's streams directly.

use std::fmt;
use std::io::{self, Write};

use serde::Serialize;

// === the printer ===

/// Where and how a run prints: stdout and stderr, and the global flags
/// (`--no-headers`, `-q`) every renderer honours. `run` makes one and
/// passes it to the command.
pub struct Printer<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
    /// Tables print no header row.
    pub no_headers: bool,
    /// Summaries on stderr are not printed (errors and warnings are).
    pub quiet: bool,
}

impl<'a> Printer<'a> {
    pub fn new(out: &'a mut dyn Write, err: &'a mut dyn Write) -> Self {
        Printer {
            out,
            err,
            no_headers: false,
            quiet: false,
        }
    }

    /// Writes a summary line to stderr, unless `-q` silenced summaries.
    pub fn summary(&mut self, line: fmt::Arguments<'_>) -> io::Result<()> {
        if self.quiet {
            return Ok(());
        }
        writeln!(self.err, "{line}")
    }

    /// Writes `t` to stdout, its header row unless `--no-headers`.
    pub fn table(&mut self, t: &Table) -> io::Result<()> {
        t.write(self.out, !self.no_headers)
    }
}

// === tables ===

/// A plain kubectl-style table: upper-case headers (none with
/// `--no-headers`), columns padded with three spaces, no borders.
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(headers: I) -> Self {
        Self {
            headers: headers.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row<I: IntoIterator<Item = S>, S: Into<String>>(&mut self, cells: I) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Writes the table, with its header row when `headers`.
    pub fn write(&self, out: &mut dyn Write, headers: bool) -> io::Result<()> {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String], out: &mut dyn Write| -> io::Result<()> {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate().take(n) {
                s.push_str(c);
                if i + 1 < n {
                    let pad = widths[i] - c.chars().count() + 3;
                    s.extend(std::iter::repeat_n(' ', pad));
                }
            }
            writeln!(out, "{}", s.trim_end())
        };
        if headers {
            line(&self.headers, out)?;
        }
        for r in &self.rows {
            line(r, out)?;
        }
        Ok(())
    }
}

pub fn json<T: Serialize>(out: &mut dyn Write, v: &T) -> anyhow::Result<()> {
    serde_json::to_writer_pretty(&mut *out, v)?;
    writeln!(out)?;
    Ok(())
}

pub fn yaml<T: Serialize>(out: &mut dyn Write, v: &T) -> anyhow::Result<()> {
    let text = serde_yaml::to_string(v)?;
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// Human-readable bytes (KB and MB are powers of 1000, as in the docs).
pub use meshscope_shared::units::bytes;

/// `1 proxy`, `2 proxies`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The first `keep` items joined by `sep`, and `+N more` for the rest.
pub fn bounded(items: &[String], keep: usize, sep: &str) -> String {
    if items.len() <= keep {
        return items.join(sep);
    }
    format!(
        "{}{sep}+{} more",
        items[..keep].join(sep),
        items.len() - keep
    )
}

// === object names (-o name) ===

/// `kind.group` as kubectl's `-o name` spells it (`deployment.apps`,
/// `sidecar.networking.istio.io`, `pod`), for a kind as the snapshot
/// names it. Kinds meshscope does not know keep their lower-case name.
pub fn resource(kind: &str) -> String {
    let group = match kind {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => "apps",
        "Job" | "CronJob" => "batch",
        "Pod" | "Service" | "Namespace" | "ConfigMap" => "",
        "Sidecar" | "ServiceEntry" | "VirtualService" | "DestinationRule" | "Gateway"
        | "WorkloadEntry" | "EnvoyFilter" => "networking.istio.io",
        "HTTPRoute" | "GRPCRoute" | "TCPRoute" | "TLSRoute" => "gateway.networking.k8s.io",
        _ => "",
    };
    let kind = kind.to_ascii_lowercase();
    if group.is_empty() {
        kind
    } else {
        format!("{kind}.{group}")
    }
}

/// `kind.group/name`, one object as kubectl's `-o name` prints it.
pub fn object_name(kind: &str, name: &str) -> String {
    format!("{}/{name}", resource(kind))
}

/// Prints `kind.group/name` lines, each object once, in the given order.
pub fn names<'a>(
    out: &mut dyn Write,
    objects: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> io::Result<()> {
    let mut seen = std::collections::HashSet::new();
    for (kind, name) in objects {
        let line = object_name(kind, name);
        if seen.insert(line.clone()) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_spelled_as_kubectl_prints_them() {
        assert_eq!(object_name("Deployment", "web"), "deployment.apps/web");
        assert_eq!(object_name("CronJob", "nightly"), "cronjob.batch/nightly");
        assert_eq!(object_name("Pod", "web-1"), "pod/web-1");
        assert_eq!(
            object_name("Sidecar", "web"),
            "sidecar.networking.istio.io/web"
        );
        assert_eq!(object_name("Rollout", "web"), "rollout/web");
    }

    #[test]
    fn bounded_lists_name_how_many_are_left_out() {
        let items: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        assert_eq!(bounded(&items, 3, ","), "a,b,c,+2 more");
        assert_eq!(bounded(&items[..3], 3, ","), "a,b,c");
    }

    #[test]
    fn no_headers_drops_the_header_row_and_quiet_the_summaries() {
        let mut t = Table::new(["A", "B"]);
        t.row(["1", "2"]);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut p = Printer::new(&mut out, &mut err);
        p.no_headers = true;
        p.quiet = true;
        p.table(&t).unwrap();
        p.summary(format_args!("1 row")).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "1   2\n");
        assert!(err.is_empty());
        let mut out = Vec::new();
        t.write(&mut out, true).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "A   B\n1   2\n");
    }
}
