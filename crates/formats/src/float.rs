//! A float that may be infinite or NaN, which JSON numbers cannot hold: a diverged model's
//! loss (the paper's diagonal SLiCE reaches 4.43×10¹⁷ on random games; another run may reach
//! infinity). Finite values are written as numbers, the others as the strings `"inf"`,
//! `"-inf"` and `"NaN"`; reading takes either, and `null` (how such a value was written
//! before) as NaN. Use as `#[serde(with = "crate::float")]`.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

/// Writes `value` as a JSON number, or as `"inf"`, `"-inf"` or `"NaN"`.
///
/// # Errors
/// The serializer's.
// serde's `with` passes a reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
pub fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    if value.is_finite() {
        serializer.serialize_f64(*value)
    } else if value.is_nan() {
        serializer.serialize_str("NaN")
    } else if *value > 0.0 {
        serializer.serialize_str("inf")
    } else {
        serializer.serialize_str("-inf")
    }
}

struct FloatVisitor;

impl Visitor<'_> for FloatVisitor {
    type Value = f64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number, \"inf\", \"-inf\" or \"NaN\"")
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }

    /// `null`: what a non-finite float became before this module (serde_json writes NaN and
    /// infinity as `null`), read as NaN.
    fn visit_unit<E: de::Error>(self) -> Result<f64, E> {
        Ok(f64::NAN)
    }

    fn visit_none<E: de::Error>(self) -> Result<f64, E> {
        Ok(f64::NAN)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
        match v {
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            "NaN" => Ok(f64::NAN),
            other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
        }
    }
}

/// Reads a JSON number, or `"inf"`, `"-inf"` or `"NaN"`.
///
/// # Errors
/// Any other value.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    deserializer.deserialize_any(FloatVisitor)
}

#[cfg(test)]
mod tests {
    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    struct Loss {
        #[serde(with = "super")]
        loss: f64,
    }

    #[test]
    fn non_finite_values_round_trip_as_strings() {
        for (value, text) in [
            (4.43e17, r#"{"loss":4.43e+17}"#),
            (f64::INFINITY, r#"{"loss":"inf"}"#),
            (f64::NEG_INFINITY, r#"{"loss":"-inf"}"#),
        ] {
            assert_eq!(serde_json::to_string(&Loss { loss: value }).unwrap(), text);
            assert_eq!(serde_json::from_str::<Loss>(text).unwrap().loss, value);
        }
        let nan = serde_json::to_string(&Loss { loss: f64::NAN }).unwrap();
        assert_eq!(nan, r#"{"loss":"NaN"}"#);
        assert!(serde_json::from_str::<Loss>(&nan).unwrap().loss.is_nan());
        assert!(
            serde_json::from_str::<Loss>(r#"{"loss":null}"#)
                .unwrap()
                .loss
                .is_nan()
        );
        assert_eq!(
            serde_json::from_str::<Loss>(r#"{"loss":3}"#).unwrap().loss,
            3.0
        );
        let err = serde_json::from_str::<Loss>(r#"{"loss":"high"}"#).unwrap_err();
        assert!(err.to_string().contains("a number, \"inf\""), "{err}");
    }
}
