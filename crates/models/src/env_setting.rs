//! A process-wide setting read from an environment variable: unset or empty is the setting's
//! default, anything else must parse as one, and an error names the variable.

use std::ffi::OsStr;
use std::str::FromStr;

/// The setting `value` (the variable `var`'s, if set) names.
///
/// # Errors
/// `var`, then why: the value is not UTF-8, or the setting's own parse error.
pub(crate) fn parse<T: FromStr<Err = String> + Default>(
    var: &str,
    value: Option<&OsStr>,
) -> Result<T, String> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(T::default());
    };
    value
        .to_str()
        .ok_or_else(|| format!("{value:?} is not UTF-8"))
        .and_then(str::parse)
        .map_err(|reason| format!("{var}: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value that is not UTF-8 is refused with the variable's name, not taken as the default.
    #[test]
    fn a_value_that_is_not_utf8_is_refused() {
        use std::os::unix::ffi::OsStrExt;
        let value = Some(OsStr::from_bytes(b"\xff"));
        let err = parse::<crate::delta_kernels::DeltaChunks>("SOME_VAR", value).unwrap_err();
        assert!(
            err.starts_with("SOME_VAR: ") && err.contains("not UTF-8"),
            "{err}"
        );
    }
}
