//! Label selectors (`-l`) in kubectl's grammar (apimachinery's
//! `labels.Parse`): comma-separated requirements, each one of
//!
//! ```text
//! key  !key  key=value  key==value  key!=value  key in (a,b)  key notin (a)  key>1  key<1
//! ```
//!
//! Errors name the character position at which the selector stops making
//! sense.

use std::collections::BTreeSet;
use std::fmt;

use anyhow::{anyhow, Result};
use meshscope_shared::snapshot::Labels;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    /// `=`, `==` and `in`: the label is one of the values.
    In,
    /// `!=` and `notin`: the label is absent or none of the values.
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Req {
    key: String,
    op: Op,
    values: BTreeSet<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector(Vec<Req>);

impl Selector {
    /// Parses a selector; the empty selector matches everything, as in kubectl.
    pub fn parse(s: &str) -> Result<Self> {
        Parser::new(s)
            .selector()
            .map(Self)
            .map_err(|e| anyhow!("-l {s:?}: {e} (kubectl selector syntax: k=v, k!=v, k in (a,b), k notin (a), k, !k)"))
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        self.0.iter().all(|r| {
            let have = labels.get(&r.key);
            match r.op {
                Op::In => have.is_some_and(|v| r.values.contains(v)),
                Op::NotIn => have.is_none_or(|v| !r.values.contains(v)),
                Op::Exists => have.is_some(),
                Op::DoesNotExist => have.is_none(),
                Op::GreaterThan | Op::LessThan => {
                    let (Some(have), Some(bound)) = (
                        have.and_then(|v| v.parse::<i64>().ok()),
                        r.values.first().and_then(|v| v.parse::<i64>().ok()),
                    ) else {
                        return false;
                    };
                    if r.op == Op::GreaterThan {
                        have > bound
                    } else {
                        have < bound
                    }
                }
            }
        })
    }
}

// === lexer ===

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Bang,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
    End,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "{s:?}"),
            Tok::Bang => f.write_str("'!'"),
            Tok::Eq => f.write_str("'='"),
            Tok::DoubleEq => f.write_str("'=='"),
            Tok::NotEq => f.write_str("'!='"),
            Tok::Gt => f.write_str("'>'"),
            Tok::Lt => f.write_str("'<'"),
            Tok::Open => f.write_str("'('"),
            Tok::Close => f.write_str("')'"),
            Tok::Comma => f.write_str("','"),
            Tok::End => f.write_str("the end"),
        }
    }
}

fn special(c: char) -> bool {
    matches!(c, '!' | '=' | '(' | ')' | ',' | '>' | '<')
}

/// Tokens with their 1-based character positions.
fn lex(s: &str) -> Vec<(usize, Tok)> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let pos = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        let (tok, len) = match (c, next) {
            ('!', Some('=')) => (Tok::NotEq, 2),
            ('=', Some('=')) => (Tok::DoubleEq, 2),
            ('!', _) => (Tok::Bang, 1),
            ('=', _) => (Tok::Eq, 1),
            ('>', _) => (Tok::Gt, 1),
            ('<', _) => (Tok::Lt, 1),
            ('(', _) => (Tok::Open, 1),
            (')', _) => (Tok::Close, 1),
            (',', _) => (Tok::Comma, 1),
            _ => {
                let end = (i..chars.len())
                    .find(|j| chars[*j].is_whitespace() || special(chars[*j]))
                    .unwrap_or(chars.len());
                (Tok::Ident(chars[i..end].iter().collect()), end - i)
            }
        };
        out.push((pos, tok));
        i += len;
    }
    out.push((chars.len() + 1, Tok::End));
    out
}

// === parser ===

struct Parser {
    toks: Vec<(usize, Tok)>,
    at: usize,
}

/// A parse error at a character position.
struct At(usize, String);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at position {}: {}", self.0, self.1)
    }
}

impl Parser {
    fn new(s: &str) -> Self {
        Self {
            toks: lex(s),
            at: 0,
        }
    }

    fn peek(&self) -> &(usize, Tok) {
        &self.toks[self.at.min(self.toks.len() - 1)]
    }

    fn next(&mut self) -> (usize, Tok) {
        let t = self.peek().clone();
        self.at += 1;
        t
    }

