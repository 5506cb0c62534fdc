//! The `probe` and `markov` stage kinds: their params and inputs, and how a pipeline runs
//! them.

use cwm_stage::{
    GpusDecl, InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, Params,
    StageContext, StageError, StageKind, ThreadsDecl,
};

use crate::collect::CollectOptions;
use crate::edit::cases::CaseOptions;
use crate::edit::{DEFAULT_ALPHAS, EditInputs, EditOptions, edit};
use crate::fit::FitOptions;
use crate::markov::classes::SwapOptions;
use crate::markov::stats::TestOptions;
use crate::markov::{MarkovOptions, markov};
use crate::probe::{ProbeInputs, ProbeOptions, probe};
use crate::sample::Sampling;

/// The `probe` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProbeStage;

/// The `device` param of both kinds.
const DEVICE_PARAM: ParamSpec = ParamSpec::with_default(
    "device",
    ParamType::Str,
    ParamDefault::Str("cpu"),
    "where the model (and the probes) run: cpu, cuda (the GPU the executor assigns) or cuda:N",
);

/// The `model` input of both kinds.
const MODEL_INPUT: InputSpec = InputSpec::one(
    "model",
    "a train artifact (checkpoint/ inside) or a checkpoint directory",
);

const PARAMS: &[ParamSpec] = &[
    ParamSpec::required(
        "splits",
        ParamType::List(&ParamType::Str),
        "labels of the eval inputs, in the same order (test_real, test_random, ...)",
    ),
    ParamSpec::with_default(
        "steps_per_game",
        ParamType::Int,
        ParamDefault::Int(5),
        "steps read from each game (all steps of a shorter game)",
    ),
    ParamSpec::with_default(
        "sampling",
        ParamType::Choice(Sampling::NAMES),
        ParamDefault::Str("uniform"),
        "uniform: steps drawn from the whole game; last: the game's last steps (the probing paper)",
    ),
    ParamSpec::with_default(
        "epochs",
        ParamType::Int,
        ParamDefault::Int(15),
        "most epochs per probe",
    ),
    ParamSpec::with_default(
        "lr",
        ParamType::Float,
        ParamDefault::Float(1e-3),
        "Adam's learning rate",
    ),
    ParamSpec::with_default(
        "probe_batch",
        ParamType::Int,
        ParamDefault::Int(256),
        "vectors per Adam step",
    ),
    ParamSpec::with_default(
        "patience",
        ParamType::Int,
        ParamDefault::Int(3),
        "stop after this many epochs without a better validation loss",
    ),
    ParamSpec::with_default(
        "aux",
        ParamType::Bool,
        ParamDefault::Bool(false),
        "also probe the 11 auxiliary labels (side, castling, en passant, counters)",
    ),
    ParamSpec::with_default(
        "seed",
        ParamType::Int,
        ParamDefault::Int(0),
        "seeds the steps drawn, the validation slice and the fitting order",
    ),
    ParamSpec::with_default(
        "batch_size",
        ParamType::Int,
        ParamDefault::Int(32),
        "games per forward pass of the model",
    ),
    ParamSpec::with_default(
        "max_games",
        ParamType::Int,
        ParamDefault::Int(0),
        "read at most this many games of each input (0 = all)",
    ),
    DEVICE_PARAM,
    cwm_stage::THREADS_PARAM,
];

const INPUTS: &[InputSpec] = &[
    MODEL_INPUT,
    InputSpec::one(
        "fit",
        "a tokenize artifact of the model's training games (the id probes)",
    ),
    InputSpec::one(
        "fit_ood",
        "a tokenize artifact of random games of another seed than the test split (the ood probes)",
    )
    .optional(),
    InputSpec::many(
        "eval",
        "tokenize artifacts to score the probes on, labelled by `splits`",
    ),
];

const DECL: KindDecl = KindDecl::new(
    "probe",
    "fits a linear board probe on every layer of a trained model and scores it on held-out splits (beyond-spec E9)",
)
.params(PARAMS)
// Extra params are labels, so a matrix over the producing train stage's keys binds each
// probe run to its model.
.extra_params()
.inputs(InputsDecl::Named(INPUTS))
.threads(ThreadsDecl::Param)
.gpus(GpusDecl::CudaParam("device"));

fn positive(params: &Params, name: &str) -> Result<usize, StageError> {
    match params.uint(name)? {
        0 => Err(StageError::Param(format!("{name} must be positive"))),
        n => Ok(n as usize),
    }
}

