//! Packed move ids (spec A.1) and the 75-label state encoding (spec A.2, E.2).
//!
//! * Squares use the python-chess numbering `8 * rank + file` (a1 = 0, h8 = 63), which is also
//!   shakmaty's [`Square`] numbering.
//! * A move packs to `(from * 64 + to) * 5 + promotion`, with promotion 0 = none, 1 = queen,
//!   2 = rook, 3 = bishop, 4 = knight. Castling is the king's two-square move (shakmaty's
//!   king-takes-rook is converted), en passant is the capturing pawn's from → to.
//! * A state is 75 labels: 64 squares in the order a8, b8, …, h1, then side to move, the four
//!   castling rights K Q k q, the en-passant file and rank, and the halfmove clock and fullmove
//!   number, each clamped to `0..=65535` and split big-endian into (hi, lo) bytes.
//! * Which en-passant square is written is an [`EpConvention`]: the reference writes one after
//!   every double pawn push, the paper's text only when an en-passant capture is legal.

use std::fmt::Write as _;

use cwm_formats::labels;

use shakmaty::{
    CastlingSide, Chess, Color, EnPassantMode, File, Move, Position, Rank, Role, Square,
};
use thiserror::Error;

/// Number of packed ids that stand for moves: `64 * 64 * 5`.
pub const NUM_MOVE_IDS: u16 = 20480;
/// The token that opens every move sequence.
pub const START: u16 = 20480;
/// The padding token.
pub const PAD: u16 = 20481;
/// Size of the input vocabulary: the move ids plus [`START`] and [`PAD`].
pub const VOCAB_SIZE: u16 = 20482;
/// Number of labels in one encoded state.
pub const STATE_LEN: usize = labels::N_LABELS;

/// One encoded state: the 75 labels of spec A.2.
pub type StateLabels = [u8; STATE_LEN];

/// Label index of the side to move (0 white, 1 black).
pub const SIDE_TO_MOVE: usize = labels::SIDE.first_label;
/// Label index of the white king-side castling right; Q, k and q follow at 66, 67 and 68.
pub const CASTLING_WHITE_KING_SIDE: usize = labels::CASTLE.first_label;
/// Label index of the en-passant file (0 none, 1..=8 = a..h).
pub const EP_FILE: usize = labels::EP_FILE.first_label;
/// Label index of the en-passant rank (0 none, 1 = rank 3, 2 = rank 6).
pub const EP_RANK: usize = labels::EP_RANK.first_label;
/// Label index of the halfmove clock's high byte; the low byte is at 72.
pub const HALFMOVE_HI: usize = labels::HALFMOVE.first_label;
/// Label index of the fullmove number's high byte; the low byte is at 74.
pub const FULLMOVE_HI: usize = labels::FULLMOVE.first_label;

/// Number of classes of each label, in label order (declared in [`cwm_formats::labels`]).
pub const LABEL_CLASSES: [u16; STATE_LEN] = labels::LABEL_CLASSES;

/// The labels of the standard initial position (spec A.2).
pub const INITIAL_STATE: StateLabels = [
    10, 8, 9, 11, 12, 9, 8, 10, // rank 8
    7, 7, 7, 7, 7, 7, 7, 7, // rank 7
    0, 0, 0, 0, 0, 0, 0, 0, // rank 6
    0, 0, 0, 0, 0, 0, 0, 0, // rank 5
    0, 0, 0, 0, 0, 0, 0, 0, // rank 4
    0, 0, 0, 0, 0, 0, 0, 0, // rank 3
    1, 1, 1, 1, 1, 1, 1, 1, // rank 2
    4, 2, 3, 5, 6, 3, 2, 4, // rank 1
    0, // white to move
    1, 1, 1, 1, // KQkq
    0, 0, // no en-passant square
    0, 0, // halfmove clock 0
    0, 1, // fullmove number 1
];

/// Piece symbols by square label, as in the reference's `spec.piece_symbols`.
pub const PIECE_SYMBOLS: [char; 13] = [
    '.', 'P', 'N', 'B', 'R', 'Q', 'K', 'p', 'n', 'b', 'r', 'q', 'k',
];

