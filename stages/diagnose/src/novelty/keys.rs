//! The three keys of a step (spec E7): what identifies its prefix, its position and its state.
//!
//! * **PrefixKey(t)**, of the tokens `x_0..x_t`, is computed incrementally: starting from the
//!   128-bit value 0, each token `x` replaces the running value `h` by
//!   `xxh3_128(h as 16 little-endian bytes ‖ x as 2 little-endian bytes)`. Step t's key is the
//!   value after `x_t`.
//! * **PositionKey(t)** identifies the position after t plies by Key4 (placement, side to move,
//!   castling rights, en-passant square only when an en-passant capture is legal): its low 64
//!   bits are shakmaty's `zobrist_hash::<Zobrist64>(EnPassantMode::Legal)` (Polyglot's key),
//!   its high 64 bits `xxh3_64` of the same four fields written as bytes (the white pieces',
//!   then each role's bitboard, the side, the four castling rights, the legal en-passant
//!   square), a second hash independent of the Zobrist tables. Move order and the counters do
//!   not enter it.
//! * **StateKey(t)** is `xxh3_128` of the 75 state labels (counters and the data's en-passant
//!   convention included).
//!
//! **Collision odds.** Under the usual model of a non-cryptographic hash as a random function
//! (an assumption about xxh3 and the Zobrist tables, not a proof), two distinct prefixes or
//! states share a key with probability 2⁻¹²⁸, and two distinct positions need both 64-bit
//! halves to agree, also about 2⁻¹²⁸. A scan that looks up M training keys in a set of N test
//! keys then marks a step falsely seen with expected count at most N·M·2⁻¹²⁸: for N = 10⁷ test
//! keys and M = 10⁹ training steps, about 3·10⁻²³. The keys are not secret, so a crafted data
//! set could collide them; chess games do not.

use std::hash::{BuildHasherDefault, Hash, Hasher};

use cwm_chess::encode::{START, STATE_LEN, unpack_move};
use cwm_stage_data::TokenizedGame;
use shakmaty::uci::UciMove;
use shakmaty::zobrist::Zobrist64;
use shakmaty::{CastlingSide, Chess, Color, EnPassantMode, Position, Role};
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

/// A 128-bit key, held as two 64-bit halves (so a map entry needs no 16-byte alignment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    /// The high half.
    pub hi: u64,
    /// The low half (Zobrist64 for a position key).
    pub lo: u64,
}

impl Key {
    /// The key of a 128-bit value.
    pub const fn from_u128(value: u128) -> Key {
        Key {
            hi: (value >> 64) as u64,
            lo: value as u64,
        }
    }

    /// The key as one 128-bit value.
    pub const fn to_u128(self) -> u128 {
        ((self.hi as u128) << 64) | self.lo as u128
    }
}

impl Hash for Key {
    /// Keys are already uniformly spread: a map hashes the low half only ([`KeyHasher`]).
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.lo);
    }
}

/// The hasher of maps keyed by [`Key`]: the low half, taken as is (keys are hash values).
#[derive(Debug, Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only reached by types other than `Key`; fold the bytes so the map stays correct.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// Builds [`KeyHasher`]s.
pub type KeyBuildHasher = BuildHasherDefault<KeyHasher>;

/// The running PrefixKey of a token sequence.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrefixHasher {
    state: u128,
}

impl PrefixHasher {
    /// The hasher of the empty sequence.
    pub fn new() -> PrefixHasher {
        PrefixHasher::default()
    }

    /// Appends `token` and returns the key of the sequence so far.
    pub fn push(&mut self, token: u16) -> Key {
        let mut bytes = [0u8; 18];
        bytes[..16].copy_from_slice(&self.state.to_le_bytes());
        bytes[16..].copy_from_slice(&token.to_le_bytes());
        self.state = xxh3_128(&bytes);
        Key::from_u128(self.state)
    }
}

/// The PrefixKey of every prefix of `tokens`: element t is the key of `tokens[..=t]`.
pub fn prefix_keys(tokens: &[u16]) -> Vec<Key> {
    let mut hasher = PrefixHasher::new();
    tokens.iter().map(|&token| hasher.push(token)).collect()
}

