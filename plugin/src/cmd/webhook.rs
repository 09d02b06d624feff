//! `kubectl meshscope webhook manifests`: the webhook's install, as YAML
//! for `kubectl apply -f -`, with a fresh CA and serving certificate.

use std::io::Write;

use anyhow::Result;
use serde_yaml::Value as Yaml;

use crate::install::{generate_pki, render, service_names, DEFAULT_IMAGE};
use crate::outcome::Outcome;
use crate::output::Printer;
use crate::request::{ManifestsRequest, WebhookRequest};

/// The rendered install: a comment saying what it is, and the objects.
pub struct Install {
    pub header: String,
    pub docs: Vec<Yaml>,
}

pub fn run(r: &WebhookRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    match r {
        WebhookRequest::Manifests(m) => {
            if m.default_image {
                writeln!(
                    p.err,
                    "warning: no --image given: {DEFAULT_IMAGE} is not published yet; build it with scripts/release, push it (docs/install.md), and pass --image REGISTRY/meshscope-webhook:TAG"
                )?;
            }
            print(&manifests(m)?, p.out)?;
            Ok(Outcome::Ok)
        }
    }
}

/// Renders the install for `m`, with a new CA.
pub fn manifests(m: &ManifestsRequest) -> Result<Install> {
    let s = &m.settings;
    let names = service_names(&s.namespace);
    let pki = generate_pki(&names, s.validity_days)?;
    let header = format!(
        "# meshscope-webhook for namespace {}, rendered by kubectl meshscope webhook manifests.\n# A fresh CA (valid {} days) signs the serving certificate for {}.\n# Re-running this replaces both; until the pods see the new Secret, calls fail open.",
        s.namespace,
        s.validity_days,
        names.join(", ")
    );
    Ok(Install {
        header,
        docs: render(s, &pki)?,
    })
}

/// Multi-document YAML, each document after a `---`.
fn print(install: &Install, out: &mut dyn Write) -> Result<()> {
    writeln!(out, "{}", install.header)?;
    for doc in &install.docs {
        writeln!(out, "---")?;
        out.write_all(serde_yaml::to_string(doc)?.as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde::Deserialize;
    use serde_json::Value;

    use super::*;
    use crate::args::Cli;
    use crate::request::Request;

    fn run_line(extra: &[&str]) -> (Outcome, String, String) {
        let argv = ["kubectl-meshscope", "webhook", "manifests"];
        let cli = Cli::try_parse_from(argv.iter().chain(extra)).unwrap();
        let (Request::Webhook(r), _) = Request::parse(cli.command).unwrap() else {
            panic!("a webhook request")
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let outcome = run(&r, &mut Printer::new(&mut out, &mut err)).unwrap();
        (
            outcome,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn an_explicit_image_needs_no_warning() {
        let (outcome, _, err) = run_line(&["--image", "registry.example.com/meshscope-webhook:1"]);
        assert_eq!(outcome, Outcome::Ok);
        assert_eq!(err, "");
    }

    #[test]
    fn the_output_is_yaml_kubectl_can_apply() {
        let (outcome, text, err) = run_line(&[]);
        assert_eq!(outcome, Outcome::Ok);
        // No --image: the default is named, and said not to be published.
        assert!(
            err.starts_with(&format!(
                "warning: no --image given: {DEFAULT_IMAGE} is not published"
            )),
            "{err}"
        );
        let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
            .map(|d| Value::deserialize(d).unwrap())
            .filter(|v| !v.is_null())
            .collect();
        assert_eq!(docs.len(), 10);
        // Fields keep the base's order: apiVersion and kind first.
        for doc in text.split("\n---\n").skip(1) {
            assert!(doc.starts_with("apiVersion: "), "{doc}");
        }
        assert!(text.starts_with("# meshscope-webhook for namespace meshscope-system"));
    }
}
