//! The `evaluate` stage: a model checkpoint over tokenized games, with the reference's metrics
//! (spec A.4, A.5) and per-step and per-game tables.
//!
//! * **Inputs** `model` (a `train` artifact, whose `checkpoint/` holds `model.json` +
//!   `model.bpk`, or a checkpoint directory itself) and `data` (a `tokenize` artifact).
//! * **Params** `split` (the label reports use), `batch_size` (32), `max_games` (0 = all),
//!   `max_steps` (0 = full games; otherwise each game keeps its first `max_steps` tokens and
//!   labels, START included, as the reference's truncation), `device` (`cpu`, `cuda` or
//!   `cuda:N`; `cuda` claims one GPU from the executor and runs on the one it assigns, an
//!   explicit `cuda:N` runs where it says), `probabilities` (false: also write each label's
//!   p(target) and p(argmax) into `predictions.parquet`), `mass_samples` (64), `mass_steps`
//!   (100,000) and `mass_seed` (0): E12's sampled masses ([`crate::mass`]; 0 samples for
//!   none), `threads` (0 = all).
//! * **Output** `out`: `timesteps.parquet`, `games.parquet`, `predictions.parquet` and
//!   `summary.json` ([`EvaluateSummary`], of [`cwm_formats::evaluate`]); see [`crate::tables`]
//!   for the columns and [`cwm_formats::predictions`] for `predictions.parquet`, which holds
//!   what the model predicted at every step (the argmax of each label, the labels, the input
//!   move, the log of the true state's probability), row for row beside `timesteps.parquet`.
//!
//! Games stream in file order, `batch_size` at a time, right-padded with `PAD` like the
//! reference's collate function; memory is bounded by one batch. The model runs on a plain
//! (non-autodiff) device, where dropout is off. The loss and metrics are the reference's:
//! [`cwm_models::step_cross_entropy`] (the per-step sum [`cwm_models::state_loss`] masks and
//! sums), [`cwm_models::correct_counts`] and [`cwm_models::StateMetrics`] (micro-averages over
//! valid steps, t = 0 included; trajectory exactness over games).
//!
//! The predictions are taken on the backend, with the model's output still there: the argmax
//! of every label per label group and, with `probabilities`, the softmax's value at the target
//! and at the argmax, packed into one tensor that is read back once per batch. The per-group
//! hits of `timesteps.parquet` are counted from those argmaxes and must add up to
//! [`cwm_models::correct_counts`]'s total, computed separately. For E12's sampled masses the
//! rows of the sampled steps are picked out of the logits on the backend and only their
//! per-label softmax is read back; the draws then run on the CPU, a step per task.

use std::fs::File;
use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};

use burn::prelude::*;
use burn::tensor::activation::log_softmax;
use cwm_formats::Versioned;
pub use cwm_formats::evaluate::EvaluateSummary;
use cwm_models::checkpoint::CONFIG_FILE;
use cwm_models::{
    LABEL_GROUPS, Model, ModelConfig, N_LABELS, PAD_TOKEN, StateMetrics, StateModel,
    correct_counts, load_model, params_of, step_cross_entropy,
};
use cwm_stage::{
    GpusDecl, InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, Params,
    Progress, StageContext, StageError, StageKind, ThreadsDecl,
};
use cwm_stage_data::{ShardReader, TokenizedGame};

use crate::EvalError;
use crate::mass::{
    MassOptions, MassSampler, MassTotals, StepMass, mass_line, mass_sampler, sampled_masses,
};
use crate::tables::{GameRow, SUMMARY_FILE, StepRow, TableWriters};

/// Width of the prefix bins the summary's metrics accumulator keeps (the reference's default).
const BIN_SIZE: usize = 20;

/// The en-passant convention of reference JSONL labels: a square after every double push,
/// `tokenize`'s `reference`.
const JSONL_EP_CONVENTION: &str = "reference";

