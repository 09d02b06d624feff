//! `kubectl meshscope webhook …`: the install flags, checked.

use anyhow::{bail, Result};

use crate::args::{ManifestsArgs, WebhookArgs, WebhookCommand};
use crate::install::{valid_namespace, Settings, DEFAULT_IMAGE};

/// One `webhook` subcommand's request.
#[derive(Debug)]
pub enum WebhookRequest {
    Manifests(ManifestsRequest),
}

/// `webhook manifests`: what to render.
#[derive(Debug)]
pub struct ManifestsRequest {
    pub settings: Settings,
    /// No `--image` was given, so [`DEFAULT_IMAGE`] (not published) is used.
    pub default_image: bool,
}

impl WebhookRequest {
    pub fn parse(a: WebhookArgs) -> Result<Self> {
        match a.command {
            WebhookCommand::Manifests(m) => {
                Ok(WebhookRequest::Manifests(ManifestsRequest::parse(m)?))
            }
        }
    }
}

impl ManifestsRequest {
    fn parse(m: ManifestsArgs) -> Result<Self> {
        for (flag, ns) in [
            ("-n", &m.namespace),
            ("--istio-namespace", &m.istio_namespace),
        ] {
            if !valid_namespace(ns) {
                bail!(
                    "{flag} {ns:?} is not a valid namespace name (lowercase letters, digits and '-', at most 63, starting and ending with a letter or digit)"
                );
            }
        }
        Ok(ManifestsRequest {
            default_image: m.image.is_none(),
            settings: Settings {
                image: m.image.unwrap_or_else(|| DEFAULT_IMAGE.to_string()),
                namespace: m.namespace,
                default_policy: m.default_policy,
                mutate_serviceentry_exportto: m.mutate_serviceentry_exportto,
                istio_namespace: m.istio_namespace,
                validity_days: m.validity_days,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use meshscope_shared::admission::Policy;

    use super::*;
    use crate::args::{Cli, Command};

    fn parse(extra: &[&str]) -> Result<ManifestsRequest> {
        let argv = ["kubectl-meshscope", "webhook", "manifests"];
        let cli = Cli::try_parse_from(argv.iter().chain(extra)).expect("clap accepts the line");
        let Command::Webhook(a) = cli.command else {
            panic!("a webhook command")
        };
        WebhookRequest::parse(a).map(|WebhookRequest::Manifests(m)| m)
    }

    #[test]
    fn namespaces_are_checked_up_front() {
        let e = parse(&["-n", "Bad_NS"]).unwrap_err().to_string();
        assert!(
            e.starts_with("-n \"Bad_NS\" is not a valid namespace name"),
            "{e}"
        );
        let e = parse(&["--istio-namespace=x-"]).unwrap_err().to_string();
        assert!(e.starts_with("--istio-namespace \"x-\" is not"), "{e}");
    }

    #[test]
    fn flags_become_settings() {
        let m = parse(&[]).unwrap();
        assert!(m.default_image);
        assert_eq!(m.settings.image, DEFAULT_IMAGE);
        assert_eq!(m.settings.namespace, "meshscope-system");
        assert_eq!(m.settings.istio_namespace, "istio-system");
        assert_eq!(m.settings.default_policy, Policy::Warn);
        assert_eq!(m.settings.validity_days, 365);
        let m = parse(&[
            "--image",
            "r/msw:1",
            "--default-policy=enforce",
            "--mutate-serviceentry-exportto",
            "--validity-days=7",
        ])
        .unwrap();
        assert!(!m.default_image);
        assert_eq!(m.settings.image, "r/msw:1");
        assert_eq!(m.settings.default_policy, Policy::Enforce);
        assert!(m.settings.mutate_serviceentry_exportto);
        assert_eq!(m.settings.validity_days, 7);
    }
}
