//! Fast mode's move pick: one uniformly random legal move without listing all legal moves.
//!
//! * Rejection sampling: draw uniformly among the pseudo-legal moves (each legal move appears
//!   exactly once among them), accept the draw if it is legal, otherwise draw again. Given
//!   acceptance, the move is uniform over the legal moves.
//! * The pseudo-legal moves are never listed: each piece contributes `popcount(targets)` moves
//!   (four per target for a pawn about to promote), so the draw is a walk over at most 16
//!   bitboards. Castling and en-passant moves come from shakmaty's own (already legal)
//!   generators.
//! * Not in check, legality is cheap: a king move needs an unattacked target, any other move a
//!   piece that is not pinned or that moves along its pin line.
//! * In check, or after [`MAX_TRIES`] rejections, [`sample_legal_move`] returns `None` and the
//!   caller draws uniformly from the full legal-move list instead. A mixture of uniform picks
//!   is uniform, so the overall pick stays exactly uniform.

use shakmaty::{
    Bitboard, CastlingSide, Chess, File, Move, MoveList, Position, Rank, Role, Square, attacks,
};

use crate::fast_rng::Xoshiro256PlusPlus;

/// Rejected draws after which [`sample_legal_move`] gives up.
pub const MAX_TRIES: u32 = 16;

/// Promotion roles in the order their moves are numbered.
const PROMOTIONS: [Role; 4] = [Role::Queen, Role::Rook, Role::Bishop, Role::Knight];

/// Where the moves of a [`Group`] start.
#[derive(Debug, Clone, Copy)]
enum Origin {
    /// All moves start on this square (one piece).
    Square(Square),
    /// Each move starts `offset` squares before its target (a set of pawn moves).
    Offset(i32),
}

/// Pseudo-legal moves sharing a role and an origin rule: `count * per_target` moves.
#[derive(Debug, Clone, Copy)]
struct Group {
    targets: Bitboard,
    role: Role,
    origin: Origin,
    /// Moves per target: 4 for promotions, 1 otherwise.
    per_target: u32,
    /// Number of moves in the group.
    moves: u32,
}

/// At most 16 pieces (one group each) plus 7 groups of pawn moves.
const MAX_GROUPS: usize = 24;

/// The pseudo-legal moves of a position, as groups plus the (legal) castling and en-passant
/// moves.
struct PseudoLegal {
    groups: [Group; MAX_GROUPS],
    n_groups: usize,
    specials: [Option<Move>; 4],
    n_specials: usize,
    total: u32,
}

impl PseudoLegal {
    fn push(&mut self, targets: Bitboard, role: Role, origin: Origin, per_target: u32) {
        if targets.is_empty() {
            return;
        }
        let moves = targets.count() as u32 * per_target;
        if let Some(group) = self.groups.get_mut(self.n_groups) {
            *group = Group {
                targets,
                role,
                origin,
                per_target,
                moves,
            };
            self.n_groups += 1;
            self.total += moves;
        }
    }

    fn push_specials(&mut self, moves: &MoveList) {
        for m in moves {
            if let Some(slot) = self.specials.get_mut(self.n_specials) {
                *slot = Some(*m);
                self.n_specials += 1;
                self.total += 1;
            }
        }
    }

    /// The `r`-th pseudo-legal move (`r < total`), as a special move or as (group, target,
    /// promotion).
    fn nth(&self, mut r: u32) -> Option<Drawn> {
        if let Some(special) = self.specials[..self.n_specials].get(r as usize) {
            return special.map(Drawn::Special);
        }
        r -= self.n_specials as u32;
        for group in &self.groups[..self.n_groups] {
            if r >= group.moves {
                r -= group.moves;
                continue;
            }
            let to = group
                .targets
                .into_iter()
                .nth((r / group.per_target) as usize)?;
            let from = match group.origin {
                Origin::Square(from) => from,
                Origin::Offset(offset) => to.offset(-offset)?,
            };
            let promotion = (group.per_target == 4).then(|| PROMOTIONS[(r % 4) as usize]);
            return Some(Drawn::Normal {
                role: group.role,
                from,
                to,
                promotion,
            });
        }
        None
    }
}

