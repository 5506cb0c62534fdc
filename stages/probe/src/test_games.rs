//! Games for the unit tests: tokenized from UCI moves with the reference labels.

use cwm_chess::encode::{EpConvention, START, encode_state, pack_move};
use cwm_stage_data::TokenizedGame;
use shakmaty::uci::UciMove;
use shakmaty::{Chess, Position};

/// START then the moves of `ucis`, and the reference labels of every step.
pub(crate) fn game(id: &str, ucis: &[&str]) -> TokenizedGame {
    let mut position = Chess::default();
    let mut moves = vec![START];
    let mut states = encode_state(&position, EpConvention::Reference).to_vec();
    for uci in ucis {
        let m = uci.parse::<UciMove>().unwrap().to_move(&position).unwrap();
        moves.push(pack_move(&m));
        position.play_unchecked(m);
        states.extend(encode_state(&position, EpConvention::Reference));
    }
    TokenizedGame {
        id: id.into(),
        moves,
        states,
    }
}