fn options(ctx: &StageContext) -> Result<ProbeOptions, StageError> {
    let params = ctx.params();
    let sampling = params.str("sampling")?;
    let sampling = Sampling::parse(sampling)
        .ok_or_else(|| StageError::Param(format!("unknown sampling {sampling:?}")))?;
    let device = ctx.assigned_device(params.str("device")?);
    Ok(ProbeOptions {
        collect: CollectOptions {
            steps_per_game: positive(params, "steps_per_game")?,
            sampling,
            seed: params.uint("seed")?,
            batch_games: positive(params, "batch_size")?,
            max_games: params.uint("max_games")?,
        },
        fit: FitOptions {
            epochs: positive(params, "epochs")?,
            lr: params.float("lr")?,
            batch: positive(params, "probe_batch")?,
            patience: positive(params, "patience")?,
            groups: if params.bool("aux")? { 7 } else { 1 },
            seed: params.uint("seed")?,
        },
        device,
        threads: ctx.threads(),
        model_hash: ctx.input_list("model").first().map(|a| a.hash.clone()),
    })
}

fn inputs(ctx: &StageContext) -> Result<ProbeInputs, StageError> {
    let splits = ctx.params().str_list("splits")?.unwrap_or_default();
    let eval = ctx.input_list("eval");
    if splits.len() != eval.len() {
        return Err(StageError::Param(format!(
            "splits names {} splits ({}) but eval has {} inputs",
            splits.len(),
            splits.join(", "),
            eval.len()
        )));
    }
    Ok(ProbeInputs {
        model: ctx.input("model")?.to_path_buf(),
        fit: ctx.input("fit")?.to_path_buf(),
        fit_ood: ctx.input_list("fit_ood").first().map(|a| a.path.clone()),
        eval: splits
            .into_iter()
            .zip(eval.iter().map(|a| a.path.clone()))
            .collect(),
    })
}

impl StageKind for ProbeStage {
    fn decl(&self) -> &'static KindDecl {
        &DECL
    }

    fn fingerprint(&self) -> String {
        kind_fingerprint(
            &[
                "src/collect.rs",
                "src/fit.rs",
                "src/score.rs",
                "src/weights.rs",
            ],
            &[&cwm_stage_data::shard_or_jsonl_reader_fingerprint()],
        )
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let options = options(ctx)?;
        let inputs = inputs(ctx)?;
        ctx.log().line(format!("device {}", options.device));
        let log = |line: &str| ctx.log().line(line);
        let summary = probe(
            &inputs,
            ctx.output("out")?,
            &options,
            ctx.progress(),
            &log,
            &|| ctx.is_cancelled(),
        )?;
        check_labels(ctx.params(), &summary.arch, &summary.size)
    }
}

/// The `markov` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct MarkovStage;

const MARKOV_PARAMS: &[ParamSpec] = &[
    ParamSpec::required(
        "split",
        ParamType::Str,
        "label of the games' split (test_real, ...)",
    ),
    ParamSpec::with_default(
        "max_games",
        ParamType::Int,
        ParamDefault::Int(0),
        "read at most this many games (0 = all)",
    ),
    ParamSpec::with_default(
        "max_class",
        ParamType::Int,
        ParamDefault::Int(8),
        "members kept per natural class (the first met)",
    ),
    ParamSpec::with_default(
        "swaps_per_game",
        ParamType::Int,
        ParamDefault::Int(4),
        "attempts per game at a swapped move order (0 = natural classes only)",
    ),
    ParamSpec::with_default(
        "window",
        ParamType::Int,
        ParamDefault::Int(8),
        "how many plies back from the step a swapped move may lie",
    ),
    ParamSpec::with_default(
        "pairs",
        ParamType::Int,
        ParamDefault::Int(100_000),
        "random pairs behind each layer's population cosine",
    ),
    ParamSpec::with_default(
        "permutations",
        ParamType::Int,
        ParamDefault::Int(1000),
        "class-label shuffles behind each p-value",
    ),
    ParamSpec::with_default(
        "seed",
        ParamType::Int,
        ParamDefault::Int(0),
        "seeds the swaps, the pairs and the shuffles",
    ),
    ParamSpec::with_default(
        "batch_size",
        ParamType::Int,
        ParamDefault::Int(32),
        "sequences per forward pass of the model",
    ),
    DEVICE_PARAM,
    cwm_stage::THREADS_PARAM,
];

