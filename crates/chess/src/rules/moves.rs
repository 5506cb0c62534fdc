//! Playable positions (P2), legal-move sets as packed token ids, moves of tokens, footprints
//! and transitions (E3, E4).
//!
//! Packed ids order moves by from-square first (`(from · 64 + to) · 5 + promotion`), so the
//! sorted ids of [`legal_ids`] hold the moves of each square in one run: [`ids_from`] cuts it out
//! without allocating (per-piece IoU), and [`from_square_of`] names the square of one id.

use std::num::NonZeroU32;

use shakmaty::{
    Bitboard, CastlingMode, CastlingSide, Chess, FromSetup, Move, Position, PositionError, Setup,
    Square,
};

use super::{CASTLING_CORNERS, Reading, read_labels};
use crate::encode::{
    EpConvention, LABEL_CLASSES, NUM_MOVE_IDS, StateLabels, encode_state_after_move, try_pack_move,
    unpack_move,
};

/// The shakmaty [`Setup`] the labels describe, with the castling rights of the labels as corner
/// rooks and a fullmove number of 0 clamped to 1; `None` when a label is out of range for its
/// index (argmax labels never are). Nothing else is checked.
pub fn setup_of(labels: &StateLabels) -> Option<Setup> {
    in_range(labels).then(|| setup_of_reading(read_labels(labels)))
}

/// Whether every label is in range for its index.
pub(crate) fn in_range(labels: &StateLabels) -> bool {
    labels
        .iter()
        .zip(LABEL_CLASSES)
        .all(|(&label, classes)| u16::from(label) < classes)
}

fn setup_of_reading(reading: Reading) -> Setup {
    Setup {
        board: reading.board,
        turn: reading.turn,
        castling_rights: reading.castling,
        ep_square: reading.ep_square,
        halfmoves: u32::from(reading.halfmoves),
        fullmoves: NonZeroU32::new(u32::from(reading.fullmoves)).unwrap_or(NonZeroU32::MIN),
        ..Setup::empty()
    }
}

/// The position a state stands for, if shakmaty can play it (spec P2): the [`setup_of`] the
/// labels as a standard-chess [`Chess`], dropping invalid castling rights and an invalid
/// en-passant square and accepting too much material and impossible checks; `None` while an
/// empty board, a missing king, too many kings, pawns on a back rank or the side not to move in
/// check remain (and for labels out of range).
pub fn playable(labels: &StateLabels) -> Option<Chess> {
    position_of(setup_of(labels)?)
}

/// [`playable`] of labels in range, already read.
pub(crate) fn playable_of_reading(reading: Reading) -> Option<Chess> {
    position_of(setup_of_reading(reading))
}

/// The standard-chess position of `setup`, with [`playable`]'s leniency.
fn position_of(setup: Setup) -> Option<Chess> {
    Chess::from_setup(setup, CastlingMode::Standard)
        .or_else(PositionError::ignore_invalid_castling_rights)
        .or_else(PositionError::ignore_invalid_ep_square)
        .or_else(PositionError::ignore_too_much_material)
        .or_else(PositionError::ignore_impossible_check)
        .ok()
}

/// Writes the packed token ids of the legal moves of `position` into `out` (cleared first),
/// sorted ascending: castling as the king's two-square move and en passant as the capturing
/// pawn's from → to, exactly as [`pack_move`](crate::encode::pack_move) packs the input tokens.
pub fn legal_ids(position: &Chess, out: &mut Vec<u16>) {
    out.clear();
    out.extend(position.legal_moves().iter().filter_map(try_pack_move));
    out.sort_unstable();
}

/// The legal move of `position` whose packed id is `token`, or `None` (not a move id, or not
/// legal there).
pub fn move_of_token(position: &Chess, token: u16) -> Option<Move> {
    if token >= NUM_MOVE_IDS {
        return None;
    }
    let (from, _, _) = unpack_move(token)?;
    if !position.us().contains(from) {
        return None;
    }
    position
        .legal_moves()
        .into_iter()
        .find(|m| try_pack_move(m) == Some(token))
}

