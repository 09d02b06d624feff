//! Equality-based label selectors (`-l`), as kubectl parses them.

use anyhow::{bail, Result};
use meshscope_shared::snapshot::Labels;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    Exists(String),
    Absent(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector(Vec<Req>);

impl Selector {
    pub fn parse(s: &str) -> Result<Self> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let req = if let Some((k, v)) = part.split_once("!=") {
                Req::Ne(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some(k) = part.strip_prefix('!') {
                Req::Absent(k.trim().into())
            } else if part.contains(' ') || part.contains('(') {
                bail!(
                    "-l: set-based selectors ({part:?}) are not supported; use k=v, k!=v, k or !k"
                );
            } else {
                Req::Exists(part.into())
            };
            reqs.push(req);
        }
        if reqs.is_empty() {
            bail!("-l: empty selector");
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => labels.get(k) == Some(v),
            Req::Ne(k, v) => labels.get(k) != Some(v),
            Req::Exists(k) => labels.contains_key(k),
            Req::Absent(k) => !labels.contains_key(k),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubectl_equality_selectors() {
        let s = Selector::parse("app=web, tier!=db,canary,!legacy").unwrap();
        let l: Labels = [("app", "web"), ("canary", "")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert!(s.matches(&l));
        assert!(Selector::parse("app in (a,b)").is_err());
    }
}
