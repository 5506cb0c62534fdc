//! The per-model E7 metrics: a model's per-step results joined with a novelty table.
//!
//! **The join contract.** The step records and the novelty rows come in the same order: the
//! order of the test shards (games in shard order, steps `t = 0, 1, ...` of each game), which
//! is the order in which `evaluate` writes `timesteps.parquet` and `predictions.parquet`.
//! Each record must equal the next novelty row in `game_id` and `t`; the only rows that may be
//! passed over are the remaining steps of the game of the previous record (an evaluation with
//! `max_steps` keeps only the first steps of each game), and rows after the last record (an
//! evaluation with `max_games` keeps only the first games). Anything else (a game missing, a
//! step out of order, another test split) is a [`NoveltyError::Join`] naming both sides.

use cwm_formats::novelty::{
    ExactBin, NoveltyCell, NoveltyClass, NoveltyMetrics, NoveltyPlyBin, NoveltyRow,
};

use super::NoveltyError;

/// One evaluated step of a model, to join with its novelty row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepRecord<'a> {
    /// The example id.
    pub game_id: &'a str,
    /// The step.
    pub t: u32,
    /// Whether all 75 predicted labels are right (ExactState).
    pub exact: bool,
    /// The fraction of the 75 labels predicted right, in `[0, 1]` (Labelwise).
    pub labelwise: f64,
    /// Whether the predicted state passes E1's V1 (a valid position), when known.
    pub v1: Option<bool>,
}

/// The plies-since-deviation bins: label and inclusive range (`None`: unbounded).
const DEVIATION_BINS: [(&str, Option<i32>, Option<i32>); 7] = [
    ("<0", None, Some(-1)),
    ("0", Some(0), Some(0)),
    ("1-4", Some(1), Some(4)),
    ("5-9", Some(5), Some(9)),
    ("10-19", Some(10), Some(19)),
    ("20-49", Some(20), Some(49)),
    (">=50", Some(50), None),
];
/// The label of the bin of games that never deviate.
const NEVER: &str = "never";
/// The position-count bins (log10(count + 1) bins): label and inclusive lower bound.
const COUNT_BINS: [(&str, u64); 6] = [
    ("0", 0),
    ("1", 1),
    ("2-9", 2),
    ("10-99", 10),
    ("100-999", 100),
    (">=1000", 1000),
];

/// The bin of `plies_since_deviation` (the last, [`NEVER`], for `None`).
fn deviation_bin(since: Option<i32>) -> usize {
    let Some(d) = since else {
        return DEVIATION_BINS.len();
    };
    DEVIATION_BINS
        .iter()
        .position(|&(_, lo, hi)| lo.is_none_or(|lo| d >= lo) && hi.is_none_or(|hi| d <= hi))
        .unwrap_or(DEVIATION_BINS.len() - 1)
}

/// The bin of a position count.
fn count_bin(count: u64) -> usize {
    COUNT_BINS
        .iter()
        .rposition(|&(_, lo)| count >= lo)
        .unwrap_or(0)
}

fn rate(part: f64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part / whole as f64)
}

/// Running sums of one stratum of one bin.
#[derive(Debug, Clone, Copy, Default)]
struct Cell {
    n: u64,
    exact: u64,
    labelwise: f64,
    v1_n: u64,
    v1_pass: u64,
}

impl Cell {
    fn add(&mut self, record: &StepRecord<'_>) {
        self.n += 1;
        self.exact += u64::from(record.exact);
        self.labelwise += record.labelwise;
        if let Some(v1) = record.v1 {
            self.v1_n += 1;
            self.v1_pass += u64::from(v1);
        }
    }

    fn exact_state(&self) -> Option<f64> {
        rate(self.exact as f64, self.n)
    }

    fn finish(&self) -> NoveltyCell {
        NoveltyCell {
            n: self.n,
            exact: self.exact,
            exact_state: self.exact_state(),
            labelwise: rate(self.labelwise, self.n),
            v1_n: self.v1_n,
            v1_pass: self.v1_pass,
            v1_rate: rate(self.v1_pass as f64, self.v1_n),
        }
    }

    fn exact_bin(&self, label: &str) -> ExactBin {
        ExactBin {
            label: label.to_owned(),
            n: self.n,
            exact: self.exact,
            exact_state: self.exact_state(),
        }
    }
}

/// Joins a model's step records with a novelty table, one record at a time, and accumulates
/// the E7 metrics (see the module documentation for the order both must follow).
#[derive(Debug)]
pub struct NoveltyJoin<I> {
    rows: I,
    bin_width: u32,
    /// Records joined so far.
    records: u64,
    /// The game and step of the previous record.
    last: Option<(String, u32)>,
    games: u64,
    prefix_seen: u64,
    position_seen: u64,
    state_seen: u64,
    unclassified: u64,
    /// Per ply bin: prefix seen, position seen, novel.
    by_ply: Vec<[Cell; 3]>,
    by_deviation: [Cell; DEVIATION_BINS.len() + 1],
    by_count: [Cell; COUNT_BINS.len()],
}