const MARKOV_INPUTS: &[InputSpec] = &[
    MODEL_INPUT,
    InputSpec::one("data", "a tokenize artifact whose games give the classes"),
];

const MARKOV_DECL: KindDecl = KindDecl::new(
    "markov",
    "tests whether a model's hidden states depend only on the state its moves reach (beyond-spec E8, E10)",
)
.params(MARKOV_PARAMS)
.extra_params()
.inputs(InputsDecl::Named(MARKOV_INPUTS))
.threads(ThreadsDecl::Param)
.gpus(GpusDecl::CudaParam("device"));

fn markov_options(ctx: &StageContext) -> Result<MarkovOptions, StageError> {
    let params = ctx.params();
    let seed = params.uint("seed")?;
    Ok(MarkovOptions {
        split: params.str("split")?.to_owned(),
        max_games: params.uint("max_games")?,
        max_class: positive(params, "max_class")?.max(2),
        swaps: SwapOptions {
            per_game: params.uint("swaps_per_game")? as usize,
            window: positive(params, "window")?,
            seed,
        },
        test: TestOptions {
            pairs: positive(params, "pairs")?,
            permutations: positive(params, "permutations")?,
            seed,
        },
        batch_size: positive(params, "batch_size")?,
        device: ctx.assigned_device(params.str("device")?),
        threads: ctx.threads(),
        model_hash: ctx.input_list("model").first().map(|a| a.hash.clone()),
    })
}

impl StageKind for MarkovStage {
    fn decl(&self) -> &'static KindDecl {
        &MARKOV_DECL
    }

    fn fingerprint(&self) -> String {
        kind_fingerprint(
            &[
                "src/collect.rs",
                "src/markov/mod.rs",
                "src/markov/classes.rs",
                "src/markov/stats.rs",
            ],
            &[
                cwm_chess::SOURCE_FINGERPRINT,
                &cwm_stage_data::shard_reader_fingerprint(),
            ],
        )
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let options = markov_options(ctx)?;
        ctx.log().line(format!("device {}", options.device));
        let log = |line: &str| ctx.log().line(line);
        let summary = markov(
            ctx.input("model")?,
            ctx.input("data")?,
            ctx.output("out")?,
            &options,
            ctx.progress(),
            &log,
            &|| ctx.is_cancelled(),
        )?;
        check_labels(ctx.params(), &summary.arch, &summary.size)
    }
}

/// The `edit` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct EditStage;

const EDIT_PARAMS: &[ParamSpec] = &[
    ParamSpec::required(
        "split",
        ParamType::Str,
        "label of the games' split (test_real, ...)",
    ),
    ParamSpec::with_default(
        "cases",
        ParamType::Int,
        ParamDefault::Int(1000),
        "cases per variant (next_move, persistent)",
    ),
    ParamSpec::with_default(
        "horizon",
        ParamType::Int,
        ParamDefault::Int(8),
        "plies after the edit over which persistence is followed (K)",
    ),
    ParamSpec::optional(
        "alphas",
        ParamType::List(&ParamType::Float),
        "edit scales α, as multiples of the hidden state's norm (default 0.5, 1, 2, 4, 8)",
    ),
    ParamSpec::with_default(
        "probe_set",
        ParamType::Choice(&["id", "ood"]),
        ParamDefault::Str("id"),
        "which probes give the probe directions: fitted on training games (id) or random ones (ood)",
    ),
    ParamSpec::with_default(
        "seed",
        ParamType::Int,
        ParamDefault::Int(0),
        "seeds the cases drawn and the random directions",
    ),
    ParamSpec::with_default(
        "batch_size",
        ParamType::Int,
        ParamDefault::Int(32),
        "cases per forward pass of the model",
    ),
    ParamSpec::with_default(
        "max_games",
        ParamType::Int,
        ParamDefault::Int(0),
        "read at most this many games (0 = all)",
    ),
    DEVICE_PARAM,
    cwm_stage::THREADS_PARAM,
];

const EDIT_INPUTS: &[InputSpec] = &[
    MODEL_INPUT,
    InputSpec::one(
        "probes",
        "a probe artifact of the same model (its weights give the probe directions)",
    ),
    InputSpec::one("data", "a tokenize artifact whose games give the cases"),
];

const EDIT_DECL: KindDecl = KindDecl::new(
    "edit",
    "removes a piece from a model's board by editing its hidden state, and follows the edit over later plies (beyond-spec E11)",
)
.params(EDIT_PARAMS)
.extra_params()
.inputs(InputsDecl::Named(EDIT_INPUTS))
.threads(ThreadsDecl::Param)
.gpus(GpusDecl::CudaParam("device"));