/// The PositionKey of `position` (see the module documentation).
pub fn position_key(position: &Chess) -> Key {
    let zobrist: Zobrist64 = position.zobrist_hash(EnPassantMode::Legal);
    let board = position.board();
    let mut bytes = [0u8; 7 * 8 + 3];
    bytes[..8].copy_from_slice(&board.by_color(Color::White).0.to_le_bytes());
    for (i, role) in Role::ALL.into_iter().enumerate() {
        let at = 8 + 8 * i;
        bytes[at..at + 8].copy_from_slice(&board.by_role(role).0.to_le_bytes());
    }
    bytes[56] = u8::from(position.turn() == Color::White);
    let castles = position.castles();
    let mut rights = 0u8;
    for (bit, (color, side)) in [
        (Color::White, CastlingSide::KingSide),
        (Color::White, CastlingSide::QueenSide),
        (Color::Black, CastlingSide::KingSide),
        (Color::Black, CastlingSide::QueenSide),
    ]
    .into_iter()
    .enumerate()
    {
        rights |= u8::from(castles.has(color, side)) << bit;
    }
    bytes[57] = rights;
    bytes[58] = position
        .ep_square(EnPassantMode::Legal)
        .map_or(64, |square| square as u8);
    Key {
        hi: xxh3_64(&bytes),
        lo: zobrist.0,
    }
}

/// The StateKey of 75 state labels.
pub fn state_key(labels: &[u8]) -> Key {
    Key::from_u128(xxh3_128(labels))
}

/// The keys of one step of a game.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepKeys {
    /// PrefixKey.
    pub prefix: Key,
    /// PositionKey, `None` from the step of a token the replay could not play on.
    pub position: Option<Key>,
    /// StateKey.
    pub state: Key,
}

/// Where a game's replay stopped: the first token that is not `START` (at t = 0) or not a legal
/// move in the replayed position (at t > 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadStep {
    /// The step of the token.
    pub t: u32,
    /// The token.
    pub token: u16,
}

/// The keys of a game's steps, t = 0, 1, ..., replaying its tokens with shakmaty. A token
/// that cannot be played ends the position keys (they are `None` from its step on, and
/// [`GameKeys::bad`] says where); prefix and state keys go on, as they need no replay.
#[derive(Debug, Clone)]
pub struct GameKeys<'a> {
    moves: &'a [u16],
    states: &'a [u8],
    t: usize,
    prefix: PrefixHasher,
    position: Option<Chess>,
    bad: Option<BadStep>,
}

impl<'a> GameKeys<'a> {
    /// The steps of `game` (as many as it has whole 75-label states for its tokens).
    pub fn new(game: &'a TokenizedGame) -> GameKeys<'a> {
        GameKeys::of(&game.moves, &game.states)
    }

    /// The steps of the tokens `moves` (`START` first) with their labels `states`
    /// (`75 · moves.len()` bytes).
    pub fn of(moves: &'a [u16], states: &'a [u8]) -> GameKeys<'a> {
        GameKeys {
            moves,
            states,
            t: 0,
            prefix: PrefixHasher::new(),
            position: Some(Chess::default()),
            bad: None,
        }
    }

    /// The token the replay stopped at, once the walk has reached it.
    pub fn bad(&self) -> Option<BadStep> {
        self.bad
    }
}

/// Plays the packed move `token` on `position`, or says it cannot.
fn play(position: &mut Chess, token: u16) -> Result<(), ()> {
    let (from, to, promotion) = unpack_move(token).ok_or(())?;
    let m = UciMove::Normal {
        from,
        to,
        promotion,
    }
    .to_move(position)
    .map_err(|_| ())?;
    position.play_unchecked(m);
    Ok(())
}

