//! The rules engine against python-chess 1.11.2 (spec §3 items 1 and 3): status flags on
//! randomly perturbed true states, and event tags on every ply of the sample data, each
//! recomputed by a python-chess script that uses python-chess's own functions. When python-chess
//! 1.11.2 is missing these fail under CI and skip loudly elsewhere.

use std::{collections::BTreeMap, fmt::Write as _, fs, path::Path, process::Command};

use cwm_chess::{
    encode::{EpConvention, LABEL_CLASSES, StateLabels, decode_state_fen, write_uci},
    rules::{EventTags, GameTagger, status, syntactic},
};

use crate::rules_common::{Rng, SAMPLE_PGN, python_chess_1_11_2, sample_games};
use crate::support::{require, require_data};

/// Recomputes `Board(fen).status()` per line (`convention \t fen \t cwm bits`), adding
/// INVALID_EP_SQUARE under legal_capture when python-chess finds no legal en-passant capture.
const STATUS_ORACLE: &str = r#"
import sys
import chess

n = bad = 0
for line in open(sys.argv[1], encoding="utf-8"):
    convention, fen, cwm = line.rstrip("\n").split("\t")
    board = chess.Board(fen)
    status = int(board.status())
    if (convention == "legal_capture" and board.ep_square is not None
            and not board.has_legal_en_passant()):
        status |= int(chess.STATUS_INVALID_EP_SQUARE)
    n += 1
    if status != int(cwm):
        bad += 1
        if bad <= 20:
            print(f"DISAGREE {convention} '{fen}': python-chess {status:#x}, cwm {int(cwm):#x}")
print(f"{n} states compared, {bad} disagreements")
sys.exit(1 if bad else 0)
"#;

/// Tags every ply of every game (`convention \t uci uci …`) with python-chess's own functions
/// and prints one line per game: per ply the sorted tag names joined by `,` (`-` for none).
const TAG_ORACLE: &str = r#"
import sys
import chess

PROMOTIONS = {chess.QUEEN: "promo_q", chess.ROOK: "underpromo_r",
              chess.BISHOP: "underpromo_b", chess.KNIGHT: "underpromo_n"}

def key4(board, convention):
    mode = "fen" if convention == "reference" else "legal"
    return " ".join(board.fen(en_passant=mode).split()[:4])

def before_tags(board, move):
    tags = set()
    mover = board.turn
    piece = board.piece_at(move.from_square)
    target = board.piece_at(move.to_square)
    rights = board.castling_rights
    castling = board.is_castling(move)
    if board.is_en_passant(move):
        tags.add("ep_capture")
    elif board.is_capture(move):
        tags.add("capture")
    if castling:
        side = "k" if board.is_kingside_castling(move) else "q"
        tags.add(f"castle_{side}_{'white' if mover == chess.WHITE else 'black'}")
    if move.promotion:
        tags.add(PROMOTIONS[move.promotion])
    ranks = abs(chess.square_rank(move.to_square) - chess.square_rank(move.from_square))
    if piece.piece_type == chess.PAWN and ranks == 2:
        tags.add("double_push")
    backrank = chess.BB_RANK_1 if mover == chess.WHITE else chess.BB_RANK_8
    if piece.piece_type == chess.KING and rights & backrank:
        tags.add("rights_lost_king")
    if piece.piece_type == chess.ROOK and rights & chess.BB_SQUARES[move.from_square]:
        tags.add("rights_lost_rook_move")
    if (not castling and target is not None and target.piece_type == chess.ROOK
            and rights & chess.BB_SQUARES[move.to_square]):
        tags.add("rights_lost_rook_captured")
    return tags

def discovered(board, move, castling, en_passant):
    # After the move: a checker that did not move, on a line to the king that ran through the
    # moved piece's origin (or the pawn taken en passant).
    moved_to = {move.to_square}
    if castling:
        rank = chess.square_rank(move.to_square)
        moved_to.add(chess.square(5 if chess.square_file(move.to_square) == 6 else 3, rank))
    opened = chess.BB_SQUARES[move.from_square]
    if en_passant:
        opened |= chess.BB_SQUARES[chess.square(chess.square_file(move.to_square),
                                                chess.square_rank(move.from_square))]
    king = board.king(board.turn)
    return any(checker not in moved_to and chess.between(checker, king) & opened
               for checker in board.checkers())

