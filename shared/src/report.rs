//! `kubectl meshscope report`: one self-contained HTML page to share (no
//! script, no stylesheet or font fetched): the mesh's estimated savings,
//! then per namespace the recommended scopes with clusters and xDS bytes
//! before and after, the audit's findings, and the observed dependency
//! graph ([`crate::graph`]) drawn as inline SVG.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::finding::Finding;
use crate::graph::{self, Graph};
use crate::recommend::{self, Recommendation};
use crate::snapshot::MeshSnapshot;
use crate::units::bytes;

const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#1d232b}\
table{border-collapse:collapse;margin:.5em 0}\
th,td{border:1px solid #c9d1db;padding:.25em .6em;text-align:left;vertical-align:top}\
th{background:#eef3fb}td.n{text-align:right;white-space:nowrap}\
.error{color:#b00020}.warning{color:#9a6700}\
svg text{font-family:sans-serif}";

/// The page: `source` says what it was made from (the command's inputs).
pub fn html(
    snap: &MeshSnapshot,
    recs: &[Recommendation],
    findings: &[Finding],
    source: &str,
) -> String {
    let mut by_ns: BTreeMap<&str, Vec<&Recommendation>> = BTreeMap::new();
    for r in recs {
        by_ns.entry(r.namespace.as_str()).or_default().push(r);
    }
    let mut namespaces: BTreeSet<&str> = by_ns.keys().copied().collect();
    namespaces.extend(
        findings
            .iter()
            .map(|f| f.namespace.as_str())
            .filter(|n| !n.is_empty()),
    );
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>meshscope report</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>meshscope report</h1>\n<p id=\"source\">{}</p>\n",
        esc(source)
    );
    let _ = writeln!(out, "<p id=\"total\">{}</p>", esc(&total(snap, recs)));
    out.push_str("<ul id=\"namespaces\">\n");
    for ns in &namespaces {
        let _ = writeln!(out, "<li><a href=\"#ns-{0}\">{0}</a></li>", esc(ns));
    }
    out.push_str("</ul>\n");
    for ns in namespaces {
        let recs = by_ns.get(ns).map(Vec::as_slice).unwrap_or_default();
        let found: Vec<&Finding> = findings.iter().filter(|f| f.namespace == ns).collect();
        section(&mut out, snap, ns, recs, &found);
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// The savings line of the whole report.
fn total(snap: &MeshSnapshot, recs: &[Recommendation]) -> String {
    let s = recommend::savings::savings(snap, recs);
    if s.proxies == 0 {
        return "No Sidecar recommended: nothing to save yet.".into();
    }
    format!(
        "Mesh: {} proxies, {} → {} clusters, {} → {} of xDS (estimated; verify measures it on istiod).",
        s.proxies,
        s.clusters_now,
        s.clusters_after,
        bytes(s.bytes_now),
        bytes(s.bytes_after)
    )
}

fn section(
    out: &mut String,
    snap: &MeshSnapshot,
    ns: &str,
    recs: &[&Recommendation],
    found: &[&Finding],
) {
    let _ = writeln!(out, "<section id=\"ns-{0}\">\n<h2>{0}</h2>", esc(ns));
    if recs.is_empty() {
        out.push_str("<p>No workload recommended for here.</p>\n");
    } else {
        out.push_str("<table class=\"scopes\">\n<tr><th>workload</th><th>scope</th><th>dependencies</th><th>clusters</th><th>xDS</th></tr>\n");
        let g = graph::build(snap, recs.iter().copied());
        for r in recs {
            let lines = graph::workload_lines(snap, r);
            let (clusters, xds) = match &r.after {
                Some(a) => (
                    format!("{} → {}", r.before.clusters, a.clusters),
                    format!("{} → {}", bytes(r.before.bytes), bytes(a.bytes)),
                ),
                None => (r.before.clusters.to_string(), bytes(r.before.bytes)),
            };
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                esc(&lines[0]),
                esc(&lines[1]),
                if r.dependencies.is_empty() {
                    "-".to_string()
                } else {
                    esc(&r.dependencies.join(", "))
                },
                esc(&clusters),
                esc(&xds)
            );
        }
        out.push_str("</table>\n");
        out.push_str(&svg(&g));
    }
    if found.is_empty() {
        out.push_str("<p>No finding.</p>\n");
    } else {
        out.push_str("<table class=\"findings\">\n<tr><th>code</th><th>severity</th><th>object</th><th>message</th></tr>\n");
        for f in found {
            let sev = f.severity.as_str();
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td class=\"{sev}\">{sev}</td><td>{}/{}</td><td>{}</td></tr>",
                f.code,
                esc(&f.kind),
                esc(&f.name),
                esc(&f.message)
            );
        }
        out.push_str("</table>\n");
    }
    out.push_str("</section>\n");
}

const ROW: u32 = 48;
const LEFT_W: u32 = 330;
const RIGHT_X: u32 = 560;
const RIGHT_W: u32 = 300;

/// The graph as SVG: the workloads in a column on the left, what they
/// call on the right (with its namespace), an arrow per observed edge.
fn svg(g: &Graph) -> String {
    let left: Vec<&graph::Node> = g.nodes.iter().filter(|n| n.workload).collect();
    let right: Vec<&graph::Node> = g.nodes.iter().filter(|n| !n.workload).collect();
    let y = |i: usize| 10 + i as u32 * ROW;
    let row_of = |nodes: &[&graph::Node], id: &str| nodes.iter().position(|n| n.id == id);
    let height = 20 + left.len().max(right.len()) as u32 * ROW;
    let mut out = format!(
        "<svg class=\"graph\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" viewBox=\"0 0 {} {height}\" role=\"img\">\n<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0L10,5L0,10z\" fill=\"context-stroke\"/></marker></defs>\n",
        RIGHT_X + RIGHT_W + 10,
        RIGHT_X + RIGHT_W + 10
    );
    for (i, n) in left.iter().enumerate() {
        let _ = writeln!(
            out,
            "<g class=\"node workload\"><rect x=\"10\" y=\"{}\" width=\"{LEFT_W}\" height=\"{}\" rx=\"6\" fill=\"#fff\" stroke=\"#1d232b\"/><text x=\"20\" y=\"{}\" font-size=\"13\">{}</text><text x=\"20\" y=\"{}\" font-size=\"11\" fill=\"#4a5563\">{}</text></g>",
            y(i),
            ROW - 8,
            y(i) + 17,
            esc(&n.lines[0]),
            y(i) + 33,
            esc(n.lines.get(1).map(String::as_str).unwrap_or_default())
        );
    }
    for (i, n) in right.iter().enumerate() {
        let _ = writeln!(
            out,
            "<g class=\"node host\"><rect x=\"{RIGHT_X}\" y=\"{}\" width=\"{RIGHT_W}\" height=\"{}\" rx=\"6\" fill=\"#eef3fb\" stroke=\"#1d232b\"/><text x=\"{}\" y=\"{}\" font-size=\"13\">{}</text><text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#4a5563\">{}</text></g>",
            y(i),
            ROW - 8,
            RIGHT_X + 10,
            y(i) + 17,
            esc(&n.lines[0]),
            RIGHT_X + 10,
            y(i) + 33,
            esc(&n.group)
        );
    }
    for e in &g.edges {
        let (Some(a), Some(b)) = (row_of(&left, &e.from), row_of(&right, &e.to)) else {
            continue;
        };
        let (x1, y1) = (10 + LEFT_W, y(a) + (ROW - 8) / 2);
        let (x2, y2) = (RIGHT_X, y(b) + (ROW - 8) / 2);
        let (stroke, dash, label) = match e.problem {
            None => ("#1d232b", "", e.label.clone()),
            Some(p) => (
                "#b00020",
                " stroke-dasharray=\"6 4\"",
                format!("{} ({p})", e.label),
            ),
        };
        let _ = writeln!(
            out,
            "<g class=\"edge\"><path d=\"M{x1},{y1} C{},{y1} {},{y2} {x2},{y2}\" fill=\"none\" stroke=\"{stroke}\"{dash} marker-end=\"url(#arrow)\"/><text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"{stroke}\" text-anchor=\"middle\">{}</text></g>",
            x1 + 90,
            x2 - 90,
            (x1 + x2) / 2,
            (y1 + y2) / 2 - 4,
            esc(&label)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// Text for HTML and SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc("<a href=\"x\">&</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"
        );
    }

    #[test]
    fn the_svg_draws_a_box_per_node_and_an_arrow_per_edge_the_scope_would_not_carry_in_red() {
        let node = |id: &str, workload: bool| graph::Node {
            id: id.into(),
            group: "shop".into(),
            lines: vec![format!("<{id}>"), "new Sidecar: 1 host".into()],
            workload,
        };
        let g = Graph {
            nodes: vec![node("w", true), node("h1", false), node("h2", false)],
            edges: vec![
                graph::Edge {
                    from: "w".into(),
                    to: "h1".into(),
                    label: ":80 · 3 req".into(),
                    problem: None,
                },
                graph::Edge {
                    from: "w".into(),
                    to: "h2".into(),
                    label: ":443 · 1 req".into(),
                    problem: Some("blackholed"),
                },
            ],
        };
        let s = svg(&g);
        assert_eq!(s.matches("<g class=\"node ").count(), 3, "{s}");
        assert_eq!(s.matches("<g class=\"edge\">").count(), 2, "{s}");
        assert!(s.contains(">&lt;w&gt;</text>"), "{s}");
        assert!(
            s.contains("stroke=\"#b00020\" stroke-dasharray=\"6 4\""),
            "{s}"
        );
        assert!(s.contains(">:443 · 1 req (blackholed)</text>"), "{s}");
        // Two host rows: 20 + 2 × 48.
        assert!(s.contains(" height=\"116\""), "{s}");
    }
}