impl Iterator for GameKeys<'_> {
    type Item = StepKeys;

    fn next(&mut self) -> Option<StepKeys> {
        let t = self.t;
        let token = *self.moves.get(t)?;
        let labels = self.states.get(t * STATE_LEN..(t + 1) * STATE_LEN)?;
        let playable = match self.position.as_mut() {
            None => false,
            Some(_) if t == 0 => token == START,
            Some(position) => play(position, token).is_ok(),
        };
        if !playable && self.position.is_some() {
            self.position = None;
            self.bad = Some(BadStep {
                t: u32::try_from(t).unwrap_or(u32::MAX),
                token,
            });
        }
        self.t += 1;
        Some(StepKeys {
            prefix: self.prefix.push(token),
            position: self.position.as_ref().map(position_key),
            state: state_key(labels),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cwm_chess::encode::{EpConvention, encode_state, pack_move};
    use shakmaty::CastlingMode;
    use shakmaty::fen::Fen;

    fn play_uci(position: &mut Chess, uci: &str) -> u16 {
        let m = uci
            .parse::<UciMove>()
            .unwrap()
            .to_move(position)
            .unwrap_or_else(|e| panic!("{uci}: {e}"));
        position.play_unchecked(m);
        pack_move(&m)
    }

    fn after(ucis: &[&str]) -> Chess {
        let mut position = Chess::default();
        for uci in ucis {
            play_uci(&mut position, uci);
        }
        position
    }

    fn from_fen(fen: &str) -> Chess {
        fen.parse::<Fen>()
            .unwrap()
            .into_position(CastlingMode::Standard)
            .unwrap()
    }

    #[test]
    fn the_low_half_of_a_position_key_is_polyglot_zobrist() {
        let start = Chess::default();
        assert_eq!(position_key(&start).lo, 0x463b_9618_1691_fc9c);
        let position = after(&["e2e4", "d7d5", "e4e5", "f7f5"]);
        let zobrist: Zobrist64 = position.zobrist_hash(EnPassantMode::Legal);
        assert_eq!(position_key(&position).lo, zobrist.0);
    }

    #[test]
    fn a_position_key_ignores_move_order_and_counters() {
        let one = after(&["g1f3", "g8f6", "e2e4", "e7e5"]);
        let other = after(&["e2e4", "e7e5", "g1f3", "g8f6"]);
        assert_eq!(position_key(&one), position_key(&other));
        // The same placement, side, rights and ep square with other counters.
        let counters =
            from_fen("rnbqkb1r/pppp1ppp/5n2/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 7 30");
        assert_eq!(position_key(&counters), position_key(&one));
        // Knights out and back: the start position again, with other counters.
        assert_eq!(
            position_key(&after(&["g1f3", "g8f6", "f3g1", "f6g8"])),
            position_key(&Chess::default())
        );
    }

    #[test]
    fn a_position_key_ignores_an_ep_square_no_pawn_can_take_on() {
        // 1. e4: the ep square e3 is set, but no black pawn can capture on it.
        let pushed = after(&["e2e4"]);
        assert!(pushed.ep_square(EnPassantMode::Always).is_some());
        let without = from_fen("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1");
        assert_eq!(position_key(&pushed), position_key(&without));
        // A capturable one counts: 1. e4 d5 2. e5 f5 leaves f6 takeable by exf6.
        let capturable = after(&["e2e4", "d7d5", "e4e5", "f7f5"]);
        assert!(capturable.ep_square(EnPassantMode::Legal).is_some());
        let no_ep = from_fen("rnbqkbnr/ppp1p1pp/8/3pPp2/8/8/PPPP1PPP/RNBQKBNR w KQkq - 0 3");
        assert_ne!(position_key(&capturable), position_key(&no_ep));
        let with_ep = from_fen("rnbqkbnr/ppp1p1pp/8/3pPp2/8/8/PPPP1PPP/RNBQKBNR w KQkq f6 0 3");
        assert_eq!(position_key(&capturable), position_key(&with_ep));
    }

    #[test]
    fn a_position_key_tells_castling_rights_and_the_side_apart() {
        let all = from_fen("r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1");
        let keys: Vec<Key> = [
            "r3k2r/8/8/8/8/8/8/R3K2R w Qkq - 0 1",
            "r3k2r/8/8/8/8/8/8/R3K2R w Kkq - 0 1",
            "r3k2r/8/8/8/8/8/8/R3K2R w KQq - 0 1",
            "r3k2r/8/8/8/8/8/8/R3K2R w KQk - 0 1",
            "r3k2r/8/8/8/8/8/8/R3K2R w - - 0 1",
            "r3k2r/8/8/8/8/8/8/R3K2R b KQkq - 0 1",
        ]
        .iter()
        .map(|fen| position_key(&from_fen(fen)))
        .collect();
        for (i, key) in keys.iter().enumerate() {
            assert_ne!(*key, position_key(&all), "{i}");
            for other in &keys[..i] {
                assert_ne!(key, other);
            }
        }
        // Each half on its own tells them apart too.
        let stripped = position_key(&from_fen("r3k2r/8/8/8/8/8/8/R3K2R w - - 0 1"));
        assert_ne!(stripped.lo, position_key(&all).lo);
        assert_ne!(stripped.hi, position_key(&all).hi);
    }

    #[test]
    fn a_state_key_sees_every_label_including_the_counters() {
        let start = encode_state(&Chess::default(), EpConvention::Reference);
        let mut moved = start;
        moved[74] = 2; // fullmove number 2, nothing else changed
        assert_ne!(state_key(&start), state_key(&moved));
        let mut halfmove = start;
        halfmove[72] = 1;
        assert_ne!(state_key(&start), state_key(&halfmove));
        assert_ne!(state_key(&moved), state_key(&halfmove));
    }

    #[test]
    fn prefix_keys_are_incremental_and_order_sensitive() {
        let keys = prefix_keys(&[START, 7, 9]);
        assert_eq!(keys.len(), 3);
        assert_eq!(prefix_keys(&[START, 7]), keys[..2]);
        assert_ne!(prefix_keys(&[START, 9, 7])[2], keys[2]);
        assert_ne!(prefix_keys(&[START, 7])[1], prefix_keys(&[7])[0]);
        let mut distinct = keys.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 3);
    }

    fn tokens_and_states(ucis: &[&str]) -> (Vec<u16>, Vec<u8>) {
        let mut position = Chess::default();
        let mut moves = vec![START];
        let mut states = encode_state(&position, EpConvention::Reference).to_vec();
        for uci in ucis {
            moves.push(play_uci(&mut position, uci));
            states.extend_from_slice(&encode_state(&position, EpConvention::Reference));
        }
        (moves, states)
    }

    #[test]
    fn a_game_walk_gives_the_keys_of_every_step() {
        let (moves, states) = tokens_and_states(&["e2e4", "e7e5", "g1f3"]);
        let walked: Vec<StepKeys> = GameKeys::of(&moves, &states).collect();
        assert_eq!(walked.len(), 4);
        let prefixes = prefix_keys(&moves);
        let mut position = Chess::default();
        for (t, keys) in walked.iter().enumerate() {
            if t > 0 {
                play(&mut position, moves[t]).unwrap();
            }
            assert_eq!(keys.prefix, prefixes[t]);
            assert_eq!(keys.position, Some(position_key(&position)));
            assert_eq!(keys.state, state_key(&states[75 * t..75 * t + 75]));
        }
    }

    #[test]
    fn an_illegal_token_ends_the_position_keys_only() {
        let (mut moves, states) = tokens_and_states(&["e2e4", "e7e5", "g1f3"]);
        moves[2] = moves[1]; // e2e4 again, for Black: illegal
        let mut walk = GameKeys::of(&moves, &states);
        let walked: Vec<StepKeys> = walk.by_ref().collect();
        assert_eq!(walked.len(), 4);
        assert!(walked[1].position.is_some());
        assert!(walked[2].position.is_none() && walked[3].position.is_none());
        assert_eq!(
            walk.bad(),
            Some(BadStep {
                t: 2,
                token: moves[1]
            })
        );
        assert_eq!(walked[3].prefix, prefix_keys(&moves)[3]);
        assert_eq!(walked[3].state, state_key(&states[225..300]));

        let mut no_start = moves.clone();
        no_start[0] = 5;
        let mut walk = GameKeys::of(&no_start, &states);
        assert!(walk.by_ref().all(|k| k.position.is_none()));
        assert_eq!(walk.bad(), Some(BadStep { t: 0, token: 5 }));

        let mut pad = moves;
        pad[1] = cwm_chess::encode::PAD;
        let mut walk = GameKeys::of(&pad, &states);
        assert_eq!(walk.by_ref().count(), 4);
        assert_eq!(walk.bad().map(|b| b.t), Some(1));
    }

    #[test]
    fn a_walk_stops_where_the_labels_stop() {
        let (moves, states) = tokens_and_states(&["e2e4", "e7e5"]);
        assert_eq!(GameKeys::of(&moves, &states[..150]).count(), 2);
    }
}
