//! E12's sampled masses (beyond-spec E12): how much of the model's probability lies on states
//! that are valid positions, and on states in which the game's next move is legal.
//!
//! At a sampled step, `samples` states are drawn from the model's 75 label distributions, each
//! label on its own (the heads are independent categoricals, as the loss treats them). The
//! step's **valid mass** is the share of drawn states that reach V1 (well-formed labels and a
//! valid position: [`cwm_chess::rules::validity`]'s cumulative tier, as diagnose's
//! `Valid position` column counts it); its **afford mass** the share in which the game's next
//! input move is legal ([`cwm_chess::rules::affords`], diagnose's V4), defined at steps with a
//! next move. No probability is stored: each label's distribution is read back for the
//! sampled steps only, turned into draws and dropped.
//!
//! **Which steps.** Every step `(game id, t)` has a 64-bit key, the first output of its own
//! generator (xoshiro256++ seeded from `seed`, the id and `t`); the sampled steps are the
//! `steps` with the lowest keys ([`LowestKeys`], a first pass over the games), or every step
//! when `steps` is 0 or the data has no more. So the sample is a uniform draw of steps without
//! replacement, the same for any batch size and thread count, and its size is exact.
//!
//! **The draws** continue that generator, one 64-bit number per label: its high half picks one
//! of the label's classes uniformly and its low half keeps it or takes its alias (Walker's
//! alias method, the tables built by Vose's construction), so each label is drawn from its own
//! distribution in constant time. A drawn state is checked once however often it is drawn (a
//! confident model draws the same few states again and again).
//!
//! The module also holds the evaluate stage's side of it: the first pass over the games that
//! finds the sampled steps ([`mass_sampler`]), the softmax of the sampled steps' logits read
//! back from the backend ([`sampled_masses`]), the running means of the summary and the log
//! line.

use std::collections::{BinaryHeap, HashMap};
use std::path::Path;

use burn::prelude::*;
use burn::tensor::activation::softmax;
use cwm_chess::encode::{EpConvention, StateLabels};
use cwm_chess::rules::{self, Tier};
use cwm_formats::evaluate::{EvaluateSummary, SampledMassSummary};
use cwm_formats::labels::{HEAD_OUT, LABEL_GROUPS, N_LABELS};
use cwm_random_uniform::fast_rng::Xoshiro256PlusPlus;
use cwm_stage_data::TokenizedGame;
use rayon::prelude::*;

use crate::EvalError;
use crate::evaluate::{EvaluateOptions, GameSource};

/// How E12's masses are sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MassOptions {
    /// States drawn per sampled step (0: no masses).
    pub samples: u32,
    /// Steps sampled per evaluation (0: every step).
    pub steps: u64,
    /// The seed of the step keys and the draws.
    pub seed: u64,
}

impl MassOptions {
    /// No masses.
    pub const OFF: MassOptions = MassOptions {
        samples: 0,
        steps: 0,
        seed: 0,
    };

    /// The specification's default: 64 states at each of 100,000 steps.
    pub const DEFAULT: MassOptions = MassOptions {
        samples: 64,
        steps: 100_000,
        seed: 0,
    };

    /// Whether any state is drawn.
    pub const fn enabled(&self) -> bool {
        self.samples > 0
    }
}

/// 64-bit FNV-1a of `bytes`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The generator of step `t` of game `id`; its first output is the step's key.
fn step_stream(seed: u64, id: &str, t: usize) -> Xoshiro256PlusPlus {
    let game = fnv1a(id.as_bytes()) ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    Xoshiro256PlusPlus::for_game(game, t as u64)
}

/// The key that decides whether step `t` of game `id` is sampled.
pub fn step_key(seed: u64, id: &str, t: usize) -> u64 {
    step_stream(seed, id, t).next_u64()
}

/// The `k` lowest keys offered so far (a bounded max-heap).
#[derive(Debug, Clone)]
pub struct LowestKeys {
    k: usize,
    heap: BinaryHeap<u64>,
}

