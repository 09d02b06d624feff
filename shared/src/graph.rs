//! The observed dependency graph with each workload's scope, as a picture
//! to share: Graphviz DOT (`recommend -o dot`) and a Mermaid flowchart
//! (`recommend -o mermaid`). One box per namespace; in it the workloads
//! recommended for, each with what its scope becomes, and the Services
//! they call; hosts outside the cluster's service domain (ServiceEntries,
//! unregistered names) in a box of their own. An edge is one observed
//! `host:port` with its request count; an edge the scope would not carry
//! (passthrough, blackholed, ...) is drawn dashed and red, with why.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::edges::Meets;
use crate::recommend::{Action, Outcome, Recommendation};
use crate::snapshot::MeshSnapshot;

/// The box of hosts outside the cluster's service domain.
pub const EXTERNAL: &str = "outside the cluster's services";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Unique in the graph: a workload's key, or `host:<hostname>`.
    pub id: String,
    /// The box it is drawn in: a namespace, or [`EXTERNAL`].
    pub group: String,
    /// Its lines of text, the first one its name.
    pub lines: Vec<String>,
    pub workload: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub label: String,
    /// Why the recommended scope would not carry it (`None`: it does).
    pub problem: Option<&'static str>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

/// The graph of `recs` (per workload; a `--per-namespace` recommendation
/// is drawn as its namespace's first workload, labelled with the count).
pub fn build<'r>(snap: &MeshSnapshot, recs: impl IntoIterator<Item = &'r Recommendation>) -> Graph {
    let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
    let mut edges = Vec::new();
    let domain = format!(".svc.{}", snap.options.cluster_domain);
    for r in recs {
        let Some(&w) = r.workloads.first() else {
            continue;
        };
        let id = snap.workloads[w].key();
        nodes.insert(
            id.clone(),
            Node {
                id: id.clone(),
                group: r.namespace.clone(),
                lines: workload_lines(snap, r),
                workload: true,
            },
        );
        for e in &r.edges {
            let to = format!("host:{}", e.host);
            nodes
                .entry(to.clone())
                .or_insert_with(|| host_node(&to, &e.host, &domain));
            let port = if e.port == 0 {
                "any port".to_string()
            } else {
                format!(":{}", e.port)
            };
            edges.push(Edge {
                from: id.clone(),
                to,
                label: format!("{port} · {} req", e.requests),
                problem: (e.meets != Meets::InScope).then(|| e.meets.as_str()),
            });
        }
    }
    Graph {
        nodes: nodes.into_values().collect(),
        edges,
    }
}

/// A Service host in its namespace's box (`name.ns.svc.<domain>`), any
/// other host in [`EXTERNAL`].
fn host_node(id: &str, host: &str, domain: &str) -> Node {
    let service = host
        .strip_suffix(domain)
        .and_then(|s| s.split_once('.'))
        .filter(|(name, ns)| !name.is_empty() && !ns.is_empty() && !ns.contains('.'));
    let (group, name) = match service {
        Some((name, ns)) => (ns.to_string(), name.to_string()),
        None => (EXTERNAL.to_string(), host.to_string()),
    };
    Node {
        id: id.to_string(),
        group,
        lines: vec![name],
        workload: false,
    }
}

/// A recommendation's workload as drawn: its name, and what its scope
/// becomes in a few words.
pub fn workload_lines(snap: &MeshSnapshot, r: &Recommendation) -> Vec<String> {
    let Some(&w) = r.workloads.first() else {
        return vec![r.namespace.clone(), scope_line(snap, r)];
    };
    let wl = &snap.workloads[w];
    let mut name = format!("{}/{}", wl.kind.as_str().to_ascii_lowercase(), wl.name);
    if r.workloads.len() > 1 {
        name = format!("{name} (+{} in the namespace)", r.workloads.len() - 1);
    }
    vec![name, scope_line(snap, r)]
}

