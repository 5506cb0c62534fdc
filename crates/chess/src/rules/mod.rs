//! The rules engine behind the diagnostics of `beyond-spec.md` (§0.2, P2, P3, E1, E3, E4, E5):
//! pure functions of the 75 state labels ([`StateLabels`]), fast enough to run on every step of
//! every evaluated game.
//!
//! * [`status`] — the validity flags of python-chess 1.11.2 `Board.status()` on the FEN the labels
//!   decode to, flag for flag, plus two stricter shakmaty-only flags ([`StatusFlags`], E1's V1).
//! * [`syntactic`], [`counter_consistent`], [`prefix_consistent`] and [`validity`] — E1's tiers
//!   V0..V3; [`affords`] — V4; [`validity_and_affords`] — both, the labels read once.
//! * [`playable`] — the position a state stands for, if shakmaty can play it (P2);
//!   [`legal_ids`], [`move_of_token`], [`footprint`], [`play_labels`], [`ids_from`] — legal-move
//!   sets as packed token ids, moves of tokens and transitions (E3, E4).
//! * [`checkers`], [`checking_moves`], [`absolute_pins`] — E3's rule queries.
//! * [`GameTagger`] — E5's event tags of every ply of a game, with the labels each tag makes
//!   relevant (P3).
//!
//! # How labels are read
//!
//! Every function reads the labels the way [`decode_state_fen`](crate::encode::decode_state_fen)
//! writes them, so [`status`] is python-chess's verdict on that FEN even for states that fail
//! V0: an en-passant file without a rank (or a rank without a file) reads as "no en-passant
//! square", and the fullmove number plays no part in any flag (python-chess reads a fullmove
//! number of 0 as 1). Labels out of range for their index, which argmax predictions never
//! produce and which fail V0, read as: a square label above 12 as an empty square, a side label
//! other than 0 as Black, a castling label other than 1 as no right, an en-passant file above 8
//! or rank above 2 as no en-passant square. [`playable`] refuses them.
//!
//! # Example
//!
//! ```
//! use cwm_chess::encode::{EpConvention, INITIAL_STATE, NUM_MOVE_IDS};
//! use cwm_chess::rules::{StatusFlags, Tier, legal_ids, playable, status, validity};
//!
//! assert_eq!(status(&INITIAL_STATE, EpConvention::Reference), StatusFlags::NONE);
//! assert_eq!(validity(&INITIAL_STATE, 0, EpConvention::Reference).tier, Tier::V3);
//!
//! let mut broken = INITIAL_STATE;
//! broken[60] = 0; // no white king on e1
//! let flags = status(&broken, EpConvention::Reference);
//! assert_eq!(flags, StatusFlags::NO_WHITE_KING | StatusFlags::BAD_CASTLING_RIGHTS);
//! assert_eq!(flags.to_string(), "NO_WHITE_KING|BAD_CASTLING_RIGHTS");
//! assert!(playable(&broken).is_none());
//!
//! let start = playable(&INITIAL_STATE).unwrap();
//! let mut ids = Vec::new();
//! legal_ids(&start, &mut ids);
//! assert_eq!(ids.len(), 20);
//! assert!(ids.iter().all(|&id| id < NUM_MOVE_IDS));
//! ```

mod events;
mod moves;
mod queries;
mod status;
mod tiers;

/// Helpers of the module's unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use shakmaty::{CastlingMode, Chess, fen::Fen, uci::UciMove};

    use crate::encode::pack_move;

    /// The position of a FEN.
    pub(crate) fn position(fen: &str) -> Chess {
        fen.parse::<Fen>()
            .unwrap()
            .into_position(CastlingMode::Standard)
            .unwrap()
    }

    /// The packed id of a UCI move in `position`.
    pub(crate) fn id(position: &Chess, uci: &str) -> u16 {
        pack_move(&uci.parse::<UciMove>().unwrap().to_move(position).unwrap())
    }
}

pub use events::{EventTags, GameTagger, LabelSet, StepTags, TagError};
pub use moves::{
    footprint, from_square_of, ids_from, intersection_len, legal_ids, move_of_token, play_labels,
    playable, setup_of,
};
pub use queries::{
    CheckKind, CheckingMoves, Pin, absolute_pins, check_kind, checkers, checking_moves,
};
pub use status::{StatusFlags, status};
pub use tiers::{
    Tier, Validity, affords, counter_consistent, prefix_consistent, syntactic, validity,
    validity_and_affords,
};

use shakmaty::{Bitboard, Board, ByColor, ByRole, Color, File, Rank, Role, Square};

use crate::encode::{
    CASTLING_WHITE_KING_SIDE, EP_FILE, EP_RANK, FULLMOVE_HI, HALFMOVE_HI, SIDE_TO_MOVE, StateLabels,
};

/// The position fields of 75 labels, read as described in the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct Reading {
    /// The pieces (square labels above 12 read as empty).
    pub board: Board,
    /// Side to move.
    pub turn: Color,
    /// The corners whose castling label is 1: h1 for K, a1 for Q, h8 for k, a8 for q.
    pub castling: Bitboard,
    /// The en-passant square, when both its labels are set and in range.
    pub ep_square: Option<Square>,
    /// Halfmove clock.
    pub halfmoves: u16,
    /// Fullmove number (may be 0).
    pub fullmoves: u16,
}

