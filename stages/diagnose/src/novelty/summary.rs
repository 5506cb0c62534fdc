//! What the summary says about the test set: seen steps, the deviation plies, bad games.

use cwm_formats::novelty::{BadGame, BadGames, DeviationStats, PlyBin, PlyQuantile};
use cwm_stage_data::TokenizedGame;

use super::scan::{GameNovelty, bad_game};

/// The quantiles of `t_dev` the summary gives.
pub(crate) const DEVIATION_QUANTILES: [f64; 6] = [0.1, 0.25, 0.5, 0.75, 0.9, 0.99];
/// The coarse histogram bins after the per-ply ones: inclusive (from, to).
const COARSE_BINS: [(u32, Option<u32>); 4] =
    [(30, Some(39)), (40, Some(49)), (50, Some(99)), (100, None)];

/// Counts over the test games, as their rows are written.
#[derive(Debug, Default)]
pub(crate) struct TestTally {
    pub(crate) games: u64,
    pub(crate) steps: u64,
    pub(crate) prefix_seen: u64,
    pub(crate) position_seen: u64,
    pub(crate) position_unknown: u64,
    pub(crate) state_seen: u64,
    /// The deviation ply of every deviating game.
    pub(crate) deviations: Vec<u32>,
    pub(crate) never: u64,
    pub(crate) bad: u64,
    pub(crate) bad_examples: Vec<BadGame>,
}

impl TestTally {
    /// Adds one test game and what the scan found for it.
    pub(crate) fn add(&mut self, game: &TokenizedGame, found: &GameNovelty) {
        self.games += 1;
        self.steps += found.steps.len() as u64;
        for step in &found.steps {
            self.prefix_seen += u64::from(step.prefix > 0);
            self.state_seen += u64::from(step.state > 0);
            match step.position {
                Some(count) => self.position_seen += u64::from(count > 0),
                None => self.position_unknown += 1,
            }
        }
        match found.deviation {
            Some(t) => self.deviations.push(t),
            None => self.never += 1,
        }
        if let Some(bad) = found.bad {
            self.bad += 1;
            if self.bad_examples.len() < BadGames::MAX_EXAMPLES {
                self.bad_examples.push(bad_game("test", &game.id, bad));
            }
        }
    }

    /// `part / steps`, 0 without steps.
    pub(crate) fn share(&self, part: u64) -> f64 {
        if self.steps == 0 {
            0.0
        } else {
            part as f64 / self.steps as f64
        }
    }

    /// The distribution of the deviation plies.
    pub(crate) fn deviation_stats(&self) -> DeviationStats {
        let mut sorted = self.deviations.clone();
        sorted.sort_unstable();
        let n = sorted.len();
        let quantiles = if n == 0 {
            Vec::new()
        } else {
            DEVIATION_QUANTILES
                .iter()
                .map(|&q| {
                    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
                    PlyQuantile {
                        q,
                        ply: sorted[rank - 1],
                    }
                })
                .collect()
        };
        let mean = (n > 0).then(|| sorted.iter().map(|&t| f64::from(t)).sum::<f64>() / n as f64);
        DeviationStats {
            games: n as u64,
            never: self.never,
            mean,
            quantiles,
            histogram: histogram(&sorted),
        }
    }
}

/// The histogram of the deviation plies: one bin per ply up to 29, then [`COARSE_BINS`].
fn histogram(plies: &[u32]) -> Vec<PlyBin> {
    let fine = (0..30).map(|ply| (ply, Some(ply)));
    fine.chain(COARSE_BINS)
        .map(|(from, to)| PlyBin {
            from,
            to,
            games: plies
                .iter()
                .filter(|&&t| t >= from && to.is_none_or(|to| t <= to))
                .count() as u64,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deviation_quantiles_are_nearest_ranks_and_the_histogram_tiles_the_plies() {
        let tally = TestTally {
            deviations: (1..=10).chain([35, 120]).collect(),
            never: 3,
            ..TestTally::default()
        };
        let stats = tally.deviation_stats();
        assert_eq!(stats.games, 12);
        assert_eq!(stats.never, 3);
        assert_eq!(stats.mean, Some((55 + 35 + 120) as f64 / 12.0));
        let plies: Vec<u32> = stats.quantiles.iter().map(|q| q.ply).collect();
        // ranks ceil(q·12): 2, 3, 6, 9, 11, 12
        assert_eq!(plies, [2, 3, 6, 9, 35, 120]);
        assert_eq!(stats.histogram.len(), 34);
        assert_eq!(stats.histogram.iter().map(|b| b.games).sum::<u64>(), 12);
        assert_eq!(stats.histogram[0].games, 0);
        assert_eq!(stats.histogram[7].games, 1);
        assert_eq!(
            stats.histogram[30],
            PlyBin {
                from: 30,
                to: Some(39),
                games: 1
            }
        );
        assert_eq!(
            stats.histogram[33],
            PlyBin {
                from: 100,
                to: None,
                games: 1
            }
        );
        for pair in stats.histogram.windows(2) {
            assert_eq!(pair[0].to.map(|to| to + 1), Some(pair[1].from));
        }
        let empty = TestTally::default().deviation_stats();
        assert!(empty.quantiles.is_empty() && empty.mean.is_none());
        assert_eq!(TestTally::default().share(0), 0.0);
    }
}
