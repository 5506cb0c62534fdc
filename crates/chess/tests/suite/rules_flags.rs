//! E1's validity flags on hand-made states: each state fires exactly the flags written beside it
//! (spec §3 item 1), under both en-passant conventions unless a case says otherwise.

use cwm_chess::{
    encode::{EP_FILE, EP_RANK, EpConvention, INITIAL_STATE, SIDE_TO_MOVE},
    rules::{StatusFlags, Tier, status, syntactic, validity},
};

use crate::rules_common::labels_of_fen;

const NONE: StatusFlags = StatusFlags::NONE;

/// A hand-made case: what it is, its FEN, its flags under `reference` and under
/// `legal_capture`.
type Case = (&'static str, &'static str, StatusFlags, StatusFlags);

/// Kings and pieces.
fn material_cases() -> Vec<Case> {
    let empty = StatusFlags::EMPTY
        .union(StatusFlags::NO_WHITE_KING)
        .union(StatusFlags::NO_BLACK_KING);
    let white_pieces = StatusFlags::TOO_MANY_WHITE_PIECES.union(StatusFlags::TOO_MUCH_MATERIAL);
    let black_pieces = StatusFlags::TOO_MANY_BLACK_PIECES.union(StatusFlags::TOO_MUCH_MATERIAL);
    let white_pawns = StatusFlags::TOO_MANY_WHITE_PAWNS.union(StatusFlags::TOO_MUCH_MATERIAL);
    let black_pawns = StatusFlags::TOO_MANY_BLACK_PAWNS.union(StatusFlags::TOO_MUCH_MATERIAL);
    let same = |what, fen, flags| (what, fen, flags, flags);
    vec![
        same("empty board", "8/8/8/8/8/8/8/8 w - - 0 1", empty),
        same(
            "no white king",
            "4k3/8/8/8/8/8/8/8 w - - 0 1",
            StatusFlags::NO_WHITE_KING,
        ),
        same(
            "no black king",
            "8/8/8/8/8/8/8/4K3 w - - 0 1",
            StatusFlags::NO_BLACK_KING,
        ),
        same(
            "two white kings and no black king: NO_BLACK_KING only",
            "8/8/8/8/8/8/8/2K1K3 w - - 0 1",
            StatusFlags::NO_BLACK_KING,
        ),
        same(
            "three kings",
            "4k3/8/8/8/8/8/8/2K1K3 w - - 0 1",
            StatusFlags::TOO_MANY_KINGS,
        ),
        // Seventeen pieces or nine pawns of a colour always mean too much material as well.
        same(
            "a 17th white piece (a third knight)",
            "rnbqkbnr/pppppppp/8/8/4N3/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
            white_pieces,
        ),
        same(
            "a 17th black piece",
            "rnbqkbnr/pppppppp/8/4n3/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
            black_pieces,
        ),
        same(
            "nine white pawns",
            "4k3/8/8/8/8/P7/PPPPPPPP/4K3 w - - 0 1",
            white_pawns,
        ),
        same(
            "nine black pawns",
            "4k3/pppppppp/p7/8/8/8/8/4K3 w - - 0 1",
            black_pawns,
        ),
        same(
            "three knights and eight pawns",
            "4k3/8/8/8/8/8/PPPPPPPP/1NN1KN2 w - - 0 1",
            StatusFlags::TOO_MUCH_MATERIAL,
        ),
    ]
}

/// Checks and combinations with castling rights.
fn combined_cases() -> Vec<Case> {
    let no_king_bad_rights = StatusFlags::NO_WHITE_KING.union(StatusFlags::BAD_CASTLING_RIGHTS);
    let three_checkers = StatusFlags::TOO_MANY_CHECKERS.union(StatusFlags::IMPOSSIBLE_CHECK);
    vec![
        (
            "the e1 king removed with all rights set",
            "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQ1BNR w KQkq - 0 1",
            no_king_bad_rights,
            no_king_bad_rights,
        ),
        (
            "a K right and a rook but no white king",
            "4k3/8/8/8/8/8/8/7R w K - 0 1",
            no_king_bad_rights,
            no_king_bad_rights,
        ),
        (
            "three sliding checkers",
            "4k3/8/8/8/1b2q3/8/8/r3K3 w - - 0 1",
            three_checkers,
            three_checkers,
        ),
        (
            "a checker the double push cannot have uncovered (under legal_capture: no capture)",
            "4k3/8/8/b2p4/8/8/8/4K3 w - d6 0 1",
            StatusFlags::IMPOSSIBLE_CHECK,
            StatusFlags::IMPOSSIBLE_CHECK.union(StatusFlags::INVALID_EP_SQUARE),
        ),
    ]
}