/// Which en-passant square the state labels 69 and 70 record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EpConvention {
    /// The reference code: python-chess's raw `board.ep_square`, set after *every* double pawn
    /// push whether or not a capture is possible (shakmaty's [`EnPassantMode::Always`]).
    #[default]
    Reference,
    /// The paper's text: only when an en-passant capture is legal (shakmaty's
    /// [`EnPassantMode::Legal`], python-chess's FEN convention).
    LegalCapture,
}

impl EpConvention {
    /// Both conventions, the default first.
    pub const ALL: [EpConvention; 2] = [EpConvention::Reference, EpConvention::LegalCapture];

    /// The shakmaty mode that yields this convention's en-passant square.
    pub const fn mode(self) -> EnPassantMode {
        match self {
            EpConvention::Reference => EnPassantMode::Always,
            EpConvention::LegalCapture => EnPassantMode::Legal,
        }
    }

    /// The convention's name in params and in the files' metadata: `reference` or
    /// `legal_capture`.
    pub const fn name(self) -> &'static str {
        match self {
            EpConvention::Reference => "reference",
            EpConvention::LegalCapture => "legal_capture",
        }
    }

    /// The convention called `name` (see [`EpConvention::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|ep| ep.name() == name)
    }
}

/// Promotion id of spec A.1, or `None` for a role no standard promotion produces.
const fn promotion_id(promotion: Option<Role>) -> Option<u16> {
    match promotion {
        None => Some(0),
        Some(Role::Queen) => Some(1),
        Some(Role::Rook) => Some(2),
        Some(Role::Bishop) => Some(3),
        Some(Role::Knight) => Some(4),
        Some(Role::Pawn | Role::King) => None,
    }
}

/// Packs a from-square, to-square and promotion id; the caller guarantees `promotion < 5`.
const fn pack_parts(from: Square, to: Square, promotion: u16) -> u16 {
    // Both squares are below 64, so the result is below 20480 and fits in a u16.
    ((from as u16) * 64 + to as u16) * 5 + promotion
}

/// Packs a move into its id of spec A.1, or `None` for a drop or a promotion to a pawn or king
/// (variant moves outside the vocabulary).
///
/// Castling is packed as the king's two-square move to the g- or c-file, whichever way
/// shakmaty represents it; en passant as the capturing pawn's from → to.
pub const fn try_pack_move(m: &Move) -> Option<u16> {
    match *m {
        Move::Normal {
            from,
            to,
            promotion,
            ..
        } => match promotion_id(promotion) {
            Some(promotion) => Some(pack_parts(from, to, promotion)),
            None => None,
        },
        Move::EnPassant { from, to } => Some(pack_parts(from, to, 0)),
        Move::Castle { king, rook } => {
            let side = if (rook as u8) < (king as u8) {
                CastlingSide::QueenSide
            } else {
                CastlingSide::KingSide
            };
            let to = Square::from_coords(side.king_to_file(), king.rank());
            Some(pack_parts(king, to, 0))
        }
        Move::Put { .. } => None,
    }
}

/// Packs a move of standard chess into its id of spec A.1 (see [`try_pack_move`]).
///
/// # Panics
///
/// Panics on a drop or a promotion to a pawn or king. A [`Chess`] position never produces
/// either; use [`try_pack_move`] for variant moves.
pub const fn pack_move(m: &Move) -> u16 {
    match try_pack_move(m) {
        Some(id) => id,
        None => panic!("drops and promotions to pawn or king have no packed id"),
    }
}

/// Unpacks a move id into (from, to, promotion), or `None` for [`START`], [`PAD`] and ids out of
/// range.
pub const fn unpack_move(id: u16) -> Option<(Square, Square, Option<Role>)> {
    if id >= NUM_MOVE_IDS {
        return None;
    }
    let promotion = match id % 5 {
        0 => None,
        1 => Some(Role::Queen),
        2 => Some(Role::Rook),
        3 => Some(Role::Bishop),
        _ => Some(Role::Knight),
    };
    let squares = (id / 5) as u32;
    Some((
        Square::new(squares / 64),
        Square::new(squares % 64),
        promotion,
    ))
}

