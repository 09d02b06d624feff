//! `-o jsonpath=TEMPLATE`: kubectl's JSONPath templates, over a command's
//! JSON output. A template is text with `{...}` actions: an expression
//! (`{.items[*].metadata.name}`, `{$.kind}`, `{@}`), a quoted string
//! (`{"\n"}`, `{'\t'}`), or `{range EXPR}...{end}`, which renders its body
//! once per match with `@` (and a leading `.`) meaning that match. The
//! expressions themselves are RFC 9535 JSONPath, which kubectl's filters
//! and slices (`[?(@.code=="MS0001")]`, `[0]`, `[-1:]`, `[*]`, `..name`)
//! already are; each match prints as kubectl prints it: a string as is,
//! anything else as JSON, several matches of one expression separated by
//! spaces, and a missing key as nothing.

use anyhow::{anyhow, bail, Result};
use jsonpath_rust::JsonPath;
use serde_json::Value;

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    nodes: Vec<Node>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Text(String),
    /// A JSONPath expression, as `$...` (from the root) or `@...` (from
    /// the current `range` item).
    Expr(String),
    Range(String, Vec<Node>),
}

impl Template {
    /// Parses `text`; a template without `{` is one expression (kubectl's
    /// relaxed form, `.metadata.name`).
    pub fn parse(text: &str) -> Result<Template> {
        let text = if text.contains('{') {
            text.to_string()
        } else {
            format!("{{{text}}}")
        };
        let mut actions = split(&text)?.into_iter();
        let nodes = nodes(&mut actions, false)?;
        Ok(Template { nodes })
    }

    /// Renders the template over `root`.
    pub fn render(&self, root: &Value) -> Result<String> {
        let mut out = String::new();
        render(&self.nodes, root, root, &mut out)?;
        Ok(out)
    }
}

/// Text and `{...}` actions, in order.
enum Piece {
    Text(String),
    Action(String),
}

fn split(text: &str) -> Result<Vec<Piece>> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_string()));
        }
        let after = &rest[open + 1..];
        let close = action_end(after).ok_or_else(|| anyhow!("unclosed {{ in {text:?}"))?;
        pieces.push(Piece::Action(after[..close].trim().to_string()));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_string()));
    }
    Ok(pieces)
}

/// The `}` that closes an action, skipping quoted strings (a filter may
/// compare with `"}"`).
fn action_end(s: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(_), '\\') if !escaped => {
                escaped = true;
                continue;
            }
            (Some(q), c) if c == q && !escaped => quote = None,
            (None, '"' | '\'') => quote = Some(c),
            (None, '}') => return Some(i),
            _ => {}
        }
        escaped = false;
    }
    None
}

/// The nodes up to `{end}` (when `in_range`) or the end of the template.
fn nodes(pieces: &mut std::vec::IntoIter<Piece>, in_range: bool) -> Result<Vec<Node>> {
    let mut out = Vec::new();
    while let Some(p) = pieces.next() {
        match p {
            Piece::Text(t) => out.push(Node::Text(t)),
            Piece::Action(a) if a == "end" => {
                if !in_range {
                    bail!("{{end}} without {{range}}");
                }
                return Ok(out);
            }
            Piece::Action(a) => {
                if let Some(expr) = a.strip_prefix("range ") {
                    let body = nodes(pieces, true)?;
                    out.push(Node::Range(expression(expr.trim())?, body));
                } else if let Some(s) = quoted(&a)? {
                    out.push(Node::Text(s));
                } else {
                    out.push(Node::Expr(expression(&a)?));
                }
            }
        }
    }
    if in_range {
        bail!("{{range}} without {{end}}");
    }
    Ok(out)
}

