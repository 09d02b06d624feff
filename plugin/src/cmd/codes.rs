//! `kubectl meshscope codes`: the finding codes and what they mean.

use std::io::Write;

use anyhow::{anyhow, Result};
use meshscope_shared as scope;
use scope::audit;

use crate::args::{self, ReportOutput};
use crate::output::{self, Table};
use crate::Outcome;

pub fn cmd_codes(a: args::CodesArgs, out: &mut dyn Write) -> Result<Outcome> {
    let docs: Vec<&audit::CodeDoc> = match &a.code {
        Some(c) => vec![audit::code_doc(c)
            .ok_or_else(|| anyhow!("unknown code {c:?}; `kubectl meshscope codes` lists them"))?],
        None => audit::CODES.iter().collect(),
    };
    match a.output {
        ReportOutput::Json => output::json(out, &docs)?,
        ReportOutput::Yaml => output::yaml(out, &docs)?,
        ReportOutput::Name => {
            for d in &docs {
                writeln!(out, "{}", d.code)?;
            }
        }
        ReportOutput::Table | ReportOutput::Wide
            if a.code.is_none() && a.output == ReportOutput::Table =>
        {
            let _headers = output::Settings {
                no_headers: a.no_headers,
                ..output::Settings::current()
            }
            .install();
            let mut t = Table::new(["CODE", "SEVERITY", "TITLE"]);
            for d in &docs {
                t.row([d.code, d.severity.as_str(), d.title]);
            }
            t.write(out)?;
        }
        _ => {
            for d in &docs {
                writeln!(out, "{} ({}): {}\n", d.code, d.severity, d.title)?;
                writeln!(out, "{}\n", d.description)?;
                writeln!(out, "Fix: {}\n", d.fix)?;
            }
        }
    }
    Ok(Outcome::Ok)
}
