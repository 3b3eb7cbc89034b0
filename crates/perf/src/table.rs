//! Plain-text tables and human-readable units for the CLI and the book.

use std::fmt;

/// Column alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Pad on the right.
    Left,
    /// Pad on the left (numbers).
    Right,
}

/// A text table: a header row and rows of cells, columns sized to fit.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    headers: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these headers; the first column is left-aligned, the rest right-aligned.
    pub fn new<S: Into<String>>(headers: impl IntoIterator<Item = S>) -> Self {
        let headers: Vec<String> = headers.into_iter().map(Into::into).collect();
        let align = (0..headers.len())
            .map(|i| if i == 0 { Align::Left } else { Align::Right })
            .collect();
        Self {
            headers,
            align,
            rows: Vec::new(),
        }
    }

    /// Sets the alignment of every column (extra entries ignored, missing ones unchanged).
    pub fn with_align(mut self, align: &[Align]) -> Self {
        for (a, b) in self.align.iter_mut().zip(align) {
            *a = *b;
        }
        self
    }

    /// Appends a row; shorter rows are padded with empty cells, longer ones truncated.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        let mut r: Vec<String> = cells.into_iter().map(Into::into).collect();
        r.resize(self.headers.len(), String::new());
        self.rows.push(r);
        self
    }

    /// Number of rows (excluding the header).
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = |s: &str| s.chars().count();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(width(c));
            }
        }
        let line = |f: &mut fmt::Formatter<'_>, cells: &[String]| -> fmt::Result {
            let mut out = String::new();
            for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
                if i > 0 {
                    out.push_str("  ");
                }
                let pad = " ".repeat(w - width(c));
                match self.align[i] {
                    Align::Left => {
                        out.push_str(c);
                        out.push_str(&pad);
                    }
                    Align::Right => {
                        out.push_str(&pad);
                        out.push_str(c);
                    }
                }
            }
            writeln!(f, "{}", out.trim_end())
        };
        line(f, &self.headers)?;
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        line(f, &rule)?;
        for r in &self.rows {
            line(f, r)?;
        }
        Ok(())
    }
}

fn si(value: f64, unit: &str, prefixes: &[(f64, &str)]) -> String {
    si_with(value, unit, prefixes, sig3)
}

fn si_with(value: f64, unit: &str, prefixes: &[(f64, &str)], digits: fn(f64) -> String) -> String {
    if !value.is_finite() {
        return format!("{value} {unit}");
    }
    let abs = value.abs();
    for &(scale, prefix) in prefixes {
        if abs >= scale {
            return format!("{} {prefix}{unit}", digits(value / scale));
        }
    }
    format!("{} {unit}", digits(value))
}

