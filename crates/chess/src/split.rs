//! The train/validation split (spec E.4): an MD5 bucket of the example id.
//!
//! `bucket(id) = u64::from_le_bytes(MD5(id)[0..8]) % 10000`; an example is in validation iff its
//! bucket is below the number of validation buckets (50 for the paper's 0.5 %).

use md5::{Digest, Md5};

/// Number of buckets.
pub const SPLIT_MOD: u64 = 10_000;
/// Validation buckets of the paper's runs: `round(0.005 * 10000)`.
pub const DEFAULT_VAL_BUCKETS: u64 = 50;

/// Which part of the data an example belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    /// The training set.
    Train,
    /// The validation set.
    Validation,
}

/// The bucket of an example id, in `0..SPLIT_MOD`: the first 8 bytes of MD5 of its UTF-8,
/// read little-endian, modulo 10000.
pub fn bucket(example_id: &str) -> u64 {
    let digest = Md5::digest(example_id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first) % SPLIT_MOD
}

/// Whether an example is in validation: its bucket is below `val_buckets`.
pub fn is_validation(example_id: &str, val_buckets: u64) -> bool {
    bucket(example_id) < val_buckets
}

/// The split of an example, given the number of validation buckets.
pub fn split_of(example_id: &str, val_buckets: u64) -> Split {
    if is_validation(example_id, val_buckets) {
        Split::Validation
    } else {
        Split::Train
    }
}

/// Validation buckets for a validation fraction: `round(fraction * 10000)` with Python's
/// round-half-to-even, clamped to `0..=10000` (non-finite or negative fractions give 0).
pub fn val_buckets_for_fraction(fraction: f64) -> u64 {
    let scaled = (fraction * SPLIT_MOD as f64).round_ties_even();
    if scaled.is_nan() || scaled <= 0.0 {
        0
    } else if scaled >= SPLIT_MOD as f64 {
        SPLIT_MOD
    } else {
        // In range 1..10000 and integral, so the cast is exact.
        scaled as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_bucket_vectors() {
        assert_eq!(bucket("cwm_random_00000"), 304);
        assert_eq!(bucket("abc"), 9392);
        assert_eq!(bucket("cwm_0123456789abcdef01234567"), 2424);
        // Computed with Python's hashlib.
        assert_eq!(bucket(""), 388);
    }

    #[test]
    fn validation_iff_bucket_below_threshold() {
        assert!(!is_validation("cwm_random_00000", DEFAULT_VAL_BUCKETS));
        assert!(is_validation("cwm_random_00000", 305));
        assert!(!is_validation("cwm_random_00000", 304));
        assert_eq!(split_of("abc", 9393), Split::Validation);
        assert_eq!(split_of("abc", DEFAULT_VAL_BUCKETS), Split::Train);
    }

    #[test]
    fn fraction_to_buckets_like_python_round() {
        assert_eq!(val_buckets_for_fraction(0.005), 50);
        assert_eq!(val_buckets_for_fraction(0.01), 100);
        assert_eq!(val_buckets_for_fraction(0.00125), 12);
        assert_eq!(val_buckets_for_fraction(0.00015), 1);
        assert_eq!(val_buckets_for_fraction(-1.0), 0);
        assert_eq!(val_buckets_for_fraction(f64::NAN), 0);
        assert_eq!(val_buckets_for_fraction(2.0), SPLIT_MOD);
    }
}