/// What to evaluate and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvaluateOptions {
    /// The split label written into the summary (`test_real`, `val`, ...).
    pub split: String,
    /// Games per batch (at least 1).
    pub batch_size: usize,
    /// Evaluate at most this many games (0 = all).
    pub max_games: u64,
    /// Keep the first `max_steps` tokens of each game (0 = all).
    pub max_steps: usize,
    /// Worker threads for the backend (0 = rayon's default).
    pub threads: usize,
    /// The device the model runs on, by name: `cpu`, `cuda` or `cuda:N`
    /// ([`cwm_models::device_by_name`]).
    pub device: String,
    /// Also write each label's p(target) and p(argmax) into `predictions.parquet`.
    pub probabilities: bool,
    /// E12's sampled masses ([`MassOptions::OFF`] for none).
    pub mass: MassOptions,
    /// The model artifact's hash, when known.
    pub model_hash: Option<String>,
    /// The data artifact's hash, when known.
    pub data_hash: Option<String>,
}

impl Default for EvaluateOptions {
    fn default() -> Self {
        Self {
            split: "test".to_owned(),
            batch_size: 32,
            max_games: 0,
            max_steps: 0,
            threads: 0,
            device: "cpu".to_owned(),
            probabilities: false,
            mass: MassOptions::DEFAULT,
            model_hash: None,
            data_hash: None,
        }
    }
}

/// The checkpoint directory of `path`: `path` itself when it holds `model.json`, else its
/// `checkpoint/` subdirectory (a `train` artifact).
///
/// # Errors
/// [`EvalError::Format`] when neither holds `model.json`.
pub fn checkpoint_dir(path: &Path) -> Result<PathBuf, EvalError> {
    cwm_models::checkpoint::find_checkpoint(path).ok_or_else(|| {
        EvalError::format(
            path,
            format!("holds no checkpoint: neither {CONFIG_FILE} nor checkpoint/{CONFIG_FILE}"),
        )
    })
}

/// Evaluation games, from `tokenize` shards or from reference JSONL shards (spec E.6).
pub enum GameSource {
    /// The shards of a `tokenize` artifact, or one shard file.
    Shards(ShardReader),
    /// Reference JSONL files, read line by line (moves and states are taken as written).
    Jsonl {
        /// Files still to read.
        files: std::vec::IntoIter<PathBuf>,
        /// The file being read, its lines and the number of the last line read.
        current: Option<(PathBuf, Lines<BufReader<File>>, u64)>,
    },
}

impl std::fmt::Debug for GameSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GameSource::Shards(reader) => f.debug_tuple("Shards").field(reader).finish(),
            GameSource::Jsonl { current, .. } => f
                .debug_struct("Jsonl")
                .field("current", &current.as_ref().map(|c| &c.0))
                .finish(),
        }
    }
}

impl GameSource {
    /// Opens `path`: a file named `*.jsonl` or a directory holding `chess_*.jsonl` files is read
    /// as reference JSONL; anything else as `tokenize` shards (decoded `batch_games` at a time).
    ///
    /// # Errors
    /// [`EvalError::Data`] when the path cannot be listed or holds no data file.
    pub fn open(path: &Path, batch_games: usize) -> Result<GameSource, EvalError> {
        let is_jsonl_file = path.is_file()
            && path
                .extension()
                .is_some_and(|ext| ext.eq_ignore_ascii_case("jsonl"));
        if is_jsonl_file {
            return Ok(GameSource::Jsonl {
                files: vec![path.to_path_buf()].into_iter(),
                current: None,
            });
        }
        if path.is_dir() {
            let files = cwm_stage_data::jsonl::jsonl_shards(path)?;
            if !files.is_empty() {
                return Ok(GameSource::Jsonl {
                    files: files.into_iter(),
                    current: None,
                });
            }
        }
        Ok(GameSource::Shards(ShardReader::open(path, batch_games)?))
    }

