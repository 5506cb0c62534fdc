//! The event tagger on hand-made games (spec §3 item 3): each tag on exactly the plies expected,
//! with the labels it makes relevant.

use cwm_chess::{
    encode::{EpConvention, label_index},
    rules::{EventTags, GameTagger, LabelSet, StepTags},
};
use shakmaty::Square;

use crate::rules_common::tokens_of_uci;

/// The tagged steps of a UCI game.
fn tag(ucis: &[&str], ep: EpConvention) -> Vec<StepTags> {
    let tokens = tokens_of_uci(ucis);
    let steps: Vec<StepTags> = GameTagger::new(&tokens, ep)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(steps.len(), ucis.len());
    for (i, step) in steps.iter().enumerate() {
        assert_eq!(step.t, i + 1);
        assert_eq!(step.token, tokens[i + 1]);
    }
    steps
}

/// The plies carrying `tag`.
fn plies(steps: &[StepTags], tag: EventTags) -> Vec<usize> {
    steps
        .iter()
        .filter(|step| step.tags.contains(tag))
        .map(|step| step.t)
        .collect()
}

/// The labels of squares plus other label indices.
fn labels(squares: &[Square], others: &[usize]) -> LabelSet {
    let set = squares.iter().fold(LabelSet::EMPTY, |set, &square| {
        set.with(label_index(square))
    });
    others.iter().fold(set, |set, &index| set.with(index))
}

#[test]
fn an_en_passant_capture() {
    for ep in EpConvention::ALL {
        let steps = tag(&["e2e4", "a7a6", "e4e5", "d7d5", "e5d6"], ep);
        assert_eq!(plies(&steps, EventTags::EP_CAPTURE), [5]);
        assert_eq!(plies(&steps, EventTags::CAPTURE), [] as [usize; 0]);
        assert_eq!(plies(&steps, EventTags::DOUBLE_PUSH), [1, 4]);
        assert_eq!(plies(&steps, EventTags::HALFMOVE_RESET), [1, 2, 3, 4, 5]);
        assert_eq!(
            steps[4].relevant(EventTags::EP_CAPTURE),
            labels(&[Square::E5, Square::D6, Square::D5], &[69, 70])
        );
        assert_eq!(
            steps[3].relevant(EventTags::DOUBLE_PUSH),
            labels(&[Square::D7, Square::D5], &[69, 70])
        );
        assert_eq!(
            steps[4].tags,
            EventTags::EP_CAPTURE | EventTags::HALFMOVE_RESET
        );
    }
}

#[test]
fn castling_queen_side_by_both_colours() {
    let game = [
        "d2d4", "d7d5", "c1f4", "c8f5", "b1c3", "b8c6", "d1d2", "d8d7", "e1c1", "e8c8",
    ];
    let steps = tag(&game, EpConvention::Reference);
    assert_eq!(plies(&steps, EventTags::CASTLE_Q_WHITE), [9]);
    assert_eq!(plies(&steps, EventTags::CASTLE_Q_BLACK), [10]);
    assert!(plies(&steps, EventTags::CASTLE_K_WHITE).is_empty());
    assert!(plies(&steps, EventTags::CASTLE_K_BLACK).is_empty());
    assert_eq!(plies(&steps, EventTags::RIGHTS_LOST_KING), [9, 10]);
    let white_corner = [Square::E1, Square::C1, Square::A1, Square::D1];
    assert_eq!(
        steps[8].relevant(EventTags::CASTLE_Q_WHITE),
        labels(&white_corner, &[65, 66])
    );
    assert_eq!(
        steps[8].relevant(EventTags::RIGHTS_LOST_KING),
        labels(&white_corner, &[65, 66])
    );
    assert_eq!(
        steps[9].relevant(EventTags::CASTLE_Q_BLACK),
        labels(&[Square::E8, Square::C8, Square::A8, Square::D8], &[67, 68])
    );
    assert_eq!(&steps[9].state[65..69], &[0, 0, 0, 0]);
}

