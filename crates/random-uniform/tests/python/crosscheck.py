"""Random games played with python-chess, for cross-checking cwm-random-uniform.

`crosscheck.py positions GAMES_PER_START SEED` plays uniformly random games exactly like the
reference generator (board.legal_moves order, stopping at board.outcome(claim_draw=True)) from
a few start positions, and prints one JSON object per game on stdout:

    {"fen": start FEN, "moves": [UCI, ...], "orders": [legal moves of every position, in
     python-chess order, space-separated; the last is the final position],
     "termination": "CHECKMATE" | ..., "result": "1-0" | "0-1" | "1/2-1/2"}

A last line {"games_per_second": ..., "plies_per_second": ...} reports this process's speed for
the plain reference loop (no recording), to compare with the Rust fast mode.

`crosscheck.py reference SEED GAMES` runs the reference generator's loop itself (one
random.Random(SEED) for all games, from the standard start) and prints one JSON object per
generated game, short ones included: {"plies", "moves": "uci uci ...", "termination",
"result"}.
"""

import json
import random
import sys
import time

import chess

START_FENS = [
    chess.STARTING_FEN,
    # Castling on both wings for both sides.
    "r3k2r/pppq1ppp/2npbn2/2b1p3/2B1P3/2NPBN2/PPPQ1PPP/R3K2R w KQkq - 0 1",
    # Promotions and under-promotions, captures onto the back rank.
    "1n2k1n1/PPP5/8/8/8/8/5ppp/1N2K1N1 w - - 0 1",
    # In check from a just double-pushed pawn, two en-passant evasions.
    "8/8/8/4k3/2pPp3/8/8/4K3 b - d3 0 1",
    # En passant next to the king on the same rank (horizontal pin).
    "8/8/8/KPp4r/8/8/8/4k3 w - c6 0 1",
    # Long endgame with rooks: repetitions and fifty-move claims.
    "4k3/8/8/8/8/8/8/R3K2r w - - 0 1",
]


def play(board, rng, record):
    orders = []
    moves = []
    while True:
        legal = list(board.legal_moves)
        if record:
            orders.append(" ".join(m.uci() for m in legal))
        if board.is_game_over(claim_draw=True):
            break
        move = legal[rng.randrange(len(legal))]
        moves.append(move.uci())
        board.push(move)
    outcome = board.outcome(claim_draw=True)
    return moves, orders, outcome


def reference(seed, games):
    rng = random.Random(seed)
    for _ in range(games):
        board = chess.Board()
        moves, _, outcome = play(board, rng, record=False)
        print(json.dumps({
            "plies": len(moves),
            "moves": " ".join(moves),
            "termination": outcome.termination.name,
            "result": board.result(claim_draw=True),
        }))


def positions(per_start, seed):
    rng = random.Random(seed)
    for fen in START_FENS:
        for _ in range(per_start):
            board = chess.Board(fen)
            moves, orders, outcome = play(board, rng, record=True)
            print(json.dumps({
                "fen": fen,
                "moves": moves,
                "orders": orders,
                "termination": outcome.termination.name,
                "result": board.result(claim_draw=True),
            }))
    timing_rng = random.Random(seed)
    started = time.perf_counter()
    games = 5
    plies = sum(len(play(chess.Board(), timing_rng, record=False)[0]) for _ in range(games))
    elapsed = time.perf_counter() - started
    print(json.dumps({"games_per_second": games / elapsed, "plies_per_second": plies / elapsed}))


def main():
    if sys.argv[1] == "reference":
        reference(int(sys.argv[2]), int(sys.argv[3]))
    else:
        positions(int(sys.argv[2]), int(sys.argv[3]))


if __name__ == "__main__":
    main()
