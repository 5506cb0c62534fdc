#!/usr/bin/env python3
"""python-chess baseline of the `data_path` bench: the reference's replay-and-encode.

For every game of a PGN file: `chess.pgn.read_game`, then each mainline move is packed
(spec A.1) and pushed, and the position after it is encoded into the 75 state labels
(spec A.2, E.2: python-chess's raw `board.ep_square`, clean castling rights, clamped
big-endian counters). Games of at least 2 * min_fullmoves plies get their id
(HMAC-SHA256 of the Site header, spec E.3) and count as kept, as in `data/process.py`.
Nothing is written: the figure is the replay and encoding alone.

Prints one JSON object: games read, games kept, plies and wall seconds.

    python3 replay_encode.py FILE.pgn [--min-fullmoves 10] [--repeat 1]
"""

import argparse
import hashlib
import hmac
import json
import time

import chess
import chess.pgn

START = 20480
PROMO_ID = {None: 0, chess.QUEEN: 1, chess.ROOK: 2, chess.BISHOP: 3, chess.KNIGHT: 4}
CORNERS = (chess.BB_H1, chess.BB_A1, chess.BB_H8, chess.BB_A8)


def pack(move):
    return (move.from_square * 64 + move.to_square) * 5 + PROMO_ID[move.promotion]


def encode(board):
    labels = [0] * 75
    for square, piece in board.piece_map().items():
        index = (7 - chess.square_rank(square)) * 8 + chess.square_file(square)
        labels[index] = piece.piece_type + (0 if piece.color == chess.WHITE else 6)
    labels[64] = 0 if board.turn == chess.WHITE else 1
    rights = board.clean_castling_rights()
    for offset, corner in enumerate(CORNERS):
        labels[65 + offset] = 1 if rights & corner else 0
    ep = board.ep_square
    if ep is not None:
        labels[69] = chess.square_file(ep) + 1
        labels[70] = 1 if chess.square_rank(ep) == 2 else 2
    halfmove = min(max(board.halfmove_clock, 0), 65535)
    fullmove = min(max(board.fullmove_number, 0), 65535)
    labels[71], labels[72] = halfmove >> 8, halfmove & 0xFF
    labels[73], labels[74] = fullmove >> 8, fullmove & 0xFF
    return labels


def run(path, min_plies, key):
    games = kept = plies = 0
    with open(path, encoding="utf-8", errors="replace") as handle:
        while True:
            game = chess.pgn.read_game(handle)
            if game is None:
                break
            games += 1
            site = game.headers.get("Site", "")
            board = game.board()
            moves = [START]
            states = [encode(board)]
            for move in game.mainline_moves():
                moves.append(pack(move))
                board.push(move)
                states.append(encode(board))
            n = len(moves) - 1
            plies += n
            if n >= min_plies:
                digest = hmac.new(key, site.strip().encode(), hashlib.sha256).hexdigest()
                _example_id = "cwm_" + digest[:24]
                kept += 1
    return games, kept, plies


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pgn")
    parser.add_argument("--min-fullmoves", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=1, help="passes over the file")
    args = parser.parse_args()
    key = b"bench key"
    start = time.perf_counter()
    games = kept = plies = 0
    for _ in range(args.repeat):
        g, k, p = run(args.pgn, 2 * args.min_fullmoves, key)
        games, kept, plies = games + g, kept + k, plies + p
    seconds = time.perf_counter() - start
    print(json.dumps({
        "python_chess": chess.__version__,
        "games": games,
        "kept": kept,
        "plies": plies,
        "seconds": seconds,
    }))


if __name__ == "__main__":
    main()
