//! An exact reimplementation of CPython's `random.Random` for non-negative integer seeds.
//!
//! * The generator is MT19937. `Random(seed)` runs `init_genrand(19650218)` and then
//!   `init_by_array` with the 32-bit little-endian limbs of the seed (seed 0 gives the key `[0]`).
//! * [`PyRandom::getrandbits`] takes the high bits of one 32-bit draw for `k <= 32` and fills
//!   32-bit words least significant first for `k <= 64`, as CPython does.
//! * [`PyRandom::randrange`] is CPython 3.12's `_randbelow_with_getrandbits`: draw
//!   `bit_length(n)` bits until the value is below `n`. It consumes draws even for `n = 1`.
//! * [`PyRandom::shuffle`] is `random.shuffle`: Fisher–Yates from the back, `j = randrange(i + 1)`.

use thiserror::Error;

/// Number of 32-bit words of MT19937 state.
const N: usize = 624;
/// The MT19937 middle-word offset.
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER_MASK: u32 = 0x8000_0000;
const LOWER_MASK: u32 = 0x7fff_ffff;

/// Errors of [`PyRandom`]'s sampling methods (Python raises `ValueError` in these cases).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PyRandomError {
    /// `randrange(0)`: the range is empty.
    #[error("empty range for randrange(0)")]
    EmptyRange,
    /// `getrandbits(k)` with more bits than this implementation supports.
    #[error("getrandbits({0}) is not supported; at most 64 bits")]
    TooManyBits(u32),
}

/// CPython's `random.Random`, seeded with a non-negative integer.
///
/// ```
/// use cwm_random_uniform::python_random::PyRandom;
///
/// let mut rng = PyRandom::new(0);
/// assert_eq!(rng.getrandbits(32), Ok(3_626_764_237));
/// ```
#[derive(Clone)]
pub struct PyRandom {
    state: [u32; N],
    index: usize,
}

