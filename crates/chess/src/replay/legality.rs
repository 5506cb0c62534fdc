//! The legality step: replaying SANs with shakmaty into move ids and state labels.

use shakmaty::{
    CastlingMode, Chess, Move, Position, Role, Square,
    fen::Fen,
    san::{San, SanError},
    uci::UciMove,
};

use super::{GameHeaders, RawGame, RejectReason, Rejection};
use crate::encode::{
    EpConvention, START, StateLabels, encode_state_after_move, encode_state_into, pack_move,
};

/// Settings of the legality step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayConfig {
    /// Games need at least `2 * min_fullmoves` plies (default 10, i.e. 20 plies).
    pub min_fullmoves: usize,
    /// Which en-passant square the state labels record.
    pub ep_convention: EpConvention,
    /// Whether to compute the state labels (default `true`). When `false`, the replay still
    /// checks every move and packs the move ids, but [`ReplayedGame::states`] stays empty: for
    /// callers that store moves only (the labels are a large share of the replay's cost).
    pub states: bool,
}

impl Default for ReplayConfig {
    fn default() -> ReplayConfig {
        ReplayConfig {
            min_fullmoves: 10,
            ep_convention: EpConvention::Reference,
            states: true,
        }
    }
}

impl ReplayConfig {
    /// The minimum number of plies, `2 * min_fullmoves`.
    pub const fn min_plies(&self) -> usize {
        self.min_fullmoves.saturating_mul(2)
    }
}

/// Moves and states of a replayed game in the reference layout: `moves[0]` is [`START`] and
/// `moves[t]` the packed id of ply `t`; `states[t]` is the position after `t` plies, so
/// `states[0]` is the start. Both have `plies + 1` entries, except after a moves-only replay
/// ([`replay_moves_into`], [`ReplayConfig::states`] `false`), which leaves `states` empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayedGame {
    /// Packed move ids, [`START`] first.
    pub moves: Vec<u16>,
    /// State labels, start position first.
    pub states: Vec<StateLabels>,
}

impl ReplayedGame {
    /// Number of plies.
    pub fn plies(&self) -> usize {
        self.moves.len().saturating_sub(1)
    }

    /// The states as one flat slice of `steps * 75` labels.
    pub fn flat_states(&self) -> &[u8] {
        self.states.as_flattened()
    }
}

/// Replays `sans` from `start` into `out` (cleared first, its allocations reused) and returns
/// the final position.
///
/// # Errors
///
/// [`RejectReason::IllegalMove`] or [`RejectReason::AmbiguousMove`] with the 1-based ply; `out`
/// then holds the plies before the bad one.
pub fn replay_sans_into(
    start: Chess,
    sans: &[San],
    ep_convention: EpConvention,
    out: &mut ReplayedGame,
) -> Result<Chess, RejectReason> {
    replay_into(start, sans, Some(ep_convention), out)
}

/// Like [`replay_sans_into`], but only checks the moves and packs their ids: `out.states` is
/// left empty. Same errors, same moves.
///
/// # Errors
///
/// [`RejectReason::IllegalMove`] or [`RejectReason::AmbiguousMove`] with the 1-based ply.
pub fn replay_moves_into(
    start: Chess,
    sans: &[San],
    out: &mut ReplayedGame,
) -> Result<Chess, RejectReason> {
    replay_into(start, sans, None, out)
}

