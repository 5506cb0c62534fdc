//! The `split` stage: the games table into training and validation tables by the reference's
//! MD5 bucket of the game id (spec E.4).
//!
//! * **Input** `games`: a games artifact (`parse.games`, `random_uniform`, ...).
//! * **Params**: `val_buckets` (50) and `split_mod` (10000): a game is in validation iff
//!   `u64_le(MD5(id)[0..8]) % split_mod < val_buckets`.
//! * **Outputs**: `train` and `val`, games artifacts with the same schema, rows in input order.
//!
//! Streams a batch at a time; memory is bounded by the row-group size.

use std::path::Path;

use cwm_stage::{
    InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, Progress, StageContext,
    StageError, StageKind,
};
use md5::{Digest, Md5};

use crate::DataError;
use crate::games::{GAMES_FILE, GamesReader, GamesWriter, ROW_GROUP_GAMES};

/// The bucket of an example id for `split_mod` buckets: the first 8 bytes of MD5 of its UTF-8,
/// little-endian, modulo `split_mod` (at least 1).
pub fn bucket_mod(example_id: &str, split_mod: u64) -> u64 {
    let digest = Md5::digest(example_id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first) % split_mod.max(1)
}

/// Game counts of a split run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SplitCounts {
    /// Games written to the training table.
    pub train: u64,
    /// Games written to the validation table.
    pub val: u64,
}

/// Splits the games tables under `input` into `train_path` and `val_path`.
///
/// # Errors
///
/// [`DataError`] on read or write errors, or cancellation.
pub fn split_games(
    input: &Path,
    train_path: &Path,
    val_path: &Path,
    val_buckets: u64,
    split_mod: u64,
    progress: &Progress,
    cancelled: &dyn Fn() -> bool,
) -> Result<SplitCounts, DataError> {
    progress.set_total(GamesReader::count_games(input)?);
    let metadata = [
        ("cwm.split_mod".to_owned(), split_mod.to_string()),
        ("cwm.val_buckets".to_owned(), val_buckets.to_string()),
    ];
    let mut train = GamesWriter::create(train_path, &metadata)?;
    let mut val = GamesWriter::create(val_path, &metadata)?;
    for batch in GamesReader::open(input, ROW_GROUP_GAMES)? {
        if cancelled() {
            return Err(DataError::Cancelled);
        }
        let batch = batch?;
        let n = batch.len() as u64;
        for game in &batch {
            if bucket_mod(&game.id, split_mod) < val_buckets {
                val.push(game)?;
            } else {
                train.push(game)?;
            }
        }
        progress.inc(n);
    }
    Ok(SplitCounts {
        train: train.finish()?,
        val: val.finish()?,
    })
}

/// The `split` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct SplitStage;

const PARAMS: &[ParamSpec] = &[
    ParamSpec::with_default(
        "val_buckets",
        ParamType::Int,
        ParamDefault::Int(50),
        "buckets (of split_mod) that go to validation",
    ),
    ParamSpec::with_default(
        "split_mod",
        ParamType::Int,
        ParamDefault::Int(10_000),
        "number of MD5 buckets",
    ),
];

const INPUTS: &[InputSpec] = &[InputSpec::one(
    "games",
    "a games artifact (e.g. parse.games)",
)];

const DECL: KindDecl = KindDecl::new(
    "split",
    "splits a games table into train and val by the MD5 bucket of the game id",
)
.params(PARAMS)
.inputs(InputsDecl::Named(INPUTS))
.outputs(&["train", "val"]);

impl StageKind for SplitStage {
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
                    "src/split.rs",
                    "src/games.rs",
                ],
            ),
            &cwm_chess::games_fingerprint(),
        ])
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let split_mod = ctx.params().uint("split_mod")?;
        if split_mod == 0 {
            return Err(StageError::Param("split_mod must be positive".into()));
        }
        let val_buckets = ctx.params().uint("val_buckets")?;
        let counts = split_games(
            ctx.input("games")?,
            &ctx.output("train")?.join(GAMES_FILE),
            &ctx.output("val")?.join(GAMES_FILE),
            val_buckets,
            split_mod,
            ctx.progress(),
            &|| ctx.is_cancelled(),
        )?;
        ctx.log()
            .line(format!("{} train, {} val games", counts.train, counts.val));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_match_the_spec_vectors_and_cwm_chess() {
        assert_eq!(bucket_mod("cwm_random_00000", 10_000), 304);
        assert_eq!(bucket_mod("abc", 10_000), 9392);
        assert_eq!(bucket_mod("cwm_0123456789abcdef01234567", 10_000), 2424);
        for i in 0..200 {
            let id = cwm_chess::ids::random_game_id(i);
            assert_eq!(bucket_mod(&id, 10_000), cwm_chess::split::bucket(&id));
        }
    }
}
