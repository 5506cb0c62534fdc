//! python-chess 1.11.2's `board.legal_moves` order for a shakmaty position (spec E.5).
//!
//! shakmaty and python-chess generate the same *set* of legal moves; only the order differs.
//! Rather than write a second move generator, each legal move gets a sort key that reproduces
//! python-chess's generation order:
//!
//! * Not in check: non-pawn pieces (the king included) by from-square descending, targets
//!   descending; then castling, rook corner descending (O-O before O-O-O); then pawn captures by
//!   from-square descending, targets descending; then single pushes, then double pushes, each by
//!   to-square descending; then en-passant captures by capturer descending. Promotions come in
//!   the order Q, R, B, N.
//! * In check: king moves first, targets descending; then the other evasions in the order above
//!   (no castling); the en-passant evasion comes last in both of python-chess's cases (ep square
//!   on the blocking ray, or the checker is the double-pushed pawn).
//!
//! Within one group every key part is a square index, so "descending" becomes `63 - square` in
//! an ascending sort. All keys of a position are distinct.

use shakmaty::{Chess, Move, MoveList, Position, Role};

/// Generation group of a move, in python-chess order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Group {
    /// King moves when in check (python-chess's `_generate_evasions` yields them first).
    KingEvasion = 0,
    /// Knight, bishop, rook, queen and (when not in check) king moves.
    Piece = 1,
    /// Castling, only when not in check.
    Castle = 2,
    /// Pawn captures other than en passant.
    PawnCapture = 3,
    /// Single pawn pushes.
    SinglePush = 4,
    /// Double pawn pushes.
    DoublePush = 5,
    /// En-passant captures.
    EnPassant = 6,
}

/// Rank of a promotion in python-chess's order Q, R, B, N (0 when there is none).
const fn promotion_rank(promotion: Option<Role>) -> u32 {
    match promotion {
        Some(Role::Rook) => 1,
        Some(Role::Bishop) => 2,
        Some(Role::Knight) => 3,
        _ => 0,
    }
}

/// The python-chess order key of a legal move; smaller keys come first.
///
/// `in_check` says whether the side to move is in check. Moves of a single position have
/// distinct keys.
pub fn order_key(m: &Move, in_check: bool) -> u32 {
    let (group, from, to, promotion) = match *m {
        Move::Normal {
            role: Role::Pawn,
            from,
            to,
            capture,
            promotion,
        } => {
            let group = if capture.is_some() {
                Group::PawnCapture
            } else if from.to_u32().abs_diff(to.to_u32()) == 16 {
                Group::DoublePush
            } else {
                Group::SinglePush
            };
            (group, from, to, promotion)
        }
        Move::Normal {
            role: Role::King,
            from,
            to,
            ..
        } if in_check => (Group::KingEvasion, from, to, None),
        Move::Normal { from, to, .. } => (Group::Piece, from, to, None),
        // The "to" of a shakmaty castling move is the rook's corner: descending corners put
        // O-O (h-file) before O-O-O (a-file).
        Move::Castle { king, rook } => (Group::Castle, king, rook, None),
        Move::EnPassant { from, to } => (Group::EnPassant, from, to, None),
        // Drops do not occur in standard chess; order them last.
        Move::Put { to, .. } => (Group::EnPassant, to, to, None),
    };
    ((group as u32) << 16)
        | ((63 - from.to_u32()) << 8)
        | ((63 - to.to_u32()) << 2)
        | promotion_rank(promotion)
}

/// Most legal moves a chess position can have is 218; shakmaty's move list holds 256.
const MAX_MOVES: usize = 256;

/// Fills `keyed` with `order_key << 8 | index` for every move of `moves`, and returns the
/// filled prefix. Keys are below 2^19, indexes below 256, so the packed values sort like the
/// keys and remember where each move came from.
fn keyed_indexes<'a>(
    position: &Chess,
    moves: &MoveList,
    keyed: &'a mut [u32; MAX_MOVES],
) -> &'a mut [u32] {
    let in_check = position.is_check();
    let n = moves.len().min(MAX_MOVES);
    for (slot, (index, m)) in keyed.iter_mut().zip(moves.iter().enumerate()) {
        // index < 256 because a move list holds at most 256 moves.
        *slot = (order_key(m, in_check) << 8) | index as u32;
    }
    &mut keyed[..n]
}

