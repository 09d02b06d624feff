//! The targets' rules, on a good run spoiled one target at a time.

use meshscope_e2e::istiod::ProcessUsage;

use crate::measure::{Dist, PushResult};
use crate::report::targets;
use crate::results::Results;

/// A run that meets every target (the figures of the committed run).
fn good() -> Results {
    let dist = |p50| Dist {
        p50,
        ..Dist::default()
    };
    Results {
        edges: 51,
        routed_edges: 22,
        before: [("all".to_string(), dist(2_339_500))].into(),
        after: [("all".to_string(), dist(35_900))].into(),
        push_before: PushResult {
            fanout: 62,
            bytes: 131_700_000,
        },
        push_after: PushResult {
            fanout: 48,
            bytes: 1_700_000,
        },
        vs_exported_proxies: 48,
        dark_ns: vec!["dark-0".into(), "dark-1".into()],
        dropped: vec!["dark-0".into(), "dark-1".into()],
        dark_services: 1200,
        registry_without: (1300, 1200),
        registry_with: (100, 0),
        istiod_without: ProcessUsage {
            rss_kb: 400_000,
            ..ProcessUsage::default()
        },
        istiod_with: ProcessUsage {
            rss_kb: 300_000,
            ..ProcessUsage::default()
        },
        ..Results::default()
    }
}

/// A change that spoils one target of a good run.
type Spoil = fn(&mut Results);

/// The rows `r` misses, by their measure's first words.
fn missed(r: &Results) -> Vec<String> {
    targets(r)
        .iter()
        .filter(|row| row[4] == "no")
        .map(|row| row[0].split(" (").next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_good_run_meets_every_target_and_each_miss_is_named() {
    assert!(missed(&good()).is_empty(), "{:?}", missed(&good()));
    let cases: [(&str, Spoil); 7] = [
        ("observed edges lost", |r| {
            r.lost_after.push("a -> b".into())
        }),
        ("observed edges lost", |r| {
            r.lost_with_selectors.push("a -> b".into())
        }),
        // Fan-out is an equality: fewer than the exported namespaces'
        // proxies (a push that reached none of them) misses too.
        ("auth VirtualService change pushed to", |r| {
            r.push_after.fanout = 0
        }),
        ("auth VirtualService change pushed to", |r| {
            r.push_after.fanout = 50
        }),
        ("p50 xDS per proxy", |r| {
            r.after.get_mut("all").unwrap().p50 = 3_000_000
        }),
        ("Services in istiod's registry", |r| {
            r.registry_with = (1300, 1)
        }),
        ("istiod RSS, fresh start, sidecars connected", |r| {
            r.istiod_with.rss_kb = 500_000
        }),
    ];
    for (name, spoil) in cases {
        let mut r = good();
        spoil(&mut r);
        assert_eq!(missed(&r), [name]);
    }
}