impl LowestKeys {
    /// Keeps the `k` lowest keys; `k = 0` keeps every step.
    pub fn new(k: u64) -> LowestKeys {
        let k = usize::try_from(k).unwrap_or(usize::MAX);
        LowestKeys {
            k,
            heap: BinaryHeap::with_capacity(k.min(1 << 20)),
        }
    }

    /// Offers one key.
    pub fn offer(&mut self, key: u64) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(key);
        } else if let Some(mut top) = self.heap.peek_mut()
            && key < *top
        {
            *top = key;
        }
    }

    /// Offers the keys of the first `len` steps of game `id`.
    pub fn offer_game(&mut self, seed: u64, id: &str, len: usize) {
        if self.k == 0 {
            return;
        }
        for t in 0..len {
            self.offer(step_key(seed, id, t));
        }
    }

    /// The largest key sampled: every key offered when fewer than `k` were.
    pub fn threshold(&self) -> u64 {
        match self.heap.peek() {
            Some(&top) if self.heap.len() == self.k => top,
            _ => u64::MAX,
        }
    }
}

/// The steps to sample and how: the keys at most `threshold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MassSampler {
    /// The options.
    pub options: MassOptions,
    /// The largest sampled key.
    pub threshold: u64,
    /// The labels' en-passant convention, for V1.
    pub ep: EpConvention,
}

impl MassSampler {
    /// Whether step `t` of game `id` is sampled.
    pub fn contains(&self, id: &str, t: usize) -> bool {
        step_key(self.options.seed, id, t) <= self.threshold
    }

    /// Draws the states of step `t` of game `id` from `probs` (the 1,878 class probabilities
    /// of the head, each label's softmax, in the head's order) and measures them; `next_token`
    /// is the game's next input move, `None` at its last evaluated step.
    pub fn measure(&self, id: &str, t: usize, probs: &[f32], next_token: Option<u16>) -> StepMass {
        let mut rng = step_stream(self.options.seed, id, t);
        rng.next_u64(); // the step's key
        let tables = AliasTables::of(probs);
        let t32 = u32::try_from(t).unwrap_or(u32::MAX);
        let mut seen: HashMap<StateLabels, (bool, bool)> = HashMap::new();
        let (mut valid, mut afford) = (0u32, 0u32);
        for _ in 0..self.options.samples {
            let state = tables.draw(&mut rng);
            let (v, a) = *seen.entry(state).or_insert_with(|| {
                let (validity, affords) =
                    rules::validity_and_affords(&state, t32, self.ep, next_token);
                (validity.tier >= Tier::V1, affords == Some(true))
            });
            valid += u32::from(v);
            afford += u32::from(a);
        }
        let share = |count: u32| count as f32 / self.options.samples.max(1) as f32;
        StepMass {
            valid: share(valid),
            afford: next_token.map(|_| share(afford)),
        }
    }
}

/// What the draws at one step found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepMass {
    /// The share of drawn states that reach V1.
    pub valid: f32,
    /// The share in which the next move is legal; `None` without a next move.
    pub afford: Option<f32>,
}

/// Each label's distribution as an alias table (Walker's method, Vose's construction), in the
/// head's order: a draw picks one of the label's classes uniformly as a column and keeps it
/// with the column's probability, else takes the column's alias, from one 64-bit number.
struct AliasTables {
    /// Per class slot: the probability of keeping the column, times 2³² (saturated).
    keep: Vec<u32>,
    /// Per class slot: the class drawn when the column is not kept.
    alias: Vec<u8>,
}

impl AliasTables {
    /// The tables of `probs` (negative, NaN and missing probabilities count as 0; a label
    /// whose probabilities sum to 0 always draws class 0).
    fn of(probs: &[f32]) -> AliasTables {
        let mut tables = AliasTables {
            keep: vec![u32::MAX; HEAD_OUT],
            alias: vec![0; HEAD_OUT],
        };
        let mut scratch = Scratch::default();
        for group in LABEL_GROUPS {
            for r in 0..group.n_labels {
                let start = group.logit_offset + r * group.n_classes;
                let end = start + group.n_classes;
                let p = |c: usize| {
                    let p = probs.get(c).copied().unwrap_or(0.0);
                    if p.is_finite() && p > 0.0 {
                        f64::from(p)
                    } else {
                        0.0
                    }
                };
                scratch.scaled.clear();
                scratch.scaled.extend((start..end).map(p));
                tables.fill(start, &mut scratch);
            }
        }
        tables
    }

