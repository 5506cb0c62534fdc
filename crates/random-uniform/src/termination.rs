//! How a game ends: python-chess's termination kinds, result strings and material rule.
//!
//! * [`Termination`] lists the ends python-chess's `board.outcome(claim_draw=True)` can report
//!   for standard chess, in the order it checks them (spec E.5).
//! * [`GameResult`] is `board.result(claim_draw=True)`: "1-0", "0-1" or "1/2-1/2".
//! * [`has_insufficient_material`] is python-chess's per-colour material rule, spelled out in
//!   spec E.5; the position-level check is [`is_insufficient_material`] (both colours).
//!
//! Deciding *when* a rule fires, which needs the game's history, is [`crate::arbiter`]'s job.

use std::fmt;

use shakmaty::{Bitboard, Board, Color};

/// Why a game ended, as python-chess's `chess.Termination` (standard chess only).
///
/// The variants are in the order `outcome(claim_draw=True)` checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Termination {
    /// The side to move is in check and has no legal move.
    Checkmate,
    /// Neither colour has enough material to mate.
    InsufficientMaterial,
    /// The side to move is not in check and has no legal move.
    Stalemate,
    /// The halfmove clock reached 150 (automatic draw).
    SeventyFiveMoves,
    /// The position occurred for the fifth time (automatic draw).
    FivefoldRepetition,
    /// A fifty-move draw can be claimed.
    FiftyMoves,
    /// A threefold-repetition draw can be claimed.
    ThreefoldRepetition,
}

impl Termination {
    /// All terminations, in python-chess's checking order.
    pub const ALL: [Termination; 7] = [
        Termination::Checkmate,
        Termination::InsufficientMaterial,
        Termination::Stalemate,
        Termination::SeventyFiveMoves,
        Termination::FivefoldRepetition,
        Termination::FiftyMoves,
        Termination::ThreefoldRepetition,
    ];

    /// The python-chess enum member name, e.g. `"FIFTY_MOVES"` (as in the reference summaries).
    pub const fn python_name(self) -> &'static str {
        match self {
            Termination::Checkmate => "CHECKMATE",
            Termination::InsufficientMaterial => "INSUFFICIENT_MATERIAL",
            Termination::Stalemate => "STALEMATE",
            Termination::SeventyFiveMoves => "SEVENTYFIVE_MOVES",
            Termination::FivefoldRepetition => "FIVEFOLD_REPETITION",
            Termination::FiftyMoves => "FIFTY_MOVES",
            Termination::ThreefoldRepetition => "THREEFOLD_REPETITION",
        }
    }

    /// Parses a [`Termination::python_name`].
    pub fn from_python_name(name: &str) -> Option<Termination> {
        Termination::ALL
            .into_iter()
            .find(|termination| termination.python_name() == name)
    }
}

impl fmt::Display for Termination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.python_name())
    }
}

/// The result of a finished game, as python-chess's `board.result(claim_draw=True)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GameResult {
    /// White won: "1-0".
    WhiteWins,
    /// Black won: "0-1".
    BlackWins,
    /// A draw: "1/2-1/2".
    Draw,
}

impl GameResult {
    /// The PGN result string: "1-0", "0-1" or "1/2-1/2".
    pub const fn as_str(self) -> &'static str {
        match self {
            GameResult::WhiteWins => "1-0",
            GameResult::BlackWins => "0-1",
            GameResult::Draw => "1/2-1/2",
        }
    }
}

impl fmt::Display for GameResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How and with what result a game ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Outcome {
    /// The rule that ended the game.
    pub termination: Termination,
    /// The game's result.
    pub result: GameResult,
}

impl Outcome {
    /// The outcome for `termination` reached with `turn` to move: checkmate is a win for the
    /// other side, everything else a draw.
    pub const fn new(termination: Termination, turn: Color) -> Outcome {
        let result = match (termination, turn) {
            (Termination::Checkmate, Color::White) => GameResult::BlackWins,
            (Termination::Checkmate, Color::Black) => GameResult::WhiteWins,
            _ => GameResult::Draw,
        };
        Outcome {
            termination,
            result,
        }
    }
}

