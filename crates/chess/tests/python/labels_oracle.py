#!/usr/bin/env python3
"""Recomputes every state label of replayed games with python-chess (an independent oracle).

Input: a JSONL file written by the Rust test `python_labels`, one game per line:
    {"source": str, "index": int, "site": str, "moves": [START, id, ...],
     "uci": [str, ...], "states": [[75 ints], ...], "states_legal": [[75 ints], ...]}

`states` use the reference convention (python-chess's raw `board.ep_square`, spec A.2/E.2),
`states_legal` write the en-passant square only when an en-passant capture is legal.

Checks, for every game and ply:
  * the UCI move is legal in python-chess and packs to the same id (spec A.1);
  * every label of `states` equals the label computed here from the python-chess board;
  * `states_legal` equals `states` except labels 69/70, which are zero exactly when
    `board.ep_square` is set but `board.has_legal_en_passant()` is false.

Exits 1 at the first mismatch, naming the game, ply and label; 0 after printing counts.
Usage: python3 labels_oracle.py GAMES.jsonl
"""

import json
import sys

import chess

START = 20480
PROMOTION_IDS = {None: 0, chess.QUEEN: 1, chess.ROOK: 2, chess.BISHOP: 3, chess.KNIGHT: 4}


def pack(move):
    return (move.from_square * 64 + move.to_square) * 5 + PROMOTION_IDS[move.promotion]


def labels(board, ep_square):
    out = [0] * 75
    for square, piece in board.piece_map().items():
        index = (7 - chess.square_rank(square)) * 8 + chess.square_file(square)
        out[index] = piece.piece_type + (0 if piece.color == chess.WHITE else 6)
    out[64] = 0 if board.turn == chess.WHITE else 1
    rights = board.clean_castling_rights()
    for offset, corner in enumerate([chess.BB_H1, chess.BB_A1, chess.BB_H8, chess.BB_A8]):
        out[65 + offset] = 1 if rights & corner else 0
    if ep_square is not None:
        out[69] = chess.square_file(ep_square) + 1
        out[70] = 1 if chess.square_rank(ep_square) == 2 else 2
    halfmove = min(max(board.halfmove_clock, 0), 65535)
    fullmove = min(max(board.fullmove_number, 0), 65535)
    out[71], out[72] = halfmove >> 8, halfmove & 255
    out[73], out[74] = fullmove >> 8, fullmove & 255
    return out


def fail(game, ply, message):
    print(f"MISMATCH {game['source']} game {game['index']} ({game['site']}) ply {ply}: {message}")
    sys.exit(1)


def compare(game, ply, name, expected, got):
    for label, (want, have) in enumerate(zip(expected, got)):
        if want != have:
            fail(game, ply, f"{name} label {label}: python-chess {want}, Rust {have}")
    if len(expected) != len(got):
        fail(game, ply, f"{name} has {len(got)} labels")


def check_game(game):
    board = chess.Board()
    moves, states, states_legal = game["moves"], game["states"], game["states_legal"]
    if moves[0] != START or not len(moves) == len(states) == len(states_legal) == len(game["uci"]) + 1:
        fail(game, 0, "bad shape")
    n_differing = 0
    for ply in range(len(states)):
        if ply > 0:
            move = chess.Move.from_uci(game["uci"][ply - 1])
            if move not in board.legal_moves:
                fail(game, ply, f"{move.uci()} is not legal in {board.fen()}")
            if pack(move) != moves[ply]:
                fail(game, ply, f"{move.uci()} packs to {pack(move)}, Rust {moves[ply]}")
            board.push(move)
        compare(game, ply, "states", labels(board, board.ep_square), states[ply])
        legal_ep = board.ep_square if board.has_legal_en_passant() else None
        compare(game, ply, "states_legal", labels(board, legal_ep), states_legal[ply])
        differing = [i for i, (a, b) in enumerate(zip(states[ply], states_legal[ply])) if a != b]
        expected_difference = board.ep_square is not None and legal_ep is None
        if differing and (not expected_difference or set(differing) - {69, 70}):
            fail(game, ply, f"conventions differ at labels {differing}")
        if expected_difference and differing != [69, 70]:
            fail(game, ply, f"conventions should differ at 69/70, differ at {differing}")
        n_differing += bool(differing)
    return len(states) - 1, n_differing


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    n_games = n_plies = n_differing = 0
    with open(sys.argv[1], encoding="utf-8") as lines:
        for line in lines:
            plies, differing = check_game(json.loads(line))
            n_games += 1
            n_plies += plies
            n_differing += differing
    print(
        f"python-chess {chess.__version__}: {n_games} games, {n_plies} plies, "
        f"{n_plies + n_games} states match; the ep conventions differ in {n_differing} states"
    )


if __name__ == "__main__":
    main()
