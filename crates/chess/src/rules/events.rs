//! The event tagger (spec P3, E5's table): every ply of a game gets its event tags, computed
//! from the state before it and the move, with the footprint and the labels each tag makes
//! relevant.

use std::collections::HashMap;
use std::fmt;
use std::ops::{BitOr, BitOrAssign};

use shakmaty::{Bitboard, CastlingSide, Chess, Color, Move, Position, Rank, Role, Square};
use thiserror::Error;

use super::moves::castling_label_of_corner;
use super::{check_kind, footprint, move_of_token};
use crate::encode::{
    CASTLING_WHITE_KING_SIDE, EP_FILE, EP_RANK, EpConvention, FULLMOVE_HI, HALFMOVE_HI, START,
    STATE_LEN, StateLabels, encode_state_after_move, encode_state_into, label_index, write_uci,
};

/// A set of E5 event tags of one step.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct EventTags(u32);

macro_rules! event_tags {
    ($($(#[$doc:meta])* $name:ident = $bit:expr, $text:literal;)*) => {
        impl EventTags {
            $($(#[$doc])* pub const $name: EventTags = EventTags(1 << $bit);)*

            /// Every tag with its stable name, in bit order (the order of reports).
            pub const ALL: [(EventTags, &'static str); EventTags::COUNT] =
                [$((EventTags::$name, $text)),*];
        }
    };
}

event_tags! {
    /// A normal capture (not en passant).
    CAPTURE = 0, "capture";
    /// An en-passant capture.
    EP_CAPTURE = 1, "ep_capture";
    /// White castles king-side.
    CASTLE_K_WHITE = 2, "castle_k_white";
    /// White castles queen-side.
    CASTLE_Q_WHITE = 3, "castle_q_white";
    /// Black castles king-side.
    CASTLE_K_BLACK = 4, "castle_k_black";
    /// Black castles queen-side.
    CASTLE_Q_BLACK = 5, "castle_q_black";
    /// A promotion to a queen.
    PROMO_Q = 6, "promo_q";
    /// A promotion to a rook.
    UNDERPROMO_R = 7, "underpromo_r";
    /// A promotion to a bishop.
    UNDERPROMO_B = 8, "underpromo_b";
    /// A promotion to a knight.
    UNDERPROMO_N = 9, "underpromo_n";
    /// A pawn's two-square advance.
    DOUBLE_PUSH = 10, "double_push";
    /// A king move (castling included) that removes at least one castling right.
    RIGHTS_LOST_KING = 11, "rights_lost_king";
    /// A rook leaves a1/h1/a8/h8 while its right is still set (castling is a king move).
    RIGHTS_LOST_ROOK_MOVE = 12, "rights_lost_rook_move";
    /// A rook is captured on its home corner while its owner still holds that right.
    RIGHTS_LOST_ROOK_CAPTURED = 13, "rights_lost_rook_captured";
    /// The move gives check.
    CHECK = 14, "check";
    /// At least two pieces give check after the move.
    DOUBLE_CHECK = 15, "double_check";
    /// A piece that did not move gives check after it (S2 C.2's discovered check).
    DISCOVERED_CHECK = 16, "discovered_check";
    /// The move mates.
    MATE = 17, "mate";
    /// The move stalemates.
    STALEMATE = 18, "stalemate";
    /// `Key4` of the new state occurred before in the game (its 2nd, 3rd, … occurrence).
    REPETITION = 19, "repetition";
    /// The halfmove clock is 0 after the move (a capture or pawn move).
    HALFMOVE_RESET = 20, "halfmove_reset";
    /// The halfmove clock is 50 or more after the move.
    HALFMOVE_GE_50 = 21, "halfmove_ge_50";
    /// The fullmove number's low byte wraps to 0 (t = 510, 1022, …).
    FULLMOVE_CARRY = 22, "fullmove_carry";
    /// Reserved: the step lies beyond the 99th percentile of the training split's game lengths.
    /// It depends on the split, so [`GameTagger`] never sets it; the caller adds it.
    LONG_GAME = 23, "long_game";
    /// The new state holds a piece that arrived by promotion.
    PROMOTED_PIECE_PRESENT = 24, "promoted_piece_present";
}

impl EventTags {
    /// No tag.
    pub const NONE: EventTags = EventTags(0);
    /// Number of tags.
    pub const COUNT: usize = 25;

    /// The raw bits (bit `i` is the `i`-th tag of [`EventTags::ALL`]).
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether no tag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every tag of `other` is set.
    pub const fn contains(self, other: EventTags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any tag of `other` is set.
    pub const fn intersects(self, other: EventTags) -> bool {
        self.0 & other.0 != 0
    }

    /// Number of tags set.
    pub const fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The stable name of a single tag (`"ep_capture"`), or `None` when `self` is not exactly
    /// one tag.
    pub fn name(self) -> Option<&'static str> {
        Self::ALL
            .iter()
            .find(|&&(tag, _)| tag == self)
            .map(|&(_, name)| name)
    }

    /// The tag of a stable name.
    pub fn from_name(name: &str) -> Option<EventTags> {
        Self::ALL
            .iter()
            .find(|&&(_, text)| text == name)
            .map(|&(tag, _)| tag)
    }

    /// The single tags set, in the order of [`EventTags::ALL`].
    pub fn iter(self) -> impl Iterator<Item = EventTags> {
        Self::ALL
            .into_iter()
            .map(|(tag, _)| tag)
            .filter(move |&tag| self.contains(tag))
    }
}

impl BitOr for EventTags {
    type Output = EventTags;
    fn bitor(self, other: EventTags) -> EventTags {
        EventTags(self.0 | other.0)
    }
}

impl BitOrAssign for EventTags {
    fn bitor_assign(&mut self, other: EventTags) {
        self.0 |= other.0;
    }
}

/// The names of the tags set, joined by `|` (`none` for no tag).
impl fmt::Display for EventTags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        for (i, tag) in self.iter().enumerate() {
            if i > 0 {
                f.write_str("|")?;
            }
            f.write_str(tag.name().unwrap_or("?"))?;
        }
        Ok(())
    }
}

impl fmt::Debug for EventTags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EventTags({self})")
    }
}

/// A set of label indices (0..75), for the labels relevant to an event.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LabelSet(u128);

impl LabelSet {
    /// No label.
    pub const EMPTY: LabelSet = LabelSet(0);

    /// The set with label `index` added (indices of 75 and above are ignored).
    #[must_use]
    pub const fn with(self, index: usize) -> LabelSet {
        if index < STATE_LEN {
            LabelSet(self.0 | 1 << index)
        } else {
            self
        }
    }

    /// The labels of the squares of `squares`.
    pub fn of_squares(squares: Bitboard) -> LabelSet {
        squares
            .into_iter()
            .fold(LabelSet::EMPTY, |set, square| set.with(label_index(square)))
    }

    /// Both sets together.
    #[must_use]
    pub const fn union(self, other: LabelSet) -> LabelSet {
        LabelSet(self.0 | other.0)
    }

    /// Whether label `index` is in the set.
    pub const fn contains(self, index: usize) -> bool {
        index < STATE_LEN && self.0 >> index & 1 == 1
    }

    /// Number of labels.
    pub const fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The raw bits (bit `i` is label `i`).
    pub const fn bits(self) -> u128 {
        self.0
    }

    /// The label indices, ascending.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..STATE_LEN).filter(move |&index| self.contains(index))
    }

    /// Whether `a` and `b` agree on every label of the set (relevant-label accuracy).
    pub fn all_equal(self, a: &StateLabels, b: &StateLabels) -> bool {
        self.iter().all(|index| a[index] == b[index])
    }
}

impl fmt::Debug for LabelSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// The labels of the en-passant square.
const EP_LABELS: LabelSet = LabelSet::EMPTY.with(EP_FILE).with(EP_RANK);
/// The labels of the halfmove clock.
const HALFMOVE_LABELS: LabelSet = LabelSet::EMPTY.with(HALFMOVE_HI).with(HALFMOVE_HI + 1);
/// The labels of the fullmove number.
const FULLMOVE_LABELS: LabelSet = LabelSet::EMPTY.with(FULLMOVE_HI).with(FULLMOVE_HI + 1);
/// Label indices of the Key4 prefix: squares, side, castling, en passant.
const KEY4_LEN: usize = EP_RANK + 1;

/// The tags of step `t` of a game and what they make relevant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepTags {
    /// The step: the state after `t` plies, `t ≥ 1`.
    pub t: usize,
    /// The packed id of the move `m_t`.
    pub token: u16,
    /// The move `m_t` as played in `S_{t-1}`.
    pub played: Move,
    /// The tags of the step ([`EventTags::LONG_GAME`] never set).
    pub tags: EventTags,
    /// The footprint `F(m_t)`.
    pub footprint: Bitboard,
    /// The true state `S_t` under the tagger's en-passant convention.
    pub state: StateLabels,
    /// `R(tag)` per tag, by bit index, without the footprint.
    extra: [LabelSet; EventTags::COUNT],
}