/// The replay behind [`replay_sans_into`] (`states` = the convention) and
/// [`replay_moves_into`] (`states` = `None`: moves only).
fn replay_into(
    start: Chess,
    sans: &[San],
    states: Option<EpConvention>,
    out: &mut ReplayedGame,
) -> Result<Chess, RejectReason> {
    out.moves.clear();
    out.states.clear();
    out.moves.reserve(sans.len() + 1);

    let mut position = start;
    out.moves.push(START);
    let mut labels = [0u8; crate::encode::STATE_LEN];
    if let Some(ep_convention) = states {
        out.states.reserve(sans.len() + 1);
        encode_state_into(&position, ep_convention, &mut labels);
        out.states.push(labels);
    }

    for (ply_index, san) in sans.iter().enumerate() {
        let m = match resolve_san(*san, &position) {
            Ok(m) => m,
            Err(err) => {
                let ply = ply_index + 1;
                let san = san.to_string();
                return Err(match err {
                    SanError::AmbiguousSan => RejectReason::AmbiguousMove { ply, san },
                    SanError::IllegalSan => RejectReason::IllegalMove { ply, san },
                });
            }
        };
        // `to_move` only returns legal moves of a `Chess` position: no drops, no promotion to a
        // king, so `pack_move` cannot panic.
        out.moves.push(pack_move(&m));
        position.play_unchecked(m);
        if let Some(ep_convention) = states {
            encode_state_after_move(&position, &m, ep_convention, &mut labels);
            out.states.push(labels);
        }
    }
    Ok(position)
}

/// The legal move a SAN stands for, resolved as python-chess's `Board.parse_san` resolves it
/// where shakmaty is stricter:
///
/// * the capture sign `x` is not checked: `Be2c4` plays `Bxc4` and `Nxf3` plays `Nf3` (a
///   capture and a quiet move never share a target square, so this adds no ambiguity);
/// * a move with both origin file and rank but no piece letter (`g1f3`, `e1g1`) is the legal
///   move between those squares, whatever the piece, castling included.
fn resolve_san(san: San, position: &Chess) -> Result<Move, SanError> {
    let San::Normal {
        role,
        file,
        rank,
        capture,
        to,
        promotion,
    } = san
    else {
        return san.to_move(position);
    };
    match san.to_move(position) {
        Err(SanError::IllegalSan) => {}
        resolved => return resolved,
    }
    if let (Role::Pawn, Some(file), Some(rank)) = (role, file, rank) {
        let uci = UciMove::Normal {
            from: Square::from_coords(file, rank),
            to,
            promotion,
        };
        if let Ok(m) = uci.to_move(position) {
            return Ok(m);
        }
    }
    San::Normal {
        role,
        file,
        rank,
        capture: !capture,
        to,
        promotion,
    }
    .to_move(position)
}

/// Replays `sans` from `start` into a new [`ReplayedGame`] (see [`replay_sans_into`]).
///
/// # Errors
///
/// [`RejectReason::IllegalMove`] or [`RejectReason::AmbiguousMove`] with the 1-based ply.
pub fn replay_sans(
    start: Chess,
    sans: &[San],
    ep_convention: EpConvention,
) -> Result<ReplayedGame, RejectReason> {
    let mut out = ReplayedGame::default();
    replay_sans_into(start, sans, ep_convention, &mut out)?;
    Ok(out)
}

/// Why a FEN header cannot start a replay.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenStartError {
    /// The FEN does not parse.
    #[error("bad FEN {fen:?}: {reason}")]
    Syntax {
        /// The FEN as given.
        fen: String,
        /// shakmaty's message.
        reason: String,
    },
    /// The FEN parses but is not a legal position.
    #[error("illegal position in FEN {fen:?}: {reason}")]
    Position {
        /// The FEN as given.
        fen: String,
        /// shakmaty's message.
        reason: String,
    },
}

/// The start position of a game with a FEN header, for replays from a set-up position (the
/// parse stage rejects those games, but oracles and checks replay them). Castling rights that
/// the position contradicts are dropped, as python-chess drops them; `mode` is
/// [`CastlingMode::Chess960`] for Chess960 games.
///
/// # Errors
///
/// [`FenStartError`] when the FEN does not parse or is not a legal position.
pub fn position_from_fen(fen: &str, mode: CastlingMode) -> Result<Chess, FenStartError> {
    let parsed = Fen::from_ascii(fen.trim().as_bytes()).map_err(|err| FenStartError::Syntax {
        fen: fen.to_owned(),
        reason: err.to_string(),
    })?;
    let position_error = |reason: String| FenStartError::Position {
        fen: fen.to_owned(),
        reason,
    };
    match parsed.into_position::<Chess>(mode) {
        Ok(position) => Ok(position),
        Err(err) => err
            .ignore_invalid_castling_rights()
            .map_err(|err| position_error(err.to_string())),
    }
}