/// python-chess's `has_insufficient_material(color)` for standard chess (spec E.5):
///
/// * never insufficient with a pawn, rook or queen;
/// * with a knight: insufficient iff `color` has at most two pieces (king and knight) and the
///   opponent has nothing besides king and queens;
/// * with bishops: insufficient iff all bishops on the board stand on one square colour and
///   there are no pawns and no knights on the board;
/// * a bare king is insufficient.
pub fn has_insufficient_material(board: &Board, color: Color) -> bool {
    let ours = board.by_color(color);
    if (ours & (board.pawns() | board.rooks_and_queens())).any() {
        return false;
    }
    if (ours & board.knights()).any() {
        let theirs = board.by_color(!color);
        return ours.count() <= 2 && (theirs & !board.kings() & !board.queens()).is_empty();
    }
    if (ours & board.bishops()).any() {
        let bishops = board.bishops();
        let one_colour = (bishops & Bitboard::DARK_SQUARES).is_empty()
            || (bishops & Bitboard::LIGHT_SQUARES).is_empty();
        return one_colour && board.pawns().is_empty() && board.knights().is_empty();
    }
    true
}

/// python-chess's `is_insufficient_material()`: both colours have insufficient material.
pub fn is_insufficient_material(board: &Board) -> bool {
    has_insufficient_material(board, Color::White) && has_insufficient_material(board, Color::Black)
}

#[cfg(test)]
mod tests {
    use shakmaty::{CastlingMode, Chess, Position, fen::Fen};

    use super::*;

    fn board(fen: &str) -> Board {
        let position: Chess = fen
            .parse::<Fen>()
            .unwrap()
            .into_position(CastlingMode::Standard)
            .unwrap();
        position.board().clone()
    }

    #[test]
    fn material_rule_cases_for_white() {
        let cases = [
            ("8/8/8/8/8/8/8/K6k w - - 0 1", true),
            ("8/8/8/8/8/8/8/KN5k w - - 0 1", true),
            ("8/8/8/8/8/8/8/KN4qk w - - 0 1", true),
            ("8/8/8/8/8/8/8/KN4rk w - - 0 1", false),
            ("8/8/8/8/8/8/8/KNN4k w - - 0 1", false),
            ("8/8/8/8/8/8/8/KB4bk w - - 0 1", false),
            ("8/8/8/8/8/8/8/KB3b1k w - - 0 1", true),
            ("8/8/8/8/8/8/8/KBB4k w - - 0 1", false),
            ("8/8/8/8/8/8/8/KB1B3k w - - 0 1", true),
            ("8/8/8/8/8/8/8/KB3n1k w - - 0 1", false),
            ("8/8/8/8/8/8/7p/KB5k w - - 0 1", false),
            ("7k/8/8/8/8/8/8/KQ6 w - - 0 1", false),
        ];
        for (fen, want) in cases {
            assert_eq!(
                has_insufficient_material(&board(fen), Color::White),
                want,
                "{fen}"
            );
        }
    }

    #[test]
    fn matches_shakmaty_on_samples() {
        let fens = [
            "8/8/8/8/8/8/8/KN4qk w - - 0 1",
            "8/8/8/8/8/8/8/KB3b1k w - - 0 1",
            "8/8/8/8/8/8/8/KB3n1k w - - 0 1",
            "8/8/8/8/8/8/8/KNN4k w - - 0 1",
            "8/8/8/8/8/8/7p/KB5k w - - 0 1",
        ];
        for fen in fens {
            let position: Chess = fen
                .parse::<Fen>()
                .unwrap()
                .into_position(CastlingMode::Standard)
                .unwrap();
            for color in Color::ALL {
                assert_eq!(
                    has_insufficient_material(position.board(), color),
                    position.has_insufficient_material(color),
                    "{fen}"
                );
            }
        }
    }

    #[test]
    fn names_round_trip_and_results() {
        for termination in Termination::ALL {
            assert_eq!(
                Termination::from_python_name(termination.python_name()),
                Some(termination)
            );
        }
        assert_eq!(
            Outcome::new(Termination::Checkmate, Color::Black)
                .result
                .as_str(),
            "1-0"
        );
        assert_eq!(
            Outcome::new(Termination::Checkmate, Color::White)
                .result
                .as_str(),
            "0-1"
        );
        assert_eq!(
            Outcome::new(Termination::FiftyMoves, Color::White)
                .result
                .as_str(),
            "1/2-1/2"
        );
    }
}
