//! How sizes read, in every table, summary and report.

/// Bytes in decimal units, as the tables print them (`173 KB`, `1.3 MB`).
pub fn bytes(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{:.1} MB", n as f64 / 1e6)
    } else if n >= 1_000 {
        format!("{:.0} KB", n as f64 / 1e3)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bytes_read_in_decimal_units() {
        assert_eq!(super::bytes(999), "999 B");
        assert_eq!(super::bytes(173_400), "173 KB");
        assert_eq!(super::bytes(1_330_000), "1.3 MB");
    }
}
