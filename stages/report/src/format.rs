//! Number formatting as the paper prints it.
//!
//! - parameter counts in millions with two decimals and an `M` (`3.13M`, spec C.3);
//! - losses with four decimals;
//! - ExactState, Labelwise, Trajectory and coverage as percentages with two decimals (the
//!   `%` sign lives in the column header);
//! - hyperparameters as in the paper's Table 7 (spec D.2): learning rate and weight decay in
//!   short scientific notation (`3e-3`, `1e-2`, `0`), warm-up in thousands (`5k`), β2 and the
//!   cosine floor as decimals without the leading zero (`.95`, `.999`, `.1`, `.01`).

/// `3128150` → `3.13M`.
pub fn millions(params: u64) -> String {
    format!("{:.2}M", params as f64 / 1e6)
}

/// A loss with four decimals.
pub fn loss(value: f64) -> String {
    format!("{value:.4}")
}

/// A fraction in `[0, 1]` as a percentage with two decimals (`0.12345` → `12.35`).
pub fn percent(fraction: f64) -> String {
    format!("{:.2}", fraction * 100.0)
}

/// The full-precision percentage of a fraction (for CSV cells).
pub fn percent_raw(fraction: f64) -> String {
    let value = fraction * 100.0;
    format!("{value}")
}

/// A count with thousands separators (`20480` → `20,480`).
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Short scientific notation: `0.003` → `3e-3`, `0.0003` → `3e-4`, `0` → `0`, `1.5e-3` →
/// `1.5e-3`; values of at least 1 print plainly (`2`, `2.5`).
pub fn sci(value: f64) -> String {
    if value == 0.0 {
        return "0".to_owned();
    }
    if !value.is_finite() || value.abs() >= 1.0 {
        return format!("{value}");
    }
    // `{:e}` is the shortest round-trip mantissa, e.g. `3e-3` or `1.5e-3`.
    format!("{value:e}")
}

/// A decimal without its leading zero: `0.95` → `.95`, `0.1` → `.1`, `1` → `1`, `0` → `0`.
pub fn dot_decimal(value: f64) -> String {
    let text = format!("{value}");
    if let Some(rest) = text.strip_prefix("0.") {
        format!(".{rest}")
    } else if let Some(rest) = text.strip_prefix("-0.") {
        format!("-.{rest}")
    } else {
        text
    }
}

/// Warm-up steps in thousands when they are a whole number of thousands: `5000` → `5k`,
/// `0` → `0`, `1500` → `1500`.
pub fn steps_k(steps: u64) -> String {
    if steps != 0 && steps.is_multiple_of(1000) {
        format!("{}k", steps / 1000)
    } else {
        steps.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_formats() {
        assert_eq!(millions(3_128_150), "3.13M");
        assert_eq!(millions(40_826_902), "40.83M");
        assert_eq!(millions(14_501_718), "14.50M");
        assert_eq!(loss(0.123_456), "0.1235");
        assert_eq!(percent(0.987_65), "98.77");
        assert_eq!(percent(1.0), "100.00");
        assert_eq!(count(20_480), "20,480");
        assert_eq!(count(1_968), "1,968");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000_000), "1,000,000");
        assert_eq!(sci(3e-3), "3e-3");
        assert_eq!(sci(0.0003), "3e-4");
        assert_eq!(sci(1e-2), "1e-2");
        assert_eq!(sci(0.0), "0");
        assert_eq!(sci(1.5e-3), "1.5e-3");
        assert_eq!(dot_decimal(0.95), ".95");
        assert_eq!(dot_decimal(0.999), ".999");
        assert_eq!(dot_decimal(0.01), ".01");
        assert_eq!(dot_decimal(1.0), "1");
        assert_eq!(steps_k(5000), "5k");
        assert_eq!(steps_k(20_000), "20k");
        assert_eq!(steps_k(0), "0");
        assert_eq!(steps_k(1500), "1500");
    }
}
