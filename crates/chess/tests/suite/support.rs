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

/// Whether the calling test may go on: `true` when `available`. Otherwise (`what` names what is
/// missing and how to get it) it panics when `CI` is set, since CI must not pass a test that
/// checked nothing, and elsewhere prints a loud `SKIPPED` line and returns `false`.
pub fn require(what: &str, available: bool) -> bool {
    if !available {
        let test = std::thread::current().name().unwrap_or("?").to_owned();
        if std::env::var_os("CI").is_some_and(|ci| !ci.is_empty()) {
            panic!(
                "{test}: {what} is missing, and CI is set: a test with a missing oracle or data set fails"
            );
        }
        eprintln!("SKIPPED: {test}: {what} is missing (under CI this test fails)");
    }
    available
}

/// The path of a file or directory in the shared data, or `None` when it is absent (after
/// [`require`], which panics under CI).
pub fn data_path(relative: &str) -> Option<PathBuf> {
    let path = data_dir().join(relative);
    let what = format!("test data {relative} (expected at {})", path.display());
    require(&what, path.exists()).then_some(path)
}

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