impl<I> NoveltyJoin<I>
where
    I: Iterator<Item = Result<NoveltyRow, NoveltyError>>,
{
    /// A join over the novelty rows `rows` (for instance a [`super::NoveltyReader`]), with ply
    /// bins `bin_width` steps wide (the spec's 20).
    ///
    /// # Errors
    /// [`NoveltyError::Invalid`] for a zero bin width.
    pub fn new(rows: I, bin_width: u32) -> Result<NoveltyJoin<I>, NoveltyError> {
        if bin_width == 0 {
            return Err(NoveltyError::Invalid(
                "the ply bin width must be positive".into(),
            ));
        }
        Ok(NoveltyJoin {
            rows,
            bin_width,
            records: 0,
            last: None,
            games: 0,
            prefix_seen: 0,
            position_seen: 0,
            state_seen: 0,
            unclassified: 0,
            by_ply: Vec::new(),
            by_deviation: Default::default(),
            by_count: Default::default(),
        })
    }

    /// The novelty row of `record`: the next row, passing over the rest of the previous
    /// record's game.
    fn row_of(&mut self, record: &StepRecord<'_>) -> Result<NoveltyRow, NoveltyError> {
        let index = self.records;
        let error = |message: String| NoveltyError::Join {
            record: index,
            message,
        };
        loop {
            let Some(row) = self.rows.next() else {
                return Err(error(format!(
                    "game {:?} step {}: the novelty table has no more rows",
                    record.game_id, record.t
                )));
            };
            let row = row?;
            if row.game_id == record.game_id && row.t == record.t {
                return Ok(row);
            }
            let rest_of_last = self
                .last
                .as_ref()
                .is_some_and(|(game, t)| *game == row.game_id && row.t > *t);
            if !rest_of_last {
                return Err(error(format!(
                    "game {:?} step {} meets the novelty row of game {:?} step {}: the records \
                     and the novelty table must follow the same test shards in the same order",
                    record.game_id, record.t, row.game_id, row.t
                )));
            }
        }
    }

    /// Joins the next record.
    ///
    /// # Errors
    /// [`NoveltyError::Join`] when the record does not match the next novelty row or its
    /// labelwise accuracy is not in `[0, 1]`; a read error of the rows.
    pub fn push(&mut self, record: &StepRecord<'_>) -> Result<(), NoveltyError> {
        if !(0.0..=1.0).contains(&record.labelwise) {
            return Err(NoveltyError::Join {
                record: self.records,
                message: format!(
                    "game {:?} step {}: labelwise accuracy {} is not in [0, 1]",
                    record.game_id, record.t, record.labelwise
                ),
            });
        }
        let row = self.row_of(record)?;
        let new_game = self.last.as_ref().is_none_or(|(g, _)| *g != row.game_id);
        self.games += u64::from(new_game);
        self.add(record, &row);
        self.records += 1;
        self.last = Some((row.game_id, row.t));
        Ok(())
    }

    fn add(&mut self, record: &StepRecord<'_>, row: &NoveltyRow) {
        self.prefix_seen += u64::from(row.prefix_seen);
        self.position_seen += u64::from(row.position_seen == Some(true));
        self.state_seen += u64::from(row.state_seen);
        let bin = (row.t / self.bin_width) as usize;
        if self.by_ply.len() <= bin {
            self.by_ply.resize(bin + 1, Default::default());
        }
        match row.class() {
            Some(NoveltyClass::PrefixSeen) => self.by_ply[bin][0].add(record),
            Some(NoveltyClass::PositionSeen) => self.by_ply[bin][1].add(record),
            Some(NoveltyClass::Novel) => self.by_ply[bin][2].add(record),
            None => self.unclassified += 1,
        }
        self.by_deviation[deviation_bin(row.plies_since_deviation)].add(record);
        if let Some(count) = row.position_count {
            self.by_count[count_bin(count)].add(record);
        }
    }

    /// The metrics of the records joined so far.
    pub fn finish(self) -> NoveltyMetrics {
        let steps = self.records;
        let by_ply: Vec<NoveltyPlyBin> = self
            .by_ply
            .iter()
            .enumerate()
            .map(|(b, [prefix, position, novel])| {
                let from = self.bin_width.saturating_mul(b as u32);
                NoveltyPlyBin {
                    from,
                    to: from.saturating_add(self.bin_width - 1),
                    prefix_seen: prefix.finish(),
                    position_seen: position.finish(),
                    novel: novel.finish(),
                }
            })
            .collect();
        let (gap, gap_weight) = seen_novel_gap(&self.by_ply);
        let deviation_labels = DEVIATION_BINS.iter().map(|b| b.0).chain([NEVER]);
        NoveltyMetrics {
            steps,
            games: self.games,
            prefix_seen_steps: self.prefix_seen,
            position_seen_steps: self.position_seen,
            state_seen_steps: self.state_seen,
            unclassified_steps: self.unclassified,
            prefix_seen_share: rate(self.prefix_seen as f64, steps),
            position_seen_share: rate(self.position_seen as f64, steps),
            state_seen_share: rate(self.state_seen as f64, steps),
            bin_width: self.bin_width,
            by_ply,
            by_plies_since_deviation: self
                .by_deviation
                .iter()
                .zip(deviation_labels)
                .map(|(cell, label)| cell.exact_bin(label))
                .collect(),
            by_position_count: self
                .by_count
                .iter()
                .zip(COUNT_BINS)
                .map(|(cell, (label, _))| cell.exact_bin(label))
                .collect(),
            seen_novel_gap: gap,
            gap_weight,
        }
    }
}