/// What the workload's scope becomes, in a few words.
fn scope_line(snap: &MeshSnapshot, r: &Recommendation) -> String {
    let clusters = match &r.after {
        Some(after) => format!("{} → {} clusters", r.before.clusters, after.clusters),
        None => format!("{} clusters", r.before.clusters),
    };
    match &r.outcome {
        Outcome::Sidecar { object, action, .. } => {
            let hosts: usize = object.spec.egress.iter().map(|e| e.hosts.len()).sum();
            let verb = match action {
                Action::Create => "new Sidecar",
                Action::Update => "Sidecar updated",
                Action::Unchanged => "Sidecar unchanged",
            };
            let s = if hosts == 1 { "" } else { "s" };
            format!("{verb}: {hosts} host{s}, {clusters}")
        }
        Outcome::UserOwned { sidecar, missing } => {
            let key = snap.sidecars[*sidecar].key();
            if missing.is_empty() {
                format!("user-owned Sidecar {key}, {clusters}")
            } else {
                let s = if missing.len() == 1 { "" } else { "s" };
                format!("user-owned Sidecar {key} misses {} host{s}", missing.len())
            }
        }
        Outcome::Skipped(why) => {
            let short: String = why.chars().take(60).collect();
            let more = if why.chars().count() > 60 { "…" } else { "" };
            format!("skipped: {short}{more}")
        }
    }
}

/// Graphviz DOT: `dot -Tsvg` draws it.
pub fn dot(g: &Graph) -> String {
    let q = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let mut out = String::from(
        "digraph meshscope {\n  rankdir=LR;\n  node [shape=box, style=rounded, fontname=\"sans-serif\"];\n  edge [fontname=\"sans-serif\", fontsize=10];\n",
    );
    for (i, (group, nodes)) in groups(g).iter().enumerate() {
        let _ = writeln!(out, "  subgraph cluster_{i} {{\n    label={};", q(group));
        for n in nodes {
            let label = n
                .lines
                .iter()
                .map(|l| l.replace('\\', "\\\\").replace('"', "\\\""))
                .collect::<Vec<_>>()
                .join("\\n");
            let style = if n.workload {
                ""
            } else {
                ", style=\"rounded,filled\", fillcolor=\"#eef3fb\""
            };
            let _ = writeln!(out, "    {} [label=\"{label}\"{style}];", q(&n.id));
        }
        out.push_str("  }\n");
    }
    for e in &g.edges {
        let (label, style) = match e.problem {
            None => (e.label.clone(), String::new()),
            Some(p) => (
                format!("{} ({p})", e.label),
                ", style=dashed, color=red, fontcolor=red".into(),
            ),
        };
        let _ = writeln!(
            out,
            "  {} -> {} [label={}{style}];",
            q(&e.from),
            q(&e.to),
            q(&label)
        );
    }
    out.push_str("}\n");
    out
}

/// A Mermaid flowchart (GitHub and GitLab render it in Markdown).
pub fn mermaid(g: &Graph) -> String {
    // Mermaid ids are plain words: n0, n1, ... in node order.
    let ids: BTreeMap<&str, String> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.as_str(), format!("n{i}")))
        .collect();
    let text = |s: &str| {
        s.replace('&', "#amp;")
            .replace('"', "#quot;")
            .replace('<', "#lt;")
            .replace('>', "#gt;")
    };
    let mut out = String::from("flowchart LR\n");
    for (i, (group, nodes)) in groups(g).iter().enumerate() {
        let _ = writeln!(out, "  subgraph g{i}[\"{}\"]", text(group));
        for n in nodes {
            let label: Vec<String> = n.lines.iter().map(|l| text(l)).collect();
            let (open, close) = if n.workload { ("[", "]") } else { ("([", "])") };
            let _ = writeln!(
                out,
                "    {}{open}\"{}\"{close}",
                ids[n.id.as_str()],
                label.join("<br/>")
            );
        }
        out.push_str("  end\n");
    }
    let mut bad = Vec::new();
    for (i, e) in g.edges.iter().enumerate() {
        let (arrow, label) = match e.problem {
            None => ("-->", e.label.clone()),
            Some(p) => {
                bad.push(i);
                ("-.->", format!("{} ({p})", e.label))
            }
        };
        let _ = writeln!(
            out,
            "  {} {arrow}|\"{}\"| {}",
            ids[e.from.as_str()],
            text(&label),
            ids[e.to.as_str()]
        );
    }
    for i in bad {
        let _ = writeln!(out, "  linkStyle {i} stroke:red,color:red");
    }
    out
}