/// One drawn pseudo-legal move.
enum Drawn {
    /// Castling or en passant: legal by construction.
    Special(Move),
    /// Any other move, legality still to check.
    Normal {
        role: Role,
        from: Square,
        to: Square,
        promotion: Option<Role>,
    },
}

/// Our pieces that are the only piece between our king and an enemy slider aiming at it.
fn pinned_candidates(position: &Chess, king: Square) -> Bitboard {
    let board = position.board();
    let occupied = board.occupied();
    let snipers = ((attacks::rook_attacks(king, Bitboard::EMPTY) & board.rooks_and_queens())
        | (attacks::bishop_attacks(king, Bitboard::EMPTY) & board.bishops_and_queens()))
        & position.them();
    let mut blockers = Bitboard::EMPTY;
    for sniper in snipers {
        let between = attacks::between(king, sniper) & occupied;
        if !between.more_than_one() {
            blockers |= between;
        }
    }
    blockers & position.us()
}

/// The pseudo-legal moves of `position`, whose side to move has its king on `king`.
fn pseudo_legal(position: &Chess, king: Square) -> PseudoLegal {
    let board = position.board();
    let turn = position.turn();
    let us = position.us();
    let them = position.them();
    let occupied = board.occupied();
    let not_us = !us;
    let mut moves = PseudoLegal {
        groups: [Group {
            targets: Bitboard::EMPTY,
            role: Role::Pawn,
            origin: Origin::Offset(0),
            per_target: 1,
            moves: 0,
        }; MAX_GROUPS],
        n_groups: 0,
        specials: [None; 4],
        n_specials: 0,
        total: 0,
    };

    for from in board.knights() & us {
        let targets = attacks::knight_attacks(from) & not_us;
        moves.push(targets, Role::Knight, Origin::Square(from), 1);
    }
    for from in board.bishops() & us {
        let targets = attacks::bishop_attacks(from, occupied) & not_us;
        moves.push(targets, Role::Bishop, Origin::Square(from), 1);
    }
    for from in board.rooks() & us {
        let targets = attacks::rook_attacks(from, occupied) & not_us;
        moves.push(targets, Role::Rook, Origin::Square(from), 1);
    }
    for from in board.queens() & us {
        let targets = attacks::queen_attacks(from, occupied) & not_us;
        moves.push(targets, Role::Queen, Origin::Square(from), 1);
    }
    let king_targets = attacks::king_attacks(king) & not_us;
    moves.push(king_targets, Role::King, Origin::Square(king), 1);

    let pawns = board.pawns() & us;
    let empty = !occupied;
    let push = turn.fold_wb(8, -8);
    let (west, east) = turn.fold_wb((7, 9), (-9, -7));
    let single = pawns.shift(push) & empty;
    let third_rank = Bitboard::from_rank(turn.relative_rank(Rank::Third));
    let double = (single & third_rank).shift(push) & empty;
    let captures_west = (pawns & !Bitboard::from_file(File::A)).shift(west) & them;
    let captures_east = (pawns & !Bitboard::from_file(File::H)).shift(east) & them;
    for (targets, offset) in [(single, push), (captures_west, west), (captures_east, east)] {
        let origin = Origin::Offset(offset);
        moves.push(targets & !Bitboard::BACKRANKS, Role::Pawn, origin, 1);
        moves.push(targets & Bitboard::BACKRANKS, Role::Pawn, origin, 4);
    }
    moves.push(double, Role::Pawn, Origin::Offset(2 * push), 1);

    // shakmaty's generators return a whole move list; ask only when a move is possible.
    let castles = position.castles();
    for side in CastlingSide::ALL {
        if castles.has(turn, side) && (castles.path(turn, side) & occupied).is_empty() {
            moves.push_specials(&position.castling_moves(side));
        }
    }
    if position.pseudo_legal_ep_square().is_some() {
        moves.push_specials(&position.en_passant_moves());
    }
    moves
}