/// The seen/novel ExactState gap of [`NoveltyMetrics::seen_novel_gap`] and its weight.
fn seen_novel_gap(by_ply: &[[Cell; 3]]) -> (Option<f64>, u64) {
    let mut weighted = 0.0;
    let mut weight = 0u64;
    for [prefix, position, novel] in by_ply {
        let seen_n = prefix.n + position.n;
        if seen_n == 0 || novel.n == 0 {
            continue;
        }
        let seen = (prefix.exact + position.exact) as f64 / seen_n as f64;
        let unseen = novel.exact as f64 / novel.n as f64;
        weighted += novel.n as f64 * (seen - unseen);
        weight += novel.n;
    }
    (rate(weighted, weight), weight)
}

/// The E7 metrics of a model: its step `records` joined with the novelty `rows` of the same
/// test split (same order: see the module documentation), in ply bins `bin_width` wide.
///
/// # Errors
/// As [`NoveltyJoin::new`] and [`NoveltyJoin::push`].
pub fn novelty_metrics<'a, R, N>(
    records: R,
    rows: N,
    bin_width: u32,
) -> Result<NoveltyMetrics, NoveltyError>
where
    R: IntoIterator<Item = StepRecord<'a>>,
    N: IntoIterator<Item = Result<NoveltyRow, NoveltyError>>,
{
    let mut join = NoveltyJoin::new(rows.into_iter(), bin_width)?;
    for record in records {
        join.push(&record)?;
    }
    Ok(join.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deviation_bins_cover_every_value() {
        let cases = [
            (None, 7),
            (Some(i32::MIN), 0),
            (Some(-1), 0),
            (Some(0), 1),
            (Some(1), 2),
            (Some(4), 2),
            (Some(5), 3),
            (Some(9), 3),
            (Some(10), 4),
            (Some(19), 4),
            (Some(20), 5),
            (Some(49), 5),
            (Some(50), 6),
            (Some(i32::MAX), 6),
        ];
        for (since, bin) in cases {
            assert_eq!(deviation_bin(since), bin, "{since:?}");
        }
    }

    #[test]
    fn count_bins_are_log10_bins() {
        let cases = [
            (0, 0),
            (1, 1),
            (2, 2),
            (9, 2),
            (10, 3),
            (99, 3),
            (100, 4),
            (999, 4),
            (1000, 5),
            (u64::MAX, 5),
        ];
        for (count, bin) in cases {
            assert_eq!(count_bin(count), bin, "{count}");
        }
    }

    #[test]
    fn the_gap_weighs_bins_by_their_novel_steps() {
        let cell = |n, exact| Cell {
            n,
            exact,
            ..Cell::default()
        };
        // Bin 0: seen 3/4 (prefix 2/2, position 1/2), novel 1/2; bin 1: seen 1/1, novel 0/6;
        // bin 2: no novel step, left out. Gap = (2·(0.75 − 0.5) + 6·(1 − 0)) / 8.
        let bins = [
            [cell(2, 2), cell(2, 1), cell(2, 1)],
            [cell(0, 0), cell(1, 1), cell(6, 0)],
            [cell(5, 5), cell(0, 0), cell(0, 0)],
        ];
        let (gap, weight) = seen_novel_gap(&bins);
        assert_eq!(weight, 8);
        assert!((gap.unwrap() - 6.5 / 8.0).abs() < 1e-12);
        assert_eq!(seen_novel_gap(&bins[2..]), (None, 0));
    }
}
