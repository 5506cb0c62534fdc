//! E6: ExactState by plies since the switch, for the real-prefix/random-continuation games of
//! the `random_continuation` stage, whose ids end `~k<k>` ([`cwm_stage_data::switch_ply`]).
//! A step `t` of a game continued after `k` plies falls in the bin of `t − k` plies since the
//! switch, [`SWITCH_BIN`] plies wide; the bins before 0 hold the real prefix. Other games add
//! nothing, so a split without continuations has no curve.
//!
//! The counts are plain sums over games, the same in any order, so they do not depend on the
//! thread count.

use std::collections::BTreeMap;

use cwm_formats::diagnose::{SWITCH_BIN, SwitchBin, SwitchCurve};

use super::steps::GameSteps;

/// Steps and exact steps per bin of plies since the switch, per switch ply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SwitchCounts {
    /// Per switch ply.
    curves: BTreeMap<u32, Curve>,
}

/// The games continued after one switch ply, and per bin index (`⌊(t − k) / SWITCH_BIN⌋`)
/// their steps and exact steps.
#[derive(Debug, Clone, Default, PartialEq)]
struct Curve {
    games: u64,
    bins: BTreeMap<i64, (u64, u64)>,
}

impl SwitchCounts {
    /// Adds the steps of one measured game, if its id names a switch ply.
    pub fn add(&mut self, game: &GameSteps) {
        let Some(k) = cwm_stage_data::switch_ply(&game.game_id).and_then(|k| u32::try_from(k).ok())
        else {
            return;
        };
        let curve = self.curves.entry(k).or_default();
        curve.games += 1;
        for row in &game.rows {
            let since = i64::from(row.t) - i64::from(k);
            let (n, exact) = curve.bins.entry(since.div_euclid(SWITCH_BIN)).or_default();
            *n += 1;
            *exact += u64::from(row.exact);
        }
    }

    /// The curves, by switch ply.
    pub fn curves(&self) -> Vec<SwitchCurve> {
        self.curves
            .iter()
            .map(|(&prefix_plies, curve)| SwitchCurve {
                prefix_plies,
                games: curve.games,
                bins: curve
                    .bins
                    .iter()
                    .map(|(&index, &(n, exact))| SwitchBin {
                        start: index * SWITCH_BIN,
                        end: (index + 1) * SWITCH_BIN,
                        n,
                        exact,
                        exact_state: (n > 0).then(|| exact as f64 / n as f64),
                    })
                    .collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::steps::StepRow;

    /// A game of `steps` steps, exact where `exact(t)`.
    fn game(id: &str, steps: u32, exact: impl Fn(u32) -> bool) -> GameSteps {
        GameSteps {
            game_id: id.to_owned(),
            rows: (0..steps)
                .map(|t| StepRow {
                    t,
                    exact: exact(t),
                    ..StepRow::default()
                })
                .collect(),
        }
    }

    #[test]
    fn steps_fall_in_bins_of_plies_since_their_games_switch() {
        let mut counts = SwitchCounts::default();
        // Switched at 15: t = 0..15 before (bins −2, −1), exact until t = 19.
        counts.add(&game("cwm_a~k15", 40, |t| t < 20));
        counts.add(&game("cwm_b~k15", 20, |_| true));
        counts.add(&game("cwm_c~k5", 12, |t| t % 2 == 0));
        counts.add(&game("cwm_real", 50, |_| true));
        let curves = counts.curves();
        assert_eq!(curves.len(), 2, "the real game has no switch");
        let (k5, k15) = (&curves[0], &curves[1]);
        assert_eq!((k5.prefix_plies, k5.games), (5, 1));
        assert_eq!((k15.prefix_plies, k15.games), (15, 2));
        let bins: Vec<(i64, i64, u64, u64)> = k15
            .bins
            .iter()
            .map(|b| (b.start, b.end, b.n, b.exact))
            .collect();
        // t − 15: −15..−11 (5 steps) in [−20, −10), −10..−1 in [−10, 0), 0..9, 10..19, 20..24.
        assert_eq!(
            bins,
            [
                (-20, -10, 10, 10),
                (-10, 0, 20, 20),
                (0, 10, 15, 10),
                (10, 20, 10, 0),
                (20, 30, 5, 0),
            ]
        );
        assert_eq!(k15.bins[2].exact_state, Some(10.0 / 15.0));
        let k5_bins: Vec<(i64, u64, u64)> =
            k5.bins.iter().map(|b| (b.start, b.n, b.exact)).collect();
        assert_eq!(k5_bins, [(-10, 5, 3), (0, 7, 3)]);
    }
}