/// Cases with a single flag.
fn single_cases() -> Vec<Case> {
    let bad = StatusFlags::BAD_CASTLING_RIGHTS;
    let invalid_ep = StatusFlags::INVALID_EP_SQUARE;
    vec![
        (
            "a white pawn on a8",
            "P3k3/8/8/8/8/8/8/4K3 w - - 0 1",
            StatusFlags::PAWNS_ON_BACKRANK,
            StatusFlags::PAWNS_ON_BACKRANK,
        ),
        (
            "a black pawn on a1",
            "4k3/8/8/8/8/8/8/p3K3 w - - 0 1",
            StatusFlags::PAWNS_ON_BACKRANK,
            StatusFlags::PAWNS_ON_BACKRANK,
        ),
        (
            "the h1 rook on h3 with K still set",
            "rnbqkbnr/pppppppp/8/8/8/7R/PPPPPPPP/RNBQKBN1 w KQkq - 0 1",
            bad,
            bad,
        ),
        (
            "an en-passant square e6 with Black to move",
            "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR b KQkq e6 0 1",
            invalid_ep,
            invalid_ep,
        ),
        (
            "Black's king attacked with White to move",
            "4k3/8/8/8/8/8/8/4R1K1 w - - 0 1",
            StatusFlags::OPPOSITE_CHECK,
            StatusFlags::OPPOSITE_CHECK,
        ),
        (
            "two checkers on one line through the king",
            "4k3/8/8/8/8/8/8/r3K2r w - - 0 1",
            StatusFlags::IMPOSSIBLE_CHECK,
            StatusFlags::IMPOSSIBLE_CHECK,
        ),
        (
            "two knights give check (python-chess accepts it)",
            "4k3/8/8/8/8/3n1n2/8/4K3 w - - 0 1",
            StatusFlags::STEPPER_DOUBLE_CHECK,
            StatusFlags::STEPPER_DOUBLE_CHECK,
        ),
    ]
}

/// En-passant and castling corner cases of python-chess.
fn corner_cases() -> Vec<Case> {
    let bad = StatusFlags::BAD_CASTLING_RIGHTS;
    let invalid_ep = StatusFlags::INVALID_EP_SQUARE;
    vec![
        (
            "(b) no pawn beyond the en-passant square",
            "4k3/8/8/8/8/8/8/4K3 w - e6 0 1",
            invalid_ep,
            invalid_ep,
        ),
        (
            "(c) the en-passant square occupied",
            "4k3/8/4n3/4p3/8/8/8/4K3 w - e6 0 1",
            invalid_ep,
            invalid_ep,
        ),
        (
            "(d) the pawn's origin occupied",
            "4k3/4n3/8/4p3/8/8/8/4K3 w - e6 0 1",
            invalid_ep,
            invalid_ep,
        ),
        (
            "(e) a double push no pawn can take",
            "4k3/8/8/4p3/8/8/8/4K3 w - e6 0 1",
            NONE,
            invalid_ep,
        ),
        (
            "(e) a capture is possible",
            "4k3/8/8/3Pp3/8/8/8/4K3 w - e6 0 1",
            NONE,
            NONE,
        ),
        (
            "(e) the capture would expose the king on the rank",
            "8/8/8/K2Pp2r/8/8/8/4k3 w - e6 0 1",
            NONE,
            invalid_ep,
        ),
        (
            "(e) Black's capture on the third rank",
            "4k3/8/8/8/3pP3/8/8/4K3 b - e3 0 1",
            NONE,
            NONE,
        ),
        (
            "a check the double push uncovered",
            "2b1k3/8/8/3p4/6K1/8/8/8 w - d6 0 1",
            NONE,
            invalid_ep,
        ),
        (
            "Q with the king on e1 and no rook: python-chess adds no right",
            "4k3/8/8/8/8/8/8/4K3 w Q - 0 1",
            NONE,
            NONE,
        ),
        (
            "Q with the king on e1 and a rook on b1",
            "4k3/8/8/8/8/8/8/1R2K3 w Q - 0 1",
            bad,
            bad,
        ),
        (
            "k with king e8 and rook h8",
            "4k2r/8/8/8/8/8/8/4K3 w k - 0 1",
            NONE,
            NONE,
        ),
        (
            "q with king e8 and only a rook on h8",
            "4k2r/8/8/8/8/8/8/4K3 w q - 0 1",
            bad,
            bad,
        ),
        (
            "Q lands on the h1 rook when the higher white king stands right of it",
            "4k3/8/8/8/8/8/4K3/4K2R w Q - 0 1",
            StatusFlags::TOO_MANY_KINGS,
            StatusFlags::TOO_MANY_KINGS,
        ),
    ]
}

