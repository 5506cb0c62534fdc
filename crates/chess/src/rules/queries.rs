//! E3's rule queries (S2 App. C.1–C.2): checkers, check-giving moves (check-in-1, with the
//! double- and discovered-check subsets) and absolute pins.

use shakmaty::{Bitboard, CastlingSide, Chess, Color, Move, Position, Square, attacks};

use crate::encode::try_pack_move;

/// The pieces giving check to the side to move.
pub fn checkers(position: &Chess) -> Bitboard {
    position.checkers()
}

/// What kind of check a move gave (S2 C.2), judged on the position after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheckKind {
    /// The opponent is in check.
    pub check: bool,
    /// At least two pieces give check.
    pub double: bool,
    /// A piece that did not move gives check: its line to the king was opened by the move (the
    /// moved piece left it or, for en passant, the captured pawn left it).
    pub discovered: bool,
}

/// The kind of check `m` gave, given `after`, the position right after it.
///
/// The moved piece is the one on `m`'s destination (for castling, the king and the rook on their
/// destinations). Before a legal move the mover's opponent is not in check, so any other checker
/// had its line opened by the move: that is S2's discovered check.
pub fn check_kind(after: &Chess, m: &Move) -> CheckKind {
    let checkers = after.checkers();
    let moved = match *m {
        Move::Normal { to, .. } | Move::EnPassant { to, .. } | Move::Put { to, .. } => {
            Bitboard::from_square(to)
        }
        Move::Castle { king, rook } => {
            let side = if rook < king {
                CastlingSide::QueenSide
            } else {
                CastlingSide::KingSide
            };
            Bitboard::from_square(Square::from_coords(side.king_to_file(), king.rank()))
                .with(Square::from_coords(side.rook_to_file(), king.rank()))
        }
    };
    CheckKind {
        check: checkers.any(),
        double: checkers.more_than_one(),
        discovered: checkers.without(moved).any(),
    }
}

/// The packed ids (ascending) of the legal moves that give check, double check and discovered
/// check (S2's Check-in-1 and C.2 detectors).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckingMoves {
    /// Moves after which the opponent is in check.
    pub checks: Vec<u16>,
    /// Moves after which at least two pieces give check.
    pub double_checks: Vec<u16>,
    /// Moves that give a discovered check ([`CheckKind::discovered`]).
    pub discovered_checks: Vec<u16>,
}

/// Fills `out` (cleared first) with the checking moves of `position`.
pub fn checking_moves(position: &Chess, out: &mut CheckingMoves) {
    out.checks.clear();
    out.double_checks.clear();
    out.discovered_checks.clear();
    for m in position.legal_moves() {
        let Some(id) = try_pack_move(&m) else {
            continue;
        };
        let mut after = position.clone();
        after.play_unchecked(m);
        let kind = check_kind(&after, &m);
        if kind.check {
            out.checks.push(id);
        }
        if kind.double {
            out.double_checks.push(id);
        }
        if kind.discovered {
            out.discovered_checks.push(id);
        }
    }
    out.checks.sort_unstable();
    out.double_checks.sort_unstable();
    out.discovered_checks.sort_unstable();
}

/// An absolute pin (S2 C.2, `pinning > pinned > king`): an enemy slider whose ray meets exactly
/// one piece, `pinned`, of the king's colour and then the king.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pin {
    /// The king the pin is against.
    pub king: Square,
    /// The enemy slider (bishop, rook or queen along a line it moves on).
    pub pinner: Square,
    /// The piece between them.
    pub pinned: Square,
}

/// Writes the absolute pins against both kings of `position` into `out` (cleared first), sorted
/// by king (White's first) and then pinner square.
pub fn absolute_pins(position: &Chess, out: &mut Vec<Pin>) {
    out.clear();
    let board = position.board();
    let occupied = board.occupied();
    for color in Color::ALL {
        let Some(king) = board.king_of(color) else {
            continue;
        };
        let them = board.by_color(!color);
        let snipers = (attacks::rook_attacks(king, Bitboard::EMPTY) & board.rooks_and_queens()
            | attacks::bishop_attacks(king, Bitboard::EMPTY) & board.bishops_and_queens())
            & them;
        let start = out.len();
        for pinner in snipers {
            let between = attacks::between(king, pinner) & occupied;
            if let Some(pinned) = between.single_square()
                && board.by_color(color).contains(pinned)
            {
                out.push(Pin {
                    king,
                    pinner,
                    pinned,
                });
            }
        }
        out[start..].sort_unstable();
    }
}