impl StepTags {
    /// The labels of the footprint's squares.
    pub fn footprint_labels(&self) -> LabelSet {
        LabelSet::of_squares(self.footprint)
    }

    /// The relevant labels of E5 for `tag`: `F(m_t) ∪ R(tag)` (for a set of tags, the union over
    /// them). Defined whether or not the step carries the tag.
    pub fn relevant(&self, tag: EventTags) -> LabelSet {
        tag.iter().fold(self.footprint_labels(), |set, single| {
            set.union(self.extra[single.0.trailing_zeros() as usize])
        })
    }

    /// `R(tag)` alone, without the footprint (for a set of tags, the union over them); for
    /// [`EventTags::PROMOTED_PIECE_PRESENT`], the squares of `S_t` holding a piece that arrived
    /// by promotion.
    pub fn extra(&self, tag: EventTags) -> LabelSet {
        tag.iter().fold(LabelSet::EMPTY, |set, single| {
            set.union(self.extra[single.0.trailing_zeros() as usize])
        })
    }
}

/// Why tagging a game stopped.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TagError {
    /// The first token is not START.
    #[error("the game's tokens do not start with START (first token: {found:?})")]
    MissingStart {
        /// The first token, if any.
        found: Option<u16>,
    },
    /// A token is not a legal move in the position it is played in.
    #[error("step {step}: token {token} ({uci}) is not a legal move after step {}", step - 1)]
    IllegalMove {
        /// The step the token would have made (1-based ply).
        step: usize,
        /// The token.
        token: u16,
        /// The token in UCI, or `not a move`.
        uci: String,
    },
}

