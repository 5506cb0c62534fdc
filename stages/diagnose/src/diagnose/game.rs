//! One game measured: the true game replayed and tagged by the rules engine, then every step
//! compared with it, filling the game's counters ([`Tally`]), its per-step rows and the counts
//! that are not bootstrapped.
//!
//! Move generation runs only where the prediction's position differs from the truth: a
//! prediction whose `Key4` is right stands for the true position (the counters play no part
//! in legal moves, checks or pins), so its move sets are the truth's and the game's next move
//! is legal in it.

use cwm_chess::encode::{EpConvention, INITIAL_STATE, StateLabels};
use cwm_chess::rules::{EventTags, GameTagger, LabelSet, StepTags, playable};
use cwm_formats::diagnose::SkippedGame;
use shakmaty::Chess;

use super::affordance::{self, MoveSets, Scratch};
use super::dynamics::{self, DynamicsCounts};
use super::events::{self, FirstErrorFields};
use super::fields::{self, FieldCounts};
use super::mass::{self, GameMass};
use super::memory::Memory;
use super::reader::GameRows;
use super::slots;
use super::steps::{GameSteps, StepRow};
use super::validity;
use crate::stats::Tally;

/// What a game is measured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// The labels' en-passant convention.
    pub ep: EpConvention,
    /// The prefix bin width (positive).
    pub bin: u32,
    /// Steps with t above this carry `long_game`.
    pub long_game_ply: Option<u32>,
}

/// Everything one game contributes.
#[derive(Debug, Clone, Default)]
pub struct GameResult {
    /// Its rows of `steps.parquet` (none for a skipped game).
    pub steps: GameSteps,
    /// Its counters.
    pub tally: Tally,
    /// E2's counts.
    pub fields: FieldCounts,
    /// E4's counts.
    pub dynamics: DynamicsCounts,
    /// E5's first-error fields.
    pub first_error_fields: FirstErrorFields,
    /// E12's histogram keys.
    pub mass: GameMass,
    /// Some step fails V1.
    pub v1_failure: bool,
    /// Prefix bins the game reaches.
    pub bins: usize,
    /// Labels right per step, for the novelty join (also for skipped games).
    pub n_correct: Vec<u8>,
    /// Why the game was left out, if it was.
    pub skipped: Option<SkippedGame>,
}

/// The true game: the tagger's steps (t = 1..=T) and the true position at every step.
struct Truth {
    steps: Vec<StepTags>,
    positions: Vec<Chess>,
}

/// Replays and tags the game's tokens, checking that the true labels are the states the moves
/// lead to; the reason otherwise.
fn replay(rows: &GameRows, ep: EpConvention) -> Result<Truth, String> {
    if rows.target(0) != &INITIAL_STATE {
        return Err("the true labels at step 0 are not the initial position".into());
    }
    let mut steps = Vec::with_capacity(rows.steps().saturating_sub(1));
    let mut positions = Vec::with_capacity(rows.steps());
    positions.push(Chess::default());
    let mut tagger = GameTagger::new(&rows.tokens, ep);
    while let Some(step) = tagger.next() {
        let step = step.map_err(|e| format!("illegal for the rules engine: {e}"))?;
        if rows.target(step.t) != &step.state {
            return Err(format!(
                "the true labels at step {} are not the state the moves lead to",
                step.t
            ));
        }
        positions.push(tagger.position().clone());
        steps.push(step);
    }
    if positions.len() != rows.steps() {
        return Err(format!(
            "the rules engine stopped after step {} of {}",
            positions.len() - 1,
            rows.steps() - 1
        ));
    }
    Ok(Truth { steps, positions })
}

fn labels_right(pred: &StateLabels, target: &StateLabels) -> u8 {
    pred.iter().zip(target).filter(|(p, t)| p == t).count() as u8
}

/// Measures one game.
pub fn measure_game(rows: &GameRows, settings: &Settings) -> GameResult {
    let n = rows.steps();
    let n_correct: Vec<u8> = (0..n)
        .map(|t| labels_right(rows.pred(t), rows.target(t)))
        .collect();
    let truth = match replay(rows, settings.ep) {
        Ok(truth) => truth,
        Err(reason) => {
            return GameResult {
                n_correct,
                skipped: Some(SkippedGame {
                    game_id: rows.game_id.clone(),
                    reason,
                }),
                ..GameResult::default()
            };
        }
    };
    let mut game = Measuring::new(rows, settings, truth);
    for t in 0..n {
        game.step(t);
    }
    game.finish(n_correct)
}

/// A game being measured.
struct Measuring<'a> {
    rows: &'a GameRows,
    settings: &'a Settings,
    truth: Truth,
    result: GameResult,
    exact: Vec<bool>,
    tags: Vec<u32>,
    scratch: Scratch,
    memory: Memory,
}

