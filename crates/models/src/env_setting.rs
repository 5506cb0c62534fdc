//! A process-wide setting read from an environment variable: unset or empty is the setting's
//! default, anything else must parse as one, and an error names the variable.

use std::ffi::OsStr;
use std::str::FromStr;
use std::sync::OnceLock;

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

/// The setting of `names` (each with its name) that `s` names, whatever its case.
///
/// # Errors
/// A message naming `s` and every name, when `s` is none of them.
pub(crate) fn by_name<T: Copy>(names: &[(T, &str)], s: &str) -> Result<T, String> {
    let found = names.iter().find(|(_, name)| s.eq_ignore_ascii_case(name));
    found.map(|&(setting, _)| setting).ok_or_else(|| {
        let listed: Vec<String> = names.iter().map(|(_, name)| format!("`{name}`")).collect();
        format!("{s:?} is neither {}", listed.join(" nor "))
    })
}

/// The name `names` gives `setting` (empty if it gives none).
pub(crate) fn name_of<T: PartialEq>(names: &[(T, &'static str)], setting: &T) -> &'static str {
    let found = names.iter().find(|(candidate, _)| candidate == setting);
    found.map_or("", |&(_, name)| name)
}

/// Names the settings of the enum `$setting`: `NAMES` (each setting with its name, in the calling
/// module), and `Display` and `FromStr` by those names (any case), as [`ProcessSetting`] reads
/// them.
macro_rules! setting_names {
    ($setting:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        /// Each setting with its name.
        const NAMES: &[($setting, &str)] = &[$(($setting::$variant, $name)),+];

        impl std::fmt::Display for $setting {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str($crate::env_setting::name_of(NAMES, self))
            }
        }

        impl std::str::FromStr for $setting {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                $crate::env_setting::by_name(NAMES, s)
            }
        }
    };
}
pub(crate) use setting_names;

/// A setting chosen once for the whole process: by a caller with a setting of its own
/// ([`ProcessSetting::choose`], e.g. a command's flag), else from the variable `var` when the
/// first cubecl device is made ([`ProcessSetting::choose_from_env`]).
pub struct ProcessSetting<T> {
    var: &'static str,
    chosen: OnceLock<T>,
}

impl<T: Copy + Default + FromStr<Err = String>> ProcessSetting<T> {
    /// The setting read from `var`, not chosen yet.
    pub const fn new(var: &'static str) -> Self {
        ProcessSetting {
            var,
            chosen: OnceLock::new(),
        }
    }

    /// The setting `value` (the variable's, if set) names.
    ///
    /// # Errors
    /// As [`parse`].
    pub fn parse(&self, value: Option<&OsStr>) -> Result<T, String> {
        parse(self.var, value)
    }

    /// Chooses `setting` unless one was chosen already; returns the one in effect.
    pub fn choose(&self, setting: T) -> T {
        *self.chosen.get_or_init(|| setting)
    }

    /// The setting chosen so far, if any.
    pub fn chosen(&self) -> Option<T> {
        self.chosen.get().copied()
    }

    /// The setting in effect, chosen from the environment if none was chosen before: what
    /// making a cubecl device does.
    ///
    /// # Errors
    /// As [`parse`], when the environment's value is read and is not a setting.
    pub fn choose_from_env(&self) -> Result<T, String> {
        match self.chosen() {
            Some(chosen) => Ok(chosen),
            None => Ok(self.choose(self.parse(std::env::var_os(self.var).as_deref())?)),
        }
    }
}

/// Checks that `setting`'s variable reads as every setting's should: unset or empty is the
/// default; each of `names` (the module's `NAMES`), in any case, is its setting, which displays
/// as it; each of `bad` is refused with a message that starts with the variable's name and
/// quotes the value.
#[cfg(test)]
pub(crate) fn assert_reads_its_names<T>(
    setting: &ProcessSetting<T>,
    names: &[(T, &str)],
    bad: &[&str],
) where
    T: Copy + Default + FromStr<Err = String> + PartialEq + std::fmt::Debug + std::fmt::Display,
{
    let parse = |v: Option<&str>| setting.parse(v.map(OsStr::new));
    assert_eq!(parse(None), Ok(T::default()), "{}: unset", setting.var);
    assert_eq!(parse(Some("")), Ok(T::default()), "{}: empty", setting.var);
    for &(value, name) in names {
        assert_eq!(parse(Some(name)), Ok(value), "{}={name}", setting.var);
        assert_eq!(
            parse(Some(&name.to_uppercase())),
            Ok(value),
            "{}={name}",
            setting.var
        );
        assert_eq!(value.to_string(), name);
    }
    for bad in bad {
        let err = parse(Some(bad)).unwrap_err();
        assert!(
            err.starts_with(setting.var) && err.contains(&format!("{bad:?}")),
            "{err}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first choice holds for the process: a later one, or the environment, changes nothing;
    /// a setting never chosen takes the environment's (here unset: the default).
    #[test]
    fn a_setting_is_chosen_once() {
        use crate::delta_kernels::DeltaChunks;
        let flagged: ProcessSetting<DeltaChunks> = ProcessSetting::new("CWM_TEST_NEVER_SET_A");
        assert_eq!(flagged.chosen(), None);
        assert_eq!(
            flagged.choose(DeltaChunks::Operations),
            DeltaChunks::Operations
        );
        assert_eq!(
            flagged.choose(DeltaChunks::Kernels),
            DeltaChunks::Operations
        );
        assert_eq!(flagged.choose_from_env(), Ok(DeltaChunks::Operations));
        let unset: ProcessSetting<DeltaChunks> = ProcessSetting::new("CWM_TEST_NEVER_SET_B");
        assert_eq!(unset.choose_from_env(), Ok(DeltaChunks::Kernels));
        assert_eq!(unset.chosen(), Some(DeltaChunks::Kernels));
    }

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