/// A datasheet figure as the datasheet gives it: four significant figures (every peak
/// in [`crate::specs`] has at most four) with trailing zeros dropped (`989.5`, `312`,
/// `1.979`). [`sig3`] would print H100's 989.5 TFLOP/s peak as `990` beside estimates
/// computed with 989.5.
pub fn sig_exact(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let digits = x.abs().log10().floor() as i32;
    let decimals = (3 - digits).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Three significant figures without trailing zeros beyond them (`312`, `2.04`, `0.125`);
/// exponent form (`1.00e-12`, `3.00e20`) far from 1, rather than hundreds of digits.
pub fn sig3(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let digits = x.abs().log10().floor() as i32;
    if !(-4..15).contains(&digits) {
        return format!("{x:.2e}");
    }
    let decimals = (2 - digits).max(0) as usize;
    format!("{x:.decimals$}")
}

const DECIMAL: &[(f64, &str)] = &[
    (1e18, "E"),
    (1e15, "P"),
    (1e12, "T"),
    (1e9, "G"),
    (1e6, "M"),
    (1e3, "k"),
];

/// Bytes in decimal (SI) units, `GB` = 1e9 bytes (`1.00 GB`, `2.04 TB`): for traffic and
/// message sizes, which pair with bandwidths in decimal `GB/s`.
pub fn bytes(b: f64) -> String {
    si(b, "B", DECIMAL)
}

const BINARY: &[(f64, &str)] = &[
    (1_152_921_504_606_846_976.0, "Ei"),
    (1_125_899_906_842_624.0, "Pi"),
    (1_099_511_627_776.0, "Ti"),
    (1_073_741_824.0, "Gi"),
    (1_048_576.0, "Mi"),
    (1024.0, "Ki"),
];

/// Bytes in binary (IEC) units, `GiB` = 2^30 bytes (`80.0 GiB`, `512 MiB`): for memory
/// capacities, which vendors size in powers of two (an "80 GB" H100 holds 80 GiB).
pub fn bytes_binary(b: f64) -> String {
    si(b, "B", BINARY)
}

/// FLOP/s (`312 TFLOP/s`).
pub fn flops_per_s(f: f64) -> String {
    si(f, "FLOP/s", DECIMAL)
}

/// A peak FLOP/s from a datasheet, unrounded ([`sig_exact`]): `989.5 TFLOP/s`.
pub fn peak_flops_per_s(f: f64) -> String {
    si_with(f, "FLOP/s", DECIMAL, sig_exact)
}

/// A FLOP count (`3.15e23 FLOP` style for huge counts, SI below 1e18).
pub fn flops(f: f64) -> String {
    if f.abs() >= 1e21 {
        format!("{f:.3e} FLOP")
    } else {
        si(f, "FLOP", DECIMAL)
    }
}

/// Bytes/s (`2.04 TB/s`).
pub fn bandwidth(b: f64) -> String {
    si(b, "B/s", DECIMAL)
}

/// A plain count (parameters, tokens) with SI prefixes: `124 M`, `175 G`, `15.0 T`,
/// `2.20 k`. Never `B` for billion, which would read as bytes; callers add the noun
/// (`175 G params`).
pub fn count(c: f64) -> String {
    si(c, "", DECIMAL).trim_end().to_string()
}

/// A duration: µs, ms, s, min, h or days, whichever reads best.
pub fn duration(s: f64) -> String {
    if !s.is_finite() {
        return format!("{s} s");
    }
    let a = s.abs();
    if a < 1e-3 {
        format!("{} µs", sig3(s * 1e6))
    } else if a < 1.0 {
        format!("{} ms", sig3(s * 1e3))
    } else if a < 120.0 {
        format!("{} s", sig3(s))
    } else if a < 7200.0 {
        format!("{} min", sig3(s / 60.0))
    } else if a < 2.0 * 86400.0 {
        format!("{} h", sig3(s / 3600.0))
    } else {
        format!("{} days", sig3(s / 86400.0))
    }
}

/// A fraction as a percentage (`45.2%`); absurd ones in exponent form (`1.00e6%`), not as
/// hundreds of digits.
pub fn percent(x: f64) -> String {
    let p = x * 100.0;
    if p.abs() >= 1e4 {
        format!("{p:.2e}%")
    } else {
        format!("{p:.1}%")
    }
}

/// Parses a quantity with an optional SI suffix, for CLI flags: `175e9`, `175B` or `175G`
/// (billion), `300B`, `1.5T`, `8k`, `4M`; for byte sizes also `1GB`, `512MB`, `1GiB`,
/// `64KiB`. A lone `B` means billion (parameters, tokens), not bytes. `_` separators allowed.
pub fn parse_quantity(s: &str) -> crate::Result<f64> {
    let bad = || {
        crate::PerfError::Invalid(format!(
            "'{s}' is not a quantity (e.g. 175e9, 175B, 1.5T, 8k, 1GiB)"
        ))
    };
    let t = s.trim().replace('_', "");
    if let Ok(v) = t.parse::<f64>() {
        return if v.is_finite() { Ok(v) } else { Err(bad()) };
    }
    let split = t
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .ok_or_else(bad)?;
    let (num, suffix) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| bad())?;
    let scale = match suffix {
        "k" | "K" | "kB" | "KB" => 1e3,
        "M" | "MB" => 1e6,
        "B" | "G" | "GB" | "bn" => 1e9,
        "T" | "TB" => 1e12,
        "P" | "PB" => 1e15,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024f64.powi(4),
        _ => return Err(bad()),
    };
    Ok(v * scale)
}

/// Splits `s` (without `_` separators) into its number and its unit suffix.
fn split_suffix(s: &str) -> Option<(f64, String)> {
    let t = s.trim().replace('_', "");
    let split = t
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let v: f64 = num.trim().parse().ok()?;
    v.is_finite().then(|| (v, suffix.trim().to_string()))
}

/// Parses a count (parameters, tokens) for CLI flags: `175e9`, `175G`, `175B` or `175bn`
/// (billion: on input a count's `B` cannot mean bytes), `1.5T`, `8k`, `4M`. Byte units
/// (`GB`, `GiB`) are refused: a count is not a size. `_` separators allowed.
pub fn parse_count(s: &str) -> crate::Result<f64> {
    let bad = || {
        crate::PerfError::Invalid(format!(
            "'{s}' is not a count (e.g. 175e9, 175G, 175B = 175 billion, 1.5T, 8k)"
        ))
    };
    let (v, suffix) = split_suffix(s).ok_or_else(bad)?;
    let scale = match suffix.as_str() {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" => 1e6,
        "B" | "G" | "bn" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        _ => return Err(bad()),
    };
    Ok(v * scale)
}