#[cfg(test)]
mod tests {
    use shakmaty::uci::UciMove;

    use super::*;
    use crate::rules::test_support::{id, position};

    #[test]
    fn checkers_of_a_double_check() {
        let pos = position("4k3/8/3N4/8/8/8/8/4R1K1 b - - 0 1");
        assert_eq!(
            checkers(&pos),
            Bitboard::from_square(Square::D6).with(Square::E1)
        );
    }

    #[test]
    fn checking_moves_split_into_double_and_discovered() {
        // The e-file rook is masked by the e5 knight.
        let pos = position("4k3/8/8/4N3/8/8/8/4RK2 w - - 0 1");
        let mut out = CheckingMoves::default();
        checking_moves(&pos, &mut out);
        // Every knight move uncovers the rook, and none of them lands on a square from which the
        // knight itself checks e8: eight discovered checks, no double check.
        let knight: Vec<u16> = [
            "e5c6", "e5g6", "e5d3", "e5f3", "e5c4", "e5g4", "e5d7", "e5f7",
        ]
        .iter()
        .map(|uci| id(&pos, uci))
        .collect();
        let mut discovered = knight.clone();
        discovered.sort_unstable();
        assert_eq!(out.discovered_checks, discovered);
        assert!(out.double_checks.is_empty());
        // Rook and king moves give no check, so the checks are exactly the knight moves.
        assert_eq!(out.checks, discovered);

        let pos = position("4k3/8/8/4N3/8/8/8/4RK2 w - - 0 1");
        let kind = {
            let m = "e5d7".parse::<UciMove>().unwrap().to_move(&pos).unwrap();
            let mut after = pos.clone();
            after.play_unchecked(m);
            check_kind(&after, &m)
        };
        assert_eq!(
            kind,
            CheckKind {
                check: true,
                double: false,
                discovered: true
            }
        );
    }

    #[test]
    fn a_knight_check_with_the_rook_behind_is_double() {
        let pos = position("4k3/8/8/8/4N3/8/8/4RK2 w - - 0 1");
        let mut out = CheckingMoves::default();
        checking_moves(&pos, &mut out);
        let (d6, f6) = (id(&pos, "e4d6"), id(&pos, "e4f6"));
        let mut double = vec![d6, f6];
        double.sort_unstable();
        assert_eq!(out.double_checks, double);
        assert!(out.checks.contains(&d6) && out.discovered_checks.contains(&f6));
        // A rook move along the first rank gives no check.
        assert!(!out.checks.contains(&id(&pos, "e1a1")));
    }

    #[test]
    fn absolute_pins_of_both_colours() {
        // The d2 knight is pinned by the b4 bishop and the e2 pawn by the e7 rook.
        let pos = position("4k3/4r3/8/8/1b6/8/3NP3/4K3 w - - 0 1");
        let mut pins = Vec::new();
        absolute_pins(&pos, &mut pins);
        assert_eq!(
            pins,
            vec![
                Pin {
                    king: Square::E1,
                    pinner: Square::B4,
                    pinned: Square::D2
                },
                Pin {
                    king: Square::E1,
                    pinner: Square::E7,
                    pinned: Square::E2
                },
            ]
        );
        // Two pieces between: no pin; an enemy piece between: no pin.
        let pos = position("4k3/4r3/8/8/1b6/2P5/3NP3/4K3 w - - 0 1");
        absolute_pins(&pos, &mut pins);
        assert_eq!(pins.len(), 1);
        let pos = position("4k3/4r3/4p3/8/8/8/8/4K3 w - - 0 1");
        absolute_pins(&pos, &mut pins);
        assert!(pins.is_empty());
        // Against the black king.
        let pos = position("4k3/3n4/8/1B6/8/8/8/4K3 b - - 0 1");
        absolute_pins(&pos, &mut pins);
        assert_eq!(
            pins,
            vec![Pin {
                king: Square::E8,
                pinner: Square::B5,
                pinned: Square::D7
            }]
        );
    }
}