/// The corner squares of the castling labels K, Q, k, q, in label order.
pub(crate) const CASTLING_CORNERS: [Square; 4] = [Square::H1, Square::A1, Square::H8, Square::A8];

/// The piece a square label stands for, or `None` for an empty square (and out-of-range labels).
pub(crate) const fn piece_of_label(label: u8) -> Option<(Color, Role)> {
    let color = if label <= 6 {
        Color::White
    } else {
        Color::Black
    };
    let role = match label {
        1 | 7 => Role::Pawn,
        2 | 8 => Role::Knight,
        3 | 9 => Role::Bishop,
        4 | 10 => Role::Rook,
        5 | 11 => Role::Queen,
        6 | 12 => Role::King,
        _ => return None,
    };
    Some((color, role))
}

/// The square of piece label `index` (0..64, a8 first): `index ^ 56`.
pub(crate) const fn square_of_label(index: usize) -> Square {
    Square::ALL[(index ^ 56) & 63]
}

/// A big-endian counter of two labels.
const fn counter(labels: &StateLabels, hi: usize) -> u16 {
    u16::from_be_bytes([labels[hi], labels[hi + 1]])
}

/// The board of the square labels, one square at a time.
fn board_by_squares(labels: &StateLabels) -> Board {
    let mut board = Board::empty();
    for (index, &label) in labels[..64].iter().enumerate() {
        if let Some((color, role)) = piece_of_label(label) {
            board.set_piece_at(square_of_label(index), role.of(color));
        }
    }
    board
}

/// Reads the position fields of `labels` (see the module documentation).
pub(crate) fn read_labels(labels: &StateLabels) -> Reading {
    let mut by_role = [0u64; 6];
    let mut by_color = [0u64; 2];
    for (index, &label) in labels[..64].iter().enumerate() {
        if let Some((color, role)) = piece_of_label(label) {
            let bit = 1u64 << (index ^ 56);
            by_role[role as usize - 1] |= bit;
            by_color[color as usize] |= bit;
        }
    }
    let [pawn, knight, bishop, rook, queen, king] = by_role.map(Bitboard);
    let [black, white] = by_color.map(Bitboard);
    let by_role = ByRole {
        pawn,
        knight,
        bishop,
        rook,
        queen,
        king,
    };
    // Each square holds one piece, so the bitboards are consistent and this cannot fail; the
    // fallback only keeps the function total.
    let board = Board::try_from_bitboards(by_role, ByColor { white, black })
        .unwrap_or_else(|_| board_by_squares(labels));

    let mut castling = Bitboard::EMPTY;
    for (offset, corner) in CASTLING_CORNERS.into_iter().enumerate() {
        if labels[CASTLING_WHITE_KING_SIDE + offset] == 1 {
            castling.add(corner);
        }
    }

    let ep_square = match (labels[EP_FILE], labels[EP_RANK]) {
        (file @ 1..=8, rank @ 1..=2) => Some(Square::from_coords(
            File::ALL[usize::from(file - 1)],
            if rank == 1 { Rank::Third } else { Rank::Sixth },
        )),
        _ => None,
    };

    Reading {
        board,
        turn: if labels[SIDE_TO_MOVE] == 0 {
            Color::White
        } else {
            Color::Black
        },
        castling,
        ep_square,
        halfmoves: counter(labels, HALFMOVE_HI),
        fullmoves: counter(labels, FULLMOVE_HI),
    }
}

#[cfg(test)]
mod tests {
    use shakmaty::{Chess, Position};

    use super::*;
    use crate::encode::{EpConvention, INITIAL_STATE, encode_state};

    #[test]
    fn the_initial_labels_read_as_the_initial_position() {
        let reading = read_labels(&INITIAL_STATE);
        assert_eq!(&reading.board, Chess::default().board());
        assert_eq!(reading.turn, Color::White);
        assert_eq!(reading.castling, Bitboard::CORNERS);
        assert_eq!(reading.ep_square, None);
        assert_eq!((reading.halfmoves, reading.fullmoves), (0, 1));
    }

    #[test]
    fn half_set_and_out_of_range_labels_read_as_decode_writes_them() {
        let mut labels = encode_state(&Chess::default(), EpConvention::Reference);
        labels[EP_FILE] = 5;
        assert_eq!(read_labels(&labels).ep_square, None);
        labels[EP_RANK] = 2;
        assert_eq!(read_labels(&labels).ep_square, Some(Square::E6));
        labels[EP_RANK] = 1;
        assert_eq!(read_labels(&labels).ep_square, Some(Square::E3));
        labels[EP_FILE] = 9;
        assert_eq!(read_labels(&labels).ep_square, None);
        labels[0] = 200;
        labels[SIDE_TO_MOVE] = 7;
        labels[CASTLING_WHITE_KING_SIDE] = 2;
        let reading = read_labels(&labels);
        assert_eq!(reading.board.piece_at(Square::A8), None);
        assert_eq!(reading.turn, Color::Black);
        assert!(!reading.castling.contains(Square::H1));
    }
}
