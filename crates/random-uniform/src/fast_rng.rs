//! The seeded generator of fast mode: xoshiro256++ seeded through SplitMix64.
//!
//! * [`SplitMix64`] (Steele, Lea, Flood 2014) expands a 64-bit seed into well-mixed words.
//! * [`Xoshiro256PlusPlus`] (Blackman, Vigna 2019) is the generator proper.
//! * [`Xoshiro256PlusPlus::for_game`] derives an independent stream for game `index` of a run
//!   seeded with `seed`, so a game depends on `(seed, index)` only and never on which thread
//!   plays it or in what order.
//! * [`Xoshiro256PlusPlus::below`] draws an exactly uniform index with Lemire's multiply-and-
//!   reject method.

/// SplitMix64: a tiny generator used to expand seeds.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64-bit output.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }
}

/// SplitMix64's output function, a bijection on `u64`.
const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// xoshiro256++, a fast all-purpose 64-bit generator.
#[derive(Debug, Clone)]
pub struct Xoshiro256PlusPlus {
    s: [u64; 4],
}

impl Xoshiro256PlusPlus {
    /// A generator whose 256-bit state is four SplitMix64 outputs from `seed` (never all zero).
    pub fn from_seed(seed: u64) -> Xoshiro256PlusPlus {
        let mut expand = SplitMix64::new(seed);
        let s = [
            expand.next_u64(),
            expand.next_u64(),
            expand.next_u64(),
            expand.next_u64(),
        ];
        // SplitMix64 outputs are a bijection of distinct counters, so four zeros cannot occur;
        // guard anyway, since the all-zero state is a fixed point.
        if s == [0; 4] {
            return Xoshiro256PlusPlus {
                s: [0x9e37_79b9_7f4a_7c15, 0, 0, 0],
            };
        }
        Xoshiro256PlusPlus { s }
    }

    /// The generator for game `index` of a run seeded with `seed`.
    ///
    /// The per-game seed `mix64(mix64(seed) ^ index)` is a bijection of `index` for a fixed
    /// `seed`, so distinct games of one run get distinct streams.
    pub fn for_game(seed: u64, index: u64) -> Xoshiro256PlusPlus {
        Xoshiro256PlusPlus::from_seed(mix64(mix64(seed) ^ index))
    }

    /// The next 64-bit output.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// A uniform integer in `0..n` (Lemire's method with rejection, exactly uniform), or 0 when
    /// `n` is 0.
    pub fn below(&mut self, n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        let mut product = (self.next_u64() >> 32) * u64::from(n);
        let mut low = product as u32;
        if low < n {
            let threshold = n.wrapping_neg() % n;
            while low < threshold {
                product = (self.next_u64() >> 32) * u64::from(n);
                low = product as u32;
            }
        }
        (product >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_reference_outputs() {
        // First outputs of SplitMix64 seeded with 1234567 (the reference C implementation).
        let mut rng = SplitMix64::new(1_234_567);
        assert_eq!(rng.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn xoshiro256plusplus_reference_outputs() {
        // State [1, 2, 3, 4] as in the reference implementation's test vectors.
        let mut rng = Xoshiro256PlusPlus { s: [1, 2, 3, 4] };
        assert_eq!(rng.next_u64(), 41_943_041);
        assert_eq!(rng.next_u64(), 58_720_359);
        assert_eq!(rng.next_u64(), 3_588_806_011_781_223);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = Xoshiro256PlusPlus::for_game(7, 3);
        let mut seen = [0u32; 7];
        for _ in 0..7000 {
            let r = rng.below(7);
            seen[r as usize] += 1;
        }
        assert!(seen.iter().all(|&count| count > 800), "{seen:?}");
        assert_eq!(rng.below(1), 0);
        assert_eq!(rng.below(0), 0);
    }

    #[test]
    fn games_get_distinct_streams() {
        let a = Xoshiro256PlusPlus::for_game(0, 0).next_u64();
        let b = Xoshiro256PlusPlus::for_game(0, 1).next_u64();
        let c = Xoshiro256PlusPlus::for_game(1, 0).next_u64();
        assert!(a != b && a != c && b != c);
    }
}
