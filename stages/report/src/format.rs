//! Number formatting as the paper prints it.
//!
//! - parameter counts in millions with two decimals and no unit in the cell (`3.13`);
//! - losses with six decimals, or `a.bc×10ᵏ` below 1e-4 (`7.65×10⁻⁵`) and from 1,000 up
//!   (`4.43×10¹⁷`); `inf` and `NaN` as they are;
//! - ExactState, Labelwise, Trajectory and coverage as percentages with two decimals (three
//!   and four in Table 6; the `%` sign lives in the column header);
//! - hyperparameters as plain decimals (`0.003`, `0.95`, `0`), warm-up steps as an integer.
//!
//! The signed forms (`signed_*`) print differences from the paper's values.

/// Losses below this print in scientific form.
pub const SCI_BELOW: f64 = 1e-4;
/// Losses from this up print in scientific form.
pub const SCI_FROM: f64 = 1e3;

/// `3128150` → `3.13` (millions, two decimals).
pub fn millions(params: u64) -> String {
    format!("{:.2}", params as f64 / 1e6)
}

/// `inf`, `-inf` or `NaN` for a value that is not finite.
fn non_finite(value: f64) -> Option<String> {
    if value.is_nan() {
        Some("NaN".to_owned())
    } else if value.is_infinite() {
        Some(if value > 0.0 { "inf" } else { "-inf" }.to_owned())
    } else {
        None
    }
}

/// A loss: six decimals, or [`loss_sci`] below [`SCI_BELOW`] (but not 0) and from
/// [`SCI_FROM`] up.
pub fn loss(value: f64) -> String {
    if let Some(text) = non_finite(value) {
        return text;
    }
    let size = value.abs();
    if size != 0.0 && !(SCI_BELOW..SCI_FROM).contains(&size) {
        loss_sci(value)
    } else {
        format!("{value:.6}")
    }
}

/// A loss as `a.bc×10ᵏ` (three significant digits): `5.6e-5` → `5.60×10⁻⁵`,
/// `4.43e17` → `4.43×10¹⁷`.
pub fn loss_sci(value: f64) -> String {
    if let Some(text) = non_finite(value) {
        return text;
    }
    times_ten(&format!("{value:.2e}")).unwrap_or_else(|| format!("{value:.2e}"))
}

/// Rust's or a CSV's e-notation as the paper prints it: `5.60e-5` → `5.60×10⁻⁵`; `None`
/// when `text` is not of the form `<mantissa>e<integer>`.
pub fn times_ten(text: &str) -> Option<String> {
    let (mantissa, exponent) = text.split_once(['e', 'E'])?;
    let exponent: i32 = exponent.parse().ok()?;
    Some(format!("{mantissa}×10{}", superscript(exponent)))
}

/// An integer in superscript digits: `-5` → `⁻⁵`.
pub fn superscript(n: i32) -> String {
    const DIGITS: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    let mut out = String::new();
    if n < 0 {
        out.push('⁻');
    }
    for c in n.unsigned_abs().to_string().chars() {
        let digit = c.to_digit(10).unwrap_or(0) as usize;
        out.push(DIGITS[digit]);
    }
    out
}

/// A fraction in `[0, 1]` as a percentage with two decimals (`0.12345` → `12.35`).
pub fn percent(fraction: f64) -> String {
    percent_dp(fraction, 2)
}

