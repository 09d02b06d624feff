//! The report: lines fitted to each mode's points, the targets, and the
//! tables.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::point::{Mode, Point, Skipped};

/// The AKS guidance's figure for 20,000 unscoped sidecars over 1,000
/// services (quoted, not measured here).
pub const AKS_QUOTE: &str = "40.4 GB and 15 CPUs for istiod at 20,000 sidecars over 1,000 services, unscoped (quoted: \"Istio service mesh add-on performance and scaling\", learn.microsoft.com/azure/aks/istio-scale, 2024-03-19: istiod asm-1-19, real Envoys, a Standard D16 v3 node, Azure CNI Overlay)";

/// `a + b·n` by least squares, and how well it fits.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Fit {
    pub a: f64,
    pub b: f64,
    pub r2: f64,
    pub points: usize,
}

impl Fit {
    pub fn of(xy: &[(f64, f64)]) -> Fit {
        let n = xy.len() as f64;
        if xy.len() < 2 {
            return Fit::default();
        }
        let (mx, my) = (
            xy.iter().map(|p| p.0).sum::<f64>() / n,
            xy.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let b = sxy / sxx.max(f64::MIN_POSITIVE);
        let a = my - b * mx;
        let ss_res: f64 = xy.iter().map(|p| (p.1 - a - b * p.0).powi(2)).sum();
        let ss_tot: f64 = xy.iter().map(|p| (p.1 - my).powi(2)).sum();
        Fit {
            a,
            b,
            r2: if ss_tot > 0.0 {
                1.0 - ss_res / ss_tot
            } else {
                1.0
            },
            points: xy.len(),
        }
    }

    pub fn at(&self, n: f64) -> f64 {
        self.a + self.b * n
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub commit: String,
    pub seed: u64,
    pub services: usize,
    pub sidecars: usize,
    pub workloads: usize,
    pub sidecars_written: usize,
    pub deploy_s: f64,
    pub points: Vec<Point>,
    pub skipped: Vec<Skipped>,
    /// mode -> (istiod RSS MB, istiod connect CPU s) fits over proxies.
    pub fits: BTreeMap<String, (Fit, Fit)>,
    pub aks_quote: &'static str,
    pub targets: Vec<[String; 4]>,
    pub met: bool,
}

pub fn fits(points: &[Point]) -> BTreeMap<String, (Fit, Fit)> {
    let mut out = BTreeMap::new();
    for (mode, name) in [(Mode::Unscoped, "unscoped"), (Mode::Scoped, "scoped")] {
        let of = |f: fn(&Point) -> f64| -> Fit {
            let xy: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.mode == mode)
                .map(|p| (p.proxies as f64, f(p)))
                .collect();
            Fit::of(&xy)
        };
        out.insert(
            name.to_string(),
            (of(|p| p.istiod_rss_mb), of(|p| p.istiod_cpu_connect_s)),
        );
    }
    out
}

/// (measure, value, target, met) rows.
pub fn targets(r: &Report) -> Vec<[String; 4]> {
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    let mut rows = Vec::new();
    let scoped: Vec<&Point> = r.points.iter().filter(|p| p.mode == Mode::Scoped).collect();
    let largest = scoped.iter().max_by_key(|p| p.proxies);
    rows.push([
        format!("scoped run at {} sidecars", r.sidecars),
        largest.map_or("not run".into(), |p| {
            format!("{} proxies, {} without config", p.proxies, p.not_ready)
        }),
        "every proxy holds its config".into(),
        yes(largest.is_some_and(|p| p.proxies == r.sidecars && p.not_ready == 0)),
    ]);
    // The streams of the largest scoped point; unscoped proxies hold 3 MB
    // of config each here, and their points are reported, not held to it.
    let sim = largest.map(|p| p.sim_rss_mb.max(p.sim_heap_mb));
    rows.push([
        format!(
            "simulator memory for {} scoped ADS streams (RSS or heap growth, the larger)",
            largest.map_or(0, |p| p.proxies)
        ),
        sim.map_or("not run".into(), |m| format!("{:.2} GB", m / 1024.0)),
        "<= 4 GB".into(),
        yes(sim.is_some_and(|m| m <= 4_096.0)),
    ]);
    let lost: usize = scoped.iter().map(|p| p.lost.len()).sum();
    rows.push([
        "safety: observed edges that lost their cluster".into(),
        lost.to_string(),
        "0".into(),
        yes(lost == 0),
    ]);
    for p in &scoped {
        rows.push(p.hub.row("hub", p.proxies));
        rows.push(p.leaf.row("leaf", p.proxies));
    }
    // Bytes: the largest point both modes ran.
    let common = r
        .points
        .iter()
        .filter(|p| p.mode == Mode::Unscoped)
        .filter_map(|u| {
            scoped
                .iter()
                .find(|s| s.proxies == u.proxies)
                .map(|s| (u, s))
        })
        .max_by_key(|(u, _)| u.proxies);
    let ratio = common.map(|(u, s)| s.xds["all"].p50 as f64 / u.xds["all"].p50.max(1) as f64);
    rows.push([
        format!(
            "xDS p50 per proxy, scoped / unscoped{}",
            common.map_or(String::new(), |(u, _)| format!(" at {}", u.proxies))
        ),
        ratio.map_or("no common point".into(), |x| format!("{x:.3}")),
        "<= 0.25".into(),
        yes(ratio.is_some_and(|x| x <= 0.25)),
    ]);
    let (u, s) = (&r.fits["unscoped"].0, &r.fits["scoped"].0);
    let n = r.sidecars as f64;
    let fitted = u.points >= 4 && s.points >= 2;
    let unscoped = measured(&r.points, Mode::Unscoped);
    let not_run: Vec<usize> = r
        .skipped
        .iter()
        .filter(|s| s.mode == Mode::Unscoped)
        .map(|s| s.proxies)
        .collect();
    rows.push([
        format!(
            "istiod RSS at {} sidecars, scoped / unscoped (lines fitted to each mode's measured points)",
            r.sidecars
        ),
        if fitted {
            format!(
                "{:.0} MB / {:.0} MB; scoped {}; unscoped measured at {} (R² {:.3}){}, so {}",
                s.at(n),
                u.at(n),
                reach(&measured(&r.points, Mode::Scoped), r.sidecars),
                listed(&unscoped),
                u.r2,
                if not_run.is_empty() {
                    String::new()
                } else {
                    format!(", not at {} (skipped)", listed(&not_run))
                },
                reach(&unscoped, r.sidecars)
            )
        } else {
            format!("{} unscoped points (4 needed)", u.points)
        },
        "<= 0.5".into(),
        yes(fitted && s.at(n) <= 0.5 * u.at(n)),
    ]);
    rows
}

/// The proxy counts a mode's points were measured at, ascending.
pub fn measured(points: &[Point], mode: Mode) -> Vec<usize> {
    let mut v: Vec<usize> = points
        .iter()
        .filter(|p| p.mode == mode)
        .map(|p| p.proxies)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

pub fn listed(v: &[usize]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a line fitted to points measured at `xs` says at `n`: a measured
/// point, between measured points, or an extrapolation and how far.
pub fn reach(xs: &[usize], n: usize) -> String {
    let (Some(&lo), Some(&hi)) = (xs.iter().min(), xs.iter().max()) else {
        return format!("at {n}: no measured point");
    };
    if xs.contains(&n) {
        format!("at {n}: the fit at a measured point")
    } else if (lo..=hi).contains(&n) {
        format!("at {n}: interpolated between measured points")
    } else if n > hi {
        format!(
            "at {n}: extrapolated, {:.1}× beyond the largest measured point ({hi})",
            n as f64 / hi as f64
        )
    } else {
        format!("at {n}: extrapolated below the smallest measured point ({lo})")
    }
}

pub fn print(r: &Report) {
    println!(
        "Mesh: realistic, seed {}: {} services and ServiceEntry hosts, {} workloads, {} injected pods ({} Sidecars written by apply -A); commit {}",
        r.seed, r.services, r.workloads, r.sidecars, r.sidecars_written, r.commit
    );
    println!();
    println!("| mode | proxies | connect (wall) | istiod CPU to connect | istiod RSS | istiod peak RSS | simulator RSS / heap growth | xDS p50 / p95 / max per proxy | hub change: proxies, last ACK | leaf change: proxies, last ACK |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for p in &r.points {
        let d = &p.xds["all"];
        let mode = match &p.from {
            Some(f) => format!("{:?} (from {f})", p.mode),
            None => format!("{:?}", p.mode),
        };
        println!(
            "| {} | {} | {:.1} s | {:.1} s | {:.0} MB | {:.0} MB | {:.0} / {:.0} MB | {:.1} / {:.1} / {:.1} KB | {} (of {} callers, {} missed), {:.2} s | {} (of {} callers, {} missed), {:.2} s |",
            mode, p.proxies, p.connect_s, p.istiod_cpu_connect_s, p.istiod_rss_mb, p.istiod_hwm_mb, p.sim_rss_mb, p.sim_heap_mb,
            d.p50 as f64 / 1e3, d.p95 as f64 / 1e3, d.max as f64 / 1e3,
            p.hub.push.fanout, p.hub.callers, p.hub.missed, p.hub.push.seconds,
            p.leaf.push.fanout, p.leaf.callers, p.leaf.missed, p.leaf.push.seconds,
        );
    }
    for s in &r.skipped {
        println!("| {:?} | {} | {} | | | | | | | |", s.mode, s.proxies, s.why);
    }
    println!();
    println!("| fit over proxies n | measured at n = | istiod RSS (MB) = a + b·n | R² | at {} | istiod CPU to connect (s) = a + b·n | R² | at {} | the value at {} is |", r.sidecars, r.sidecars, r.sidecars);
    println!("|---|---|---|---|---|---|---|---|---|");
    let n = r.sidecars as f64;
    for (mode, (m, c)) in &r.fits {
        let xs = measured(
            &r.points,
            if mode == "unscoped" {
                Mode::Unscoped
            } else {
                Mode::Scoped
            },
        );
        println!(
            "| {mode} ({} points) | {} | {:.0} + {:.3}·n | {:.3} | {:.1} GB | {:.1} + {:.4}·n | {:.3} | {:.0} CPU s | {} |",
            m.points, listed(&xs), m.a, m.b, m.r2, m.at(n) / 1024.0, c.a, c.b, c.r2, c.at(n), reach(&xs, r.sidecars)
        );
    }
    println!("| AKS guidance (quoted) | | | | 40.4 GB | | | 15 CPUs | quoted, not measured here |");
    println!();
    println!("| measure | value | target | met |");
    println!("|---|---|---|---|");
    for t in &r.targets {
        println!("| {} | {} | {} | {} |", t[0], t[1], t[2], t[3]);
    }
}