    /// Number of games, when it can be known without reading them (tokenize shards).
    pub fn count(path: &Path) -> Option<u64> {
        let is_jsonl = path
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("jsonl"))
            || (path.is_dir()
                && cwm_stage_data::jsonl::jsonl_shards(path).is_ok_and(|f| !f.is_empty()));
        if is_jsonl {
            None
        } else {
            ShardReader::count_games(path).ok()
        }
    }

    fn next_jsonl(
        files: &mut std::vec::IntoIter<PathBuf>,
        current: &mut Option<(PathBuf, Lines<BufReader<File>>, u64)>,
    ) -> Option<Result<TokenizedGame, EvalError>> {
        loop {
            if current.is_none() {
                let file = files.next()?;
                match File::open(&file) {
                    Ok(f) => *current = Some((file, BufReader::new(f).lines(), 0)),
                    Err(e) => return Some(Err(EvalError::io(&file, e))),
                }
            }
            let (path, lines, line_no) = current.as_mut()?;
            match lines.next() {
                None => *current = None,
                Some(Err(e)) => return Some(Err(EvalError::io(path.as_path(), e))),
                Some(Ok(line)) => {
                    *line_no += 1;
                    if line.trim().is_empty() {
                        continue;
                    }
                    return Some(jsonl_game(path.as_path(), *line_no, &line));
                }
            }
        }
    }
}

/// One JSONL line as a tokenized game.
fn jsonl_game(path: &Path, line_no: u64, line: &str) -> Result<TokenizedGame, EvalError> {
    let example = cwm_chess::jsonl::parse_example_line(line)
        .map_err(|e| EvalError::format(path, format!("line {line_no}: {e}")))?;
    if example.moves.is_empty() || example.moves.len() != example.states.len() {
        return Err(EvalError::format(
            path,
            format!(
                "line {line_no}: example {:?} has {} moves but {} states",
                example.example_id,
                example.moves.len(),
                example.states.len()
            ),
        ));
    }
    Ok(TokenizedGame {
        id: example.example_id,
        moves: example.moves,
        states: example.states.iter().flatten().copied().collect(),
    })
}

impl Iterator for GameSource {
    type Item = Result<TokenizedGame, EvalError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            GameSource::Shards(reader) => reader.next().map(|r| r.map_err(EvalError::from)),
            GameSource::Jsonl { files, current } => {
                let item = Self::next_jsonl(files, current);
                if matches!(item, Some(Err(_))) {
                    *current = None;
                    *files = Vec::new().into_iter();
                }
                item
            }
        }
    }
}

/// The results of one batch.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchResult {
    /// One row per game.
    pub games: Vec<GameRow>,
    /// The rows of each game's valid steps.
    pub steps: Vec<Vec<StepRow>>,
    /// [`correct_counts`] of the padded batch, row-major `[games, seq_len]`.
    pub correct: Vec<i64>,
    /// The padded length.
    pub seq_len: usize,
    /// Valid steps of each game.
    pub lengths: Vec<usize>,
    /// Σ over valid steps of the cross-entropy summed over the 75 labels.
    pub loss_sum: f64,
    /// 75 × the number of valid steps.
    pub loss_denom: f64,
    /// The argmax of every label, row-major `[games, seq_len, 75]` (padded steps included).
    pub pred: Vec<u8>,
    /// Σ over the 75 labels of ln p(target label), row-major `[games, seq_len]`: minus the
    /// per-step cross-entropy sum.
    pub log_p_true: Vec<f32>,
    /// Each label's probabilities, when asked for.
    pub probabilities: Option<LabelProbabilities>,
    /// E12's sampled masses, row-major `[games, seq_len]` (`None` at a step not sampled);
    /// empty when no step is sampled.
    pub masses: Vec<Option<StepMass>>,
}

/// Per-label probabilities of a batch, each row-major `[games, seq_len, 75]`.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelProbabilities {
    /// p(target label).
    pub p_true: Vec<f32>,
    /// p(argmax label): the largest probability of the label's classes.
    pub p_max: Vec<f32>,
}

fn read_i64(tensor: Tensor<2, Int>, what: &str) -> Result<Vec<i64>, EvalError> {
    tensor
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .map_err(|e| EvalError::Invalid(format!("cannot read back {what}: {e:?}")))
}