/// Writes a move id in UCI notation (`e2e4`, `a7a8q`; castling as `e1g1`) into `out`, or
/// returns `false` (writing nothing) for ids that are not moves.
pub fn write_uci(id: u16, out: &mut String) -> bool {
    let Some((from, to, promotion)) = unpack_move(id) else {
        return false;
    };
    from.append_to_string(out);
    to.append_to_string(out);
    if let Some(role) = promotion {
        out.push(role.char());
    }
    true
}

/// State label index of a square: `(7 - rank) * 8 + file`, i.e. `square ^ 56`.
pub const fn label_index(square: Square) -> usize {
    (square as usize) ^ 56
}

/// Square label of a piece: 1..=6 for white P N B R Q K, 7..=12 for black.
const fn piece_label(color: Color, role: Role) -> u8 {
    match color {
        Color::White => role as u8,
        Color::Black => role as u8 + 6,
    }
}

/// Splits a counter into big-endian (hi, lo) bytes after clamping it to `0..=65535`.
fn clamped_be_bytes(counter: u32) -> [u8; 2] {
    u16::try_from(counter).unwrap_or(u16::MAX).to_be_bytes()
}

/// Encodes a position into its 75 state labels (spec A.2, E.2).
///
/// Castling label K (Q, k, q) is set iff the castling-rights mask still holds the h1 (a1, h8,
/// a8) rook, which in standard chess is the usual FEN availability. The en-passant square
/// follows `ep`.
pub fn encode_state(position: &Chess, ep: EpConvention) -> StateLabels {
    let mut labels = [0u8; STATE_LEN];
    encode_state_into(position, ep, &mut labels);
    labels
}

/// Like [`encode_state`], but writes into an existing buffer (for example a row of a larger
/// array), overwriting all 75 labels.
pub fn encode_state_into(position: &Chess, ep: EpConvention, labels: &mut StateLabels) {
    labels[..64].fill(0);
    // One pass per (colour, role) bitboard: cheaper than asking the board for the piece on
    // each occupied square.
    let board = position.board();
    for color in Color::ALL {
        let ours = board.by_color(color);
        for role in Role::ALL {
            let label = piece_label(color, role);
            for square in board.by_role(role) & ours {
                labels[label_index(square)] = label;
            }
        }
    }

    encode_non_piece_labels(position, ep, labels);
}

/// Like [`encode_state_into`] for `position`, the position right after `m`, when `labels` hold
/// the labels of the position `m` was played from: only the squares `m` can change (its from
/// and to squares, the pawn taken en passant, the castling rook's squares) are read again from
/// the board, and the non-piece labels are recomputed. The result equals
/// [`encode_state_into`]'s; it is the cheaper way to label a game ply by ply.
pub fn encode_state_after_move(
    position: &Chess,
    m: &Move,
    ep: EpConvention,
    labels: &mut StateLabels,
) {
    let board = position.board();
    let mut relabel = |square: Square| {
        labels[label_index(square)] = board
            .piece_at(square)
            .map_or(0, |piece| piece_label(piece.color, piece.role));
    };
    match *m {
        Move::Normal { from, to, .. } => {
            relabel(from);
            relabel(to);
        }
        Move::EnPassant { from, to } => {
            relabel(from);
            relabel(to);
            relabel(Square::from_coords(to.file(), from.rank()));
        }
        Move::Castle { king, rook } => {
            let (king_file, rook_file) = if rook.file() > king.file() {
                (File::G, File::F)
            } else {
                (File::C, File::D)
            };
            relabel(king);
            relabel(rook);
            relabel(Square::from_coords(king_file, king.rank()));
            relabel(Square::from_coords(rook_file, king.rank()));
        }
        Move::Put { to, .. } => relabel(to),
    }
    encode_non_piece_labels(position, ep, labels);
}