#[test]
fn every_hand_made_state_fires_exactly_its_flags() {
    let mut all = material_cases();
    all.extend(combined_cases());
    all.extend(single_cases());
    all.extend(corner_cases());
    let mut seen = NONE;
    for (what, fen, reference, legal_capture) in all {
        let labels = labels_of_fen(fen);
        assert!(syntactic(&labels), "{what}");
        for (ep, expected) in [
            (EpConvention::Reference, reference),
            (EpConvention::LegalCapture, legal_capture),
        ] {
            let flags = status(&labels, ep);
            assert_eq!(flags, expected, "{what} ({fen}) under {ep:?}");
            let v = validity(&labels, 0, ep);
            assert_eq!(v.flags, flags);
            assert_eq!(v.tier >= Tier::V1, flags.passes_v1(), "{what}");
            seen |= flags;
        }
    }
    // Every flag is fired by some case.
    assert_eq!(seen, StatusFlags::all(), "flags never fired: {}", !seen);
}

#[test]
fn states_that_fail_v0_read_as_their_decoded_fen() {
    // A file without a rank decodes to "-": no en-passant square, no flag.
    let mut labels = INITIAL_STATE;
    labels[EP_FILE] = 5;
    assert!(!syntactic(&labels));
    for ep in EpConvention::ALL {
        assert_eq!(status(&labels, ep), NONE);
        assert_eq!(validity(&labels, 0, ep).tier, Tier::BelowV0);
    }
    // A rank without a file, with Black to move: still no square.
    let mut labels = INITIAL_STATE;
    labels[EP_RANK] = 2;
    labels[SIDE_TO_MOVE] = 1;
    for ep in EpConvention::ALL {
        assert_eq!(status(&labels, ep), NONE);
    }
    // Fullmove 0 plays no part in the flags.
    let mut labels = labels_of_fen("4k3/8/8/8/8/8/8/4R1K1 w - - 0 1");
    labels[74] = 0;
    assert!(!syntactic(&labels));
    assert_eq!(
        status(&labels, EpConvention::Reference),
        StatusFlags::OPPOSITE_CHECK
    );
}

#[test]
fn the_spec_examples_edited_from_the_initial_labels() {
    // The FEN helper writes what encode_state writes for legal positions.
    assert_eq!(
        labels_of_fen("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"),
        INITIAL_STATE
    );
    let e4_d5_e5_f5 = cwm_chess::replay::replay_sans(
        shakmaty::Chess::default(),
        &["e4", "d5", "e5", "f5"].map(|san| san.parse().unwrap()),
        EpConvention::Reference,
    )
    .unwrap();
    let last = e4_d5_e5_f5.states.last().unwrap();
    assert_eq!(
        &labels_of_fen("rnbqkbnr/ppp1p1pp/8/3pPp2/8/8/PPPP1PPP/RNBQKBNR w KQkq f6 0 3"),
        last
    );

    // The h1 rook moved to h3, K still set.
    let mut labels = INITIAL_STATE;
    labels[63] = 0;
    labels[47] = 4;
    // An en-passant square e6 with Black to move.
    let mut ep = INITIAL_STATE;
    ep[SIDE_TO_MOVE] = 1;
    ep[EP_FILE] = 5;
    ep[EP_RANK] = 2;
    // The e1 king removed, all rights set.
    let mut kingless = INITIAL_STATE;
    kingless[60] = 0;
    for convention in EpConvention::ALL {
        assert_eq!(
            status(&labels, convention),
            StatusFlags::BAD_CASTLING_RIGHTS
        );
        assert_eq!(status(&ep, convention), StatusFlags::INVALID_EP_SQUARE);
        assert_eq!(
            status(&kingless, convention),
            StatusFlags::NO_WHITE_KING | StatusFlags::BAD_CASTLING_RIGHTS
        );
    }
}