/// Runs `model` on one batch of games (each truncated to `max_steps` tokens when non-zero)
/// and computes every step's correct counts per label group, its loss, the argmax of every
/// label, with `probabilities` each label's p(target) and p(argmax), and with `masses` E12's
/// sampled masses at the steps it samples.
///
/// # Errors
/// [`EvalError::Model`] when the model or the loss fails; [`EvalError::Invalid`] when a
/// game's labels do not fit its moves or the group counts disagree with the total.
pub fn evaluate_batch(
    model: &Model,
    games: &[TokenizedGame],
    max_steps: usize,
    probabilities: bool,
    masses: Option<&MassSampler>,
    device: &Device,
) -> Result<BatchResult, EvalError> {
    let lengths: Vec<usize> = games
        .iter()
        .map(|g| match max_steps {
            0 => g.moves.len(),
            cap => g.moves.len().min(cap),
        })
        .collect();
    let batch = games.len();
    let seq_len = lengths.iter().copied().max().unwrap_or(0);
    if batch == 0 || seq_len == 0 {
        return Ok(BatchResult {
            games: Vec::new(),
            steps: Vec::new(),
            correct: Vec::new(),
            seq_len: 0,
            lengths,
            loss_sum: 0.0,
            loss_denom: 0.0,
            pred: Vec::new(),
            log_p_true: Vec::new(),
            probabilities: None,
            masses: Vec::new(),
        });
    }
    let (moves, labels) = padded_inputs(games, &lengths, seq_len)?;
    let moves = Tensor::<2, Int>::from_data(TensorData::new(moves, [batch, seq_len]), device);
    let targets = Tensor::<3, Int>::from_data(
        TensorData::new(labels.clone(), [batch, seq_len, N_LABELS]),
        device,
    );
    let logits = model.logits(moves);
    let model_err = |e| EvalError::model("evaluation batch", e);
    let per_step = step_cross_entropy(logits.clone(), targets.clone())
        .map_err(model_err)?
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| EvalError::Invalid(format!("cannot read back the loss: {e:?}")))?;
    let correct = read_i64(
        correct_counts(logits.clone(), targets.clone()).map_err(model_err)?,
        "correct counts",
    )?;
    let masses = match masses {
        Some(sampler) => sampled_masses(&logits, games, &lengths, sampler, device)?,
        None => Vec::new(),
    };
    let (pred, probs) = label_outputs(logits, &targets, probabilities)?;
    let hits = GroupHits::count(&pred, &labels);
    let mut loss_sum = 0.0f64;
    let mut rows = Vec::with_capacity(batch);
    let mut steps = Vec::with_capacity(batch);
    for (b, (game, &len)) in games.iter().zip(&lengths).enumerate() {
        let valid = b * seq_len..b * seq_len + len;
        let game_steps = hits.game_steps(game, valid.clone(), &correct, &per_step)?;
        for &loss in &per_step[valid] {
            loss_sum += f64::from(loss);
        }
        rows.push(game_row(game, &game_steps));
        steps.push(game_steps);
    }
    let valid: usize = lengths.iter().sum();
    Ok(BatchResult {
        games: rows,
        steps,
        correct,
        seq_len,
        lengths,
        loss_sum,
        loss_denom: (valid * N_LABELS) as f64,
        pred,
        log_p_true: per_step.iter().map(|loss| -loss).collect(),
        probabilities: probs,
        masses,
    })
}

/// The argmax of every label of `logits` (`[games, seq_len, 1878]`), row-major
/// `[games, seq_len, 75]`, and with `probabilities` each label's p(target) and p(argmax): the
/// argmax per label group, as [`cwm_models::correct_counts`] takes it, and the group's softmax,
/// all on the backend and read back as one tensor (the class indices, below 256, are exact
/// as `f32`).
fn label_outputs(
    logits: Tensor<3>,
    targets: &Tensor<3, Int>,
    probabilities: bool,
) -> Result<(Vec<u8>, Option<LabelProbabilities>), EvalError> {
    let [batch, seq_len, _] = logits.dims();
    let mut parts: Vec<Tensor<4>> = Vec::with_capacity(LABEL_GROUPS.len());
    for group in LABEL_GROUPS {
        let view = logits
            .clone()
            .narrow(2, group.logit_offset, group.n_logits())
            .reshape([batch, seq_len, group.n_labels, group.n_classes]);
        let argmax = view.clone().argmax(3).float(); // [batch, seq, n, 1]
        if probabilities {
            let log_p = log_softmax(view, 3);
            let index = targets
                .clone()
                .narrow(2, group.first_label, group.n_labels)
                .unsqueeze_dim::<4>(3);
            let p_true = log_p.clone().gather(3, index).exp();
            let p_max = log_p.max_dim(3).exp();
            parts.push(Tensor::cat(vec![argmax, p_true, p_max], 3));
        } else {
            parts.push(argmax);
        }
    }
    let width = if probabilities { 3 } else { 1 };
    let values = Tensor::cat(parts, 2)
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| EvalError::Invalid(format!("cannot read back the predictions: {e:?}")))?;
    let n = batch * seq_len * N_LABELS;
    if values.len() != n * width {
        return Err(EvalError::Invalid(format!(
            "read back {} prediction values, expected {}",
            values.len(),
            n * width
        )));
    }
    let pred = values.iter().step_by(width).map(|&v| v as u8).collect();
    let probs = probabilities.then(|| LabelProbabilities {
        p_true: values.iter().skip(1).step_by(width).copied().collect(),
        p_max: values.iter().skip(2).step_by(width).copied().collect(),
    });
    Ok((pred, probs))
}