/// Replays a game's tokens (START, then packed move ids, as in the shards) and yields, for every
/// step `t ≥ 1`, its [`StepTags`]. It tracks `Key4` occurrences (for `repetition`, under the
/// given en-passant convention, the start position included) and the pieces that arrived by
/// promotion. A token that is not a legal move ends the iteration with a [`TagError`] naming the
/// step.
#[derive(Debug, Clone)]
pub struct GameTagger<'a> {
    tokens: &'a [u16],
    ep: EpConvention,
    position: Chess,
    labels: StateLabels,
    seen: HashMap<[u8; KEY4_LEN], u32>,
    promoted: Bitboard,
    t: usize,
    failed: bool,
}

impl<'a> GameTagger<'a> {
    /// A tagger for the game `tokens` with state labels under `ep`.
    pub fn new(tokens: &'a [u16], ep: EpConvention) -> GameTagger<'a> {
        let position = Chess::default();
        let mut labels = [0; STATE_LEN];
        encode_state_into(&position, ep, &mut labels);
        let mut seen = HashMap::with_capacity(tokens.len());
        seen.insert(key4(&labels), 1);
        GameTagger {
            tokens,
            ep,
            position,
            labels,
            seen,
            promoted: Bitboard::EMPTY,
            t: 0,
            failed: false,
        }
    }

    /// The position after the last step yielded.
    pub fn position(&self) -> &Chess {
        &self.position
    }

    /// The squares of the pieces that arrived by promotion, after the last step yielded.
    pub fn promoted(&self) -> Bitboard {
        self.promoted
    }

    /// Plays step `t` (the token `self.tokens[t]`).
    fn step(&mut self, t: usize, token: u16) -> Result<StepTags, TagError> {
        let Some(m) = move_of_token(&self.position, token) else {
            let mut uci = String::new();
            if !write_uci(token, &mut uci) {
                uci.push_str("not a move");
            }
            return Err(TagError::IllegalMove {
                step: t,
                token,
                uci,
            });
        };
        let mut extra = [LabelSet::EMPTY; EventTags::COUNT];
        let mut tags = EventTags::NONE;
        let mut mark = |tags: &mut EventTags, event: EventTags, relevant: LabelSet| {
            *tags |= event;
            extra[event.0.trailing_zeros() as usize] = relevant;
        };
        move_tags(&self.labels, self.position.turn(), &m, &mut tags, &mut mark);
        self.track_promotions(&m);

        let before = self.labels;
        self.position.play_unchecked(m);
        encode_state_after_move(&self.position, &m, self.ep, &mut self.labels);
        let kind = check_kind(&self.position, &m);
        let none = LabelSet::EMPTY;
        let no_moves = self.position.legal_moves().is_empty();
        for (holds, event) in [
            (kind.check, EventTags::CHECK),
            (kind.double, EventTags::DOUBLE_CHECK),
            (kind.discovered, EventTags::DISCOVERED_CHECK),
            (kind.check && no_moves, EventTags::MATE),
            (!kind.check && no_moves, EventTags::STALEMATE),
        ] {
            if holds {
                mark(&mut tags, event, none);
            }
        }
        let count = self.seen.entry(key4(&self.labels)).or_insert(0);
        *count = count.saturating_add(1);
        if *count > 1 {
            mark(&mut tags, EventTags::REPETITION, none);
        }
        let halfmove = u16::from_be_bytes([self.labels[HALFMOVE_HI], self.labels[HALFMOVE_HI + 1]]);
        if halfmove == 0 {
            mark(&mut tags, EventTags::HALFMOVE_RESET, HALFMOVE_LABELS);
        }
        if halfmove >= 50 {
            mark(&mut tags, EventTags::HALFMOVE_GE_50, HALFMOVE_LABELS);
        }
        if self.labels[FULLMOVE_HI + 1] == 0 && self.labels[FULLMOVE_HI] != before[FULLMOVE_HI] {
            mark(&mut tags, EventTags::FULLMOVE_CARRY, FULLMOVE_LABELS);
        }
        if self.promoted.any() {
            let squares = LabelSet::of_squares(self.promoted);
            mark(&mut tags, EventTags::PROMOTED_PIECE_PRESENT, squares);
        }
        Ok(StepTags {
            t,
            token,
            played: m,
            tags,
            footprint: footprint(&m),
            state: self.labels,
            extra,
        })
    }

    /// Moves the promoted-piece squares along with `m` (before it is played).
    fn track_promotions(&mut self, m: &Move) {
        match *m {
            Move::Normal {
                from,
                to,
                promotion,
                ..
            } => {
                // A capture on `to` removes whatever stood there.
                self.promoted.discard(to);
                if self.promoted.remove(from) || promotion.is_some() {
                    self.promoted.add(to);
                }
            }
            Move::Castle { king, rook } => {
                if self.promoted.remove(rook) {
                    let side = if rook < king {
                        CastlingSide::QueenSide
                    } else {
                        CastlingSide::KingSide
                    };
                    self.promoted
                        .add(Square::from_coords(side.rook_to_file(), rook.rank()));
                }
            }
            // The capturing and the captured pawn are never promoted pieces.
            Move::EnPassant { .. } | Move::Put { .. } => {}
        }
    }
}

impl Iterator for GameTagger<'_> {
    type Item = Result<StepTags, TagError>;

