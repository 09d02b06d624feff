//! Shapes the first random seeds predate, drawn from a stream of their own
//! so that the rest of each seed stays as it was: several ServiceEntries
//! of one hostname ([`unusual_entries`]) and egress hosts that name them
//! ([`unusual_host`]).

use super::docs::{labelled, ServiceEntryDoc, VirtualServiceDoc};
use super::draw::pick;
use super::scenario::Builder;
use crate::bench::Rng;

/// The hosts [`unusual_entries`] defines.
fn unusual_names(seed: u64) -> (String, String, String) {
    (
        format!("same-{seed}.example.com"),
        format!("multi-{seed}.example.com"),
        format!("front-{seed}.example.com"),
    )
}

/// Several ServiceEntries of one hostname in one namespace (like, or of
/// another resolution or labels, the second created over a second after
/// the first), one hostname in two namespaces with other ports, and a
/// VirtualService routing to it. Everything added after this is newer.
pub(super) fn unusual_entries(b: &mut Builder, shape: &mut Rng, nss: &[String], seed: u64) {
    let (same, multi, front) = unusual_names(seed);
    let home = pick(shape, nss).clone();
    let (m1, m2) = (pick(shape, nss).clone(), pick(shape, nss).clone());
    let export = |shape: &mut Rng| -> Option<Vec<String>> {
        match shape.below(4) {
            0 => Some(vec![".".into()]),
            1 => Some(vec![pick(shape, nss).clone()]),
            _ => None,
        }
    };
    let entry = |ns: &str, name: &str, host: &str, (n, pname, proto): (u32, &str, &str)| {
        ServiceEntryDoc::new(ns, name)
            .host(host)
            .port(n, pname, proto)
    };
    b.istio(entry(&home, "same-a", &same, (80, "http", "HTTP")).yaml());
    let e1 = export(shape);
    b.istio(
        entry(&m1, "multi-a", &multi, (8080, "http", "HTTP"))
            .export(e1)
            .yaml(),
    );
    b.later();
    let tls = entry(&home, "same-b", &same, (443, "tls", "TLS"));
    let second = match shape.below(3) {
        0 => tls.yaml(),
        1 => tls.resolution("NONE").yaml(),
        _ => labelled(&tls.yaml(), "{team: x}"),
    };
    b.istio(second);
    let e2 = export(shape);
    b.istio(
        entry(&m2, "multi-b", &multi, (9090, "http", "HTTP"))
            .export(e2)
            .yaml(),
    );
    let vns = pick(shape, nss).clone();
    b.istio(
        VirtualServiceDoc::new(&vns, "to-multi")
            .host(front)
            .destination((multi, None, None))
            .yaml(),
    );
}

/// An egress host of the shapes [`unusual_entries`] makes: exclusions, a
/// namespace twice, a named namespace that may lack the host.
pub(super) fn unusual_host(shape: &mut Rng, nss: &[String], seed: u64) -> String {
    let (same, multi, front) = unusual_names(seed);
    let other = pick(shape, nss).clone();
    match shape.below(8) {
        0 => format!("~{other}/*"),
        1 => format!("~/{same}"),
        2 => format!("{other}/*"),
        3 => format!("{other}/{multi}"),
        4 => format!("*/{multi}"),
        5 => format!("*/{front}"),
        6 => format!("~{other}/{multi}"),
        _ => format!("./{same}"),
    }
}