    fn selector(&mut self) -> Result<Vec<Req>, At> {
        let mut reqs = Vec::new();
        if self.peek().1 == Tok::End {
            return Ok(reqs);
        }
        loop {
            reqs.push(self.requirement()?);
            match self.next() {
                (_, Tok::End) => return Ok(reqs),
                (_, Tok::Comma) => {}
                (pos, t) => {
                    return Err(At(
                        pos,
                        format!("expected ',' or the end of the selector, found {t}"),
                    ))
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Req, At> {
        let negated = self.peek().1 == Tok::Bang;
        if negated {
            self.next();
        }
        let key = match self.next() {
            (pos, Tok::Ident(k)) => {
                valid_key(&k).map_err(|why| At(pos, format!("invalid label key {k:?}: {why}")))?;
                k
            }
            (pos, t) => return Err(At(pos, format!("expected a label key, found {t}"))),
        };
        let unary = |op| Req {
            key: key.clone(),
            op,
            values: BTreeSet::new(),
        };
        if matches!(self.peek().1, Tok::End | Tok::Comma) {
            return Ok(unary(if negated {
                Op::DoesNotExist
            } else {
                Op::Exists
            }));
        }
        if negated {
            let (pos, t) = self.peek().clone();
            return Err(At(
                pos,
                format!("!{key} takes no operator or value, found {t}"),
            ));
        }
        let (pos, t) = self.next();
        let (op, values) = match t {
            Tok::Ident(w) if w == "in" => (Op::In, self.set()?),
            Tok::Ident(w) if w == "notin" => (Op::NotIn, self.set()?),
            Tok::Eq | Tok::DoubleEq => (Op::In, BTreeSet::from([self.exact()?])),
            Tok::NotEq => (Op::NotIn, BTreeSet::from([self.exact()?])),
            Tok::Gt | Tok::Lt => {
                let (vpos, _) = self.peek().clone();
                let v = self.exact()?;
                if v.parse::<i64>().is_err() {
                    return Err(At(vpos, format!("{t} compares integers, found {v:?}")));
                }
                let op = if t == Tok::Gt {
                    Op::GreaterThan
                } else {
                    Op::LessThan
                };
                (op, BTreeSet::from([v]))
            }
            t => {
                return Err(At(
                    pos,
                    format!(
                    "expected an operator (=, ==, !=, in, notin, >, <) after {key:?}, found {t}"
                ),
                ))
            }
        };
        Ok(Req { key, op, values })
    }

    /// One value after `=`, `==` or `!=`; nothing before `,` or the end is
    /// the empty value.
    fn exact(&mut self) -> Result<String, At> {
        if matches!(self.peek().1, Tok::End | Tok::Comma) {
            return Ok(String::new());
        }
        match self.next() {
            (pos, Tok::Ident(v)) => {
                valid_value(&v)
                    .map_err(|why| At(pos, format!("invalid label value {v:?}: {why}")))?;
                Ok(v)
            }
            (pos, t) => Err(At(pos, format!("expected a value, found {t}"))),
        }
    }

    /// `(a,b,...)` after `in` or `notin`.
    fn set(&mut self) -> Result<BTreeSet<String>, At> {
        match self.next() {
            (_, Tok::Open) => {}
            (pos, t) => {
                return Err(At(
                    pos,
                    format!("expected '(' to open the list of values, found {t}"),
                ))
            }
        }
        let mut values = BTreeSet::new();
        loop {
            // A value, or nothing (`()`, `(a,)`: the empty value, as kubectl).
            let v = match self.peek().clone() {
                (pos, Tok::Ident(v)) => {
                    self.next();
                    valid_value(&v)
                        .map_err(|why| At(pos, format!("invalid label value {v:?}: {why}")))?;
                    v
                }
                _ => String::new(),
            };
            values.insert(v);
            match self.next() {
                (_, Tok::Comma) => {}
                (_, Tok::Close) => return Ok(values),
                (pos, t) => {
                    return Err(At(
                        pos,
                        format!("expected ',' or ')' in the list of values, found {t}"),
                    ))
                }
            }
        }
    }
}

// === validation (apimachinery's qualified names and label values) ===

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters.
fn valid_name(s: &str) -> Result<(), String> {
    if s.len() > 63 {
        return Err("must be at most 63 characters".into());
    }
    let ok_inner = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let ok_ends = s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !(ok_inner && ok_ends) {
        return Err(
            "must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
                .into(),
        );
    }
    Ok(())
}

fn valid_key(k: &str) -> Result<(), String> {
    let name = match k.split_once('/') {
        Some((prefix, name)) => {
            let dns = !prefix.is_empty()
                && prefix.len() <= 253
                && prefix.split('.').all(|l| {
                    !l.is_empty()
                        && l.chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                });
            if !dns {
                return Err(format!("prefix {prefix:?} must be a DNS subdomain"));
            }
            name
        }
        None => k,
    };
    if name.is_empty() {
        return Err("the name part must not be empty".into());
    }
    valid_name(name)
}

fn valid_value(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    valid_name(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> Labels {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn err(s: &str) -> String {
        format!("{}", Selector::parse(s).unwrap_err())
    }

    #[test]
    fn parses_kubectl_equality_selectors() {
        let s = Selector::parse("app=web, tier!=db,canary,!legacy").unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("canary", "")])));
        assert!(!s.matches(&labels(&[("app", "web")])), "canary is required");
        assert!(!s.matches(&labels(&[("app", "web"), ("canary", ""), ("legacy", "1")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("canary", ""), ("tier", "db")])));
        let s = Selector::parse("app==web").unwrap();
        assert!(s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "webx")])));
    }

    #[test]
    fn set_based_requirements_match_as_in_kubectl() {
        let s = Selector::parse("app in (web, api),tier notin (db)").unwrap();
        assert!(s.matches(&labels(&[("app", "api")])));
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "front")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("app", "batch")])));
        assert!(!s.matches(&labels(&[])), "in needs the label");
        // notin and != match when the label is absent.
        assert!(Selector::parse("tier notin (db)")
            .unwrap()
            .matches(&labels(&[])));
        assert!(Selector::parse("tier!=db").unwrap().matches(&labels(&[])));
    }

    #[test]
    fn keywords_are_values_inside_lists_and_keys_may_have_prefixes() {
        let s = Selector::parse("app.kubernetes.io/name in (in,notin)").unwrap();
        assert!(s.matches(&labels(&[("app.kubernetes.io/name", "notin")])));
        assert!(Selector::parse("version=")
            .unwrap()
            .matches(&labels(&[("version", "")])));
    }

    #[test]
    fn numeric_comparisons_need_integers_on_both_sides() {
        let s = Selector::parse("replicas>2").unwrap();
        assert!(s.matches(&labels(&[("replicas", "3")])));
        assert!(!s.matches(&labels(&[("replicas", "2")])));
        assert!(!s.matches(&labels(&[("replicas", "many")])));
        assert!(Selector::parse("replicas<3")
            .unwrap()
            .matches(&labels(&[("replicas", "1")])));
        assert!(err("replicas>two").contains("at position 10: '>' compares integers"));
    }

    #[test]
    fn the_empty_selector_matches_everything() {
        assert!(Selector::parse("").unwrap().matches(&labels(&[("a", "b")])));
        assert!(Selector::parse("  ").unwrap().matches(&labels(&[])));
    }

    #[test]
    fn errors_name_the_position_where_the_selector_breaks() {
        let e = err("app in (a,b");
        assert!(
            e.starts_with("-l \"app in (a,b\": at position 12: expected ',' or ')' in the list of values, found the end"),
            "{e}"
        );
        assert!(err("app in a").contains("at position 8: expected '(' to open the list"));
        assert!(err("app,").contains("at position 5: expected a label key, found the end"));
        assert!(err("app=web,,tier").contains("at position 9: expected a label key, found ','"));
        assert!(err("!app=web").contains("at position 5: !app takes no operator or value"));
        assert!(err("app ~ web").contains("at position 5: expected an operator"));
        assert!(err("app=web tier").contains("at position 9: expected ',' or the end"));
        assert!(err("app=(web)").contains("at position 5: expected a value, found '('"));
        assert!(err("-bad=x").contains("at position 1: invalid label key \"-bad\""));
        assert!(err("a=b c").contains("at position 5"));
        assert!(err("Example.com/app=x").contains("prefix \"Example.com\" must be a DNS subdomain"));
        assert!(err("app=web_").contains("invalid label value \"web_\""));
        assert!(err("app in (a").contains("kubectl selector syntax"));
    }
}
