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
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data")
}

/// The path of a file or directory in the shared data, or `None` (after printing why the
/// caller skips) when it is absent.
pub fn data_path(relative: &str) -> Option<PathBuf> {
    let path = data_dir().join(relative);
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "skipping: test data {} is absent (expected at {})",
            relative,
            path.display()
        );
        None
    }
}

/// Returns early from a test, with a message, when the shared data is absent.
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