def tag_game(convention, ucis):
    board = chess.Board()
    seen = {key4(board, convention): 1}
    plies = []
    for uci in ucis:
        move = chess.Move.from_uci(uci)
        assert board.is_legal(move), (uci, board.fen())
        tags = before_tags(board, move)
        castling = board.is_castling(move)
        en_passant = board.is_en_passant(move)
        fullmove = board.fullmove_number
        board.push(move)
        checkers = board.checkers()
        if checkers:
            tags.add("check")
        if len(checkers) >= 2:
            tags.add("double_check")
        if discovered(board, move, castling, en_passant):
            tags.add("discovered_check")
        if board.is_checkmate():
            tags.add("mate")
        if board.is_stalemate():
            tags.add("stalemate")
        key = key4(board, convention)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            tags.add("repetition")
        if board.halfmove_clock == 0:
            tags.add("halfmove_reset")
        if board.halfmove_clock >= 50:
            tags.add("halfmove_ge_50")
        if board.fullmove_number != fullmove and board.fullmove_number % 256 == 0:
            tags.add("fullmove_carry")
        if board.promoted & board.occupied:
            tags.add("promoted_piece_present")
        plies.append(",".join(sorted(tags)) or "-")
    return " ".join(plies)

for line in open(sys.argv[1], encoding="utf-8"):
    convention, ucis = line.rstrip("\n").split("\t")
    print(tag_game(convention, ucis.split()))
"#;

/// Runs an oracle script on an input file; returns its stdout, panicking with its output when it
/// fails.
fn run_oracle(script: &str, input: &Path) -> String {
    let output = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(input)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python-chess disagrees or failed on {}:\n{stdout}{stderr}",
        input.display()
    );
    stdout
}

/// Sets the en-passant labels to the square behind a pawn that may just have made a double
/// push (a pawn of the side not to move on its fourth rank), or to a random square if there is
/// none.
fn plausible_ep(labels: &mut StateLabels, rng: &mut Rng) {
    let white_to_move = labels[64] == 0;
    // Rank 5 (a8-first row 3) holds black pawns that may have pushed; rank 4 (row 4) white ones.
    let (row, pawn, rank_label) = if white_to_move { (3, 7, 2) } else { (4, 1, 1) };
    let files: Vec<usize> = (0..8)
        .filter(|&file| labels[row * 8 + file] == pawn)
        .collect();
    if files.is_empty() {
        labels[69] = 1 + rng.below(8) as u8;
        labels[70] = 1 + rng.below(2) as u8;
    } else {
        labels[69] = 1 + files[rng.below(files.len())] as u8;
        labels[70] = rank_label;
    }
}

/// A true state with 1–3 labels set to random in-range classes.
fn perturb(state: &StateLabels, rng: &mut Rng) -> StateLabels {
    let mut labels = *state;
    for _ in 0..1 + rng.below(3) {
        match rng.below(20) {
            0..=8 => labels[rng.below(64)] = rng.below(13) as u8,
            // Kings and rooks: missing, extra and misplaced kings and castling pieces.
            9..=10 => labels[rng.below(64)] = [4, 6, 10, 12][rng.below(4)],
            // Side, castling, en passant, counters.
            11..=16 => {
                let index = 64 + rng.below(11);
                labels[index] = rng.below(usize::from(LABEL_CLASSES[index])) as u8;
            }
            _ => plausible_ep(&mut labels, rng),
        }
    }
    labels
}

#[test]
fn status_agrees_with_python_chess_on_perturbed_true_states() {
    let path = require_data!(SAMPLE_PGN);
    if !require(
        "python-chess 1.11.2 for python3 (pip install chess==1.11.2)",
        python_chess_1_11_2(),
    ) {
        return;
    }
    const PER_CONVENTION: usize = 8_000;
    let mut rng = Rng::new(0x5EED_F1A6);
    let mut lines = String::new();
    let mut fired: BTreeMap<String, usize> = BTreeMap::new();
    let (mut n_v0_failures, mut n_flagged) = (0, 0);
    for ep in EpConvention::ALL {
        let states: Vec<StateLabels> = sample_games(&path, ep)
            .into_iter()
            .flat_map(|game| game.states)
            .collect();
        for _ in 0..PER_CONVENTION {
            let labels = perturb(&states[rng.below(states.len())], &mut rng);
            // Labels failing V0 still decode (a half-set en-passant pair as "-", fullmove 0 as
            // written, which python-chess reads as 1), and `status` is defined on that FEN: they
            // are compared too, and counted.
            n_v0_failures += usize::from(!syntactic(&labels));
            let flags = status(&labels, ep);
            n_flagged += usize::from(!flags.passes_v1());
            for flag in flags.iter() {
                *fired.entry(flag.to_string()).or_default() += 1;
            }
            let fen = decode_state_fen(&labels).unwrap();
            let _ = writeln!(lines, "{}\t{fen}\t{}", ep.name(), flags.v1().bits());
        }
    }
    let input = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cwm_rules_status_oracle.tsv");
    fs::write(&input, lines).unwrap();
    let stdout = run_oracle(STATUS_ORACLE, &input);
    eprintln!(
        "{stdout}{} perturbed states ({n_v0_failures} failing V0, {n_flagged} failing V1); \
         flags fired: {fired:?}",
        2 * PER_CONVENTION
    );
    assert!(stdout.contains(&format!(
        "{} states compared, 0 disagreements",
        2 * PER_CONVENTION
    )));
    // The perturbations reach most flags, the en-passant ones included.
    for name in [
        "NO_WHITE_KING",
        "NO_BLACK_KING",
        "TOO_MANY_KINGS",
        "TOO_MANY_WHITE_PIECES",
        "TOO_MANY_BLACK_PIECES",
        "PAWNS_ON_BACKRANK",
        "BAD_CASTLING_RIGHTS",
        "INVALID_EP_SQUARE",
        "OPPOSITE_CHECK",
        "IMPOSSIBLE_CHECK",
    ] {
        assert!(
            fired.get(name).is_some_and(|&n| n >= 10),
            "{name}: {fired:?}"
        );
    }
    assert!(n_v0_failures > 100, "{n_v0_failures}");
}

