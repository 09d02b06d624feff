//! Renderers. Everything writes into `&mut dyn Write`; nothing prints.

use std::io::{self, Write};

use serde::Serialize;

/// A plain kubectl-style table: upper-case headers, columns padded with
/// three spaces, no borders.
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

    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
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
        line(&self.headers, out)?;
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
pub fn bytes(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{:.1} MB", n as f64 / 1e6)
    } else if n >= 1_000 {
        format!("{:.0} KB", n as f64 / 1e3)
    } else {
        format!("{n} B")
    }
}

/// `1 proxy`, `2 proxies`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