/// Labels 64..75: side to move, castling, en passant, halfmove clock and fullmove number.
fn encode_non_piece_labels(position: &Chess, ep: EpConvention, labels: &mut StateLabels) {
    labels[SIDE_TO_MOVE] = match position.turn() {
        Color::White => 0,
        Color::Black => 1,
    };

    let rights = position.castles().castling_rights();
    for (offset, corner) in [Square::H1, Square::A1, Square::H8, Square::A8]
        .into_iter()
        .enumerate()
    {
        labels[CASTLING_WHITE_KING_SIDE + offset] = u8::from(rights.contains(corner));
    }

    let (ep_file, ep_rank) = match position.ep_square(ep.mode()) {
        Some(square) => (
            square.file() as u8 + 1,
            if square.rank() == Rank::Third { 1 } else { 2 },
        ),
        None => (0, 0),
    };
    labels[EP_FILE] = ep_file;
    labels[EP_RANK] = ep_rank;

    let [hi, lo] = clamped_be_bytes(position.halfmoves());
    labels[HALFMOVE_HI] = hi;
    labels[HALFMOVE_HI + 1] = lo;
    let [hi, lo] = clamped_be_bytes(position.fullmoves().get());
    labels[FULLMOVE_HI] = hi;
    labels[FULLMOVE_HI + 1] = lo;
}

/// A label that is out of range for its index, found while decoding.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("state label {index} has value {value}, but that label has only {classes} classes")]
pub struct DecodeStateError {
    /// Index of the bad label (0..75).
    pub index: usize,
    /// Its value.
    pub value: u8,
    /// The number of classes of that label.
    pub classes: u16,
}

/// Decodes 75 labels back into a FEN string: placement, side, castling, en-passant square,
/// halfmove clock and fullmove number.
///
/// The en-passant field is whatever the labels hold, so labels encoded under
/// [`EpConvention::Reference`] decode to a FEN with an en-passant square after every double
/// push, and labels under [`EpConvention::LegalCapture`] to python-chess's `Board.fen()`.
/// A rank label of 1 is rank 3 and 2 is rank 6. Used for cross-checks; it does not check that
/// the position is legal.
///
/// # Errors
///
/// [`DecodeStateError`] when a label is out of range for its index.
pub fn decode_state_fen(labels: &StateLabels) -> Result<String, DecodeStateError> {
    if let Some((index, &value)) = labels
        .iter()
        .enumerate()
        .find(|&(index, &value)| u16::from(value) >= LABEL_CLASSES[index])
    {
        return Err(DecodeStateError {
            index,
            value,
            classes: LABEL_CLASSES[index],
        });
    }

    let mut fen = String::with_capacity(90);
    for (row, rank_labels) in labels[..64].chunks_exact(8).enumerate() {
        if row > 0 {
            fen.push('/');
        }
        let mut empty = 0u8;
        for &label in rank_labels {
            if label == 0 {
                empty += 1;
            } else {
                if empty > 0 {
                    fen.push(char::from(b'0' + empty));
                    empty = 0;
                }
                fen.push(PIECE_SYMBOLS[usize::from(label)]);
            }
        }
        if empty > 0 {
            fen.push(char::from(b'0' + empty));
        }
    }

    fen.push_str(if labels[SIDE_TO_MOVE] == 0 {
        " w "
    } else {
        " b "
    });

    let mut any_castling = false;
    for (offset, symbol) in ['K', 'Q', 'k', 'q'].into_iter().enumerate() {
        if labels[CASTLING_WHITE_KING_SIDE + offset] == 1 {
            fen.push(symbol);
            any_castling = true;
        }
    }
    if !any_castling {
        fen.push('-');
    }

    fen.push(' ');
    match (labels[EP_FILE], labels[EP_RANK]) {
        (0, _) | (_, 0) => fen.push('-'),
        (file, rank) => {
            let rank = if rank == 1 { Rank::Third } else { Rank::Sixth };
            let file = File::new(u32::from(file - 1));
            Square::from_coords(file, rank).append_to_string(&mut fen);
        }
    }

    let halfmove = u16::from_be_bytes([labels[HALFMOVE_HI], labels[HALFMOVE_HI + 1]]);
    let fullmove = u16::from_be_bytes([labels[FULLMOVE_HI], labels[FULLMOVE_HI + 1]]);
    // Writing into a String cannot fail.
    let _ = write!(fen, " {halfmove} {fullmove}");
    Ok(fen)
}

#[cfg(test)]
mod tests {
    use shakmaty::{Chess, Position, san::San, uci::UciMove};

    use super::*;