    /// Fills the table of the label whose classes start at slot `start`, from their
    /// probabilities in `scratch.scaled`.
    fn fill(&mut self, start: usize, scratch: &mut Scratch) {
        let n = scratch.scaled.len();
        let total: f64 = scratch.scaled.iter().sum();
        let keep = &mut self.keep[start..start + n];
        let alias = &mut self.alias[start..start + n];
        if total <= 0.0 {
            keep.fill(0);
            alias.fill(0);
            return;
        }
        let Scratch {
            scaled,
            small,
            large,
        } = scratch;
        small.clear();
        large.clear();
        for (c, x) in scaled.iter_mut().enumerate() {
            *x *= n as f64 / total;
            if *x < 1.0 {
                small.push(c)
            } else {
                large.push(c)
            }
        }
        while let (Some(s), Some(l)) = (small.pop(), large.pop()) {
            // `as` saturates: a share of 1 or more keeps u32::MAX.
            keep[s] = (scaled[s] * 4_294_967_296.0) as u32;
            alias[s] = l as u8;
            scaled[l] = (scaled[l] + scaled[s]) - 1.0;
            if scaled[l] < 1.0 {
                small.push(l)
            } else {
                large.push(l)
            }
        }
        // What is left has probability one, up to rounding: its own class always.
        for &c in small.iter().chain(large.iter()) {
            keep[c] = u32::MAX;
            alias[c] = c as u8;
        }
    }

    /// One state: each label's class drawn from its distribution.
    fn draw(&self, rng: &mut Xoshiro256PlusPlus) -> StateLabels {
        let mut state = [0u8; N_LABELS];
        for group in LABEL_GROUPS {
            let n = group.n_classes as u64;
            for r in 0..group.n_labels {
                let bits = rng.next_u64();
                let column = (((bits >> 32) * n) >> 32) as usize;
                let slot = group.logit_offset + r * group.n_classes + column;
                // Without a branch, which a uniform draw would mispredict half the time.
                let kept = u8::from((bits as u32) < self.keep[slot]);
                let alias = self.alias[slot];
                state[group.first_label + r] =
                    alias ^ ((column as u8 ^ alias) & kept.wrapping_neg());
            }
        }
        state
    }
}

/// Buffers reused from label to label while the tables are built.
#[derive(Default)]
struct Scratch {
    scaled: Vec<f64>,
    small: Vec<usize>,
    large: Vec<usize>,
}

// The evaluate stage's side: the sampled steps' distributions from the backend, the first
// pass that picks the steps, the running means and the log line.

/// Sampled steps whose distributions are read back at once for E12's masses: 7.7 MB of
/// probabilities, so that a batch of long games does not hold them all.
const MASS_ROWS_PER_READ: usize = 1024;

/// E12's masses at the steps of the batch that `sampler` samples, row-major
/// `[games, seq_len]`: the sampled rows of `logits` (`[games, seq_len, 1878]`) are gathered
/// on the backend, [`MASS_ROWS_PER_READ`] at a time, each label's softmax taken and read back,
/// and the draws made on the CPU, a step per task. Empty when no step of the batch is sampled.
pub(crate) fn sampled_masses(
    logits: &Tensor<3>,
    games: &[TokenizedGame],
    lengths: &[usize],
    sampler: &MassSampler,
    device: &Device,
) -> Result<Vec<Option<StepMass>>, EvalError> {
    let [batch, seq_len, _] = logits.dims();
    let picked: Vec<(usize, usize)> = games
        .iter()
        .zip(lengths)
        .enumerate()
        .flat_map(|(b, (game, &len))| {
            (0..len)
                .filter(|&t| sampler.contains(&game.id, t))
                .map(move |t| (b, t))
        })
        .collect();
    if picked.is_empty() {
        return Ok(Vec::new());
    }
    let mut masses = vec![None; batch * seq_len];
    for chunk in picked.chunks(MASS_ROWS_PER_READ) {
        let rows: Vec<i64> = chunk
            .iter()
            .map(|&(b, t)| (b * seq_len + t) as i64)
            .collect();
        let probs = label_softmax(logits, rows, device)?;
        let measured: Vec<StepMass> = chunk
            .par_iter()
            .zip(probs.par_chunks_exact(HEAD_OUT))
            .map(|(&(b, t), probs)| {
                let game = &games[b];
                let next = (t + 1 < lengths[b]).then(|| game.moves[t + 1]);
                sampler.measure(&game.id, t, probs, next)
            })
            .collect();
        for (&(b, t), mass) in chunk.iter().zip(measured) {
            masses[b * seq_len + t] = Some(mass);
        }
    }
    Ok(masses)
}