/// The nodes by box, boxes and nodes in order.
fn groups(g: &Graph) -> BTreeMap<&str, Vec<&Node>> {
    let mut out: BTreeMap<&str, Vec<&Node>> = BTreeMap::new();
    for n in &g.nodes {
        out.entry(n.group.as_str()).or_default().push(n);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph() -> Graph {
        Graph {
            nodes: vec![
                Node {
                    id: "Deployment/shop/web".into(),
                    group: "shop".into(),
                    lines: vec![
                        "deployment/web".into(),
                        "new Sidecar: 2 hosts, 40 → 9 clusters".into(),
                    ],
                    workload: true,
                },
                Node {
                    id: "host:db.data.svc.cluster.local".into(),
                    group: "data".into(),
                    lines: vec!["db".into()],
                    workload: false,
                },
                Node {
                    id: "host:api.\"quoted\".example.com".into(),
                    group: EXTERNAL.into(),
                    lines: vec!["api.\"quoted\".example.com".into()],
                    workload: false,
                },
            ],
            edges: vec![
                Edge {
                    from: "Deployment/shop/web".into(),
                    to: "host:db.data.svc.cluster.local".into(),
                    label: ":5432 · 12 req".into(),
                    problem: None,
                },
                Edge {
                    from: "Deployment/shop/web".into(),
                    to: "host:api.\"quoted\".example.com".into(),
                    label: ":443 · 3 req".into(),
                    problem: Some("passthrough"),
                },
            ],
        }
    }

    #[test]
    fn dot_boxes_each_namespace_escapes_quotes_and_marks_edges_the_scope_would_not_carry() {
        let d = dot(&graph());
        assert!(d.starts_with("digraph meshscope {\n  rankdir=LR;"), "{d}");
        assert!(d.contains("label=\"shop\";"), "{d}");
        assert!(
            d.contains("\"Deployment/shop/web\" [label=\"deployment/web\\nnew Sidecar: 2 hosts, 40 → 9 clusters\"];"),
            "{d}"
        );
        assert!(d.contains("\"host:api.\\\"quoted\\\".example.com\""), "{d}");
        assert!(
            d.contains("\"Deployment/shop/web\" -> \"host:db.data.svc.cluster.local\" [label=\":5432 · 12 req\"];"),
            "{d}"
        );
        assert!(
            d.contains(
                "[label=\":443 · 3 req (passthrough)\", style=dashed, color=red, fontcolor=red];"
            ),
            "{d}"
        );
        assert_eq!(d.matches("subgraph cluster_").count(), 3);
        assert!(d.ends_with("}\n"));
    }

    #[test]
    fn mermaid_uses_plain_ids_escaped_labels_and_styles_edges_the_scope_would_not_carry() {
        let m = mermaid(&graph());
        assert!(m.starts_with("flowchart LR\n"), "{m}");
        // Nodes in id order: the workload's key sorts first.
        assert!(
            m.contains("    n0[\"deployment/web<br/>new Sidecar: 2 hosts, 40 → 9 clusters\"]"),
            "{m}"
        );
        assert!(m.contains("    n1([\"db\"])"), "{m}");
        assert!(
            m.contains("n2([\"api.#quot;quoted#quot;.example.com\"])"),
            "{m}"
        );
        assert!(m.contains("  n0 -->|\":5432 · 12 req\"| n1"), "{m}");
        assert!(
            m.contains("  n0 -.->|\":443 · 3 req (passthrough)\"| n2"),
            "{m}"
        );
        assert!(m.contains("  linkStyle 1 stroke:red,color:red"), "{m}");
        assert_eq!(m.matches("  subgraph ").count(), 3);
        assert_eq!(m.matches("  end\n").count(), 3);
    }

    #[test]
    fn service_hosts_go_to_their_namespace_and_other_hosts_outside() {
        let d = ".svc.cluster.local";
        assert_eq!(host_node("h", "db.data.svc.cluster.local", d).group, "data");
        assert_eq!(
            host_node("h", "db.data.svc.cluster.local", d).lines,
            vec!["db"]
        );
        assert_eq!(host_node("h", "api.stripe.com", d).group, EXTERNAL);
        assert_eq!(host_node("h", "a.b.c.svc.cluster.local", d).group, EXTERNAL);
        assert_eq!(host_node("h", ".svc.cluster.local", d).group, EXTERNAL);
    }
}
