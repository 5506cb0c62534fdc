//! The `markov` stage: does a model's hidden state depend only on the state its moves reach,
//! or also on the order they came in (beyond-spec E8 and E10)?
//!
//! * **Inputs** `model` (a `train` artifact or a checkpoint directory), `data` (a `tokenize`
//!   artifact, typically the real test split).
//! * **Params** `split` (its label), `max_games` (0 = all), `max_class` (8 members at most per
//!   natural class), `swaps_per_game` (4 attempts), `window` (8 plies), `pairs` (100,000
//!   population pairs), `permutations` (1,000), `seed`, `batch_size`, `device`, `threads`.
//! * **Output** `out`: `summary.json` ([`cwm_formats::markov::MarkovSummary`]).
//!
//! The classes ([`classes`]) are built from the games' labels and the rules engine; every
//! member's hidden states are read at every layer with one forward pass per batch of games
//! (or of swapped prefixes), and each layer is tested ([`stats`]). At the output, the
//! members' predicted labels say whether the model answers the same for the same state.

pub mod classes;
pub mod stats;

use std::collections::BTreeMap;
use std::path::Path;

use burn::prelude::*;
use cwm_formats::Versioned;
use cwm_formats::markov::{
    ClassSet, KIND, LayerTest, MarkovSummary, SET_NATURAL, SET_SWAP, SUMMARY_FILE,
};
use cwm_models::{Model, N_LABELS, StateModel, layer_name};
use cwm_stage::Progress;
use cwm_stage_data::{ShardReader, TokenizedGame};

use self::classes::{Class, Source, SwapOptions, natural_classes, swap_classes};
use self::stats::{TestOptions, holm, layer_test};
use crate::ProbeError;
use crate::collect::hidden_at;

/// What to test and how.
#[derive(Debug, Clone, PartialEq)]
pub struct MarkovOptions {
    /// The split label written into the summary.
    pub split: String,
    /// Read at most this many games (0 = all).
    pub max_games: u64,
    /// Members kept per natural class.
    pub max_class: usize,
    /// How swapped orders are drawn.
    pub swaps: SwapOptions,
    /// Pairs and shuffles of the test.
    pub test: TestOptions,
    /// Sequences per forward pass (at least 1).
    pub batch_size: usize,
    /// The device, by name.
    pub device: String,
    /// Worker threads for the backend (0 = rayon's default).
    pub threads: usize,
    /// The model artifact's hash, when known.
    pub model_hash: Option<String>,
}