/// Each label's softmax at rows `rows` of `logits` flattened to `[games · seq_len, 1878]`,
/// read back row-major `[rows, 1878]` in the head's order.
fn label_softmax(
    logits: &Tensor<3>,
    rows: Vec<i64>,
    device: &Device,
) -> Result<Vec<f32>, EvalError> {
    let [batch, seq_len, width] = logits.dims();
    let n = rows.len();
    let index = Tensor::<1, Int>::from_data(TensorData::new(rows, [n]), device);
    let picked = logits
        .clone()
        .reshape([batch * seq_len, width])
        .select(0, index);
    let parts: Vec<Tensor<2>> = LABEL_GROUPS
        .iter()
        .map(|group| {
            let view = picked
                .clone()
                .narrow(1, group.logit_offset, group.n_logits())
                .reshape([n, group.n_labels, group.n_classes]);
            softmax(view, 2).reshape([n, group.n_logits()])
        })
        .collect();
    let values = Tensor::cat(parts, 1)
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| EvalError::Invalid(format!("cannot read back the distributions: {e:?}")))?;
    if values.len() != n * HEAD_OUT {
        return Err(EvalError::Invalid(format!(
            "read back {} probabilities, expected {}",
            values.len(),
            n * HEAD_OUT
        )));
    }
    Ok(values)
}

/// The sampler of E12's masses for the games at `data`, `None` when `options.mass` draws
/// nothing or the labels' en-passant convention is unknown (V1 depends on it). Finding the
/// sampled steps reads the games once more, before the model runs (keys only).
pub(crate) fn mass_sampler(
    data: &Path,
    options: &EvaluateOptions,
    ep_convention: Option<&str>,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<Option<MassSampler>, EvalError> {
    let mass = options.mass;
    let Some(ep) = ep_convention.and_then(EpConvention::from_name) else {
        return Ok(None);
    };
    if !mass.enabled() {
        return Ok(None);
    }
    let mut lowest = LowestKeys::new(mass.steps);
    if mass.steps > 0 {
        let source = GameSource::open(data, options.batch_size)?;
        let cap = match options.max_games {
            0 => u64::MAX,
            cap => cap,
        };
        for (i, game) in source.enumerate() {
            if i as u64 >= cap {
                break;
            }
            if i % 1024 == 0 && cancelled() {
                return Err(EvalError::Cancelled);
            }
            let game = game?;
            let len = match options.max_steps {
                0 => game.moves.len(),
                cap => game.moves.len().min(cap),
            };
            lowest.offer_game(mass.seed, &game.id, len);
        }
    }
    Ok(Some(MassSampler {
        options: mass,
        threshold: lowest.threshold(),
        ep,
    }))
}

/// Running sums of E12's sampled masses over an evaluation.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MassTotals {
    steps: u64,
    valid: f64,
    with_next: u64,
    afford: f64,
}

impl MassTotals {
    pub(crate) fn add(&mut self, masses: &[Option<StepMass>]) {
        for mass in masses.iter().flatten() {
            self.steps += 1;
            self.valid += f64::from(mass.valid);
            if let Some(afford) = mass.afford {
                self.with_next += 1;
                self.afford += f64::from(afford);
            }
        }
    }