    #[test]
    fn each_convention_is_found_by_its_name_and_no_other_name_is() {
        for ep in EpConvention::ALL {
            assert_eq!(EpConvention::from_name(ep.name()), Some(ep));
        }
        assert_eq!(EpConvention::Reference.name(), "reference");
        assert_eq!(EpConvention::LegalCapture.name(), "legal_capture");
        assert_eq!(EpConvention::from_name("Reference"), None);
        assert_eq!(EpConvention::from_name(""), None);
    }

    #[test]
    fn labelling_after_each_move_equals_labelling_from_scratch() {
        // Random legal games (a 64-bit LCG picks among the legal moves, a special move, if
        // there is one, half the time) cover castling on both sides, en passant and every
        // promotion many times over.
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: usize| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as usize % n
        };
        let mut kinds = [0usize; 4]; // normal, en passant, castle, promotion
        for ep in EpConvention::ALL {
            for _ in 0..300 {
                let mut position = Chess::default();
                let mut labels = encode_state(&position, ep);
                for _ in 0..300 {
                    let moves = position.legal_moves();
                    if moves.is_empty() {
                        break;
                    }
                    let special: Vec<&Move> = moves
                        .iter()
                        .filter(|m| m.is_en_passant() || m.is_castle() || m.is_promotion())
                        .collect();
                    let m = if !special.is_empty() && next(2) == 0 {
                        *special[next(special.len())]
                    } else {
                        moves[next(moves.len())]
                    };
                    kinds[match m {
                        Move::EnPassant { .. } => 1,
                        Move::Castle { .. } => 2,
                        Move::Normal {
                            promotion: Some(_), ..
                        } => 3,
                        _ => 0,
                    }] += 1;
                    position.play_unchecked(m);
                    encode_state_after_move(&position, &m, ep, &mut labels);
                    assert_eq!(labels, encode_state(&position, ep), "after {m:?}");
                }
            }
        }
        // Seen when written: [164328, 125, 281, 1499].
        assert!(
            kinds.iter().all(|&k| k >= 100),
            "move kinds seen: {kinds:?}"
        );
    }

    /// Plays SAN moves from the start, panicking on a bad one (test helper).
    fn play_san(sans: &[&str]) -> Chess {
        let mut position = Chess::default();
        for san in sans {
            let m = san
                .parse::<San>()
                .unwrap()
                .to_move(&position)
                .unwrap_or_else(|e| panic!("{san}: {e}"));
            position.play_unchecked(m);
        }
        position
    }

    fn uci_move(position: &Chess, uci: &str) -> Move {
        uci.parse::<UciMove>().unwrap().to_move(position).unwrap()
    }

    #[test]
    fn vocabulary_constants() {
        assert_eq!(NUM_MOVE_IDS, 64 * 64 * 5);
        assert_eq!(START, NUM_MOVE_IDS);
        assert_eq!(PAD, START + 1);
        assert_eq!(VOCAB_SIZE, PAD + 1);
    }

    #[test]
    fn spec_move_vectors() {
        let promotion = "8/P7/8/8/8/8/8/k6K w - - 0 1"
            .parse::<shakmaty::fen::Fen>()
            .unwrap()
            .into_position::<Chess>(shakmaty::CastlingMode::Standard)
            .unwrap();
        assert_eq!(pack_move(&uci_move(&promotion, "a7a8q")), 15641);
        assert_eq!(pack_move(&uci_move(&promotion, "a7a8r")), 15642);
        assert_eq!(pack_move(&uci_move(&promotion, "a7a8b")), 15643);
        assert_eq!(pack_move(&uci_move(&promotion, "a7a8n")), 15644);

        let castling = play_san(&["e4", "e5", "Nf3", "Nc6", "Bc4", "Bc5"]);
        let short = "O-O".parse::<San>().unwrap().to_move(&castling).unwrap();
        assert!(matches!(short, Move::Castle { .. }));
        assert_eq!(pack_move(&short), 1310);
    }

    #[test]
    fn castling_packs_as_the_kings_two_square_move() {
        let position = "r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1"
            .parse::<shakmaty::fen::Fen>()
            .unwrap()
            .into_position::<Chess>(shakmaty::CastlingMode::Standard)
            .unwrap();
        let castle = |king, rook| Move::Castle { king, rook };
        assert_eq!(
            unpack_move(pack_move(&castle(Square::E1, Square::H1))),
            Some((Square::E1, Square::G1, None))
        );
        assert_eq!(
            unpack_move(pack_move(&castle(Square::E1, Square::A1))),
            Some((Square::E1, Square::C1, None))
        );
        assert_eq!(
            unpack_move(pack_move(&castle(Square::E8, Square::H8))),
            Some((Square::E8, Square::G8, None))
        );
        assert_eq!(
            unpack_move(pack_move(&castle(Square::E8, Square::A8))),
            Some((Square::E8, Square::C8, None))
        );
        // The UCI e1g1 and e1c1 that shakmaty parses become the same castling moves.
        assert_eq!(pack_move(&uci_move(&position, "e1g1")), 1310);
        assert_eq!(pack_move(&uci_move(&position, "e1c1")), (4 * 64 + 2) * 5);
    }

    #[test]
    fn en_passant_packs_from_to() {
        let position = play_san(&["e4", "a6", "e5", "d5"]);
        let m = "exd6".parse::<San>().unwrap().to_move(&position).unwrap();
        assert!(m.is_en_passant());
        assert_eq!(
            unpack_move(pack_move(&m)),
            Some((Square::E5, Square::D6, None))
        );
    }

    #[test]
    fn every_move_id_round_trips() {
        for id in 0..NUM_MOVE_IDS {
            let (from, to, promotion) = unpack_move(id).unwrap();
            let m = Move::Normal {
                role: Role::Pawn,
                from,
                capture: None,
                to,
                promotion,
            };
            assert_eq!(pack_move(&m), id);
        }
        assert_eq!(unpack_move(START), None);
        assert_eq!(unpack_move(PAD), None);
        assert_eq!(unpack_move(u16::MAX), None);
    }

    #[test]
    fn variant_moves_have_no_id() {
        let drop = Move::Put {
            role: Role::Knight,
            to: Square::E4,
        };
        assert_eq!(try_pack_move(&drop), None);
        let to_king = Move::Normal {
            role: Role::Pawn,
            from: Square::A7,
            capture: None,
            to: Square::A8,
            promotion: Some(Role::King),
        };
        assert_eq!(try_pack_move(&to_king), None);
    }

    #[test]
    fn uci_text_of_ids() {
        let mut text = String::new();
        assert!(write_uci(15641, &mut text));
        text.push(' ');
        assert!(write_uci(1310, &mut text));
        assert!(!write_uci(START, &mut text));
        assert_eq!(text, "a7a8q e1g1");
    }

    #[test]
    fn initial_state() {
        let start = Chess::default();
        assert_eq!(encode_state(&start, EpConvention::Reference), INITIAL_STATE);
        assert_eq!(
            encode_state(&start, EpConvention::LegalCapture),
            INITIAL_STATE
        );
        assert_eq!(
            decode_state_fen(&INITIAL_STATE).unwrap(),
            "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
        );
    }

    #[test]
    fn spec_en_passant_example() {
        let after_e4 = play_san(&["e4"]);
        let labels = encode_state(&after_e4, EpConvention::Reference);
        assert_eq!((labels[EP_FILE], labels[EP_RANK]), (5, 1));
        let labels = encode_state(&after_e4, EpConvention::LegalCapture);
        assert_eq!((labels[EP_FILE], labels[EP_RANK]), (0, 0));

        let after_nf6 = play_san(&["e4", "Nf6"]);
        let labels = encode_state(&after_nf6, EpConvention::Reference);
        assert_eq!((labels[EP_FILE], labels[EP_RANK]), (0, 0));

        let after_d5 = play_san(&["e4", "Nf6", "e5", "d5"]);
        for ep in EpConvention::ALL {
            let labels = encode_state(&after_d5, ep);
            assert_eq!((labels[EP_FILE], labels[EP_RANK]), (4, 2), "{ep:?}");
        }
    }

    #[test]
    fn counters_and_side_to_move() {
        let position = play_san(&["Nf3", "Nf6", "Ng1", "Ng8", "Nc3"]);
        let labels = encode_state(&position, EpConvention::Reference);
        assert_eq!(labels[SIDE_TO_MOVE], 1);
        assert_eq!(&labels[HALFMOVE_HI..=HALFMOVE_HI + 1], &[0, 5]);
        assert_eq!(&labels[FULLMOVE_HI..=FULLMOVE_HI + 1], &[0, 3]);

        let late = "4k3/8/8/8/8/8/8/4K3 w - - 300 1000"
            .parse::<shakmaty::fen::Fen>()
            .unwrap()
            .into_position::<Chess>(shakmaty::CastlingMode::Standard)
            .unwrap();
        let labels = encode_state(&late, EpConvention::Reference);
        assert_eq!(&labels[HALFMOVE_HI..=HALFMOVE_HI + 1], &[1, 44]);
        assert_eq!(&labels[FULLMOVE_HI..=FULLMOVE_HI + 1], &[3, 232]);
        assert_eq!(clamped_be_bytes(70_000), [255, 255]);
    }

    fn castling_labels(position: &Chess) -> [u8; 4] {
        let labels = encode_state(position, EpConvention::Reference);
        [labels[65], labels[66], labels[67], labels[68]]
    }

    #[test]
    fn castling_rights_are_lost_by_king_moves_rook_moves_and_captures() {
        // King moves lose both rights of that colour.
        assert_eq!(
            castling_labels(&play_san(&["e4", "e5", "Ke2"])),
            [0, 0, 1, 1]
        );
        // Castling loses both rights too.
        assert_eq!(
            castling_labels(&play_san(&["e4", "e5", "Nf3", "Nc6", "Bc4", "Bc5", "O-O"])),
            [0, 0, 1, 1]
        );
        // A rook move loses that side only, permanently.
        assert_eq!(
            castling_labels(&play_san(&["h4", "a5", "Rh3", "Ra6", "Rh1", "Ra8"])),
            [0, 1, 1, 0]
        );
        // A capture on a corner loses the captured rook's right.
        assert_eq!(
            castling_labels(&play_san(&["g4", "b6", "g5", "Bb7", "g6", "Bxh1"])),
            [0, 1, 1, 1]
        );
        // Promoted queens capturing on both colours' corners.
        assert_eq!(
            castling_labels(&play_san(&[
                "b4", "g5", "b5", "g4", "b6", "g3", "bxa7", "gxh2", "axb8=Q", "hxg1=Q", "Qxa8",
                "Qxh1"
            ])),
            [0, 1, 1, 0]
        );
    }

    #[test]
    fn decoded_fen_matches_shakmaty() {
        let position = play_san(&["e4", "Nf6", "e5", "d5", "Nf3", "Nc6", "Bb5", "a6", "O-O"]);
        let legal = encode_state(&position, EpConvention::LegalCapture);
        let fen = shakmaty::fen::Fen::from_position(&position, EnPassantMode::Legal).to_string();
        assert_eq!(decode_state_fen(&legal).unwrap(), fen);

        let after_d5 = play_san(&["e4", "Nf6", "e5", "d5"]);
        let labels = encode_state(&after_d5, EpConvention::Reference);
        assert_eq!(
            decode_state_fen(&labels).unwrap(),
            "rnbqkb1r/ppp1pppp/5n2/3pP3/8/8/PPPP1PPP/RNBQKBNR w KQkq d6 0 3"
        );
    }

    #[test]
    fn decoding_rejects_out_of_range_labels() {
        let mut labels = INITIAL_STATE;
        labels[EP_RANK] = 3;
        assert_eq!(
            decode_state_fen(&labels),
            Err(DecodeStateError {
                index: EP_RANK,
                value: 3,
                classes: 3
            })
        );
        labels = INITIAL_STATE;
        labels[0] = 13;
        assert!(decode_state_fen(&labels).is_err());
    }

    #[test]
    fn encode_into_overwrites_the_buffer() {
        let mut labels = [200u8; STATE_LEN];
        encode_state_into(&Chess::default(), EpConvention::Reference, &mut labels);
        assert_eq!(labels, INITIAL_STATE);
    }

    #[test]
    fn play_keeps_the_position_usable() {
        // Guard against shakmaty behaviour changes: play() must keep halfmoves counting.
        let position = play_san(&["Nc3", "Nc6"]);
        assert_eq!(position.halfmoves(), 2);
    }
}