/// The sorted tag names of a step, joined as the oracle joins them.
fn tag_text(tags: EventTags) -> String {
    let mut names: Vec<&str> = tags.iter().filter_map(EventTags::name).collect();
    names.sort_unstable();
    if names.is_empty() {
        "-".to_owned()
    } else {
        names.join(",")
    }
}

#[test]
fn event_tags_of_the_sample_data_agree_with_python_chess() {
    let path = require_data!(SAMPLE_PGN);
    if !require(
        "python-chess 1.11.2 for python3 (pip install chess==1.11.2)",
        python_chess_1_11_2(),
    ) {
        return;
    }
    for ep in EpConvention::ALL {
        let games = sample_games(&path, ep);
        let mut input = String::new();
        let mut ours = Vec::new();
        let mut counts = vec![0usize; EventTags::COUNT];
        for game in &games {
            let _ = write!(input, "{}\t", ep.name());
            for (i, &token) in game.moves[1..].iter().enumerate() {
                if i > 0 {
                    input.push(' ');
                }
                assert!(write_uci(token, &mut input));
            }
            input.push('\n');
            let mut plies = Vec::new();
            for (t, step) in GameTagger::new(&game.moves, ep).enumerate() {
                let step = step.unwrap();
                assert_eq!(step.state, game.states[t + 1]);
                for (i, (tag, _)) in EventTags::ALL.iter().enumerate() {
                    counts[i] += usize::from(step.tags.contains(*tag));
                }
                plies.push(tag_text(step.tags));
            }
            ours.push(plies);
        }
        let file = format!("cwm_rules_tags_{}.tsv", ep.name());
        let input_path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(file);
        fs::write(&input_path, input).unwrap();
        let stdout = run_oracle(TAG_ORACLE, &input_path);
        let theirs: Vec<&str> = stdout.lines().collect();
        assert_eq!(theirs.len(), games.len());
        let mut disagreements = Vec::new();
        for (g, (plies, line)) in ours.iter().zip(&theirs).enumerate() {
            let python: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(python.len(), plies.len(), "{ep:?} game {g}");
            for (t, (a, b)) in plies.iter().zip(&python).enumerate() {
                if a != b {
                    disagreements
                        .push(format!("game {g} ply {}: cwm {a}, python-chess {b}", t + 1));
                }
            }
        }
        let table: Vec<String> = EventTags::ALL
            .iter()
            .zip(&counts)
            .map(|((_, name), n)| format!("{name} {n}"))
            .collect();
        eprintln!(
            "{ep:?}: {} games; tag counts: {}",
            games.len(),
            table.join(", ")
        );
        assert!(
            disagreements.is_empty(),
            "{ep:?}: {} plies disagree, first: {:#?}",
            disagreements.len(),
            &disagreements[..disagreements.len().min(10)]
        );
        // The sample exercises the common events.
        for tag in [
            EventTags::CAPTURE,
            EventTags::CASTLE_K_WHITE,
            EventTags::CASTLE_K_BLACK,
            EventTags::CHECK,
            EventTags::MATE,
            EventTags::PROMO_Q,
            EventTags::REPETITION,
        ] {
            let i = tag.bits().trailing_zeros() as usize;
            assert!(counts[i] > 0, "{ep:?}: no {tag}");
        }
    }
}