/// The batch's move ids `[games, seq_len]` and labels `[games, seq_len, 75]`, each game's first
/// `lengths[b]` steps filled in and the rest padded (`PAD`, label 0).
fn padded_inputs(
    games: &[TokenizedGame],
    lengths: &[usize],
    seq_len: usize,
) -> Result<(Vec<i64>, Vec<i64>), EvalError> {
    let batch = games.len();
    let mut moves = vec![PAD_TOKEN; batch * seq_len];
    let mut targets = vec![0i64; batch * seq_len * N_LABELS];
    for (b, (game, &len)) in games.iter().zip(lengths).enumerate() {
        if game.states.len() != game.moves.len() * N_LABELS {
            return Err(EvalError::Invalid(format!(
                "game {:?}: {} moves but {} label bytes",
                game.id,
                game.moves.len(),
                game.states.len()
            )));
        }
        for (slot, &token) in moves[b * seq_len..b * seq_len + len]
            .iter_mut()
            .zip(&game.moves)
        {
            *slot = i64::from(token);
        }
        let start = b * seq_len * N_LABELS;
        for (slot, &label) in targets[start..start + len * N_LABELS]
            .iter_mut()
            .zip(&game.states)
        {
            *slot = i64::from(label);
        }
    }
    Ok((moves, targets))
}

/// Correct labels per output group at each step of a padded batch, row-major
/// `[games, seq_len]`.
struct GroupHits {
    pieces: Vec<i64>,
    side: Vec<i64>,
    castle: Vec<i64>,
    ep_file: Vec<i64>,
    ep_rank: Vec<i64>,
    halfmove: Vec<i64>,
    fullmove: Vec<i64>,
}

impl GroupHits {
    /// Counts the hits of each of [`LABEL_GROUPS`] at every step from the predicted labels
    /// and the targets, both row-major `[steps, 75]`.
    fn count(pred: &[u8], targets: &[i64]) -> GroupHits {
        let steps = pred.len() / N_LABELS;
        let mut hits: [Vec<i64>; 7] = std::array::from_fn(|_| Vec::with_capacity(steps));
        for (p, t) in pred
            .chunks_exact(N_LABELS)
            .zip(targets.chunks_exact(N_LABELS))
        {
            for (counts, group) in hits.iter_mut().zip(&LABEL_GROUPS) {
                let labels = group.first_label..group.first_label + group.n_labels;
                let n = p[labels.clone()]
                    .iter()
                    .zip(&t[labels])
                    .filter(|&(&predicted, &target)| i64::from(predicted) == target)
                    .count();
                counts.push(n as i64);
            }
        }
        let [pieces, side, castle, ep_file, ep_rank, halfmove, fullmove] = hits;
        GroupHits {
            pieces,
            side,
            castle,
            ep_file,
            ep_rank,
            halfmove,
            fullmove,
        }
    }

    /// Correct labels over all groups at step `i`.
    fn total(&self, i: usize) -> i64 {
        self.pieces[i]
            + self.side[i]
            + self.castle[i]
            + self.ep_file[i]
            + self.ep_rank[i]
            + self.halfmove[i]
            + self.fullmove[i]
    }

