//! `meshscope-benchgen`: writes benchmark inputs.
//!
//!   meshscope-benchgen mesh audit SCALE OUT.json   # 30k pods ... at scale 1
//!   meshscope-benchgen mesh logs OUT.json          # 5k workloads, 20k services
//!   meshscope-benchgen logs text|json MB OUT       # access logs for the logs mesh

use std::fs::File;
use std::io::BufWriter;

use anyhow::{bail, Context, Result};
use meshscope_e2e::bench::{write_logs, Format, Mesh};

fn main() -> std::process::ExitCode {
    meshscope_e2e::tool_exit(try_main())
}

fn try_main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["mesh", "audit", scale, out] => {
            let scale: f64 = scale.parse().context("SCALE")?;
            Mesh::audit(scale).write(&mut BufWriter::new(File::create(out)?))?;
        }
        ["mesh", "logs", out] => Mesh::logs().write(&mut BufWriter::new(File::create(out)?))?,
        ["logs", fmt, mb, out] => {
            let format = match *fmt {
                "text" => Format::Text,
                "json" => Format::Json,
                _ => bail!("format is text or json"),
            };
            let mb: u64 = mb.parse().context("MB")?;
            let lines = write_logs(&Mesh::logs(), format, mb * 1_000_000, 42, &mut BufWriter::with_capacity(1 << 20, File::create(out)?))?;
            eprintln!("{lines} lines");
        }
        _ => bail!("usage: meshscope-benchgen mesh audit SCALE OUT | mesh logs OUT | logs text|json MB OUT"),
    }
    Ok(())
}
