//! The soak's targets, and what they are judged on.

/// What the soak's targets are judged on.
pub struct Judged<'a> {
    pub lost_before_sigterm: u64,
    pub refused_before_sigterm: u64,
    pub resets_after_sigterm: u64,
    pub wrong: u64,
    pub unexpected_non_2xx: u64,
    pub rss_growth_pct: f64,
    pub flip_latency_ms: &'a [f64],
    pub stale_certs: u64,
    pub generations_seen: usize,
    pub generations: usize,
    pub stale_seen: bool,
    pub stale_gauge_seen: bool,
    pub fresh_again: bool,
    pub exit_ok: bool,
}

/// Each target and whether it was met.
pub fn targets(j: &Judged<'_>) -> [(&'static str, bool); 9] {
    let flips_ok = !j.flip_latency_ms.is_empty() && j.flip_latency_ms.iter().all(|ms| *ms < 1000.0);
    [
        (
            "0 lost or reset requests before SIGTERM",
            j.lost_before_sigterm == 0 && j.refused_before_sigterm == 0,
        ),
        (
            "0 reset requests after SIGTERM",
            j.resets_after_sigterm == 0,
        ),
        ("0 wrong decisions", j.wrong == 0),
        ("0 unexpected non-2xx", j.unexpected_non_2xx == 0),
        ("RSS within 10%", j.rss_growth_pct.abs() <= 10.0),
        ("policy flips followed within 1 s", flips_ok),
        (
            "new connections see the new certificate",
            j.stale_certs == 0 && j.generations_seen >= j.generations.min(2),
        ),
        (
            "stale caches reported and cleared",
            j.stale_seen && j.stale_gauge_seen && j.fresh_again,
        ),
        ("clean exit after SIGTERM", j.exit_ok),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good(flips: &[f64]) -> Judged<'_> {
        Judged {
            lost_before_sigterm: 0,
            refused_before_sigterm: 0,
            resets_after_sigterm: 0,
            wrong: 0,
            unexpected_non_2xx: 0,
            rss_growth_pct: 4.1,
            flip_latency_ms: flips,
            stale_certs: 0,
            generations_seen: 7,
            generations: 7,
            stale_seen: true,
            stale_gauge_seen: true,
            fresh_again: true,
            exit_ok: true,
        }
    }

    /// A change that spoils one target of a good run.
    type Spoil = fn(&mut Judged<'_>);

    /// The targets `j` misses, by name.
    fn missed(j: &Judged<'_>) -> Vec<&'static str> {
        targets(j)
            .iter()
            .filter(|(_, ok)| !ok)
            .map(|(n, _)| *n)
            .collect()
    }

    #[test]
    fn a_good_run_meets_every_target_and_each_miss_is_named() {
        let flips = [13.4, 15.5];
        assert!(missed(&good(&flips)).is_empty());
        let cases: [(&str, Spoil); 10] = [
            ("0 lost or reset requests before SIGTERM", |j| {
                j.lost_before_sigterm = 1
            }),
            ("0 lost or reset requests before SIGTERM", |j| {
                j.refused_before_sigterm = 1
            }),
            ("0 reset requests after SIGTERM", |j| {
                j.resets_after_sigterm = 2
            }),
            ("0 wrong decisions", |j| j.wrong = 1),
            ("0 unexpected non-2xx", |j| j.unexpected_non_2xx = 3),
            ("RSS within 10%", |j| j.rss_growth_pct = -12.0),
            ("new connections see the new certificate", |j| {
                j.stale_certs = 1
            }),
            ("new connections see the new certificate", |j| {
                j.generations_seen = 1
            }),
            ("stale caches reported and cleared", |j| {
                j.fresh_again = false
            }),
            ("clean exit after SIGTERM", |j| j.exit_ok = false),
        ];
        for (name, spoil) in cases {
            let mut j = good(&flips);
            spoil(&mut j);
            assert_eq!(missed(&j), [name]);
        }
        // No flip measured, or one followed late, misses the flip target.
        assert_eq!(missed(&good(&[])), ["policy flips followed within 1 s"]);
        assert_eq!(
            missed(&good(&[13.0, 1500.0])),
            ["policy flips followed within 1 s"]
        );
    }
}
