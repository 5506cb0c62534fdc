//! Helpers shared by the tests of `cwm_chess::rules`.

use std::{path::Path, process::Command};

use cwm_chess::{
    encode::{EpConvention, StateLabels, pack_move},
    replay::{ReplayConfig, ReplayedGame, replay_game},
};
use shakmaty::{Chess, Position, uci::UciMove};

use crate::support::read_pgn_file;

/// The sample games (the shipped `data/lichess_db_1000k.pgn.zst`, uncompressed in the shared
/// data), relative to the shared data directory.
pub const SAMPLE_PGN: &str = "real/lichess_db_1000k.pgn";

/// The 75 labels a FEN spells, written field by field whether or not the position is legal
/// (test helper: panics on a malformed FEN). The en-passant square must be on rank 3 or 6.
pub fn labels_of_fen(fen: &str) -> StateLabels {
    let fields: Vec<&str> = fen.split_whitespace().collect();
    assert_eq!(fields.len(), 6, "{fen}");
    let mut labels = [0u8; 75];
    let mut index = 0;
    for c in fields[0].chars() {
        match c {
            '/' => assert_eq!(index % 8, 0, "{fen}"),
            '1'..='8' => index += c as usize - '0' as usize,
            _ => {
                let label = ".PNBRQKpnbrqk"
                    .find(c)
                    .unwrap_or_else(|| panic!("{fen}: {c}"));
                labels[index] = label as u8;
                index += 1;
            }
        }
    }
    assert_eq!(index, 64, "{fen}");
    labels[64] = u8::from(fields[1] == "b");
    for (offset, symbol) in ['K', 'Q', 'k', 'q'].into_iter().enumerate() {
        labels[65 + offset] = u8::from(fields[2].contains(symbol));
    }
    if fields[3] != "-" {
        let bytes = fields[3].as_bytes();
        labels[69] = bytes[0] - b'a' + 1;
        labels[70] = match bytes[1] {
            b'3' => 1,
            b'6' => 2,
            _ => panic!("{fen}: en-passant square off ranks 3 and 6"),
        };
    }
    let halfmove: u16 = fields[4].parse().unwrap();
    let fullmove: u16 = fields[5].parse().unwrap();
    labels[71..73].copy_from_slice(&halfmove.to_be_bytes());
    labels[73..75].copy_from_slice(&fullmove.to_be_bytes());
    labels
}

/// Every legal game of the sample PGN (no length screen), with labels under `ep`.
pub fn sample_games(path: &Path, ep: EpConvention) -> Vec<ReplayedGame> {
    let config = ReplayConfig {
        min_fullmoves: 0,
        ep_convention: ep,
        states: true,
    };
    read_pgn_file(path)
        .into_iter()
        .filter_map(|raw| replay_game(raw, &config).ok())
        .map(|kept| kept.replay)
        .collect()
}

/// START followed by the packed ids of a game given in UCI (panics on an illegal move).
pub fn tokens_of_uci(ucis: &[&str]) -> Vec<u16> {
    let mut position = Chess::default();
    let mut tokens = vec![cwm_chess::encode::START];
    for uci in ucis {
        let m = uci
            .parse::<UciMove>()
            .unwrap()
            .to_move(&position)
            .unwrap_or_else(|err| panic!("{uci}: {err}"));
        tokens.push(pack_move(&m));
        position.play_unchecked(m);
    }
    tokens
}

/// Whether `python3` imports python-chess 1.11.2, the oracle's version.
pub fn python_chess_1_11_2() -> bool {
    Command::new("python3")
        .args([
            "-c",
            "import chess, sys; sys.exit(0 if chess.__version__ == '1.11.2' else 1)",
        ])
        .output()
        .is_ok_and(|output| output.status.success())
}

/// A small deterministic generator (SplitMix64) for the property tests.
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