    fn next(&mut self) -> Option<Result<StepTags, TagError>> {
        if self.failed {
            return None;
        }
        if self.t == 0 && self.tokens.first() != Some(&START) {
            self.failed = true;
            return Some(Err(TagError::MissingStart {
                found: self.tokens.first().copied(),
            }));
        }
        let t = self.t + 1;
        let &token = self.tokens.get(t)?;
        let result = self.step(t, token);
        match result {
            Ok(_) => self.t = t,
            Err(_) => self.failed = true,
        }
        Some(result)
    }
}

/// The `Key4` of a state: its labels up to the en-passant rank.
fn key4(labels: &StateLabels) -> [u8; KEY4_LEN] {
    let mut key = [0; KEY4_LEN];
    key.copy_from_slice(&labels[..KEY4_LEN]);
    key
}

/// The castling labels (as a set) of `color`'s rights that are set in `labels`.
fn rights_held(labels: &StateLabels, color: Color) -> LabelSet {
    let first = CASTLING_WHITE_KING_SIDE + if color.is_white() { 0 } else { 2 };
    (first..first + 2)
        .filter(|&index| labels[index] == 1)
        .fold(LabelSet::EMPTY, LabelSet::with)
}

/// The castling label of a corner when its right is set in `labels` and belongs to `owner`.
fn held_corner_right(labels: &StateLabels, corner: Square, owner: Color) -> Option<usize> {
    let label = castling_label_of_corner(corner)?;
    let corner_owner = if corner.rank() == Rank::First {
        Color::White
    } else {
        Color::Black
    };
    (labels[label] == 1 && corner_owner == owner).then_some(label)
}