/// Sorts a position's legal moves into python-chess's `board.legal_moves` order.
///
/// `moves` must be the legal moves of `position` (as from [`Position::legal_moves`]).
pub fn sort_python_order(position: &Chess, moves: &mut MoveList) {
    let mut keyed = [0u32; MAX_MOVES];
    let keyed = keyed_indexes(position, moves, &mut keyed);
    keyed.sort_unstable();
    let original = moves.clone();
    for (slot, packed) in moves.iter_mut().zip(keyed.iter()) {
        *slot = original[(packed & 0xff) as usize];
    }
}

/// The legal moves of `position` in python-chess's `board.legal_moves` order.
///
/// ```
/// use cwm_random_uniform::move_order::legal_moves_python_order;
/// use shakmaty::{Chess, uci::UciMove, CastlingMode};
///
/// let moves = legal_moves_python_order(&Chess::default());
/// let first = UciMove::from_move(moves[0], CastlingMode::Standard);
/// assert_eq!(first.to_string(), "g1h3");
/// ```
pub fn legal_moves_python_order(position: &Chess) -> MoveList {
    let mut moves = position.legal_moves();
    sort_python_order(position, &mut moves);
    moves
}

/// Where in `moves` (the legal moves of `position`, in any order) is the move python-chess
/// would list at `rank` of `board.legal_moves`; `None` when `rank` is out of range.
///
/// Selects in linear time on packed integer keys, without sorting or copying the moves.
pub fn python_order_index(position: &Chess, moves: &MoveList, rank: usize) -> Option<usize> {
    if rank >= moves.len() {
        return None;
    }
    let mut keyed = [0u32; MAX_MOVES];
    let keyed = keyed_indexes(position, moves, &mut keyed);
    let (_, nth, _) = keyed.select_nth_unstable(rank);
    Some((*nth & 0xff) as usize)
}

#[cfg(test)]
mod tests {
    use shakmaty::{CastlingMode, fen::Fen, uci::UciMove};

    use super::*;

    fn uci_list(fen: &str) -> Vec<String> {
        let position: Chess = fen
            .parse::<Fen>()
            .unwrap()
            .into_position(CastlingMode::Standard)
            .unwrap();
        legal_moves_python_order(&position)
            .iter()
            .map(|m| UciMove::from_move(*m, CastlingMode::Standard).to_string())
            .collect()
    }

    #[test]
    fn initial_position_order() {
        let want = "g1h3 g1f3 b1c3 b1a3 h2h3 g2g3 f2f3 e2e3 d2d3 c2c3 b2b3 a2a3 \
                    h2h4 g2g4 f2f4 e2e4 d2d4 c2c4 b2b4 a2a4";
        let got = uci_list("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1");
        assert_eq!(got.join(" "), want);
    }

    #[test]
    fn castling_comes_after_pieces_king_side_first() {
        let got = uci_list("r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1");
        let castles: Vec<usize> = got
            .iter()
            .enumerate()
            .filter(|(_, m)| *m == "e1g1" || *m == "e1c1")
            .map(|(i, _)| i)
            .collect();
        assert_eq!(castles.len(), 2);
        assert_eq!(got[castles[0]], "e1g1");
        assert_eq!(castles[1], castles[0] + 1);
        assert_eq!(castles[1], got.len() - 1, "no pawns: castling is last");
    }

    #[test]
    fn promotions_are_queen_rook_bishop_knight() {
        let got = uci_list("1n5k/P7/8/8/8/8/8/7K w - - 0 1");
        let promotions: Vec<&str> = got
            .iter()
            .map(String::as_str)
            .filter(|m| m.len() == 5)
            .collect();
        assert_eq!(
            promotions,
            [
                "a7b8q", "a7b8r", "a7b8b", "a7b8n", "a7a8q", "a7a8r", "a7a8b", "a7a8n"
            ]
        );
    }

    #[test]
    fn in_check_king_moves_come_first() {
        // White king on e1 in check from the rook on e8; the bishop on b5 can block on e2 or e8.
        let got = uci_list("4r2k/8/8/1B6/8/8/8/4K2N w - - 0 1");
        assert_eq!(got, ["e1f2", "e1d2", "e1f1", "e1d1", "b5e8", "b5e2"]);
    }

    #[test]
    fn index_of_rank_matches_sorted() {
        let position = Chess::default();
        let sorted = legal_moves_python_order(&position);
        let moves = position.legal_moves();
        for (rank, want) in sorted.iter().enumerate() {
            let index = python_order_index(&position, &moves, rank).unwrap();
            assert_eq!(moves[index], *want);
        }
        assert_eq!(python_order_index(&position, &moves, 20), None);
    }
}