/// The footprint `F(m)` of a move: the squares it changes (from and to; for castling the king's
/// and the rook's from and to squares; for en passant also the captured pawn's square).
pub fn footprint(m: &Move) -> Bitboard {
    match *m {
        Move::Normal { from, to, .. } => Bitboard::from_square(from).with(to),
        Move::EnPassant { from, to } => Bitboard::from_square(from)
            .with(to)
            .with(Square::from_coords(to.file(), from.rank())),
        Move::Castle { king, rook } => {
            let side = if rook < king {
                CastlingSide::QueenSide
            } else {
                CastlingSide::KingSide
            };
            Bitboard::from_square(king)
                .with(rook)
                .with(Square::from_coords(side.king_to_file(), king.rank()))
                .with(Square::from_coords(side.rook_to_file(), king.rank()))
        }
        Move::Put { to, .. } => Bitboard::from_square(to),
    }
}

/// The labels after playing `token` in [`playable`]`(labels_before)`, encoded under `ep` (E4's
/// transition): `None` when the state is not playable or the token is not legal there.
///
/// Counters follow the rules from the labels' own (halfmove clock reset by a capture or pawn
/// move, else plus one; fullmove number plus one after Black's move, from 1 when the labels say
/// 0), clamped to 0..=65535 as every state is; castling rights and the en-passant square are
/// those of the played position, so invalid ones in `labels_before` are gone.
pub fn play_labels(
    labels_before: &StateLabels,
    token: u16,
    ep: EpConvention,
) -> Option<StateLabels> {
    let mut position = playable(labels_before)?;
    let m = move_of_token(&position, token)?;
    position.play_unchecked(m);
    // The board of `position` before the move was read from these very labels, so relabelling
    // the squares the move touches gives the labels of the whole new board.
    let mut labels = *labels_before;
    encode_state_after_move(&position, &m, ep, &mut labels);
    Some(labels)
}

/// The from-square of a packed move id (`None` for START, PAD and ids out of range).
pub const fn from_square_of(token: u16) -> Option<Square> {
    match unpack_move(token) {
        Some((from, _, _)) => Some(from),
        None => None,
    }
}

/// The ids in `sorted_ids` (sorted ascending, as [`legal_ids`] writes them) whose move starts on
/// `from`: one contiguous run, found by binary search.
pub fn ids_from(sorted_ids: &[u16], from: Square) -> &[u16] {
    let first = (from as u16) * 64 * 5;
    let end = first + 64 * 5;
    let start = sorted_ids.partition_point(|&id| id < first);
    let stop = sorted_ids.partition_point(|&id| id < end);
    &sorted_ids[start..stop.max(start)]
}