/// The tags that follow from the move alone and the state before it.
fn move_tags(
    before: &StateLabels,
    mover: Color,
    m: &Move,
    tags: &mut EventTags,
    mark: &mut impl FnMut(&mut EventTags, EventTags, LabelSet),
) {
    match *m {
        Move::Normal {
            role,
            from,
            capture,
            to,
            promotion,
        } => {
            if let Some(captured) = capture {
                mark(tags, EventTags::CAPTURE, LabelSet::EMPTY);
                if captured == Role::Rook
                    && let Some(label) = held_corner_right(before, to, !mover)
                {
                    let lost = LabelSet::EMPTY.with(label);
                    mark(tags, EventTags::RIGHTS_LOST_ROOK_CAPTURED, lost);
                }
            }
            let promoted = match promotion {
                Some(Role::Queen) => EventTags::PROMO_Q,
                Some(Role::Rook) => EventTags::UNDERPROMO_R,
                Some(Role::Bishop) => EventTags::UNDERPROMO_B,
                Some(Role::Knight) => EventTags::UNDERPROMO_N,
                _ => EventTags::NONE,
            };
            if !promoted.is_empty() {
                mark(tags, promoted, LabelSet::EMPTY);
            }
            if role == Role::Pawn && from.rank().distance(to.rank()) == 2 {
                mark(tags, EventTags::DOUBLE_PUSH, EP_LABELS);
            }
            let held = rights_held(before, mover);
            if role == Role::King && !held.is_empty() {
                mark(tags, EventTags::RIGHTS_LOST_KING, held);
            }
            if role == Role::Rook
                && let Some(label) = held_corner_right(before, from, mover)
            {
                let lost = LabelSet::EMPTY.with(label);
                mark(tags, EventTags::RIGHTS_LOST_ROOK_MOVE, lost);
            }
        }
        Move::EnPassant { .. } => mark(tags, EventTags::EP_CAPTURE, EP_LABELS),
        Move::Castle { king, rook } => {
            let event = match (mover, rook < king) {
                (Color::White, false) => EventTags::CASTLE_K_WHITE,
                (Color::White, true) => EventTags::CASTLE_Q_WHITE,
                (Color::Black, false) => EventTags::CASTLE_K_BLACK,
                (Color::Black, true) => EventTags::CASTLE_Q_BLACK,
            };
            let held = rights_held(before, mover);
            let first = CASTLING_WHITE_KING_SIDE + if mover.is_white() { 0 } else { 2 };
            let rights = LabelSet::EMPTY.with(first).with(first + 1);
            // The rook's squares are in the footprint already.
            mark(tags, event, rights);
            if !held.is_empty() {
                mark(tags, EventTags::RIGHTS_LOST_KING, held);
            }
        }
        Move::Put { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_names_are_stable_and_in_bit_order() {
        assert_eq!(EventTags::ALL.len(), EventTags::COUNT);
        for (i, (tag, name)) in EventTags::ALL.into_iter().enumerate() {
            assert_eq!(tag.bits(), 1 << i, "{name}");
            assert_eq!(tag.name(), Some(name));
            assert_eq!(EventTags::from_name(name), Some(tag));
        }
        assert_eq!(EventTags::LONG_GAME.name(), Some("long_game"));
        let pair = EventTags::CHECK | EventTags::MATE;
        assert_eq!(pair.to_string(), "check|mate");
        assert_eq!(pair.name(), None);
        assert_eq!(pair.len(), 2);
        assert_eq!(EventTags::NONE.to_string(), "none");
    }

    #[test]
    fn label_sets() {
        let set = LabelSet::EMPTY.with(3).with(74).with(75).with(500);
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![3, 74]);
        assert!(set.contains(74) && !set.contains(75) && !set.contains(4));
        assert_eq!(
            LabelSet::of_squares(Bitboard::from_square(Square::A8).with(Square::H1)),
            LabelSet::EMPTY.with(0).with(63)
        );
        let mut a = [0u8; STATE_LEN];
        let b = a;
        a[74] = 1;
        assert!(!set.all_equal(&a, &b));
        assert!(LabelSet::EMPTY.with(3).all_equal(&a, &b));
    }

    #[test]
    fn a_bad_start_and_an_illegal_token_end_tagging_with_the_step() {
        let mut tagger = GameTagger::new(&[1, 2], EpConvention::Reference);
        assert_eq!(
            tagger.next(),
            Some(Err(TagError::MissingStart { found: Some(1) }))
        );
        assert_eq!(tagger.next(), None);

        let e2e4 = (12 * 64 + 28) * 5;
        let tokens = [START, e2e4, e2e4];
        let steps: Vec<_> = GameTagger::new(&tokens, EpConvention::Reference).collect();
        assert_eq!(steps.len(), 2);
        assert!(steps[0].as_ref().is_ok_and(|step| step.t == 1));
        let err = steps[1].clone().unwrap_err();
        assert_eq!(
            err,
            TagError::IllegalMove {
                step: 2,
                token: e2e4,
                uci: "e2e4".into()
            }
        );
        assert_eq!(
            err.to_string(),
            format!("step 2: token {e2e4} (e2e4) is not a legal move after step 1")
        );
        let tokens = [START, crate::encode::PAD];
        let step = GameTagger::new(&tokens, EpConvention::Reference).next();
        assert!(matches!(
            step,
            Some(Err(TagError::IllegalMove { step: 1, .. }))
        ));
        assert_eq!(
            GameTagger::new(&[START], EpConvention::Reference).next(),
            None
        );
    }
}