    /// The rows of `game`'s steps, at `valid` in the padded batch, with `correct` and
    /// `per_step` the batch's total correct counts and losses; the groups must add up to the
    /// total.
    fn game_steps(
        &self,
        game: &TokenizedGame,
        valid: std::ops::Range<usize>,
        correct: &[i64],
        per_step: &[f32],
    ) -> Result<Vec<StepRow>, EvalError> {
        let first = valid.start;
        let mut game_steps = Vec::with_capacity(valid.len());
        for i in valid {
            let t = i - first;
            let by_group = self.total(i);
            if by_group != correct[i] {
                return Err(EvalError::Invalid(format!(
                    "game {:?} step {t}: label groups count {by_group} correct, the total {}",
                    game.id, correct[i]
                )));
            }
            game_steps.push(StepRow {
                t: t as u32,
                n_correct: correct[i] as u8,
                board: self.pieces[i] as u8,
                side: self.side[i] == 1,
                castling: self.castle[i] as u8,
                en_passant: (self.ep_file[i] + self.ep_rank[i]) as u8,
                halfmove: self.halfmove[i] as u8,
                fullmove: self.fullmove[i] as u8,
                loss: per_step[i] / N_LABELS as f32,
            });
        }
        Ok(game_steps)
    }
}

/// The `games.parquet` row of `game`, from the rows of its evaluated steps.
fn game_row(game: &TokenizedGame, steps: &[StepRow]) -> GameRow {
    let len = steps.len();
    let exact_steps = steps
        .iter()
        .filter(|s| usize::from(s.n_correct) == N_LABELS)
        .count() as u32;
    GameRow {
        game_id: game.id.clone(),
        plies: game.plies() as u32,
        steps: len as u32,
        exact_steps,
        all_exact: exact_steps as usize == len,
    }
}

/// Evaluates the checkpoint at `model_path` (a checkpoint directory or a `train` artifact) on
/// the games at `data` (see [`GameSource::open`]) and writes `timesteps.parquet`,
/// `games.parquet`, `predictions.parquet` and `summary.json` into `out_dir` (created if
/// needed). Each file appears under its name only when complete; the summary is written last.
///
/// # Errors
/// [`EvalError`] for a missing or bad checkpoint, unreadable data, write errors or
/// cancellation.
pub fn evaluate(
    model_path: &Path,
    data: &Path,
    out_dir: &Path,
    options: &EvaluateOptions,
    progress: &Progress,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<EvaluateSummary, EvalError> {
    if options.batch_size == 0 {
        return Err(EvalError::Invalid("batch_size must be positive".into()));
    }
    let checkpoint = checkpoint_dir(model_path)?;
    std::fs::create_dir_all(out_dir).map_err(|e| EvalError::io(out_dir, e))?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.threads)
        .build()
        .map_err(|e| {
            EvalError::Invalid(format!("cannot start {} threads: {e}", options.threads))
        })?;
    pool.install(|| {
        let device = cwm_models::device_by_name(&options.device)
            .map_err(|e| EvalError::model("device", e))?;
        let (model, config) = load_model(&checkpoint, &device)
            .map_err(|e| EvalError::model(checkpoint.display().to_string(), e))?;
        run_evaluation(
            &model, &config, data, out_dir, options, &device, progress, cancelled,
        )
    })
}