/// The number of ids two ascending, duplicate-free id lists share (for precision, recall and
/// IoU of move sets).
pub fn intersection_len(a: &[u16], b: &[u16]) -> usize {
    let (mut i, mut j, mut shared) = (0, 0, 0);
    while let (Some(&x), Some(&y)) = (a.get(i), b.get(j)) {
        match x.cmp(&y) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    shared
}

/// The castling labels (65..=68) of a colour's corners, for the event tagger.
pub(crate) fn castling_label_of_corner(corner: Square) -> Option<usize> {
    CASTLING_CORNERS
        .iter()
        .position(|&c| c == corner)
        .map(|offset| crate::encode::CASTLING_WHITE_KING_SIDE + offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{INITIAL_STATE, encode_state};
    use crate::rules::test_support::{id, position};

    #[test]
    fn the_initial_position_has_20_sorted_legal_ids() {
        let start = playable(&INITIAL_STATE).unwrap();
        let mut ids = vec![7, 7, 7];
        legal_ids(&start, &mut ids);
        assert_eq!(ids.len(), 20);
        assert!(ids.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(ids.contains(&id(&start, "e2e4")));
        assert!(ids.contains(&id(&start, "g1f3")));
    }

    #[test]
    fn castling_ids_are_the_tokens_of_e1g1_and_e1c1() {
        let pos = position("r3k2r/pppppppp/8/8/8/8/PPPPPPPP/R3K2R w KQkq - 0 1");
        let mut ids = Vec::new();
        legal_ids(&pos, &mut ids);
        let short = (4 * 64 + 6) * 5;
        let long = (4 * 64 + 2) * 5;
        assert_eq!(short, 1310);
        assert!(ids.contains(&short) && ids.contains(&long));
        assert_eq!(id(&pos, "e1g1"), short);
        assert_eq!(id(&pos, "e1c1"), long);
        assert!(matches!(
            move_of_token(&pos, short),
            Some(Move::Castle {
                king: Square::E1,
                rook: Square::H1
            })
        ));
        assert_eq!(
            footprint(&move_of_token(&pos, long).unwrap()),
            Bitboard::from_square(Square::E1)
                .with(Square::A1)
                .with(Square::C1)
                .with(Square::D1)
        );
    }

    #[test]
    fn footprints_of_normal_en_passant_and_promotion_moves() {
        let pos = position("4k3/1P6/8/3pP3/8/8/8/4K3 w - d6 0 2");
        let ep = move_of_token(&pos, id(&pos, "e5d6")).unwrap();
        assert!(ep.is_en_passant());
        assert_eq!(
            footprint(&ep),
            Bitboard::from_square(Square::E5)
                .with(Square::D6)
                .with(Square::D5)
        );
        let promotion = move_of_token(&pos, id(&pos, "b7b8n")).unwrap();
        assert_eq!(
            footprint(&promotion),
            Bitboard::from_square(Square::B7).with(Square::B8)
        );
        assert_eq!(move_of_token(&pos, id(&pos, "b7b8q") + 5), None);
        assert_eq!(move_of_token(&pos, crate::encode::PAD), None);
    }

    #[test]
    fn per_square_runs_of_sorted_ids() {
        let start = playable(&INITIAL_STATE).unwrap();
        let mut ids = Vec::new();
        legal_ids(&start, &mut ids);
        let knight = ids_from(&ids, Square::G1);
        assert_eq!(knight, &[id(&start, "g1f3"), id(&start, "g1h3")]);
        assert!(
            knight
                .iter()
                .all(|&id| from_square_of(id) == Some(Square::G1))
        );
        assert_eq!(ids_from(&ids, Square::E2).len(), 2);
        assert!(ids_from(&ids, Square::E1).is_empty());
        assert!(ids_from(&ids, Square::E7).is_empty());
        let total: usize = Square::ALL.iter().map(|&sq| ids_from(&ids, sq).len()).sum();
        assert_eq!(total, 20);
        assert_eq!(from_square_of(crate::encode::START), None);
        assert_eq!(intersection_len(&ids, knight), 2);
        assert_eq!(intersection_len(&[1, 3, 5], &[2, 3, 4, 5]), 2);
        assert_eq!(intersection_len(&[], &[2]), 0);
    }

    #[test]
    fn play_labels_plays_true_moves_and_refuses_illegal_ones() {
        for ep in EpConvention::ALL {
            let mut pos = Chess::default();
            let mut labels = encode_state(&pos, ep);
            for uci in [
                "e2e4", "d7d5", "e4e5", "f7f5", "e5f6", "e8f7", "g1f3", "g8f6",
            ] {
                let token = id(&pos, uci);
                let m = move_of_token(&pos, token).unwrap();
                pos.play_unchecked(m);
                let next = play_labels(&labels, token, ep).unwrap();
                assert_eq!(next, encode_state(&pos, ep), "{uci} {ep:?}");
                labels = next;
            }
            assert_eq!(
                play_labels(&labels, id(&Chess::default(), "e2e4"), ep),
                None
            );
        }
    }

    #[test]
    fn playable_drops_what_may_be_ignored_and_refuses_the_rest() {
        // Castling rights without rooks and a fullmove number of 0 are dropped or clamped.
        let mut labels = INITIAL_STATE;
        labels[63] = 0; // no rook on h1, K still set
        labels[74] = 0; // fullmove 0
        let pos = playable(&labels).unwrap();
        assert!(!pos.castles().castling_rights().contains(Square::H1));
        assert_eq!(pos.fullmoves().get(), 1);
        // Too much material is accepted.
        labels[36] = 2; // a third white knight on e4
        assert!(playable(&labels).is_some());
        // A pawn on the back rank is not.
        labels[0] = 1;
        assert!(playable(&labels).is_none());
        // Nor an out-of-range label.
        let mut labels = INITIAL_STATE;
        labels[64] = 2;
        assert!(playable(&labels).is_none());
        assert!(setup_of(&labels).is_none());
    }
}