/// A uniformly random legal move of `position`, or `None` when the position is in check or
/// [`MAX_TRIES`] draws were all illegal; the caller then picks uniformly from
/// [`Position::legal_moves`]. `None` is also returned when there is no pseudo-legal move.
pub fn sample_legal_move(position: &Chess, rng: &mut Xoshiro256PlusPlus) -> Option<Move> {
    let board = position.board();
    let turn = position.turn();
    let occupied = board.occupied();
    let king = board.king_of(turn)?;
    if position.king_attackers(king, !turn, occupied).any() {
        return None;
    }
    let moves = pseudo_legal(position, king);
    if moves.total == 0 {
        return None;
    }
    let mut pinned = None;
    for _ in 0..MAX_TRIES {
        let (role, from, to, promotion) = match moves.nth(rng.below(moves.total))? {
            Drawn::Special(m) => return Some(m),
            Drawn::Normal {
                role,
                from,
                to,
                promotion,
            } => (role, from, to, promotion),
        };
        let legal = if role == Role::King {
            board.attacks_to(to, !turn, occupied).is_empty()
        } else {
            let pinned = *pinned.get_or_insert_with(|| pinned_candidates(position, king));
            !pinned.contains(from) || attacks::aligned(from, to, king)
        };
        if legal {
            return Some(Move::Normal {
                role,
                from,
                capture: board.role_at(to),
                to,
                promotion,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use shakmaty::{CastlingMode, fen::Fen};

    use super::*;

    fn position(fen: &str) -> Chess {
        fen.parse::<Fen>()
            .unwrap()
            .into_position(CastlingMode::Standard)
            .unwrap()
    }

    /// Samples `n` times; every sample must be legal, and all legal moves must come up about
    /// equally often.
    fn check_uniform(fen: &str, n: u32) {
        let position = position(fen);
        let legal = position.legal_moves();
        let mut rng = Xoshiro256PlusPlus::for_game(99, 0);
        let mut counts: HashMap<Move, u32> = HashMap::new();
        let mut fallbacks = 0;
        for _ in 0..n {
            match sample_legal_move(&position, &mut rng) {
                Some(m) => {
                    assert!(legal.contains(&m), "{fen}: illegal sample {m:?}");
                    *counts.entry(m).or_default() += 1;
                }
                None => fallbacks += 1,
            }
        }
        let sampled = n - fallbacks;
        assert!(sampled > n / 2, "{fen}: too many fallbacks ({fallbacks})");
        assert_eq!(
            counts.len(),
            legal.len(),
            "{fen}: some legal move never drawn"
        );
        let expected = f64::from(sampled) / legal.len() as f64;
        for (m, count) in counts {
            let deviation = (f64::from(count) - expected).abs() / expected.sqrt();
            assert!(
                deviation < 5.0,
                "{fen}: {m:?} drawn {count} times, {expected:.0} expected"
            );
        }
    }

    #[test]
    fn uniform_and_legal_in_assorted_positions() {
        check_uniform(
            "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
            40_000,
        );
        // Castling both ways, pieces pinned on a file and a diagonal.
        check_uniform("r3k2r/8/8/8/1b6/8/3N4/R3K2R w KQkq - 0 1", 60_000);
        check_uniform("4r1k1/8/8/8/8/8/4R3/4K3 w - - 0 1", 40_000);
        // Promotions (with captures) and an en-passant capture.
        check_uniform("1n2k3/P7/8/3pP3/8/8/8/4K3 w - d6 0 1", 60_000);
        // The same for black: castling, promotions with a capture, en passant, a pinned knight.
        check_uniform("r3k2r/pppppppp/8/8/8/8/8/4K3 b kq - 0 1", 60_000);
        check_uniform("4k3/8/8/8/3Pp3/8/p7/1N2K3 b - d3 0 1", 60_000);
        check_uniform("4k3/3n4/8/1B6/8/8/8/4K3 b - - 0 1", 40_000);
    }

    #[test]
    fn in_check_falls_back() {
        let position = position("4k3/8/8/8/8/8/8/4K2r w - - 0 1");
        let mut rng = Xoshiro256PlusPlus::for_game(1, 1);
        assert_eq!(sample_legal_move(&position, &mut rng), None);
    }

    #[test]
    fn stalemate_has_no_sample() {
        let position = position("k7/2Q5/1K6/8/8/8/8/8 b - - 0 1");
        let mut rng = Xoshiro256PlusPlus::for_game(1, 2);
        assert_eq!(sample_legal_move(&position, &mut rng), None);
    }
}