impl std::fmt::Debug for PyRandom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PyRandom")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl PyRandom {
    /// `random.Random(seed)`.
    pub fn new(seed: u64) -> PyRandom {
        // The limbs of |seed|, least significant first; at least one limb (0 gives [0]).
        let low = seed as u32;
        let high = (seed >> 32) as u32;
        if high == 0 {
            PyRandom::from_key(&[low])
        } else {
            PyRandom::from_key(&[low, high])
        }
    }

    /// MT19937's `init_by_array(key)` after `init_genrand(19650218)`, which is how CPython
    /// seeds from an integer whose 32-bit little-endian limbs are `key`. An empty key is
    /// treated as `[0]`, as CPython does for seed 0.
    pub fn from_key(key: &[u32]) -> PyRandom {
        let key: &[u32] = if key.is_empty() { &[0] } else { key };
        let mut rng = PyRandom::from_genrand(19_650_218);
        let mt = &mut rng.state;
        let mut i = 1usize;
        let mut j = 0usize;
        for _ in 0..N.max(key.len()) {
            let prev = mt[i - 1] ^ (mt[i - 1] >> 30);
            mt[i] = (mt[i] ^ prev.wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = mt[i - 1] ^ (mt[i - 1] >> 30);
            mt[i] = (mt[i] ^ prev.wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
        }
        mt[0] = 0x8000_0000;
        rng
    }

    /// MT19937's `init_genrand(seed)`.
    fn from_genrand(seed: u32) -> PyRandom {
        let mut state = [0u32; N];
        state[0] = seed;
        for i in 1..N {
            let prev = state[i - 1] ^ (state[i - 1] >> 30);
            state[i] = prev.wrapping_mul(1_812_433_253).wrapping_add(i as u32);
        }
        PyRandom { state, index: N }
    }

    /// Regenerates all 624 words of state.
    fn twist(&mut self) {
        let mt = &mut self.state;
        for kk in 0..N {
            let y = (mt[kk] & UPPER_MASK) | (mt[(kk + 1) % N] & LOWER_MASK);
            let mag = if y & 1 == 0 { 0 } else { MATRIX_A };
            mt[kk] = mt[(kk + M) % N] ^ (y >> 1) ^ mag;
        }
        self.index = 0;
    }

    /// MT19937's `genrand_uint32()`: the next tempered 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// `getrandbits(k)` for `k <= 64`; `getrandbits(0)` is 0 and draws nothing.
    ///
    /// # Errors
    ///
    /// [`PyRandomError::TooManyBits`] for `k > 64`.
    pub fn getrandbits(&mut self, k: u32) -> Result<u64, PyRandomError> {
        match k {
            0 => Ok(0),
            1..=32 => Ok(u64::from(self.next_u32() >> (32 - k))),
            33..=64 => {
                let low = u64::from(self.next_u32());
                let high = u64::from(self.next_u32() >> (64 - k));
                Ok((high << 32) | low)
            }
            _ => Err(PyRandomError::TooManyBits(k)),
        }
    }

    /// `randrange(n)`: a uniform integer in `0..n` by rejection sampling on `bit_length(n)` bits.
    ///
    /// # Errors
    ///
    /// [`PyRandomError::EmptyRange`] for `n = 0`.
    pub fn randrange(&mut self, n: u64) -> Result<u64, PyRandomError> {
        if n == 0 {
            return Err(PyRandomError::EmptyRange);
        }
        let bits = u64::BITS - n.leading_zeros();
        loop {
            let r = self.getrandbits(bits)?;
            if r < n {
                return Ok(r);
            }
        }
    }

    /// [`PyRandom::randrange`] for an index into a slice of length `n`.
    ///
    /// # Errors
    ///
    /// [`PyRandomError::EmptyRange`] for `n = 0`.
    pub fn randrange_usize(&mut self, n: usize) -> Result<usize, PyRandomError> {
        // usize fits in u64 on every supported target, and the result is below n.
        let r = self.randrange(n as u64)?;
        Ok(r as usize)
    }

    /// `random.shuffle(items)`: for `i` from `len - 1` down to 1, swap `items[i]` with
    /// `items[randrange(i + 1)]`.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            // i + 1 >= 2, so the range is never empty.
            if let Ok(j) = self.randrange_usize(i + 1) {
                items.swap(i, j);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getrandbits_32_seed_0() {
        let mut rng = PyRandom::new(0);
        let draws: Vec<u64> = (0..5).map(|_| rng.getrandbits(32).unwrap()).collect();
        assert_eq!(
            draws,
            [3626764237, 1654615998, 3255389356, 3823568514, 1806341205]
        );
    }

    #[test]
    fn randrange_20_seed_0() {
        let mut rng = PyRandom::new(0);
        let draws: Vec<u64> = (0..10).map(|_| rng.randrange(20).unwrap()).collect();
        assert_eq!(draws, [12, 13, 1, 8, 16, 15, 12, 9, 15, 11]);
    }

    #[test]
    fn shard_shuffle_vectors() {
        let expected = [
            [7, 8, 1, 5, 3, 4, 2, 0, 9, 6],
            [1, 9, 6, 3, 4, 5, 8, 7, 0, 2],
            [6, 1, 7, 9, 4, 5, 3, 0, 2, 8],
        ];
        for (epoch, want) in expected.iter().enumerate() {
            let mut shards: Vec<u32> = (0..10).collect();
            PyRandom::new(1009 * epoch as u64).shuffle(&mut shards);
            assert_eq!(&shards, want, "epoch {epoch}");
        }
    }

    #[test]
    fn empty_range_and_too_many_bits_are_errors() {
        let mut rng = PyRandom::new(0);
        assert_eq!(rng.randrange(0), Err(PyRandomError::EmptyRange));
        assert_eq!(rng.getrandbits(65), Err(PyRandomError::TooManyBits(65)));
        assert_eq!(rng.getrandbits(0), Ok(0));
    }

    #[test]
    fn getrandbits_64_is_two_words_low_first() {
        let mut words = PyRandom::new(0);
        let low = u64::from(words.next_u32());
        let high = u64::from(words.next_u32());
        assert_eq!(PyRandom::new(0).getrandbits(64), Ok((high << 32) | low));
        let high_40 = high >> 24;
        assert_eq!(PyRandom::new(0).getrandbits(40), Ok((high_40 << 32) | low));
    }
}