/// The `alphas` param, or the default sweep.
fn alphas(params: &Params) -> Result<Vec<f64>, StageError> {
    let Some(cwm_stage::ParamValue::List(items)) = params.get("alphas") else {
        return Ok(DEFAULT_ALPHAS.to_vec());
    };
    items
        .iter()
        .map(|item| match item {
            cwm_stage::ParamValue::Float(x) if x.is_finite() && *x >= 0.0 => Ok(*x),
            cwm_stage::ParamValue::Int(i) if *i >= 0 => Ok(*i as f64),
            other => Err(StageError::Param(format!(
                "alphas: expected non-negative numbers, found {other:?}"
            ))),
        })
        .collect::<Result<Vec<f64>, _>>()
        .and_then(|list| match list.is_empty() {
            true => Err(StageError::Param("alphas must not be empty".into())),
            false => Ok(list),
        })
}

fn edit_options(ctx: &StageContext) -> Result<EditOptions, StageError> {
    let params = ctx.params();
    let hash = |input: &str| ctx.input_list(input).first().map(|a| a.hash.clone());
    Ok(EditOptions {
        split: params.str("split")?.to_owned(),
        cases: CaseOptions {
            cases: positive(params, "cases")?,
            horizon: positive(params, "horizon")?,
            seed: params.uint("seed")?,
            ep: cwm_chess::encode::EpConvention::Reference,
        },
        alphas: alphas(params)?,
        probe_set: params.str("probe_set")?.to_owned(),
        batch_size: positive(params, "batch_size")?,
        max_games: params.uint("max_games")?,
        device: ctx.assigned_device(params.str("device")?),
        threads: ctx.threads(),
        model_hash: hash("model"),
        probe_hash: hash("probes"),
    })
}

impl StageKind for EditStage {
    fn decl(&self) -> &'static KindDecl {
        &EDIT_DECL
    }

    fn fingerprint(&self) -> String {
        kind_fingerprint(
            &[
                "src/weights.rs",
                "src/markov/mod.rs",
                "src/edit/mod.rs",
                "src/edit/batch.rs",
                "src/edit/cases.rs",
                "src/edit/tally.rs",
                "src/edit/vectors.rs",
            ],
            &[
                cwm_chess::SOURCE_FINGERPRINT,
                &cwm_stage_data::shard_reader_fingerprint(),
            ],
        )
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let options = edit_options(ctx)?;
        ctx.log().line(format!("device {}", options.device));
        let log = |line: &str| ctx.log().line(line);
        let inputs = EditInputs {
            model: ctx.input("model")?,
            probes: ctx.input("probes")?,
            data: ctx.input("data")?,
        };
        let summary = edit(
            inputs,
            ctx.output("out")?,
            &options,
            ctx.progress(),
            &log,
            &|| ctx.is_cancelled(),
        )?;
        check_labels(ctx.params(), &summary.arch, &summary.size)
    }
}

/// The files every kind of this crate runs: its entry, errors, declarations, the model
/// loading and the probe's layout.
const SHARED_FILES: [&str; 7] = [
    "Cargo.toml",
    "src/lib.rs",
    "src/error.rs",
    "src/stage.rs",
    "src/probe.rs",
    "src/linear.rs",
    "src/sample.rs",
];

/// A kind's code fingerprint: the shared files and its `own`, the models crate's sources and
/// the `more` it depends on.
fn kind_fingerprint(own: &[&str], more: &[&str]) -> String {
    let files: Vec<&str> = SHARED_FILES.iter().chain(own).copied().collect();
    let mine = cwm_stage::fingerprint_of_files(crate::FILE_FINGERPRINTS, &files);
    let mut parts: Vec<&str> = vec![&mine, cwm_models::SOURCE_FINGERPRINT];
    parts.extend(more);
    cwm_stage::combine_fingerprints(&parts)
}

/// An error unless the `arch` and `size` labels, when given, name the checkpoint's.
fn check_labels(params: &Params, arch: &str, size: &str) -> Result<(), StageError> {
    for (label, actual) in [("arch", arch), ("size", size)] {
        if let Ok(expected) = params.str(label)
            && expected != actual
        {
            return Err(StageError::Param(format!(
                "{label} is {expected:?} but the model's checkpoint is {actual:?}"
            )));
        }
    }
    Ok(())
}