/// A game that passed every filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptGame {
    /// 0-based index of the game in its stream.
    pub index: u64,
    /// Byte offset of the game in its stream.
    pub offset: u64,
    /// Its headers; `site` is always present.
    pub headers: GameHeaders,
    /// Its moves and states.
    pub replay: ReplayedGame,
}

/// Screens a game ([`RawGame::screen`]) and replays it from the standard start, with its
/// state labels unless `config.states` is `false` (then `replay.states` is empty).
///
/// # Errors
///
/// A [`Rejection`] with the first reason that applies.
pub fn replay_game(raw: RawGame, config: &ReplayConfig) -> Result<KeptGame, Rejection> {
    let states = config.states.then_some(config.ep_convention);
    let checked = raw.screen(config.min_plies()).and_then(|()| {
        let mut replay = ReplayedGame::default();
        replay_into(Chess::default(), &raw.sans, states, &mut replay).map(|_| replay)
    });
    match checked {
        Ok(replay) => Ok(KeptGame {
            index: raw.index,
            offset: raw.offset,
            headers: raw.headers,
            replay,
        }),
        Err(reason) => Err(Rejection {
            index: raw.index,
            offset: raw.offset,
            site: raw.headers.site,
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{EP_FILE, EP_RANK, INITIAL_STATE};
    use crate::replay::PgnGames;

    fn sans(text: &str) -> Vec<San> {
        text.split_whitespace()
            .map(|san| san.parse().unwrap())
            .collect()
    }

    #[test]
    fn replay_layout_matches_the_reference() {
        let replay = replay_sans(
            Chess::default(),
            &sans("e4 Nf6 Nf3 Nc6 Bc4 e6 O-O"),
            EpConvention::Reference,
        )
        .unwrap();
        assert_eq!(replay.plies(), 7);
        assert_eq!(replay.moves.len(), 8);
        assert_eq!(replay.states.len(), 8);
        assert_eq!(replay.moves[0], START);
        assert_eq!(replay.moves[7], 1310);
        assert_eq!(replay.states[0], INITIAL_STATE);
        assert_eq!(
            (replay.states[1][EP_FILE], replay.states[1][EP_RANK]),
            (5, 1)
        );
        assert_eq!(
            (replay.states[2][EP_FILE], replay.states[2][EP_RANK]),
            (0, 0)
        );
        assert_eq!(replay.flat_states().len(), 8 * 75);
    }

    #[test]
    fn moves_only_replay_gives_the_same_moves_and_errors() {
        for text in [
            "e4 d5 exd5 c5 dxc6 Nf6 cxb7 e5 bxa8=N Bc5 Nf3 O-O Ke2",
            "d4 b4",
            "e4 e5 Ke3",
        ] {
            let full = replay_sans(Chess::default(), &sans(text), EpConvention::Reference);
            let mut moves_only = ReplayedGame::default();
            let result = replay_moves_into(Chess::default(), &sans(text), &mut moves_only);
            assert!(moves_only.states.is_empty());
            match full {
                Ok(full) => {
                    result.unwrap();
                    assert_eq!(moves_only.moves, full.moves);
                }
                Err(reason) => assert_eq!(result.unwrap_err(), reason),
            }
        }
        let pgn = "[Site \"https://lichess.org/x\"]\n\n1. e4 e5 2. Nf3 Nc6 *\n";
        let lenient = ReplayConfig {
            min_fullmoves: 1,
            ..ReplayConfig::default()
        };
        let raw = PgnGames::new(pgn.as_bytes()).next().unwrap().unwrap();
        let full = replay_game(raw.clone(), &lenient).unwrap();
        let moves_only = replay_game(
            raw,
            &ReplayConfig {
                states: false,
                ..lenient
            },
        )
        .unwrap();
        assert_eq!(full.replay.states.len(), 5);
        assert!(moves_only.replay.states.is_empty());
        assert_eq!(moves_only.replay.moves, full.replay.moves);
        assert_eq!(moves_only.headers, full.headers);
    }

    #[test]
    fn bad_moves_carry_ply_and_san() {
        assert_eq!(
            replay_sans(Chess::default(), &sans("d4 b4"), EpConvention::Reference),
            Err(RejectReason::IllegalMove {
                ply: 2,
                san: "b4".to_owned()
            })
        );
        assert_eq!(
            replay_sans(
                Chess::default(),
                &sans("e4 e5 Ke3"),
                EpConvention::Reference
            ),
            Err(RejectReason::IllegalMove {
                ply: 3,
                san: "Ke3".to_owned()
            })
        );
        // Knights on c3 and g5 can both reach e4.
        assert_eq!(
            replay_sans(
                Chess::default(),
                &sans("Nc3 a6 Nf3 a5 Ng5 a4 Ne4"),
                EpConvention::Reference
            ),
            Err(RejectReason::AmbiguousMove {
                ply: 7,
                san: "Ne4".to_owned()
            })
        );
    }

    #[test]
    fn the_capture_sign_is_not_checked_like_python_chess() {
        let with = replay_sans(
            Chess::default(),
            &sans("e4 d5 exd5 Qxd5 Nc3 Qe5 Be2 Qxe4"),
            EpConvention::Reference,
        )
        .unwrap();
        let without = replay_sans(
            Chess::default(),
            &sans("e4 d5 ed5 Qd5 Nc3 Qe5 Be2 Qe4"),
            EpConvention::Reference,
        )
        .unwrap();
        assert_eq!(with, without);
        let wrong_sign =
            replay_sans(Chess::default(), &sans("Nxf3 e5"), EpConvention::Reference).unwrap();
        assert_eq!(wrong_sign.plies(), 2);
    }

    #[test]
    fn fully_specified_moves_like_python_chess() {
        let uci = replay_sans(
            Chess::default(),
            &sans("e2e4 e7e5 g1f3 b8c6 f1c4 f8c5 e1g1"),
            EpConvention::Reference,
        )
        .unwrap();
        let san = replay_sans(
            Chess::default(),
            &sans("e4 e5 Nf3 Nc6 Bc4 Bc5 O-O"),
            EpConvention::Reference,
        )
        .unwrap();
        assert_eq!(uci, san);
    }

    #[test]
    fn whole_game_is_rejected_and_the_next_is_kept() {
        let mut pgn = String::new();
        let twenty = "1. e4 e5 2. Nf3 Nc6 3. Bc4 Bc5 4. c3 Nf6 5. d4 exd4 6. cxd4 Bb4+ \
            7. Nc3 Nxe4 8. O-O Bxc3 9. d5 Bf6 10. Re1 Ne7 *";
        pgn.push_str(&format!(
            "[Site \"https://lichess.org/one\"]\n\n{twenty}\n\n"
        ));
        pgn.push_str("[Site \"https://lichess.org/two\"]\n\n1. e4 e5 2. Ke3 *\n\n");
        pgn.push_str(&format!(
            "[Site \"https://lichess.org/three\"]\n\n{twenty}\n\n"
        ));
        let config = ReplayConfig::default();
        let outcomes: Vec<_> = PgnGames::new(pgn.as_bytes())
            .map(|game| replay_game(game.unwrap(), &config))
            .collect();
        assert_eq!(outcomes.len(), 3);
        let kept = outcomes[0].as_ref().unwrap();
        assert_eq!(kept.replay.plies(), 20);
        assert_eq!(
            outcomes[1].as_ref().unwrap_err().reason,
            RejectReason::TooShort {
                plies: 3,
                min_plies: 20
            }
        );
        assert_eq!(outcomes[2].as_ref().unwrap().index, 2);

        let lenient = ReplayConfig {
            min_fullmoves: 1,
            ..config
        };
        let pgn = "[Site \"https://lichess.org/two\"]\n\n1. e4 e5 2. Ke3 *\n";
        let game = PgnGames::new(pgn.as_bytes()).next().unwrap().unwrap();
        let rejection = replay_game(game, &lenient).unwrap_err();
        assert_eq!(rejection.site.as_deref(), Some("https://lichess.org/two"));
        assert_eq!(rejection.reason.code(), "illegal_move");
    }
}
