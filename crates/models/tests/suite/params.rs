//! Parameter counts of instantiated models against spec C.2/C.3, all 28 family × size cells.

use cwm_models::{Family, ModelConfig, Size, params, params_of};

/// Spec C.2 totals, sizes d128, d256, d384, d512.
const EXPECTED: [(Family, [usize; 4]); 7] = [
    (
        Family::Transformer,
        [3_128_150, 7_831_126, 18_048_726, 36_662_614],
    ),
    (
        Family::Slice,
        [3_144_662, 7_962_966, 18_641_238, 38_241_110],
    ),
    (
        Family::SliceDiag,
        [3_029_078, 7_041_878, 14_501_718, 27_209_558],
    ),
    (Family::Gdn, [3_161_402, 7_703_846, 16_886_406, 35_136_502]),
    (
        Family::GdnPos,
        [3_161_402, 7_703_846, 16_886_406, 35_136_502],
    ),
    (
        Family::Mamba3,
        [3_198_942, 8_250_998, 19_719_478, 40_826_902],
    ),
    (
        Family::Mamba2,
        [3_195_362, 8_230_534, 19_643_750, 40_648_822],
    ),
];

/// Spec C.2: Mamba-3 MIMO rank 4, for the `mamba3_mimo` option.
const MAMBA3_MIMO: [usize; 4] = [3_303_390, 8_668_790, 20_972_854, 43_333_654];

#[test]
fn parameter_counts_match_spec_c3() {
    let mut checked = 0;
    for (family, counts) in EXPECTED {
        for (size, expected) in Size::ALL.into_iter().zip(counts) {
            assert_eq!(params(family, size).unwrap(), expected, "{family} {size}");
            checked += 1;
        }
    }
    assert_eq!(checked, 28);
}

#[test]
fn mamba3_mimo_parameter_counts() {
    for (size, expected) in Size::ALL.into_iter().zip(MAMBA3_MIMO) {
        let mut config = ModelConfig::new(Family::Mamba3, size);
        config.mamba3_mimo = true;
        assert_eq!(params_of(&config).unwrap(), expected, "mamba3 MIMO {size}");
    }
}