#[allow(clippy::too_many_arguments)]
fn run_evaluation(
    model: &Model,
    config: &ModelConfig,
    data: &Path,
    out_dir: &Path,
    options: &EvaluateOptions,
    device: &Device,
    progress: &Progress,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<EvaluateSummary, EvalError> {
    if let Some(total) = GameSource::count(data) {
        let total = match options.max_games {
            0 => total,
            cap => total.min(cap),
        };
        progress.set_total(total);
    }
    let mut source = GameSource::open(data, options.batch_size)?;
    let ep_convention = match &source {
        GameSource::Shards(_) => ShardReader::ep_convention(data)?,
        GameSource::Jsonl { .. } => Some(JSONL_EP_CONVENTION.to_owned()),
    };
    let sampler = mass_sampler(data, options, ep_convention.as_deref(), cancelled)?;
    let mut metrics = StateMetrics::new(BIN_SIZE).map_err(|e| EvalError::model("metrics", e))?;
    let mut writers = TableWriters::create(
        out_dir,
        options.probabilities,
        ep_convention.as_deref(),
        sampler.map(|s| s.options.samples),
    )?;
    let mut mass_totals = MassTotals::default();
    let mut batch: Vec<TokenizedGame> = Vec::with_capacity(options.batch_size);
    let mut taken = 0u64;
    loop {
        batch.clear();
        while batch.len() < options.batch_size
            && (options.max_games == 0 || taken < options.max_games)
        {
            match source.next() {
                Some(game) => {
                    batch.push(game?);
                    taken += 1;
                }
                None => break,
            }
        }
        if batch.is_empty() {
            break;
        }
        if cancelled() {
            return Err(EvalError::Cancelled);
        }
        let result = evaluate_batch(
            model,
            &batch,
            options.max_steps,
            options.probabilities,
            sampler.as_ref(),
            device,
        )?;
        mass_totals.add(&result.masses);
        metrics
            .add_batch(
                &result.correct,
                result.seq_len,
                &result.lengths,
                result.loss_sum,
                result.loss_denom,
            )
            .map_err(|e| EvalError::model("metrics", e))?;
        writers.append(&batch, &result)?;
        progress.inc(batch.len() as u64);
    }
    writers.finish()?;
    let (exact_games, games) = metrics.game_exact_counts();
    let summary = EvaluateSummary {
        version: EvaluateSummary::VERSION,
        kind: cwm_formats::evaluate::KIND.to_owned(),
        split: options.split.clone(),
        arch: config.family.name().to_owned(),
        size: config.size.name().to_owned(),
        params: params_of(config).map_err(|e| EvalError::model("parameter count", e))? as u64,
        model_hash: options.model_hash.clone(),
        data_hash: options.data_hash.clone(),
        games,
        steps: metrics.n_steps(),
        loss: metrics.loss(),
        labelwise: metrics.partial_exact(),
        exact_state: metrics.full_exact(),
        trajectory: metrics.game_exact(),
        exact_games,
        max_steps: options.max_steps as u64,
        sampled_mass: sampler.map(|s| mass_totals.summary(&s.options)),
    };
    cwm_formats::write_json(&out_dir.join(SUMMARY_FILE), &summary)?;
    Ok(summary)
}

/// The `evaluate` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct EvaluateStage;

const PARAMS: &[ParamSpec] = &[
    ParamSpec::required(
        "split",
        ParamType::Str,
        "label of the evaluated split in reports (test_real, test_random, val, ...)",
    ),
    ParamSpec::with_default(
        "batch_size",
        ParamType::Int,
        ParamDefault::Int(32),
        "games per batch",
    ),
    ParamSpec::with_default(
        "max_games",
        ParamType::Int,
        ParamDefault::Int(0),
        "evaluate at most this many games (0 = all)",
    ),
    ParamSpec::with_default(
        "max_steps",
        ParamType::Int,
        ParamDefault::Int(0),
        "keep the first N tokens of each game, START included (0 = full games)",
    ),
    ParamSpec::with_default(
        "device",
        ParamType::Str,
        ParamDefault::Str("cpu"),
        "where the model runs: cpu, cuda (the GPU the executor assigns) or cuda:N (cuda needs a build with --features cuda)",
    ),
    ParamSpec::with_default(
        "probabilities",
        ParamType::Bool,
        ParamDefault::Bool(false),
        "also write each label's p(target) and p(argmax) into predictions.parquet (2 x 75 float32 per step)",
    ),
    ParamSpec::with_default(
        "mass_samples",
        ParamType::Int,
        ParamDefault::Int(64),
        "E12: states drawn from the label distributions at each sampled step, for its valid and afford masses (0 = none)",
    ),
    ParamSpec::with_default(
        "mass_steps",
        ParamType::Int,
        ParamDefault::Int(100_000),
        "E12: steps sampled for the masses, a uniform draw without replacement (0 = every step)",
    ),
    ParamSpec::with_default(
        "mass_seed",
        ParamType::Int,
        ParamDefault::Int(0),
        "E12: seed of the sampled steps and the draws",
    ),
    cwm_stage::THREADS_PARAM,
];

const INPUTS: &[InputSpec] = &[
    InputSpec::one(
        "model",
        "a train artifact (checkpoint/ inside) or a checkpoint directory (model.json + model.bpk)",
    ),
    InputSpec::one("data", "a tokenize artifact"),
];

fn uint_param(params: &Params, name: &str) -> Result<u64, StageError> {
    params.uint(name)
}

const DECL: KindDecl = KindDecl::new(
    "evaluate",
    "evaluates a trained model on tokenized games: per-step and per-game tables and the reference metrics",
)
.params(PARAMS)
// Extra params are labels, so a matrix over the producing train stage's keys (`arch`,
// `size`, `lr_min_ratio`, ...) binds each evaluation to its model; `arch` and `size`, when
// given, must name the checkpoint's family and size.
.extra_params()
.inputs(InputsDecl::Named(INPUTS))
.threads(ThreadsDecl::Param)
.gpus(GpusDecl::CudaParam("device"));

impl StageKind for EvaluateStage {
    fn decl(&self) -> &'static KindDecl {
        &DECL
    }

    fn fingerprint(&self) -> String {
        cwm_stage::combine_fingerprints(&[
            &cwm_stage::fingerprint_of_files(
                crate::FILE_FINGERPRINTS,
                &[
                    "Cargo.toml",
                    "src/lib.rs",
                    "src/error.rs",
                    "src/evaluate.rs",
                    "src/mass.rs",
                    "src/tables.rs",
                ],
            ),
            cwm_models::SOURCE_FINGERPRINT,
            cwm_random_uniform::SOURCE_FINGERPRINT,
            &cwm_stage_data::shard_or_jsonl_reader_fingerprint(),
            cwm_chess::SOURCE_FINGERPRINT,
        ])
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let params = ctx.params();
        let batch_size = uint_param(params, "batch_size")?;
        if batch_size == 0 {
            return Err(StageError::Param("batch_size must be positive".into()));
        }
        let hash = |name: &str| ctx.input_list(name).first().map(|a| a.hash.clone());
        let requested = params.str("device")?;
        let device = ctx.assigned_device(requested);
        ctx.log().line(match ctx.gpus() {
            [] => format!("device {device}"),
            gpus => format!("device {device} (param {requested}; assigned GPUs {gpus:?})"),
        });
        let options = EvaluateOptions {
            split: params.str("split")?.to_owned(),
            batch_size: batch_size as usize,
            max_games: uint_param(params, "max_games")?,
            max_steps: uint_param(params, "max_steps")? as usize,
            threads: ctx.threads(),
            device,
            probabilities: params.bool("probabilities")?,
            mass: MassOptions {
                samples: u32::try_from(uint_param(params, "mass_samples")?)
                    .map_err(|_| StageError::Param("mass_samples must be below 2^32".into()))?,
                steps: uint_param(params, "mass_steps")?,
                seed: uint_param(params, "mass_seed")?,
            },
            model_hash: hash("model"),
            data_hash: hash("data"),
        };
        let summary = evaluate(
            ctx.input("model")?,
            ctx.input("data")?,
            ctx.output("out")?,
            &options,
            ctx.progress(),
            &|| ctx.is_cancelled(),
        )?;
        for (label, actual) in [("arch", &summary.arch), ("size", &summary.size)] {
            if let Ok(expected) = params.str(label)
                && expected != actual.as_str()
            {
                return Err(StageError::Param(format!(
                    "{label} is {expected:?} but the model's checkpoint is {actual:?}"
                )));
            }
        }
        ctx.log().line(format!(
            "{} {} on {}: {} games, {} steps, loss {:.4}, labelwise {:.4}, exact_state {:.4}, trajectory {:.4}",
            summary.arch,
            summary.size,
            summary.split,
            summary.games,
            summary.steps,
            summary.loss,
            summary.labelwise,
            summary.exact_state,
            summary.trajectory
        ));
        ctx.log().line(mass_line(&summary, &options.mass));
        Ok(())
    }
}