/// A quoted string action, unescaped (`\n`, `\t`, `\\`, `\"`).
fn quoted(a: &str) -> Result<Option<String>> {
    let Some(q) = a.chars().next().filter(|c| *c == '"' || *c == '\'') else {
        return Ok(None);
    };
    let inner = a
        .strip_prefix(q)
        .and_then(|s| s.strip_suffix(q))
        .ok_or_else(|| anyhow!("unterminated string {a:?}"))?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    Ok(Some(out))
}

/// kubectl's expression as RFC 9535: `.a` and `[0]` from the current
/// node, `$` the root, `@` the current node.
fn expression(e: &str) -> Result<String> {
    if e.is_empty() {
        bail!("empty {{}}");
    }
    Ok(match e.chars().next() {
        Some('$') | Some('@') => e.to_string(),
        Some('.') | Some('[') => format!("@{e}"),
        _ => format!("@.{e}"),
    })
}

fn render(nodes: &[Node], root: &Value, current: &Value, out: &mut String) -> Result<()> {
    for n in nodes {
        match n {
            Node::Text(t) => out.push_str(t),
            Node::Expr(e) => {
                let found = query(e, root, current)?;
                let shown: Vec<String> = found.iter().map(|v| show(v)).collect();
                out.push_str(&shown.join(" "));
            }
            Node::Range(e, body) => {
                for item in query(e, root, current)? {
                    // An array item ranges over its elements, as kubectl's
                    // `{range .items}`.
                    match item {
                        Value::Array(items) => {
                            for i in items {
                                render(body, root, i, out)?;
                            }
                        }
                        other => render(body, root, other, out)?,
                    }
                }
            }
        }
    }
    Ok(())
}

/// The matches of `e`: from the root for `$`, else from `current`.
fn query<'a>(e: &str, root: &'a Value, current: &'a Value) -> Result<Vec<&'a Value>> {
    let (base, path) = match e.strip_prefix('@') {
        Some(rest) => (current, format!("${rest}")),
        None => (root, e.to_string()),
    };
    if path == "$" {
        return Ok(vec![base]);
    }
    base.query(&path)
        .map_err(|err| anyhow!("cannot read {e:?}: {err}"))
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(t: &str, v: &Value) -> String {
        Template::parse(t).unwrap().render(v).unwrap()
    }

    #[test]
    fn kubectls_forms_render_as_kubectl_renders_them() {
        let list = json!({"kind": "List", "items": [
            {"metadata": {"name": "a", "namespace": "x"}, "spec": {"n": 1}},
            {"metadata": {"name": "b", "namespace": "y"}, "spec": {"n": 2}},
        ]});
        assert_eq!(render("{.items[*].metadata.name}", &list), "a b");
        assert_eq!(render("{.kind}", &list), "List");
        assert_eq!(render(".kind", &list), "List");
        assert_eq!(render("{$.items[0].spec}", &list), "{\"n\":1}");
        assert_eq!(
            render(
                "{range .items[*]}{.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}",
                &list
            ),
            "x/a\ny/b\n"
        );
        assert_eq!(render("{range .items}{@.spec.n}{','}{end}", &list), "1,2,");
        assert_eq!(
            render("{.items[?(@.metadata.name==\"b\")].spec.n}", &list),
            "2"
        );
        assert_eq!(render("{.items[-1:].metadata.name}", &list), "b");
        assert_eq!(render("name: {.nosuch}.", &list), "name: .");
        assert_eq!(render("{..name}", &list), "a b");
    }

    #[test]
    fn broken_templates_say_what_is_wrong() {
        for (t, says) in [
            ("{.items", "unclosed {"),
            ("{range .items[*]}{.a}", "{range} without {end}"),
            ("{.a}{end}", "{end} without {range}"),
            ("{\"x}", "unclosed {"),
            ("{}", "empty {}"),
        ] {
            let e = Template::parse(t).unwrap_err().to_string();
            assert!(e.contains(says), "{t}: {e}");
        }
        let e = Template::parse("{.a[?(@.b==)]}")
            .unwrap()
            .render(&json!({}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot read"), "{e}");
    }
}