impl<'a> Measuring<'a> {
    fn new(rows: &'a GameRows, settings: &'a Settings, truth: Truth) -> Measuring<'a> {
        let n = rows.steps();
        let mut result = GameResult::default();
        result.steps.game_id = rows.game_id.clone();
        result.steps.rows.reserve(n);
        Measuring {
            rows,
            settings,
            truth,
            result,
            exact: Vec::with_capacity(n),
            tags: Vec::with_capacity(n),
            scratch: Scratch::default(),
            memory: Memory::default(),
        }
    }

    /// Counts the step in the shared denominators; returns ExactState and the bin.
    fn common(&mut self, t: usize) -> (bool, usize) {
        let (pred, target) = (self.rows.pred(t), self.rows.target(t));
        let exact = pred == target;
        let last = t + 1 == self.rows.steps();
        let bin = t / self.settings.bin as usize;
        let tally = &mut self.result.tally;
        tally.add(slots::STEPS, 1.0);
        tally.count(slots::EXACT, exact);
        tally.count(slots::NON_EXACT, !exact);
        tally.count(slots::BEFORE_LAST, !last);
        if t > 0 {
            tally.add(slots::AFTER_FIRST, 1.0);
            let slot = if self.exact[t - 1] {
                slots::PREV_EXACT
            } else {
                slots::PREV_WRONG
            };
            tally.add(slot, 1.0);
        }
        tally.add(slots::bin(bin, slots::BIN_STEPS), 1.0);
        tally.count(slots::bin(bin, slots::BIN_ERRORS), !exact);
        self.result.bins = self.result.bins.max(bin + 1);
        (exact, bin)
    }

    fn step(&mut self, t: usize) {
        let (exact, bin) = self.common(t);
        let rows = self.rows;
        let (pred, target) = (rows.pred(t), rows.target(t));
        let next_token = rows.tokens.get(t + 1).copied();
        let tally = &mut self.result.tally;
        let field = fields::measure(pred, target, exact, tally, &mut self.result.fields);

        // E3 and V4: the believed position, only where it is not the true one.
        let (playable_now, sets, affords) = if field.position_exact {
            (true, Some(MoveSets::PERFECT), next_token.map(|_| true))
        } else {
            let belief = playable(pred);
            let sets = belief
                .as_ref()
                .map(|b| affordance::compare(&self.truth.positions[t], b, &mut self.scratch));
            let affords = next_token.map(|token| affordance::affords(belief.as_ref(), token));
            (belief.is_some(), sets, affords)
        };
        affordance::record(sets.as_ref(), exact, bin, tally);
        let v = validity::measure(pred, t as u32, self.settings.ep, affords, exact, tally);
        tally.count(slots::bin(bin, slots::BIN_V1), v.v1);
        self.result.v1_failure |= !v.v1;
        if let Some(afforded) = affords {
            dynamics::record_afforded(afforded, tally);
        }

        // E4 over the previous step, E5's tags of this one.
        let (mut transition, mut invariants, mut tag_bits) = (None, 0u8, 0u32);
        if t > 0 {
            let step = &self.truth.steps[t - 1];
            let prev_exact = self.exact[t - 1];
            let prev = rows.pred(t - 1);
            let consistent = dynamics::transition_consistent(
                prev,
                prev_exact,
                pred,
                exact,
                rows.tokens[t],
                self.settings.ep,
            );
            dynamics::record_transition(consistent, prev_exact, tally);
            transition = Some(consistent);
            invariants = dynamics::invariant_bits(prev, pred, step.footprint);
            dynamics::record_invariants(invariants, tally);
            let tags = events::step_tags(step, self.settings.long_game_ply);
            events::record_step(step, tags, pred, exact, bin, tally);
            tag_bits = tags.bits();
        }
        let (previous, promoted) = match t.checked_sub(1) {
            Some(before) => (
                rows.target(before),
                self.truth.steps[before].extra(EventTags::PROMOTED_PIECE_PRESENT),
            ),
            None => (target, LabelSet::EMPTY),
        };
        self.memory.step(t as u32, previous, target, pred, promoted);
        let (valid, afford) = rows.sampled_mass(t);
        let step = mass::StepMass {
            log_p_true: rows.log_p_true[t],
            p_max: rows.p_max(t),
            valid,
            afford,
        };
        mass::measure(&step, exact, tally, &mut self.result.mass);
        self.exact.push(exact);
        self.tags.push(tag_bits);
        self.result.steps.rows.push(StepRow {
            t: t as u32,
            exact,
            tier: v.tier,
            flags: v.flags,
            fields: field.bits,
            position_exact: field.position_exact,
            playable: playable_now,
            iou: sets.map(|s| s.iou as f32),
            precision: sets.map(|s| s.precision as f32),
            recall: sets.map(|s| s.recall as f32),
            legal_exact: sets.map(|s| s.exact),
            piece_iou: sets.map(|s| s.piece_iou as f32),
            next_afforded: affords,
            transition_consistent: transition,
            invariants,
            tags: tag_bits,
            first_error: false,
        });
    }

    fn finish(mut self, n_correct: Vec<u8>) -> GameResult {
        let rows = self.rows;
        let result = &mut self.result;
        dynamics::record_errors(&self.exact, &mut result.tally, &mut result.dynamics);
        dynamics::record_rollouts(
            &self.exact,
            |t| rows.pred(t),
            |t| rows.target(t),
            &rows.tokens,
            self.settings.ep,
            &mut result.dynamics,
        );
        events::record_aftershocks(&self.tags, &self.exact, &mut result.tally);
        if let Some(first) = self.exact.iter().position(|&e| !e) {
            let bin = first / self.settings.bin as usize;
            events::record_first_error(self.tags[first], bin, &mut result.tally);
            if let Some(row) = result.steps.rows.get_mut(first) {
                row.first_error = true;
                result.first_error_fields.add(row.fields);
            }
        }
        self.memory.finish(&mut result.tally);
        result.n_correct = n_correct;
        self.result
    }
}
