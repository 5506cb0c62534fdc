//! E1's V1 flags: python-chess 1.11.2 `Board.status()` on the FEN the labels decode to, computed
//! on shakmaty bitboards, plus two stricter shakmaty-only flags.
//!
//! python-chess's semantics are followed where they differ from a plain reading of the rules,
//! so the flags are equal bit for bit:
//!
//! * **Kings.** "The" king of a colour is its king on the highest square (python-chess's `msb`):
//!   checks are counted against it, and `OPPOSITE_CHECK` looks at the opponent's. The
//!   impossible-check tests look at *all* kings of the side to move. `TOO_MANY_KINGS` means
//!   more than two kings in total.
//! * **Castling.** python-chess first turns each castling letter into a rook square (`K`: the
//!   rightmost rook on the back rank when it stands right of the king, else h1; `Q`: the leftmost
//!   rook when it stands left of the king, else a1, and *nothing* when the king is on the board
//!   but the back rank holds no rook of that colour) and then keeps the squares that hold a rook
//!   of that colour on a1/h1 (a8/h8) with a king of that colour on e1 (e8).
//!   `BAD_CASTLING_RIGHTS` fires when the two differ. In all reachable situations that is the
//!   spec's rule ("K needs a white king on e1 and a white rook on h1"); the differences are
//!   positions like a `Q` right with the king on e1 and no white rook on the first rank (no flag)
//!   or two white kings whose higher one is right of h1's rook (a `Q` right then lands on h1).
//! * **En passant.** An en-passant square is valid when it is on the sixth rank with White to
//!   move (third with Black), a pawn of the side not to move stands just beyond it, and it and
//!   the pawn's origin square are empty (the spec's rules (a)–(d)). Under
//!   [`EpConvention::LegalCapture`] it must also allow a legal en-passant capture (rule (e)),
//!   legal as python-chess's `has_legal_en_passant()` decides: no capture exposes the king of the
//!   side to move (its highest king), and with no king any capture counts.

use std::fmt;
use std::ops::{BitAnd, BitOr, BitOrAssign, Not};

use shakmaty::{Bitboard, Board, Color, Rank, Square, attacks};

use super::{Reading, read_labels};
use crate::encode::{EpConvention, StateLabels};

/// A set of validity flags (E1's V1 and the two shakmaty-only columns).
///
/// The 14 python-chess flags have python-chess's own bit values, so [`StatusFlags::bits`] of
/// [`StatusFlags::v1`] equals the integer python-chess's `Board.status()` returns.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct StatusFlags(u32);

impl StatusFlags {
    /// No flag: a valid position.
    pub const NONE: StatusFlags = StatusFlags(0);
    /// White has no king.
    pub const NO_WHITE_KING: StatusFlags = StatusFlags(1);
    /// Black has no king.
    pub const NO_BLACK_KING: StatusFlags = StatusFlags(1 << 1);
    /// More than two kings on the board in total.
    pub const TOO_MANY_KINGS: StatusFlags = StatusFlags(1 << 2);
    /// More than 8 white pawns.
    pub const TOO_MANY_WHITE_PAWNS: StatusFlags = StatusFlags(1 << 3);
    /// More than 8 black pawns.
    pub const TOO_MANY_BLACK_PAWNS: StatusFlags = StatusFlags(1 << 4);
    /// A pawn on rank 1 or 8.
    pub const PAWNS_ON_BACKRANK: StatusFlags = StatusFlags(1 << 5);
    /// More than 16 white pieces.
    pub const TOO_MANY_WHITE_PIECES: StatusFlags = StatusFlags(1 << 6);
    /// More than 16 black pieces.
    pub const TOO_MANY_BLACK_PIECES: StatusFlags = StatusFlags(1 << 7);
    /// A castling right without its king and rook (see the module documentation).
    pub const BAD_CASTLING_RIGHTS: StatusFlags = StatusFlags(1 << 8);
    /// An en-passant square that no double push can have left (or, under
    /// [`EpConvention::LegalCapture`], that allows no legal capture).
    pub const INVALID_EP_SQUARE: StatusFlags = StatusFlags(1 << 9);
    /// The king of the side not to move is attacked.
    pub const OPPOSITE_CHECK: StatusFlags = StatusFlags(1 << 10);
    /// No piece on the board.
    pub const EMPTY: StatusFlags = StatusFlags(1 << 11);
    /// More than two pieces give check.
    pub const TOO_MANY_CHECKERS: StatusFlags = StatusFlags(1 << 15);
    /// A check no legal last move can have given.
    pub const IMPOSSIBLE_CHECK: StatusFlags = StatusFlags(1 << 16);
    /// shakmaty only, not part of V1: pawns plus promoted extras (queens beyond 1, rooks beyond
    /// 2, knights beyond 2, light- and dark-squared bishops beyond 1 each) exceed 8 for a colour.
    pub const TOO_MUCH_MATERIAL: StatusFlags = StatusFlags(1 << 20);
    /// shakmaty only, not part of V1: two or more of the checkers (of the king python-chess
    /// checks, see the module documentation) are knights, pawns or kings.
    pub const STEPPER_DOUBLE_CHECK: StatusFlags = StatusFlags(1 << 21);

