//! The reference's JSONL format (spec E.6) in and out: [`export_jsonl`] writes
//! `chess_000000.jsonl`, ... shards byte for byte as the reference scripts do (lines from
//! `cwm_chess::jsonl`), and [`import_jsonl`] reads such shards back into a games table.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use cwm_chess::encode::{EpConvention, START, STATE_LEN, StateLabels};
use cwm_chess::jsonl::{append_example_line, parse_example_line};
use rayon::prelude::*;

use crate::DataError;
use crate::games::{GAMES_FILE, GameRecord, GamesReader, GamesWriter};
use crate::parse::pool;
use crate::tokenize::{BATCH_GAMES, replay_states};

/// Writes examples into `dir/chess_{idx:06}.jsonl` shards of `shard_size` examples each.
#[derive(Debug)]
pub struct JsonlShards {
    dir: PathBuf,
    shard_size: u64,
    current: Option<(PathBuf, BufWriter<File>)>,
    in_current: u64,
    shards: Vec<PathBuf>,
    line: Vec<u8>,
}

impl JsonlShards {
    /// Shards in `dir` (created if needed) of `shard_size` examples (at least 1).
    ///
    /// # Errors
    ///
    /// [`DataError::Io`] when `dir` cannot be created.
    pub fn new(dir: &Path, shard_size: u64) -> Result<JsonlShards, DataError> {
        std::fs::create_dir_all(dir).map_err(|e| DataError::io(dir, e))?;
        Ok(JsonlShards {
            dir: dir.to_path_buf(),
            shard_size: shard_size.max(1),
            current: None,
            in_current: 0,
            shards: Vec::new(),
            line: Vec::new(),
        })
    }

    /// Writes one example: `moves` starts with `START`, `states` holds `moves.len() * 75` labels.
    ///
    /// # Errors
    ///
    /// [`DataError`] on a write error or a shape mismatch.
    pub fn write(
        &mut self,
        id: &str,
        moves: &[u16],
        states: &[StateLabels],
        result: &str,
    ) -> Result<(), DataError> {
        if self.current.is_none() || self.in_current >= self.shard_size {
            self.close_current()?;
            let path = self
                .dir
                .join(format!("chess_{:06}.jsonl", self.shards.len()));
            let file = File::create(&path).map_err(|e| DataError::io(&path, e))?;
            self.shards.push(path.clone());
            self.current = Some((path, BufWriter::new(file)));
            self.in_current = 0;
        }
        self.line.clear();
        let path = self.shards.last().cloned().unwrap_or_default();
        append_example_line(&mut self.line, id, moves, states, result).map_err(|source| {
            DataError::Jsonl {
                path: path.clone(),
                line: 0,
                source,
            }
        })?;
        if let Some((path, out)) = self.current.as_mut() {
            out.write_all(&self.line)
                .map_err(|e| DataError::io(&*path, e))?;
        }
        self.in_current += 1;
        Ok(())
    }

    fn close_current(&mut self) -> Result<(), DataError> {
        if let Some((path, mut out)) = self.current.take() {
            out.flush().map_err(|e| DataError::io(&path, e))?;
        }
        Ok(())
    }

    /// Flushes the last shard and returns the shard paths.
    ///
    /// # Errors
    ///
    /// [`DataError::Io`] when flushing fails.
    pub fn finish(mut self) -> Result<Vec<PathBuf>, DataError> {
        self.close_current()?;
        Ok(std::mem::take(&mut self.shards))
    }
}

/// States as 75-label arrays from a flat buffer.
pub(crate) fn chunk_states(flat: &[u8]) -> Vec<StateLabels> {
    flat.chunks_exact(STATE_LEN)
        .map(|c| {
            let mut labels = [0u8; STATE_LEN];
            labels.copy_from_slice(c);
            labels
        })
        .collect()
}

/// Writes the games of `input` (a games artifact directory or one games Parquet file) as the
/// reference's JSONL shards in `out_dir`: `chess_000000.jsonl`, ... with `shard_size` games
/// each, states with the reference's en-passant convention, replayed on `threads` threads.
/// Returns the shard paths.
///
/// # Errors
///
/// [`DataError`] on read or write errors, or an illegal stored move.
pub fn export_jsonl(
    input: &Path,
    out_dir: &Path,
    shard_size: u64,
    threads: usize,
) -> Result<Vec<PathBuf>, DataError> {
    let pool = pool(threads)?;
    let mut shards = JsonlShards::new(out_dir, shard_size)?;
    for batch in GamesReader::open(input, BATCH_GAMES)? {
        let batch = batch?;
        let states: Vec<Result<Vec<u8>, DataError>> = pool.install(|| {
            batch
                .par_iter()
                .map(|g| {
                    let mut states = Vec::new();
                    replay_states(&g.id, &g.moves, EpConvention::Reference, &mut states)
                        .map(|()| states)
                })
                .collect()
        });
        let mut moves = Vec::new();
        for (game, states) in batch.iter().zip(states) {
            let states = chunk_states(&states?);
            moves.clear();
            moves.push(START);
            moves.extend_from_slice(&game.moves);
            shards.write(&game.id, &moves, &states, &game.result)?;
        }
    }
    shards.finish()
}

/// The `chess_*.jsonl` files under `dir`, recursively, sorted by path (spec E.7); a file is
/// returned as is.
///
/// # Errors
///
/// [`DataError::Io`] when a directory cannot be listed.
pub fn jsonl_shards(dir: &Path) -> Result<Vec<PathBuf>, DataError> {
    if dir.is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| DataError::io(&d, e))? {
            let path = entry.map_err(|e| DataError::io(&d, e))?.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if name.starts_with("chess_") && name.ends_with(".jsonl") {
                    found.push(path);
                }
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Reads reference JSONL shards (a file, or every `chess_*.jsonl` under a directory) into a
/// games table at `out_dir/games.parquet`. Moves must start with `START`; the states are not
/// stored (they follow from the moves). Returns the number of games.
///
/// # Errors
///
/// [`DataError`] on read or write errors or a malformed line.
pub fn import_jsonl(input: &Path, out_dir: &Path) -> Result<u64, DataError> {
    std::fs::create_dir_all(out_dir).map_err(|e| DataError::io(out_dir, e))?;
    let files = jsonl_shards(input)?;
    if files.is_empty() {
        return Err(DataError::format(input, "holds no chess_*.jsonl file"));
    }
    let metadata = [("cwm.imported_from".to_owned(), "jsonl".to_owned())];
    let mut writer = GamesWriter::create(&out_dir.join(GAMES_FILE), &metadata)?;
    let mut index = 0u64;
    for file in files {
        let reader = BufReader::new(File::open(&file).map_err(|e| DataError::io(&file, e))?);
        for (line_no, line) in reader.lines().enumerate() {
            let line = line.map_err(|e| DataError::io(&file, e))?;
            if line.trim().is_empty() {
                continue;
            }
            let example = parse_example_line(&line).map_err(|source| DataError::Jsonl {
                path: file.clone(),
                line: line_no as u64 + 1,
                source,
            })?;
            if example.moves.first() != Some(&START) {
                return Err(DataError::format(
                    &file,
                    format!("line {}: moves do not start with START", line_no + 1),
                ));
            }
            writer.push(&GameRecord {
                id: example.example_id,
                source_index: index,
                result: example.result,
                moves: example.moves[1..].to_vec(),
                ..GameRecord::default()
            })?;
            index += 1;
        }
    }
    writer.finish()
}