#[test]
fn a_promotion_to_a_knight_that_takes_a_rook_and_is_taken() {
    let game = [
        "a2a4", "b7b5", "a4b5", "a7a6", "b5a6", "c8b7", "a6b7", "b8c6", "b7a8n", "e7e6", "a8c7",
        "d8c7",
    ];
    let steps = tag(&game, EpConvention::Reference);
    assert_eq!(plies(&steps, EventTags::UNDERPROMO_N), [9]);
    assert!(plies(&steps, EventTags::PROMO_Q).is_empty());
    assert_eq!(plies(&steps, EventTags::RIGHTS_LOST_ROOK_CAPTURED), [9]);
    assert_eq!(
        plies(&steps, EventTags::PROMOTED_PIECE_PRESENT),
        [9, 10, 11]
    );
    assert_eq!(plies(&steps, EventTags::CAPTURE), [3, 5, 7, 9, 11, 12]);
    assert_eq!(plies(&steps, EventTags::CHECK), [11]);
    // Black's q right goes with the a8 rook.
    assert_eq!(
        steps[8].relevant(EventTags::RIGHTS_LOST_ROOK_CAPTURED),
        labels(&[Square::B7, Square::A8], &[68])
    );
    assert_eq!(steps[8].state[68], 0);
    // The promoted knight is relevant where it stands.
    assert_eq!(
        steps[9].relevant(EventTags::PROMOTED_PIECE_PRESENT),
        labels(&[Square::E7, Square::E6, Square::A8], &[])
    );
    assert_eq!(
        steps[10].relevant(EventTags::PROMOTED_PIECE_PRESENT),
        labels(&[Square::A8, Square::C7], &[])
    );
}

#[test]
fn a_rook_taken_on_h8_while_black_holds_k() {
    let steps = tag(
        &["b2b3", "g7g6", "c1b2", "a7a6", "b2h8"],
        EpConvention::LegalCapture,
    );
    assert_eq!(plies(&steps, EventTags::RIGHTS_LOST_ROOK_CAPTURED), [5]);
    assert_eq!(
        steps[4].tags,
        EventTags::CAPTURE | EventTags::RIGHTS_LOST_ROOK_CAPTURED | EventTags::HALFMOVE_RESET
    );
    assert_eq!(
        steps[4].relevant(EventTags::RIGHTS_LOST_ROOK_CAPTURED),
        labels(&[Square::B2, Square::H8], &[67])
    );
    assert_eq!(&steps[4].state[65..69], &[1, 1, 0, 1]);
}

#[test]
fn rooks_and_kings_leaving_home() {
    let steps = tag(
        &[
            "h2h4", "a7a5", "h1h3", "a8a6", "h3h1", "e7e5", "e2e4", "e8e7", "e1e2",
        ],
        EpConvention::Reference,
    );
    assert_eq!(plies(&steps, EventTags::RIGHTS_LOST_ROOK_MOVE), [3, 4]);
    assert_eq!(
        steps[2].relevant(EventTags::RIGHTS_LOST_ROOK_MOVE),
        labels(&[Square::H1, Square::H3], &[65])
    );
    assert_eq!(
        steps[3].relevant(EventTags::RIGHTS_LOST_ROOK_MOVE),
        labels(&[Square::A8, Square::A6], &[68])
    );
    // Black's king takes its k right with it; White's king its remaining Q.
    assert_eq!(plies(&steps, EventTags::RIGHTS_LOST_KING), [8, 9]);
    assert_eq!(
        steps[7].relevant(EventTags::RIGHTS_LOST_KING),
        labels(&[Square::E8, Square::E7], &[67])
    );
    assert_eq!(
        steps[8].relevant(EventTags::RIGHTS_LOST_KING),
        labels(&[Square::E1, Square::E2], &[66])
    );
}