/// Runs the test of the model at `model` on the games at `data` and writes the summary into
/// `out`.
///
/// # Errors
/// [`ProbeError`] for a missing checkpoint, unreadable games, bad options, write errors or
/// cancellation.
pub fn markov(
    model: &Path,
    data: &Path,
    out: &Path,
    options: &MarkovOptions,
    progress: &Progress,
    log: &(dyn Fn(&str) + Sync),
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<MarkovSummary, ProbeError> {
    if options.batch_size == 0 {
        return Err(ProbeError::Invalid("batch_size must be positive".into()));
    }
    crate::probe::with_model(
        model,
        out,
        &options.device,
        options.threads,
        |model, config, device| {
            let games = read_games(data, options.max_games)?;
            let sets = [
                (SET_NATURAL, natural_classes(&games, options.max_class)),
                (SET_SWAP, swap_classes(&games, &options.swaps)),
            ];
            progress.set_total(sets.iter().map(|(_, c)| c.len() as u64).sum());
            let mut tested = Vec::with_capacity(sets.len());
            for (name, classes) in &sets {
                if cancelled() {
                    return Err(ProbeError::Cancelled);
                }
                let members = Members::read(model, &games, classes, options.batch_size, device)?;
                let set = test_set(name, classes, &members, model.blocks(), &options.test);
                log(&set_line(&set));
                progress.inc(classes.len() as u64);
                tested.push(set);
            }
            let summary = MarkovSummary {
                version: MarkovSummary::VERSION,
                kind: KIND.to_owned(),
                arch: config.family.name().to_owned(),
                size: config.size.name().to_owned(),
                model_hash: options.model_hash.clone(),
                split: options.split.clone(),
                blocks: model.blocks() as u32,
                games: games.len() as u64,
                population_pairs: options.test.pairs as u64,
                permutations: options.test.permutations as u64,
                sets: tested,
            };
            cwm_formats::write_json(&out.join(SUMMARY_FILE), &summary)?;
            Ok(summary)
        },
    )
}

/// The games at `data` (at most `max_games`, 0 = all).
pub(crate) fn read_games(data: &Path, max_games: u64) -> Result<Vec<TokenizedGame>, ProbeError> {
    let mut games = Vec::new();
    for game in ShardReader::open(data, 256)? {
        if max_games > 0 && games.len() as u64 >= max_games {
            break;
        }
        games.push(game?);
    }
    Ok(games)
}

/// One line of the log per class set.
fn set_line(set: &ClassSet) -> String {
    let last = set.layers.last();
    format!(
        "{}: {} classes, {} members; head input d {}, p {}; prediction agreement {}",
        set.name,
        set.classes,
        set.members,
        fmt(last.and_then(|l| l.d)),
        fmt(last.and_then(|l| l.p_holm)),
        fmt(set.prediction_agreement)
    )
}

fn fmt(value: Option<f64>) -> String {
    value.map_or("-".to_owned(), |v| format!("{v:.4}"))
}

/// One member's hidden state at every layer and its 75 predicted labels.
type MemberRow = (Vec<Vec<f32>>, Vec<u8>);

/// The hidden states and predictions of every member of a set of classes, members in class
/// order.
struct Members {
    /// Per layer: `[members, d]`.
    layers: Vec<Vec<f32>>,
    /// 75 predicted labels per member.
    head: Vec<u8>,
    /// The class of each member.
    class: Vec<usize>,
    d: usize,
}

impl Members {
    fn read(
        model: &Model,
        games: &[TokenizedGame],
        classes: &[Class],
        batch: usize,
        device: &Device,
    ) -> Result<Members, ProbeError> {
        let [d, _] = model.head().weight.dims();
        let sources: Vec<(usize, &Source)> = classes
            .iter()
            .enumerate()
            .flat_map(|(c, class)| class.members.iter().map(move |m| (c, m)))
            .collect();
        let n_layers = model.blocks() + 2;
        let mut rows: Vec<Option<MemberRow>> = vec![None; sources.len()];
        // Members at steps of the games: one pass over the games that hold any.
        let mut by_game: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
        let mut prefixes: Vec<(usize, &[u16])> = Vec::new();
        for (i, (_, source)) in sources.iter().enumerate() {
            match source {
                Source::Step { game, t } => by_game.entry(*game).or_default().push((i, *t)),
                Source::Prefix(tokens) => prefixes.push((i, tokens)),
            }
        }
        let game_list: Vec<(usize, Vec<(usize, usize)>)> = by_game.into_iter().collect();
        for chunk in game_list.chunks(batch) {
            let sequences: Vec<&[u16]> = chunk
                .iter()
                .map(|(g, _)| games[*g].moves.as_slice())
                .collect();
            let wanted: Vec<(usize, (usize, usize))> = chunk
                .iter()
                .enumerate()
                .flat_map(|(b, (_, steps))| steps.iter().map(move |&(i, t)| (i, (b, t))))
                .collect();
            place(model, &sequences, &wanted, device, &mut rows)?;
        }
        for chunk in prefixes.chunks(batch) {
            let sequences: Vec<&[u16]> = chunk.iter().map(|(_, p)| *p).collect();
            let wanted: Vec<(usize, (usize, usize))> = chunk
                .iter()
                .enumerate()
                .map(|(b, (i, p))| (*i, (b, p.len() - 1)))
                .collect();
            place(model, &sequences, &wanted, device, &mut rows)?;
        }
        let mut members = Members {
            layers: vec![Vec::with_capacity(sources.len() * d); n_layers],
            head: Vec::with_capacity(sources.len() * N_LABELS),
            class: sources.iter().map(|(c, _)| *c).collect(),
            d,
        };
        for row in rows {
            let (layers, head) =
                row.ok_or_else(|| ProbeError::Invalid("a class member was not read".into()))?;
            for (all, one) in members.layers.iter_mut().zip(layers) {
                all.extend(one);
            }
            members.head.extend(head);
        }
        Ok(members)
    }
}

/// Reads `wanted` (member index, (sequence, step)) from one pass over `sequences` into `rows`.
fn place(
    model: &Model,
    sequences: &[&[u16]],
    wanted: &[(usize, (usize, usize))],
    device: &Device,
    rows: &mut [Option<MemberRow>],
) -> Result<(), ProbeError> {
    let positions: Vec<(usize, usize)> = wanted.iter().map(|w| w.1).collect();
    let hidden = hidden_at(model, sequences, &positions, device)?;
    let d = hidden
        .layers
        .first()
        .map_or(0, |l| l.len() / positions.len().max(1));
    for (k, (i, _)) in wanted.iter().enumerate() {
        let layers = hidden
            .layers
            .iter()
            .map(|l| l[k * d..(k + 1) * d].to_vec())
            .collect();
        let head = hidden.head[k * N_LABELS..(k + 1) * N_LABELS].to_vec();
        rows[*i] = Some((layers, head));
    }
    Ok(())
}

/// The test of one class set at every layer, and its output agreement.
fn test_set(
    name: &str,
    classes: &[Class],
    members: &Members,
    blocks: usize,
    options: &TestOptions,
) -> ClassSet {
    let stats: Vec<_> = members
        .layers
        .iter()
        .map(|x| layer_test(x, members.d, &members.class, classes.len(), options))
        .collect();
    let adjusted = holm(&stats.iter().map(|s| s.p).collect::<Vec<_>>());
    let layers = stats
        .iter()
        .zip(adjusted)
        .enumerate()
        .map(|(layer, (s, p_holm))| LayerTest {
            layer: layer as u32,
            layer_name: layer_name(layer, blocks),
            mu_sem: s.mu_sem,
            mu_pop: s.mu_pop,
            sigma_pop: s.sigma_pop,
            d: s.d,
            p: s.p,
            p_holm,
        })
        .collect();
    let agreement = Agreement::count(classes, &members.head);
    ClassSet {
        name: name.to_owned(),
        classes: classes.len() as u64,
        members: members.class.len() as u64,
        within_pairs: classes
            .iter()
            .map(|c| (c.members.len() * (c.members.len() - 1) / 2) as u64)
            .sum(),
        prediction_agreement: agreement.share(agreement.same_prediction),
        exact_agreement: agreement.share(agreement.same_exactness),
        exact_first: ratio(agreement.exact_first, agreement.classes),
        exact_others: ratio(agreement.exact_others, agreement.others),
        layers,
    }
}

/// Output-level counts over the classes (E8).
#[derive(Debug, Default)]
struct Agreement {
    classes: u64,
    same_prediction: u64,
    same_exactness: u64,
    exact_first: u64,
    exact_others: u64,
    others: u64,
}

impl Agreement {
    /// `head`: 75 predicted labels per member, members in class order.
    fn count(classes: &[Class], head: &[u8]) -> Agreement {
        let mut a = Agreement::default();
        let mut rows = head.chunks_exact(N_LABELS);
        for class in classes {
            let preds: Vec<&[u8]> = rows.by_ref().take(class.members.len()).collect();
            let exact: Vec<bool> = preds
                .iter()
                .map(|p| *p == class.labels.as_slice())
                .collect();
            a.classes += 1;
            a.same_prediction += u64::from(preds.windows(2).all(|w| w[0] == w[1]));
            a.same_exactness += u64::from(exact.windows(2).all(|w| w[0] == w[1]));
            a.exact_first += u64::from(exact.first().copied().unwrap_or(false));
            a.exact_others += exact.iter().skip(1).filter(|&&e| e).count() as u64;
            a.others += exact.len().saturating_sub(1) as u64;
        }
        a
    }

    fn share(&self, n: u64) -> Option<f64> {
        ratio(n, self.classes)
    }
}

fn ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_counts_identical_predictions_and_exactness() {
        let labels = vec![1u8; N_LABELS];
        let mut other = labels.clone();
        other[3] = 0;
        let classes = vec![
            Class {
                members: vec![Source::Prefix(vec![1]), Source::Prefix(vec![2])],
                labels: labels.clone(),
            },
            Class {
                members: vec![Source::Prefix(vec![3]), Source::Prefix(vec![4])],
                labels: labels.clone(),
            },
        ];
        // Class 0: both exact. Class 1: the first exact, the second not.
        let head = [labels.clone(), labels.clone(), labels.clone(), other].concat();
        let a = Agreement::count(&classes, &head);
        assert_eq!((a.same_prediction, a.same_exactness), (1, 1));
        assert_eq!((a.exact_first, a.exact_others, a.others), (2, 1, 2));
        assert_eq!(a.share(a.same_prediction), Some(0.5));
    }
}