/// Parses a size in bytes for CLI flags: `1e9`, `512B`, `1GB`/`1G` (1e9), `256MB`, `1GiB`
/// (2^30), `64KiB`. Here `B` is bytes, so `1B` is one byte. `_` separators allowed.
pub fn parse_bytes(s: &str) -> crate::Result<f64> {
    let bad = || {
        crate::PerfError::Invalid(format!(
            "'{s}' is not a size in bytes (e.g. 1e9, 1GB = 1e9 bytes, 1GiB = 2^30 bytes, 256MiB)"
        ))
    };
    let (v, suffix) = split_suffix(s).ok_or_else(bad)?;
    let decimal = |p: &str| ["", "B"].iter().any(|b| suffix == format!("{p}{b}"));
    let binary = |p: &str| suffix == format!("{p}iB") || suffix == format!("{p}i");
    let scale = [
        ("", 0),
        ("k", 1),
        ("K", 1),
        ("M", 2),
        ("G", 3),
        ("T", 4),
        ("P", 5),
    ]
    .iter()
    .find_map(|&(p, e)| {
        if decimal(p) {
            Some(1e3f64.powi(e))
        } else if !p.is_empty() && binary(p) {
            Some(1024f64.powi(e))
        } else {
            None
        }
    })
    .ok_or_else(bad)?;
    Ok(v * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datasheet_peaks_print_as_given() {
        assert_eq!(peak_flops_per_s(989.5e12), "989.5 TFLOP/s");
        assert_eq!(peak_flops_per_s(312e12), "312 TFLOP/s");
        assert_eq!(peak_flops_per_s(1979e12), "1.979 PFLOP/s");
        assert_eq!(peak_flops_per_s(19.5e12), "19.5 TFLOP/s");
        // The rounded form, for everything computed.
        assert_eq!(flops_per_s(989.5e12), "990 TFLOP/s");
    }

    #[test]
    fn formats_units() {
        assert_eq!(flops_per_s(312e12), "312 TFLOP/s");
        assert_eq!(bandwidth(2039e9), "2.04 TB/s");
        assert_eq!(bytes(80e9), "80.0 GB");
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(duration(440e-6), "440 µs");
        assert_eq!(duration(34.0 * 86400.0), "34.0 days");
        assert_eq!(flops(3.15e23), "3.150e23 FLOP");
        assert_eq!(percent(0.4525), "45.2%");
        assert_eq!(percent(1e300), "1.00e302%");
        assert_eq!(duration(1e-306), "1.00e-300 µs");
        assert_eq!(sig3(0.000123), "0.000123");
        assert_eq!(count(124_439_808.0), "124 M");
        assert_eq!(count(175e9), "175 G");
        assert_eq!(bytes_binary(80.0 * 1024f64.powi(3)), "80.0 GiB");
        assert_eq!(bytes_binary(512.0 * 1024.0 * 1024.0), "512 MiB");
        assert_eq!(bytes_binary(100.0), "100 B");
    }

    #[test]
    fn parses_quantities() {
        assert_eq!(parse_quantity("175e9").unwrap(), 175e9);
        assert_eq!(parse_quantity("175B").unwrap(), 175e9);
        assert_eq!(parse_quantity("1.5T").unwrap(), 1.5e12);
        assert_eq!(parse_quantity("8k").unwrap(), 8e3);
        assert_eq!(parse_quantity("1GB").unwrap(), 1e9);
        assert_eq!(parse_quantity("1GiB").unwrap(), 1073741824.0);
        assert_eq!(parse_quantity("1_000").unwrap(), 1000.0);
        assert!(parse_quantity("lots").is_err());
        assert!(parse_quantity("5X").is_err());
        assert!(parse_quantity("inf").is_err());
    }

    /// On input a count's `B` is a billion and a size's `B` is a byte; neither parser accepts
    /// the other's units.
    #[test]
    fn parses_counts_and_bytes_apart() {
        assert_eq!(parse_count("175B").unwrap(), 175e9);
        assert_eq!(parse_count("175G").unwrap(), 175e9);
        assert_eq!(parse_count("1_000").unwrap(), 1000.0);
        assert_eq!(parse_count("-5").unwrap(), -5.0);
        assert!(parse_count("1GB").is_err());
        assert!(parse_count("1GiB").is_err());
        assert!(parse_count("nan").is_err());
        assert!(parse_count("1e999").is_err());
        assert_eq!(parse_bytes("1B").unwrap(), 1.0);
        assert_eq!(parse_bytes("1GB").unwrap(), 1e9);
        assert_eq!(parse_bytes("1G").unwrap(), 1e9);
        assert_eq!(parse_bytes("256MiB").unwrap(), 256.0 * 1048576.0);
        assert_eq!(parse_bytes("1GiB").unwrap(), 1073741824.0);
        assert_eq!(parse_bytes("64KiB").unwrap(), 65536.0);
        assert_eq!(parse_bytes("1e9").unwrap(), 1e9);
        assert!(parse_bytes("1bn").is_err());
        assert!(parse_bytes("1iB").is_err());
        assert!(parse_bytes("inf").is_err());
    }

    #[test]
    fn aligns_columns() {
        let mut t = Table::new(["op", "time"]);
        t.row(["gemm", "1 ms"]).row(["softmax", "10 µs"]);
        let s = t.to_string();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "op        time");
        assert_eq!(lines[2], "gemm      1 ms");
        assert_eq!(lines[3], "softmax  10 µs");
    }
}