    pub(crate) fn summary(&self, options: &MassOptions) -> SampledMassSummary {
        let mean = |sum: f64, n: u64| (n > 0).then(|| sum / n as f64);
        SampledMassSummary {
            samples: options.samples,
            seed: options.seed,
            steps: self.steps,
            valid_mass: mean(self.valid, self.steps),
            steps_with_next_move: self.with_next,
            afford_mass: mean(self.afford, self.with_next),
        }
    }
}

/// The log's line on E12's sampled masses.
pub(crate) fn mass_line(summary: &EvaluateSummary, options: &MassOptions) -> String {
    let share = |v: Option<f64>| v.map_or_else(|| "–".to_owned(), |v| format!("{v:.4}"));
    match &summary.sampled_mass {
        Some(m) => format!(
            "E12: {} states at each of {} steps: valid mass {}, afford mass {} ({} steps with a next move)",
            m.samples,
            m.steps,
            share(m.valid_mass),
            share(m.afford_mass),
            m.steps_with_next_move
        ),
        None if options.enabled() => "E12: no sampled masses: the data names no en-passant \
                                       convention, which validity depends on"
            .to_owned(),
        None => "E12: no sampled masses (mass_samples 0)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use cwm_chess::encode::INITIAL_STATE;

    use super::*;

    /// The head's probabilities of a model sure of `state`.
    fn one_hot(state: &StateLabels) -> Vec<f32> {
        let mut probs = vec![0.0f32; HEAD_OUT];
        for group in LABEL_GROUPS {
            for r in 0..group.n_labels {
                let class = usize::from(state[group.first_label + r]);
                probs[group.logit_offset + r * group.n_classes + class] = 1.0;
            }
        }
        probs
    }

    fn sampler(samples: u32) -> MassSampler {
        MassSampler {
            options: MassOptions {
                samples,
                steps: 0,
                seed: 7,
            },
            threshold: u64::MAX,
            ep: EpConvention::Reference,
        }
    }

    const E2E4: u16 = (12 * 64 + 28) * 5;
    const E2E5: u16 = (12 * 64 + 36) * 5;

    #[test]
    fn a_sure_model_of_the_true_state_has_all_its_mass_valid_and_affording() {
        let probs = one_hot(&INITIAL_STATE);
        let mass = sampler(64).measure("g", 0, &probs, Some(E2E4));
        assert_eq!(
            mass,
            StepMass {
                valid: 1.0,
                afford: Some(1.0)
            }
        );
        let mass = sampler(64).measure("g", 0, &probs, Some(E2E5));
        assert_eq!(mass.afford, Some(0.0), "e2e5 is no legal move");
        assert_eq!(sampler(64).measure("g", 0, &probs, None).afford, None);
    }

    /// The initial state, except that the black king's square (e8) is empty with probability
    /// `p_empty`: without a black king a state is no valid position and affords nothing.
    fn doubtful_king(p_empty: f32) -> Vec<f32> {
        const E8: usize = 4; // labels run a8, b8, …, h1
        assert_eq!(INITIAL_STATE[E8], 12, "the black king");
        let mut probs = one_hot(&INITIAL_STATE);
        probs[E8 * 13 + 12] = 1.0 - p_empty;
        probs[E8 * 13] = p_empty;
        probs
    }

    #[test]
    fn the_masses_follow_the_probability_of_an_invalid_state() {
        let samples = 4096;
        let mass = sampler(samples).measure("g", 0, &doubtful_king(0.25), Some(E2E4));
        // A binomial share of 4,096 draws at p = 0.75 has a standard deviation of 0.0068.
        assert!((mass.valid - 0.75).abs() < 0.03, "{mass:?}");
        assert_eq!(mass.afford, Some(mass.valid), "the same draws fail both");
        let all = sampler(256).measure("g", 0, &doubtful_king(1.0), Some(E2E4));
        assert_eq!(
            all,
            StepMass {
                valid: 0.0,
                afford: Some(0.0)
            }
        );
    }

    #[test]
    fn the_draws_depend_on_the_seed_the_game_and_the_step_only() {
        let probs = doubtful_king(0.5);
        let a = sampler(64).measure("g", 3, &probs, Some(E2E4));
        assert_eq!(a, sampler(64).measure("g", 3, &probs, Some(E2E4)));
        let others = [
            sampler(64).measure("h", 3, &probs, Some(E2E4)),
            sampler(64).measure("g", 4, &probs, Some(E2E4)),
            MassSampler {
                options: MassOptions {
                    seed: 8,
                    ..sampler(64).options
                },
                ..sampler(64)
            }
            .measure("g", 3, &probs, Some(E2E4)),
        ];
        assert!(
            others.iter().any(|m| m.valid != a.valid),
            "{a:?} {others:?}"
        );
    }

    #[test]
    fn a_label_is_drawn_in_proportion_to_its_probabilities() {
        let mut probs = one_hot(&INITIAL_STATE);
        // The halfmove clock's low byte: 0 with 0.5, 1 with 0.3, 255 with 0.2.
        let group = LABEL_GROUPS[5];
        let low = group.logit_offset + group.n_classes;
        probs[low] = 0.5;
        probs[low + 1] = 0.3;
        probs[low + 255] = 0.2;
        let tables = AliasTables::of(&probs);
        let mut rng = Xoshiro256PlusPlus::for_game(1, 2);
        let mut counts = [0u32; 256];
        let draws = 20_000;
        for _ in 0..draws {
            let state = tables.draw(&mut rng);
            counts[usize::from(state[group.first_label + 1])] += 1;
            assert_eq!(state[..71], INITIAL_STATE[..71]);
        }
        let share = |c: usize| f64::from(counts[c]) / f64::from(draws);
        assert!((share(0) - 0.5).abs() < 0.02, "{}", share(0));
        assert!((share(1) - 0.3).abs() < 0.02, "{}", share(1));
        assert!((share(255) - 0.2).abs() < 0.02, "{}", share(255));
        assert_eq!(counts.iter().sum::<u32>(), draws);
    }

    #[test]
    fn classes_of_probability_zero_are_never_drawn_and_a_label_without_mass_draws_zero() {
        let mut probs = one_hot(&INITIAL_STATE);
        // a8's 13 classes: five of them 0.2 each, the others 0; White's king-side castling
        // right (label 65, true class 1): nothing at all.
        probs[..13].fill(0.0);
        for c in [1, 4, 6, 9, 12] {
            probs[c] = 0.2;
        }
        let castle = LABEL_GROUPS[2].logit_offset;
        probs[castle..castle + 2].fill(0.0);
        let tables = AliasTables::of(&probs);
        let mut rng = Xoshiro256PlusPlus::for_game(5, 0);
        let mut seen = [0u32; 13];
        for _ in 0..13_000 {
            let state = tables.draw(&mut rng);
            seen[usize::from(state[0])] += 1;
            assert_eq!(state[65], 0, "a label without mass draws class 0");
            assert_eq!(state[1..65], INITIAL_STATE[1..65]);
            assert_eq!(state[66..], INITIAL_STATE[66..]);
        }
        for (c, &n) in seen.iter().enumerate() {
            if [1, 4, 6, 9, 12].contains(&c) {
                assert!((2300..2900).contains(&n), "class {c}: {n} of 13,000");
            } else {
                assert_eq!(n, 0, "class {c} has probability 0");
            }
        }
    }

    #[test]
    fn the_lowest_keys_are_exactly_k_whatever_the_order_they_come_in() {
        let keys: Vec<u64> = (0..1000).map(|t| step_key(0, "game", t)).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        let mut forward = LowestKeys::new(100);
        keys.iter().for_each(|&k| forward.offer(k));
        let mut backward = LowestKeys::new(100);
        keys.iter().rev().for_each(|&k| backward.offer(k));
        assert_eq!(forward.threshold(), sorted[99]);
        assert_eq!(backward.threshold(), sorted[99]);
        assert_eq!(keys.iter().filter(|&&k| k <= sorted[99]).count(), 100);
        let mut few = LowestKeys::new(2000);
        few.offer_game(0, "game", 1000);
        assert_eq!(
            few.threshold(),
            u64::MAX,
            "fewer steps than asked: all of them"
        );
        assert_eq!(LowestKeys::new(0).threshold(), u64::MAX, "0: every step");
    }
}
