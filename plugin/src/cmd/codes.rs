//! `kubectl meshscope codes`: the finding codes and what they mean.

use anyhow::Result;

use crate::args::ReportOutput;
use crate::outcome::Outcome;
use crate::output::{self, Printer, Table};
use crate::request::CodesRequest;

pub fn run(r: &CodesRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    let docs = &r.docs;
    match r.output {
        ReportOutput::Json => output::json(p.out, docs)?,
        ReportOutput::Yaml => output::yaml(p.out, docs)?,
        ReportOutput::Name => {
            for d in docs {
                writeln!(p.out, "{}", d.code)?;
            }
        }
        ReportOutput::Table | ReportOutput::Wide if !r.one && r.output == ReportOutput::Table => {
            let mut t = Table::new(["CODE", "SEVERITY", "TITLE"]);
            for d in docs {
                t.row([d.code.as_str(), d.severity.as_str(), d.title]);
            }
            p.table(&t)?;
        }
        _ => {
            for d in docs {
                writeln!(p.out, "{} ({}): {}\n", d.code, d.severity, d.title)?;
                writeln!(p.out, "{}\n", d.description)?;
                writeln!(p.out, "Fix: {}\n", d.fix)?;
            }
        }
    }
    Ok(Outcome::Ok)
}