    /// The 14 python-chess flags: a state passes V1 when it has none of them.
    pub const V1: StatusFlags = StatusFlags(
        Self::EMPTY.0
            | Self::NO_WHITE_KING.0
            | Self::NO_BLACK_KING.0
            | Self::TOO_MANY_KINGS.0
            | Self::TOO_MANY_WHITE_PIECES.0
            | Self::TOO_MANY_BLACK_PIECES.0
            | Self::TOO_MANY_WHITE_PAWNS.0
            | Self::TOO_MANY_BLACK_PAWNS.0
            | Self::PAWNS_ON_BACKRANK.0
            | Self::BAD_CASTLING_RIGHTS.0
            | Self::INVALID_EP_SQUARE.0
            | Self::OPPOSITE_CHECK.0
            | Self::TOO_MANY_CHECKERS.0
            | Self::IMPOSSIBLE_CHECK.0,
    );

    /// Every flag with its stable name, in the fixed order of reports: the 14 python-chess flags,
    /// then the two shakmaty-only ones.
    pub const ALL: [(StatusFlags, &'static str); 16] = [
        (Self::EMPTY, "EMPTY"),
        (Self::NO_WHITE_KING, "NO_WHITE_KING"),
        (Self::NO_BLACK_KING, "NO_BLACK_KING"),
        (Self::TOO_MANY_KINGS, "TOO_MANY_KINGS"),
        (Self::TOO_MANY_WHITE_PIECES, "TOO_MANY_WHITE_PIECES"),
        (Self::TOO_MANY_BLACK_PIECES, "TOO_MANY_BLACK_PIECES"),
        (Self::TOO_MANY_WHITE_PAWNS, "TOO_MANY_WHITE_PAWNS"),
        (Self::TOO_MANY_BLACK_PAWNS, "TOO_MANY_BLACK_PAWNS"),
        (Self::PAWNS_ON_BACKRANK, "PAWNS_ON_BACKRANK"),
        (Self::BAD_CASTLING_RIGHTS, "BAD_CASTLING_RIGHTS"),
        (Self::INVALID_EP_SQUARE, "INVALID_EP_SQUARE"),
        (Self::OPPOSITE_CHECK, "OPPOSITE_CHECK"),
        (Self::TOO_MANY_CHECKERS, "TOO_MANY_CHECKERS"),
        (Self::IMPOSSIBLE_CHECK, "IMPOSSIBLE_CHECK"),
        (Self::TOO_MUCH_MATERIAL, "TOO_MUCH_MATERIAL"),
        (Self::STEPPER_DOUBLE_CHECK, "STEPPER_DOUBLE_CHECK"),
    ];

    /// The raw bits (python-chess's values for the V1 flags).
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// The flags of `bits`, dropping bits that name no flag.
    pub const fn from_bits_truncate(bits: u32) -> StatusFlags {
        StatusFlags(bits & Self::all().0)
    }

    /// All 16 flags.
    pub const fn all() -> StatusFlags {
        StatusFlags(Self::V1.0 | Self::TOO_MUCH_MATERIAL.0 | Self::STEPPER_DOUBLE_CHECK.0)
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The flags of both sets (`|` in const contexts).
    #[must_use]
    pub const fn union(self, other: StatusFlags) -> StatusFlags {
        StatusFlags(self.0 | other.0)
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: StatusFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag of `other` is set.
    pub const fn intersects(self, other: StatusFlags) -> bool {
        self.0 & other.0 != 0
    }

    /// The python-chess flags among these (what V1 looks at).
    pub const fn v1(self) -> StatusFlags {
        StatusFlags(self.0 & Self::V1.0)
    }

    /// Whether V1 passes: none of the 14 python-chess flags is set.
    pub const fn passes_v1(self) -> bool {
        !self.intersects(Self::V1)
    }

    /// Number of flags set.
    pub const fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The stable name of a single flag (`"BAD_CASTLING_RIGHTS"`), or `None` when `self` is not
    /// exactly one flag.
    pub fn name(self) -> Option<&'static str> {
        Self::ALL
            .iter()
            .find(|&&(flag, _)| flag == self)
            .map(|&(_, name)| name)
    }

    /// The single flags set, in the order of [`StatusFlags::ALL`].
    pub fn iter(self) -> impl Iterator<Item = StatusFlags> {
        Self::ALL
            .into_iter()
            .map(|(flag, _)| flag)
            .filter(move |&flag| self.contains(flag))
    }
}

impl BitOr for StatusFlags {
    type Output = StatusFlags;
    fn bitor(self, other: StatusFlags) -> StatusFlags {
        StatusFlags(self.0 | other.0)
    }
}

impl BitOrAssign for StatusFlags {
    fn bitor_assign(&mut self, other: StatusFlags) {
        self.0 |= other.0;
    }
}

impl BitAnd for StatusFlags {
    type Output = StatusFlags;
    fn bitand(self, other: StatusFlags) -> StatusFlags {
        StatusFlags(self.0 & other.0)
    }
}

impl Not for StatusFlags {
    type Output = StatusFlags;
    fn not(self) -> StatusFlags {
        StatusFlags(!self.0 & Self::all().0)
    }
}

/// The names of the flags set, joined by `|` (`NONE` for no flag).
impl fmt::Display for StatusFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("NONE");
        }
        for (i, (_, name)) in Self::ALL
            .iter()
            .filter(|&&(flag, _)| self.contains(flag))
            .enumerate()
        {
            if i > 0 {
                f.write_str("|")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

impl fmt::Debug for StatusFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StatusFlags({self})")
    }
}

/// The validity flags of a state (E1's V1 plus the shakmaty-only flags), flag for flag equal to
/// python-chess 1.11.2 `chess.Board(fen).status()` on the FEN the labels decode to; under
/// [`EpConvention::LegalCapture`] an en-passant square that allows no legal capture also sets
/// [`StatusFlags::INVALID_EP_SQUARE`] (the spec's rule (e)). See the module documentation for
/// python-chess's corner cases and the [`rules`](super) documentation for how labels that fail
/// V0 read.
pub fn status(labels: &StateLabels, ep: EpConvention) -> StatusFlags {
    status_of(&read_labels(labels), ep)
}

/// [`status`] of labels already read.
pub(crate) fn status_of(reading: &Reading, ep: EpConvention) -> StatusFlags {
    let board = &reading.board;
    let mut flags = material_flags(board);

    let rights = castling_as_parsed(reading);
    if rights != cleaned_castling(board, rights) {
        flags |= StatusFlags::BAD_CASTLING_RIGHTS;
    }

    let valid_ep = valid_ep_square(reading);
    if reading.ep_square.is_some()
        && (valid_ep.is_none()
            || (ep == EpConvention::LegalCapture && !has_legal_ep_capture(reading)))
    {
        flags |= StatusFlags::INVALID_EP_SQUARE;
    }

    let us = reading.turn;
    let them = !us;
    let occupied = board.occupied();
    if let Some(their_king) = king_of(board, them)
        && board.attacks_to(their_king, us, occupied).any()
    {
        flags |= StatusFlags::OPPOSITE_CHECK;
    }

    let checkers = king_of(board, us).map_or(Bitboard::EMPTY, |king| {
        board.attacks_to(king, them, occupied)
    });
    if checkers.any() {
        flags |= check_flags(board, us, checkers, valid_ep);
    }
    flags
}

/// The flags that count pieces: empty board, kings, pieces, pawns, back-rank pawns, material.
fn material_flags(board: &Board) -> StatusFlags {
    let mut flags = StatusFlags::NONE;
    let mut set = |condition: bool, flag: StatusFlags| {
        if condition {
            flags |= flag;
        }
    };
    let (white, black) = (board.white(), board.black());
    set(board.occupied().is_empty(), StatusFlags::EMPTY);
    set(
        (board.kings() & white).is_empty(),
        StatusFlags::NO_WHITE_KING,
    );
    set(
        (board.kings() & black).is_empty(),
        StatusFlags::NO_BLACK_KING,
    );
    set(board.kings().count() > 2, StatusFlags::TOO_MANY_KINGS);
    set(white.count() > 16, StatusFlags::TOO_MANY_WHITE_PIECES);
    set(black.count() > 16, StatusFlags::TOO_MANY_BLACK_PIECES);
    set(
        (board.pawns() & white).count() > 8,
        StatusFlags::TOO_MANY_WHITE_PAWNS,
    );
    set(
        (board.pawns() & black).count() > 8,
        StatusFlags::TOO_MANY_BLACK_PAWNS,
    );
    set(
        (board.pawns() & Bitboard::BACKRANKS).any(),
        StatusFlags::PAWNS_ON_BACKRANK,
    );
    set(
        !standard_material(board, Color::White) || !standard_material(board, Color::Black),
        StatusFlags::TOO_MUCH_MATERIAL,
    );
    flags
}

/// The flags about the checkers of the side to move's king.
fn check_flags(
    board: &Board,
    us: Color,
    checkers: Bitboard,
    valid_ep: Option<Square>,
) -> StatusFlags {
    let mut flags = StatusFlags::NONE;
    let them = !us;
    let our_kings = board.kings() & board.by_color(us);
    if checkers.count() > 2 {
        flags |= StatusFlags::TOO_MANY_CHECKERS;
    }
    let impossible = match valid_ep {
        Some(ep_square) => {
            let pushed_to = ep_square.xor(Square::A2);
            let pushed_from = ep_square.xor(Square::A4);
            let occupied_before = board.occupied().without(pushed_to).with(pushed_from);
            checkers.more_than_one()
                || (checkers.last() != Some(pushed_to)
                    && our_kings
                        .into_iter()
                        .any(|king| board.attacks_to(king, them, occupied_before).any()))
        }
        None => {
            checkers.count() > 2
                || (checkers.count() == 2
                    && match (checkers.first(), checkers.last()) {
                        (Some(a), Some(b)) => attacks::ray(a, b).intersects(our_kings),
                        _ => false,
                    })
        }
    };
    if impossible {
        flags |= StatusFlags::IMPOSSIBLE_CHECK;
    }
    if (checkers & board.steppers()).more_than_one() {
        flags |= StatusFlags::STEPPER_DOUBLE_CHECK;
    }
    flags
}

/// python-chess's king of a colour: the one on the highest square.
pub(crate) fn king_of(board: &Board, color: Color) -> Option<Square> {
    (board.kings() & board.by_color(color)).last()
}

/// The castling-rights mask python-chess's FEN parser builds from the castling labels.
fn castling_as_parsed(reading: &Reading) -> Bitboard {
    let board = &reading.board;
    let mut rights = Bitboard::EMPTY;
    for color in Color::ALL {
        let backrank = color.backrank();
        let (h_corner, a_corner) = match color {
            Color::White => (Square::H1, Square::A1),
            Color::Black => (Square::H8, Square::A8),
        };
        let rooks = board.rooks() & board.by_color(color) & Bitboard::from_rank(backrank);
        let king = king_of(board, color);
        if reading.castling.contains(h_corner) {
            match (king, rooks.last()) {
                (Some(king), Some(rook)) if king < rook => rights.add(rook),
                _ => rights.add(h_corner),
            }
        }
        if reading.castling.contains(a_corner) {
            match (king, rooks.first()) {
                // A king but no rook: python-chess adds nothing.
                (Some(_), None) => {}
                (Some(king), Some(rook)) if rook < king => rights.add(rook),
                _ => rights.add(a_corner),
            }
        }
    }
    rights
}

/// python-chess's `clean_castling_rights()` for standard chess: the rights whose rook stands on
/// its corner with its king on e1 / e8.
fn cleaned_castling(board: &Board, rights: Bitboard) -> Bitboard {
    let castling = rights & board.rooks();
    let mut white = castling
        & Bitboard::from_rank(Rank::First)
        & board.white()
        & (Bitboard::from_square(Square::A1) | Bitboard::from_square(Square::H1));
    let mut black = castling
        & Bitboard::from_rank(Rank::Eighth)
        & board.black()
        & (Bitboard::from_square(Square::A8) | Bitboard::from_square(Square::H8));
    if !(board.kings() & board.white()).contains(Square::E1) {
        white = Bitboard::EMPTY;
    }
    if !(board.kings() & board.black()).contains(Square::E8) {
        black = Bitboard::EMPTY;
    }
    white | black
}

/// The en-passant square when rules (a)–(d) hold (python-chess's `_valid_ep_square()`).
pub(crate) fn valid_ep_square(reading: &Reading) -> Option<Square> {
    let ep_square = reading.ep_square?;
    let board = &reading.board;
    if ep_square.rank() != reading.turn.relative_rank(Rank::Sixth) {
        return None;
    }
    let pushed_to = ep_square.xor(Square::A2);
    let pushed_from = ep_square.xor(Square::A4);
    let their_pawns = board.pawns() & board.by_color(!reading.turn);
    (their_pawns.contains(pushed_to)
        && !board.occupied().contains(ep_square)
        && !board.occupied().contains(pushed_from))
    .then_some(ep_square)
}

/// Whether the side to move has an en-passant capture that python-chess calls legal (rule (e)).
/// Only meaningful for a square that passes (a)–(d).
fn has_legal_ep_capture(reading: &Reading) -> bool {
    let Some(ep_square) = reading.ep_square else {
        return false;
    };
    let board = &reading.board;
    let us = reading.turn;
    let them = !us;
    let captured = ep_square.xor(Square::A2);
    let capturers = board.pawns() & board.by_color(us) & attacks::pawn_attacks(them, ep_square);
    let Some(king) = king_of(board, us) else {
        return capturers.any();
    };
    capturers.into_iter().any(|capturer| {
        let occupied = board
            .occupied()
            .without(capturer)
            .without(captured)
            .with(ep_square);
        let attackers = board.attacks_to(king, them, occupied).without(captured);
        attackers.is_empty()
    })
}

/// shakmaty's standard-material test for one colour (not `TOO_MUCH_MATERIAL` when true).
fn standard_material(board: &Board, color: Color) -> bool {
    let ours = board.by_color(color);
    let extra = |pieces: Bitboard, allowed: usize| (pieces & ours).count().saturating_sub(allowed);
    let promoted = extra(board.queens(), 1)
        + extra(board.rooks(), 2)
        + extra(board.knights(), 2)
        + extra(board.bishops() & Bitboard::LIGHT_SQUARES, 1)
        + extra(board.bishops() & Bitboard::DARK_SQUARES, 1);
    (board.pawns() & ours).count() + promoted <= 8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::INITIAL_STATE;

    #[test]
    fn flag_bits_are_python_chess_values_and_names_are_stable() {
        assert_eq!(StatusFlags::V1.bits(), 0x1_8FFF);
        assert_eq!(StatusFlags::all().len(), 16);
        let names: Vec<&str> = StatusFlags::ALL.iter().map(|&(_, name)| name).collect();
        assert_eq!(names.len(), 16);
        for (flag, name) in StatusFlags::ALL {
            assert_eq!(flag.len(), 1, "{name}");
            assert_eq!(flag.name(), Some(name));
            assert_eq!(flag.to_string(), name);
        }
        assert_eq!(StatusFlags::NONE.name(), None);
        assert_eq!(StatusFlags::all().iter().count(), 16);
        assert!(!StatusFlags::TOO_MUCH_MATERIAL.intersects(StatusFlags::V1));
        assert!(StatusFlags::STEPPER_DOUBLE_CHECK.passes_v1());
        assert!(!StatusFlags::EMPTY.passes_v1());
        let pair = StatusFlags::EMPTY | StatusFlags::TOO_MUCH_MATERIAL;
        assert_eq!(pair.v1(), StatusFlags::EMPTY);
        assert_eq!(format!("{pair:?}"), "StatusFlags(EMPTY|TOO_MUCH_MATERIAL)");
        assert_eq!(
            StatusFlags::from_bits_truncate(u32::MAX),
            StatusFlags::all()
        );
        assert_eq!(!StatusFlags::all(), StatusFlags::NONE);
    }

    #[test]
    fn the_initial_position_is_valid() {
        for ep in EpConvention::ALL {
            assert_eq!(status(&INITIAL_STATE, ep), StatusFlags::NONE);
        }
    }
}
