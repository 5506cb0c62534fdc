//! Helpers shared by the integration tests.

use std::{
    fs::File,
    path::{Path, PathBuf},
};

use cwm_chess::{
    encode::{EpConvention, StateLabels, decode_state_fen},
    replay::{PgnGames, RawGame},
};

/// The shared test data directory, `<workspace>/../shared/data`.
pub fn data_dir() -> PathBuf {
    cwm_testkit::shared_data_dir()
}

pub use cwm_testkit::require;

/// The path of a file or directory in the shared data, or `None` when it is absent (after
/// [`require`], which panics under CI).
pub use cwm_testkit::shared_data as data_path;

/// Returns early from a test when the shared data is absent (see [`require`]).
macro_rules! require_data {
    ($relative:expr) => {
        match crate::support::data_path($relative) {
            Some(path) => path,
            None => return,
        }
    };
}
pub(crate) use require_data;

/// All games of a PGN file, panicking on an I/O error.
pub fn read_pgn_file(path: &Path) -> Vec<RawGame> {
    let file = File::open(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    PgnGames::new(file)
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// All games of a PGN text.
pub fn read_pgn_text(pgn: &str) -> Vec<RawGame> {
    PgnGames::new(pgn.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_else(|err| panic!("{err}"))
}

/// The FEN decoded from state labels.
pub fn fen_of(labels: &StateLabels) -> String {
    decode_state_fen(labels).unwrap_or_else(|err| panic!("{err}"))
}

/// The first `n` space-separated fields of a FEN.
pub fn fen_fields(fen: &str, n: usize) -> String {
    fen.split_whitespace().take(n).collect::<Vec<_>>().join(" ")
}

/// The convention python-chess's `Board.fen()` and most FEN oracles use.
pub const FEN_EP: EpConvention = EpConvention::LegalCapture;
