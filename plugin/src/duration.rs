//! Durations as the flags spell them: `--request-timeout` in kubectl's Go
//! syntax, `--since` and `--wait` as `30m`, `24h`, `7d`. A leaf module: it
//! imports nothing from the crate.

use std::fmt;
use std::time::Duration;

/// `--request-timeout` when not given.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// `--request-timeout`: the bound on one request to the API server (one
/// page of a list, or one call with all its retries). `None` waits forever
/// (kubectl's `0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestTimeout(pub Option<Duration>);

impl Default for RequestTimeout {
    fn default() -> Self {
        RequestTimeout(Some(DEFAULT_REQUEST_TIMEOUT))
    }
}

impl RequestTimeout {
    pub fn get(self) -> Option<Duration> {
        self.0
    }

    /// Whole seconds, rounded up; `u64::MAX` when there is no timeout.
    pub fn secs(self) -> u64 {
        match self.0 {
            Some(d) => d.as_secs() + u64::from(d.subsec_nanos() > 0),
            None => u64::MAX,
        }
    }
}

impl fmt::Display for RequestTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(d) => f.write_str(&show_duration(d)),
            None => f.write_str("0 (no timeout)"),
        }
    }
}

/// `30s`, `500ms`, `1.5s`, `2m`, `1h`.
pub fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if !ms.is_multiple_of(1000) {
        return format!("{}s", d.as_secs_f64());
    }
    let s = d.as_secs();
    if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// Parses `--request-timeout` as kubectl does: a Go duration (`30s`,
/// `1m30s`, `500ms`, `1.5h`) or a bare number of seconds; `0` means no
/// timeout.
pub fn parse_request_timeout(s: &str) -> Result<RequestTimeout, String> {
    let d = parse_go_duration(s)?;
    Ok(RequestTimeout((!d.is_zero()).then_some(d)))
}

fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let bad = || {
        format!("invalid duration {t:?}: use kubectl's syntax, e.g. 30s, 1m, 500ms, or a number of seconds (0: no timeout)")
    };
    if let Ok(n) = t.parse::<u64>() {
        return Ok(Duration::from_secs(n));
    }
    if t.starts_with('-') {
        return Err(format!(
            "invalid duration {t:?}: it cannot be negative (0 means no timeout)"
        ));
    }
    let mut rest = t.strip_prefix('+').unwrap_or(t);
    if rest.is_empty() {
        return Err(bad());
    }
    let mut nanos = 0f64;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (num, tail) = rest.split_at(num_end);
        let v: f64 = num.parse().map_err(|_| bad())?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_end);
        let per = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => {
                return Err(format!(
                    "invalid duration {t:?}: unknown unit {unit:?} (use ms, s, m or h)"
                ))
            }
        };
        nanos += v * per;
        rest = next;
    }
    if !nanos.is_finite() || nanos >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok(Duration::from_nanos(nanos.round() as u64))
}
/// Parses durations like `90s`, `30m`, `24h`, `7d`.
pub fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("invalid duration {s:?} (expected e.g. 30m, 24h, 7d)"))?;
    let secs = match unit {
        "s" | "" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        "w" => n * 7 * 86400,
        _ => anyhow::bail!("invalid duration unit in {s:?} (use s, m, h, d or w)"),
    };
    Ok(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86400)
        );
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn request_timeouts_read_as_kubectl_reads_them() {
        let t = |s: &str| parse_request_timeout(s).map(RequestTimeout::get);
        assert_eq!(t("30s"), Ok(Some(Duration::from_secs(30))));
        assert_eq!(t("1m"), Ok(Some(Duration::from_secs(60))));
        assert_eq!(t("500ms"), Ok(Some(Duration::from_millis(500))));
        assert_eq!(t("1m30s"), Ok(Some(Duration::from_secs(90))));
        assert_eq!(t("1.5h"), Ok(Some(Duration::from_secs(5400))));
        assert_eq!(t("7"), Ok(Some(Duration::from_secs(7))));
        assert_eq!(t("0"), Ok(None));
        assert_eq!(t("0s"), Ok(None));
        assert!(t("-1s").unwrap_err().contains("negative"));
        assert!(t("5d").unwrap_err().contains("unknown unit \"d\""));
        assert!(t("soon").is_err() && t("").is_err() && t("1.2.3s").is_err());
        assert_eq!(RequestTimeout(Some(Duration::from_millis(500))).secs(), 1);
        assert_eq!(RequestTimeout(None).secs(), u64::MAX);
        assert_eq!(RequestTimeout::default().to_string(), "30s");
    }
}
