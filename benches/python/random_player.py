#!/usr/bin/env python3
"""python-chess baseline of the `data_path` bench: a uniformly random player.

Plays games from the standard start, each move drawn uniformly from `list(board.legal_moves)`
with Python's `random.Random(seed)`, until `board.is_game_over(claim_draw=True)` (the
reference generator's termination, spec E.5), recording the packed move ids (spec A.1) as
cwm's fast mode does (no state labels). `--no-claims` stops at `board.is_game_over()`
instead (checkmate, stalemate, insufficient material, 75-move rule, fivefold repetition):
cheaper per ply, but games run longer, so it is a different workload.

Stops after `--games` games or `--seconds` seconds, whichever comes first, and prints one
JSON object: games, plies and wall seconds.

    python3 random_player.py [--games 50] [--seconds 20] [--seed 0] [--no-claims]
"""

import argparse
import json
import random
import time

import chess

PROMO_ID = {None: 0, chess.QUEEN: 1, chess.ROOK: 2, chess.BISHOP: 3, chess.KNIGHT: 4}


def play(rng, claim_draw):
    board = chess.Board()
    moves = [20480]
    while not board.is_game_over(claim_draw=claim_draw):
        legal = list(board.legal_moves)
        move = legal[rng.randrange(len(legal))]
        moves.append((move.from_square * 64 + move.to_square) * 5 + PROMO_ID[move.promotion])
        board.push(move)
    return len(moves) - 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-claims", action="store_true")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    claim_draw = not args.no_claims
    start = time.perf_counter()
    games = plies = 0
    while games < args.games and time.perf_counter() - start < args.seconds:
        plies += play(rng, claim_draw)
        games += 1
    seconds = time.perf_counter() - start
    print(json.dumps({
        "python_chess": chess.__version__,
        "claim_draw": claim_draw,
        "games": games,
        "plies": plies,
        "seconds": seconds,
    }))


if __name__ == "__main__":
    main()