#[test]
fn a_discovered_check_and_a_double_check() {
    // The Petroff trap: 5. Nc6+ uncovers the e2 queen.
    let petroff = [
        "e2e4", "e7e5", "g1f3", "g8f6", "f3e5", "f6e4", "d1e2", "e4f6", "e5c6",
    ];
    let steps = tag(&petroff, EpConvention::Reference);
    assert_eq!(plies(&steps, EventTags::CHECK), [9]);
    assert_eq!(plies(&steps, EventTags::DISCOVERED_CHECK), [9]);
    assert!(plies(&steps, EventTags::DOUBLE_CHECK).is_empty());

    // 6. exf5++: the pawn checks e6 and uncovers the e2 queen.
    let double = [
        "b1c3", "f7f5", "e2e4", "e8f7", "d1h5", "f7e6", "h5e2", "b7b6", "a2a4", "d7d5", "e4f5",
    ];
    let steps = tag(&double, EpConvention::Reference);
    assert_eq!(plies(&steps, EventTags::CHECK), [5, 11]);
    assert_eq!(plies(&steps, EventTags::DOUBLE_CHECK), [11]);
    assert_eq!(plies(&steps, EventTags::DISCOVERED_CHECK), [11]);
    assert_eq!(plies(&steps, EventTags::RIGHTS_LOST_KING), [4]);
}

#[test]
fn repetitions_follow_the_convention_of_key4() {
    // After 1. e4 the reference labels carry e3; after 3. Ng1 the same placement comes back
    // without it. Under legal_capture (no capture possible) the two are the same Key4.
    let game = [
        "e2e4", "g8f6", "g1f3", "f6g8", "f3g1", "g8f6", "g1f3", "f6g8", "f3g1",
    ];
    let steps = tag(&game, EpConvention::Reference);
    assert_eq!(plies(&steps, EventTags::REPETITION), [6, 7, 8, 9]);
    let steps = tag(&game, EpConvention::LegalCapture);
    assert_eq!(plies(&steps, EventTags::REPETITION), [5, 6, 7, 8, 9]);
}

#[test]
fn mate_and_stalemate() {
    let steps = tag(&["f2f3", "e7e5", "g2g4", "d8h4"], EpConvention::Reference);
    assert_eq!(plies(&steps, EventTags::MATE), [4]);
    assert_eq!(plies(&steps, EventTags::CHECK), [4]);
    assert!(plies(&steps, EventTags::STALEMATE).is_empty());

    // Loyd's ten-move stalemate.
    let loyd = [
        "e2e3", "a7a5", "d1h5", "a8a6", "h5a5", "h7h5", "h2h4", "a6h6", "a5c7", "f7f6", "c7d7",
        "e8f7", "d7b7", "d8d3", "b7b8", "d3h7", "b8c8", "f7g6", "c8e6",
    ];
    let steps = tag(&loyd, EpConvention::Reference);
    assert_eq!(plies(&steps, EventTags::STALEMATE), [19]);
    assert!(plies(&steps, EventTags::MATE).is_empty());
    assert_eq!(plies(&steps, EventTags::CHECK), [11]);
}

#[test]
fn a_long_shuffle_reaches_the_clock_and_the_fullmove_carry() {
    let shuffle = ["g1f3", "g8f6", "f3g1", "f6g8"];
    let game: Vec<&str> = shuffle.iter().copied().cycle().take(516).collect();
    let steps = tag(&game, EpConvention::Reference);
    assert_eq!(plies(&steps, EventTags::FULLMOVE_CARRY), [510]);
    assert_eq!(
        plies(&steps, EventTags::HALFMOVE_GE_50),
        (50..=516).collect::<Vec<_>>()
    );
    assert!(plies(&steps, EventTags::HALFMOVE_RESET).is_empty());
    assert_eq!(
        plies(&steps, EventTags::REPETITION),
        (4..=516).collect::<Vec<_>>()
    );
    assert_eq!(&steps[509].state[73..75], &[1, 0]);
    assert_eq!(
        steps[509].relevant(EventTags::FULLMOVE_CARRY),
        labels(&[Square::F6, Square::G8], &[73, 74])
    );
    assert_eq!(
        steps[49].relevant(EventTags::HALFMOVE_GE_50),
        labels(&[Square::F6, Square::G8], &[71, 72])
    );
    // No tag is ever set that the game does not have.
    let seen = steps
        .iter()
        .fold(EventTags::NONE, |seen, step| seen | step.tags);
    assert_eq!(
        seen,
        EventTags::FULLMOVE_CARRY | EventTags::HALFMOVE_GE_50 | EventTags::REPETITION
    );
}