/// A fraction as a percentage with `decimals` decimals (`0.9999973`, 4 → `99.9997`).
pub fn percent_dp(fraction: f64, decimals: usize) -> String {
    format!("{:.*}", decimals, fraction * 100.0)
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

/// A hyperparameter as a plain decimal, never in e-notation: `0.003` → `0.003`, `0.0003` →
/// `0.0003`, `0.95` → `0.95`, `0` → `0`.
pub fn decimal(value: f64) -> String {
    if value == 0.0 {
        // Also -0.0.
        return "0".to_owned();
    }
    // f64's Display is the shortest round-trip form and never uses an exponent.
    format!("{value}")
}

/// A difference of losses: `+` or `-`, then the magnitude as [`loss`] prints it; `0` for
/// none.
pub fn signed_loss(delta: f64) -> String {
    signed(delta, loss(delta.abs()))
}

/// A difference with `decimals` decimals and its sign (`+0.12`; percentage points for
/// percentages); `0` for none.
pub fn signed_fixed(delta: f64, decimals: usize) -> String {
    if let Some(text) = non_finite(delta) {
        return sign_non_finite(delta, text);
    }
    if delta == 0.0 {
        return "0".to_owned();
    }
    format!("{delta:+.decimals$}")
}

/// A difference of hyperparameters as a plain decimal rounded to 12 decimals
/// (`0.001 - 0.003` → `-0.002`).
pub fn signed_decimal(delta: f64) -> String {
    let rounded = (delta * 1e12).round() / 1e12;
    signed(rounded, decimal(rounded.abs()))
}

fn signed(delta: f64, magnitude: String) -> String {
    if let Some(text) = non_finite(delta) {
        return sign_non_finite(delta, text);
    }
    if delta == 0.0 {
        "0".to_owned()
    } else if delta < 0.0 {
        format!("-{magnitude}")
    } else {
        format!("+{magnitude}")
    }
}

fn sign_non_finite(delta: f64, text: String) -> String {
    if delta == f64::INFINITY {
        "+inf".to_owned()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losses_as_the_paper_prints_them() {
        assert_eq!(loss(0.137_515), "0.137515");
        assert_eq!(loss(0.000_110), "0.000110");
        assert_eq!(loss(1e-4), "0.000100");
        assert_eq!(loss(7.65e-5), "7.65×10⁻⁵");
        assert_eq!(loss(7.27e-7), "7.27×10⁻⁷");
        assert_eq!(
            loss(9.996e-5),
            "1.00×10⁻⁴",
            "rounding carries into the exponent"
        );
        assert_eq!(loss(1.615_620), "1.615620");
        assert_eq!(loss(35.9174), "35.917400");
        assert_eq!(loss(8.23e6), "8.23×10⁶");
        assert_eq!(loss(4.43e17), "4.43×10¹⁷");
        assert_eq!(loss(0.0), "0.000000");
        assert_eq!(loss(f64::INFINITY), "inf");
        assert_eq!(loss(f64::NEG_INFINITY), "-inf");
        assert_eq!(loss(f64::NAN), "NaN");
        assert_eq!(loss_sci(1.14e-4), "1.14×10⁻⁴");
        assert_eq!(loss_sci(0.015_992), "1.60×10⁻²");
        assert_eq!(loss_sci(f64::NAN), "NaN");
    }

    #[test]
    fn e_notation_becomes_times_ten() {
        assert_eq!(times_ten("5.60e-5").as_deref(), Some("5.60×10⁻⁵"));
        assert_eq!(times_ten("4.43e17").as_deref(), Some("4.43×10¹⁷"));
        assert_eq!(times_ten("1.29E-10").as_deref(), Some("1.29×10⁻¹⁰"));
        assert_eq!(times_ten("0.137515"), None);
        assert_eq!(times_ten("1e-x"), None);
        assert_eq!(superscript(0), "⁰");
    }

    #[test]
    fn percentages_counts_and_parameters() {
        assert_eq!(millions(3_128_150), "3.13");
        assert_eq!(millions(40_826_902), "40.83");
        assert_eq!(millions(14_501_718), "14.50");
        assert_eq!(percent(0.987_65), "98.77");
        assert_eq!(percent(1.0), "100.00");
        assert_eq!(percent_dp(0.267_35, 3), "26.735");
        assert_eq!(percent_dp(0.999_997_3, 4), "99.9997");
        assert_eq!(percent(f64::NAN), "NaN");
        assert_eq!(count(20_480), "20,480");
        assert_eq!(count(1_968), "1,968");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000_000), "1,000,000");
    }

    #[test]
    fn hyperparameters_are_plain_decimals() {
        assert_eq!(decimal(3e-3), "0.003");
        assert_eq!(decimal(0.0003), "0.0003");
        assert_eq!(decimal(1e-2), "0.01");
        assert_eq!(decimal(0.0), "0");
        assert_eq!(decimal(-0.0), "0");
        assert_eq!(decimal(0.999), "0.999");
        assert_eq!(decimal(0.1), "0.1");
    }

    #[test]
    fn differences_carry_their_sign() {
        assert_eq!(signed_loss(0.0), "0");
        assert_eq!(signed_loss(-2.1e-5), "-2.10×10⁻⁵");
        assert_eq!(signed_loss(0.001_234), "+0.001234");
        assert_eq!(signed_loss(f64::INFINITY), "+inf");
        assert_eq!(signed_loss(f64::NAN), "NaN");
        assert_eq!(signed_fixed(0.123, 2), "+0.12");
        assert_eq!(signed_fixed(0.0, 2), "0");
        assert_eq!(signed_fixed(1e-9, 2), "+0.00", "not zero, rounded");
        assert_eq!(signed_fixed(-0.054, 2), "-0.05");
        assert_eq!(signed_fixed(f64::NEG_INFINITY, 2), "-inf");
        assert_eq!(signed_decimal(0.001 - 0.003), "-0.002");
        assert_eq!(signed_decimal(5000.0), "+5000");
        assert_eq!(signed_decimal(0.0), "0");
    }
}
