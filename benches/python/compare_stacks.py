"""cwm's training throughput beside a PyTorch stack's, per family and size, as the table of
docs/gpu.md: tokens per second, their ratio, and the device memory each side held.

    python3 benches/python/compare_stacks.py --cwm target/release/cwm --device cuda \
        --families all --sizes d128,d512 --batch 128 --seq 256 --steps 10 --rounds 2 \
        [--stack reference] [--json-out figures.jsonl]

Each cell runs ``cwm model bench --json`` (the train stage's step) and ``train_torch.py``
(``--stack reference``, the default here: the libraries the reference imports, with its
precision and its step's read-backs; ``--stack eager``: cwm's own PyTorch versions) with the
same batch, length, warm-up and timed steps, each in a fresh process, ``--rounds`` times in
alternating order (cwm first in odd rounds, PyTorch first in even ones). A side's figure is the
median over rounds of its per-process medians; the ratio is cwm's over PyTorch's (≥ 1.0× means
cwm is at least as fast). Memory: the most cwm's allocator held after any step, and PyTorch's
``max_memory_reserved`` (with ``max_memory_allocated`` in brackets); blank on the CPU.

Both sides run a few more steps after the timed ones that wait for the device after each phase
(``phase_s``: the body's forward pass, the head and loss, the backward pass, the update); a
second table, after the first, puts each phase's median beside the other side's: where a
step's time goes.

The markdown tables go to stdout, progress to stderr (each process's wall time included);
``--json-out`` appends every process's own JSON line with its ``side``, ``round`` and ``cell``
(the settings that identify the measurement). A cell that fails (a library missing, a
non-finite loss, out of memory, a process past ``--timeout``) is reported in its row with the
error's last line, the other cells go on, and the exit status is 1.

``--cwm-args`` times a variant of cwm's step (``"--loss fused-device"``, ``"--chunk-size
32"``): the arguments go to every ``cwm model bench`` and into the cwm side's record, so a run
with other ``--cwm-args`` and ``--resume`` on the same file runs cwm's processes again and
reuses PyTorch's. ``--cwm-env NAME=VALUE`` (repeatable) does the same with a variable in cwm's
environment (``CUBECL_AUTOTUNE_SHORT_CIRCUIT=1``: cubecl's autotuner with its early stop, which
cwm turns off on CUDA), recorded as the cell's ``cwm_env``. The table's last three columns: the
loss kernel and the optimizer's update cwm ran (``--update ops``: the update as separate tensor
operations); the time of cwm's first warm-up step (median over rounds), which on a GPU holds
the compilation and autotuning of the step's kernels, less what the kernel cache
(``CWM_KERNEL_CACHE``) had; and the share of cwm's
step after which the host had recorded the forward and backward passes (``queued_s``; median
over steps, then rounds): on a GPU, near 100 % means the host sets the pace, far under it the
device.

For a machine lent for a limited time, two more options make the comparison a series of calls
that each end in time and pick up where the last one stopped:

* ``--budget-s S``: no process runs past S seconds from the start. Once the longest cell so
  far would not fit in what is left, or a process is still running at the budget's end (it is
  stopped), no process starts; the cells left are reported as "not run" (exit status 3 when
  nothing failed), except those ``--resume`` finds whole in the file.
* ``--resume`` (with ``--json-out``): a process whose line the file already holds for the same
  cell, side and round is not run again; its figures are read from the file. With every
  process there, nothing runs and the table is printed from the file.

A cwm process on a GPU spends its first step compiling and autotuning the step's kernels
(about 100 s on an H200), one kernel after another, and the compilation keeps one CPU core busy
while the GPU idles. ``--prewarm P`` first runs cwm's process of every cell still to be measured,
P at a time, with its warm-up and one timed step, so that the cells' compilations share the
machine's cores; with ``CWM_KERNEL_CACHE`` set they leave the compiled kernels on disk for the
measured processes. They run with ``CWM_KERNEL_TUNING=off``: a kernel timed while other
processes shared the GPU may not be the fastest alone, so the measured processes tune again
(timing only: every candidate is compiled by then). Their lines go to ``--json-out`` as side
``prewarm`` (``--resume`` skips a cell prewarmed before); a prewarm process that fails is
reported on stderr and its cell measured as usual. ``--prewarm-only`` stops after it and prints a
table of the prewarm processes instead (exit status 1 if one failed, 3 if the budget cut it).
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "crates/models/python"))
from cwm_torch_models import FAMILIES, SIZES  # noqa: E402


def listed(text, known, what):
    if text == "all":
        return list(known)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {unknown} (expected some of {', '.join(known)} or all)"
        )
    return names


def shape_args(args, arch, size, steps=None):
    return [
        "--arch", arch, "--size", size, "--device", args.device,
        "--batch", str(args.batch), "--seq", str(args.seq),
        "--warmup", str(args.warmup), "--steps", str(steps or args.steps),
    ]  # fmt: skip


def commands(args, arch, size):
    """The two processes of one cell, cwm's first, and cwm's as the prewarm runs it."""
    cwm = [str(args.cwm), "--threads", str(args.threads), "model", "bench", "--json"]
    torch = [
        sys.executable,
        str(HERE / "train_torch.py"),
        "--stack",
        args.stack,
        "--threads",
        str(args.threads),
    ]
    variant = shlex.split(args.cwm_args)
    return {
        "cwm": cwm + shape_args(args, arch, size) + variant,
        "torch": torch + shape_args(args, arch, size),
        "prewarm": cwm + shape_args(args, arch, size, steps=1) + variant,
    }


class OutOfBudget(Exception):
    """The time budget ran out before the cell's processes were done; ``seconds``: how long the
    process it stopped had run (``None`` when none was running)."""

    def __init__(self, seconds=None):
        super().__init__()
        self.seconds = seconds

    def say(self, what):
        """On stderr, the stopped process ``what`` and how long it ran (a start-up's length is
        worth knowing even then); nothing when none was stopped."""
        if self.seconds is not None:
            print(
                f"compare_stacks: {what} stopped at the budget's end after {self.seconds:.1f} s",
                file=sys.stderr,
            )


def cell_key(args, arch, size):
    """The settings that identify one cell's measurement in ``--json-out``."""
    return {
        "family": arch, "size": size, "device": args.device, "stack": args.stack,
        "batch": args.batch, "seq": args.seq, "warmup": args.warmup, "steps": args.steps,
        "threads": args.threads,
    }  # fmt: skip


def side_cell(args, cell, side):
    """The cell as one side's records name it: cwm's (and its prewarm's) with its
    ``--cwm-args`` and ``--cwm-env``, if any."""
    if side not in ("cwm", "prewarm"):
        return cell
    if args.cwm_args:
        cell = {**cell, "cwm_args": args.cwm_args}
    if args.cwm_env:
        cell = {**cell, "cwm_env": dict(args.cwm_env)}
    return cell


def cwm_environment(args, extra=None):
    """The environment of cwm's processes: this one's with ``--cwm-env`` (and ``extra``) on top;
    ``None`` (inherit) when there is nothing to add."""
    added = {**dict(args.cwm_env), **(extra or {})}
    return {**os.environ, **added} if added else None


def variable(text):
    """``NAME=VALUE`` as a pair, for ``--cwm-env``."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def record_key(cell, side, round_number):
    """How ``--resume`` finds one process's line: its cell, side and round."""
    return json.dumps(cell, sort_keys=True), side, round_number


def recorded(path):
    """The lines of an earlier ``--json-out``, keyed by :func:`record_key`."""
    found = {}
    if path is None or not path.exists():
        return found
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            value = json.loads(line)
            key = record_key(value["cell"], value["side"], value["round"])
        except (ValueError, KeyError, TypeError):
            print(f"compare_stacks: {path}:{number}: not a line of this script, ignored", file=sys.stderr)
            continue
        found[key] = value
    return found


class Clock:
    """The time budget: how long the next process may run, and whether a cell still fits."""

    def __init__(self, budget_s, timeout_s):
        self.start, self.budget_s, self.timeout_s = time.monotonic(), budget_s, timeout_s
        self.longest_cell_s = 0.0
        self.closed = False

    def left(self):
        return None if self.budget_s is None else self.budget_s - (time.monotonic() - self.start)

    def check_a_cell_fits(self):
        """Closes the clock, for good, once the longest cell so far would not fit."""
        left = self.left()
        self.closed = self.closed or (left is not None and left <= self.longest_cell_s)

    def process_limit(self):
        """(seconds, whether the budget rather than --timeout sets them); raises OutOfBudget
        when the clock is closed."""
        if self.closed:
            raise OutOfBudget()
        left = self.left()
        if left is not None and (self.timeout_s is None or left < self.timeout_s):
            return max(left, 0.0), True
        return self.timeout_s, False


def run(command, clock, env=None):
    """The process's JSON line. Raises RuntimeError with the last line of its stderr and the
    process's wall time, or OutOfBudget when the budget, not --timeout, stopped it."""
    limit, by_budget = clock.process_limit()
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, check=False, capture_output=True, text=True, timeout=limit, env=env
        )
    except subprocess.TimeoutExpired:
        if by_budget:
            clock.closed = True
            raise OutOfBudget(time.monotonic() - started) from None
        raise RuntimeError(f"timed out after {limit:g} s (--timeout)") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()] or [
            f"exit status {done.returncode}"
        ]
        raise RuntimeError(f"{lines[-1].strip()} (after {time.monotonic() - started:.1f} s)")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_cell(args, arch, size, sink, clock, earlier):
    """Per side, the list of its rounds' JSON objects (from ``earlier`` where it has them)."""
    figures = {"cwm": [], "torch": []}
    cell = commands(args, arch, size)
    key = cell_key(args, arch, size)
    started = time.monotonic()
    for round_index in range(args.rounds):
        order = ("cwm", "torch") if round_index % 2 == 0 else ("torch", "cwm")
        for side in order:
            side_key = side_cell(args, key, side)
            line = earlier.get(record_key(side_key, side, round_index + 1))
            if line is None:
                begun = time.monotonic()
                what = f"{arch} {size} round {round_index + 1}: {side}"
                try:
                    env = cwm_environment(args) if side == "cwm" else None
                    value = run(cell[side], clock, env)
                except OutOfBudget as stop:
                    stop.say(what)
                    raise
                print(
                    f"compare_stacks: {what} ({time.monotonic() - begun:.1f} s)", file=sys.stderr
                )
                line = {"side": side, "round": round_index + 1, "cell": side_key, **value}
                if sink is not None:
                    sink.write(json.dumps(line) + "\n")
                    sink.flush()
            figures[side].append(line)
    clock.longest_cell_s = max(clock.longest_cell_s, time.monotonic() - started)
    return figures


# What the prewarm's processes run with (see the module docs).
PREWARM_ENV = {"CWM_KERNEL_TUNING": "off"}


def to_prewarm(args, cells, earlier):
    """The cells whose cwm processes are not all in ``earlier`` and that were not prewarmed
    before."""
    def missing(key):
        rounds = range(1, args.rounds + 1)
        cwm = side_cell(args, key, "cwm")
        return any(record_key(cwm, "cwm", r) not in earlier for r in rounds)

    keys = [(arch, size, cell_key(args, arch, size)) for arch, size in cells]
    return [
        (arch, size) for arch, size, key in keys
        if missing(key) and record_key(side_cell(args, key, "prewarm"), "prewarm", 0) not in earlier
    ]  # fmt: skip


def prewarm(args, cells, sink, clock):
    """Runs the prewarm processes of ``cells``, ``args.prewarm`` at a time; per cell, its
    JSON line (with ``wall_s``) or the error's text."""
    lock = threading.Lock()
    env = cwm_environment(args, PREWARM_ENV)

    def one(cell):
        arch, size = cell
        begun = time.monotonic()
        try:
            value = run(commands(args, arch, size)["prewarm"], clock, env)
        except OutOfBudget as stop:
            stop.say(f"prewarm {arch} {size}")
            return "not run: the time budget ran out"
        except (RuntimeError, ValueError) as error:
            print(f"compare_stacks: prewarm {arch} {size} failed: {error}", file=sys.stderr)
            return f"failed: {error}"
        wall_s = time.monotonic() - begun
        key = side_cell(args, cell_key(args, arch, size), "prewarm")
        line = {"side": "prewarm", "round": 0, "cell": key, "env": PREWARM_ENV, "wall_s": wall_s}
        line.update(value)
        with lock:
            print(f"compare_stacks: prewarm {arch} {size} ({wall_s:.1f} s)", file=sys.stderr)
            if sink is not None:
                sink.write(json.dumps(line) + "\n")
                sink.flush()
        return line

    with ThreadPoolExecutor(max_workers=args.prewarm) as pool:
        return dict(zip(cells, pool.map(one, cells)))


def prewarm_table(args, results):
    """The prewarm's processes as a markdown table, and the exit status they make."""
    lines = [
        f"cwm's prewarm at batch {args.batch} × {args.seq} tokens on {args.device}: "
        f"{args.warmup} warm-up step(s) and one timed step per cell, {args.prewarm} at a time, "
        + ", ".join(f"{k}={v}" for k, v in PREWARM_ENV.items()),
        "",
        "| family | size | first step s | process s | result |",
        "|---|---|---:|---:|---|",
    ]
    for (arch, size), result in results.items():
        if isinstance(result, dict):
            first = (result.get("warmup_s") or [None])[0]
            first = "" if first is None else f"{first:.1f}"
            lines.append(f"| {arch} | {size} | {first} | {result['wall_s']:.1f} | done |")
        else:
            lines.append(f"| {arch} | {size} |  |  | {result} |")
    texts = [r for r in results.values() if isinstance(r, str)]
    status = 1 if any(t.startswith("failed") for t in texts) else 3 if texts else 0
    return "\n".join(lines), status


def mib(value):
    return "" if value is None else f"{value / 1_048_576:,.0f}"


def row(arch, size, figures):
    ours = statistics.median(f["tokens_per_s"] for f in figures["cwm"])
    theirs = statistics.median(f["tokens_per_s"] for f in figures["torch"])
    cwm_memory = max((f.get("peak_reserved_bytes") or 0 for f in figures["cwm"]), default=0) or None
    last = figures["torch"][-1]
    torch_memory = mib(last.get("peak_reserved_bytes"))
    if last.get("peak_allocated_bytes") is not None:
        torch_memory += f" ({mib(last['peak_allocated_bytes'])})"
    ours_last = figures["cwm"][-1]
    notes = (
        f"cwm {ours_last.get('precision', 'f32')}, {ours_last.get('loss', 'auto')} loss, "
        f"{ours_last.get('update', 'one-pass')} update{fusion_note(ours_last)}"
        f"{settings_note(ours_last)}; "
        f"PyTorch {last.get('precision', '')}, {last.get('step', '')} step"
        + (f", {last['stack_note']}" if last.get("stack_note") else "")
    )
    firsts = [f["warmup_s"][0] for f in figures["cwm"] if f.get("warmup_s")]
    first = f"{statistics.median(firsts):.1f}" if firsts else ""
    return (
        f"| {arch} | {size} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f}× | "
        f"{mib(cwm_memory)} | {torch_memory} | {notes} | {first} | {queued_share(figures['cwm'])} |"
    )


def fusion_note(line):
    """How widely cwm's process searched for operations to fuse, where it made a cubecl
    device (``fusion_blocks`` of ``cwm model bench --json``)."""
    blocks = line.get("fusion_blocks")
    if blocks is None:
        return ""
    return ", burn's fusion search" if blocks == "burn" else f", {blocks}-block fusion search"


# The process settings ``cwm model bench --json`` reports for a cubecl device: each one's field,
# its default, and how a row's notes name it where it is not the default.
SETTINGS = [
    ("attention", "operations", "attention"),  # the transformer's training attention
    ("delta_chunks", "kernels", "delta chunks"),  # Gated DeltaNet's passage between chunks
    ("column_sums", "blocks", "column sums"),  # a bias's gradient summed over the rows
    ("embedding_grad", "scatter", "embedding gradient"),  # the input embedding's gradient
    ("slice_scan", "kernel", "SLiCE scan"),  # SLiCE's recurrence, both block sizes
    ("products", "cubecl", "products"),  # who multiplies the Linear matrices
]


def settings_note(line):
    """The settings cwm's process ran with where they are not its defaults, in the order of
    ``SETTINGS`` (an older line without a field counts as its default)."""
    return "".join(
        f", {label}: {line[field]}"
        for field, default, label in SETTINGS
        if line.get(field) not in (None, default)
    )


def queued_share(lines):
    """The median over rounds of the share of cwm's step that the host spent recording its
    forward and backward passes (``queued_s`` over ``step_s``, step by step); blank for lines
    without it."""
    shares = [
        statistics.median(q / s for q, s in zip(f["queued_s"], f["step_s"]))
        for f in lines
        if f.get("queued_s")
    ]
    return f"{100 * statistics.median(shares):.0f} %" if shares else ""


# The table's columns, with each one's markdown alignment.
COLUMNS = [
    ("family", "---"), ("size", "---"), ("cwm tokens/s", "---:"), ("PyTorch tokens/s", "---:"),
    ("ratio", "---:"), ("cwm MiB", "---:"), ("PyTorch MiB reserved (allocated)", "---:"),
    ("precision and loss, PyTorch's step", "---"), ("cwm's first step s", "---:"),
    ("cwm's step queued by", "---:"),
]


# A step's phases, as both sides' ``phase_s`` name them, and the phase table's words for them.
PHASES = [
    ("forward_s", "forward"),
    ("loss_s", "head and loss"),
    ("backward_s", "backward"),
    ("update_s", "update"),
]


def phase_seconds(lines, phase):
    """The median over rounds of a side's median over its steps by phases of ``phase``;
    ``None`` when a round has no such steps (a binary or script from before them, or
    ``--phase-steps 0``)."""
    medians = [
        statistics.median(p[phase] for p in f["phase_s"]) if f.get("phase_s") else None
        for f in lines
    ]
    return None if not medians or None in medians else statistics.median(medians)


def phase_table(measured):
    """Where a step's time goes on both sides: per cell of ``measured`` ((arch, size,
    figures)), each phase's seconds on each side and PyTorch's over cwm's; empty when no cell
    has both sides' phases."""
    rows = []
    for arch, size, figures in measured:
        cells = []
        for phase, _ in PHASES:
            ours, theirs = (phase_seconds(figures[side], phase) for side in ("cwm", "torch"))
            if ours is None or theirs is None:
                break
            ratio = f"{theirs / ours:.2f}×" if ours > 0 else ""
            cells.append(f"{1000 * ours:,.1f} | {1000 * theirs:,.1f} | {ratio}")
        if len(cells) == len(PHASES):
            rows.append(f"| {arch} | {size} | " + " | ".join(cells) + " |")
    if not rows:
        return ""
    columns = ["family", "size"] + [
        f"{words}, {who}" for _, words in PHASES for who in ("cwm ms", "PyTorch ms", "ratio")
    ]
    return "\n".join(
        [
            "Where a step's time goes: steps after the timed ones, each phase ended by a wait for "
            "the device (medians over those steps, then rounds); the ratio is PyTorch's time over "
            "cwm's (≥ 1.0× means cwm's phase is at least as fast)",
            "",
            "| " + " | ".join(columns) + " |",
            "|---|---|" + "---:|" * (len(columns) - 2),
            *rows,
        ]
    )


def note_row(arch, size, text):
    """A cell's row that holds only a note (not run, failed), the other columns blank."""
    return f"| {arch} | {size} | {text} |" + "  |" * (len(COLUMNS) - 3)


def header(args):
    title = (
        f"cwm against the {args.stack} PyTorch stack: training tokens/s at batch {args.batch} × "
        f"{args.seq} tokens on {args.device}, median of {args.steps} steps after {args.warmup} "
        f"warm-up, median of {args.rounds} round(s) per side"
        + (f"; cwm with {args.cwm_args}" if args.cwm_args else "")
        + "".join(f"; cwm's {name}={value}" for name, value in args.cwm_env)
    )
    return "\n".join(
        [
            title,
            "",
            "| " + " | ".join(name for name, _ in COLUMNS) + " |",
            "|" + "|".join(align for _, align in COLUMNS) + "|",
        ]
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cwm", type=Path, default=Path("target/release/cwm"), help="the cwm binary")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (both sides)")
    parser.add_argument("--families", default="all", type=lambda t: listed(t, FAMILIES, "family"))
    parser.add_argument("--sizes", default="d128,d512", type=lambda t: listed(t, SIZES, "size"))
    parser.add_argument("--stack", choices=("reference", "eager"), default="reference")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of each side")
    parser.add_argument(
        "--cwm-args", default="", help="more arguments for cwm model bench: the variant to time"
    )
    parser.add_argument(
        "--cwm-env",
        type=variable,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a variable in cwm's environment: the variant to time (repeatable)",
    )
    parser.add_argument("--json-out", type=Path, help="append every process's JSON line here")
    parser.add_argument("--resume", action="store_true", help="reuse what --json-out already holds")
    parser.add_argument("--budget-s", type=float, help="end within this many seconds (see above)")
    parser.add_argument("--timeout", type=float, help="stop a process after this many seconds")
    parser.add_argument(
        "--prewarm", type=int, metavar="P", help="compile cwm's kernels first, P cells at a time"
    )
    parser.add_argument("--prewarm-only", action="store_true", help="stop after the prewarm")
    args = parser.parse_args()
    if min(args.batch, args.seq, args.steps, args.rounds, args.threads) < 1 or args.warmup < 0:
        parser.error(
            "--batch, --seq, --steps, --rounds and --threads must be positive, --warmup not negative"
        )
    if any(value is not None and value <= 0 for value in (args.budget_s, args.timeout)):
        parser.error("--budget-s and --timeout must be positive")
    if args.resume and args.json_out is None:
        parser.error("--resume reads the file of --json-out: give one")
    if args.prewarm is not None and args.prewarm < 1:
        parser.error("--prewarm must be positive")
    if args.prewarm_only and args.prewarm is None:
        parser.error("--prewarm-only needs --prewarm P")
    if not args.cwm.is_file():
        parser.error(f"{args.cwm} is not a file (build cwm, or pass --cwm)")

    earlier = recorded(args.json_out) if args.resume else {}
    clock = Clock(args.budget_s, args.timeout)
    sink = args.json_out.open("a") if args.json_out else None
    cells = [(arch, size) for arch in args.families for size in args.sizes]
    if args.prewarm is not None:
        results = prewarm(args, to_prewarm(args, cells, earlier), sink, clock)
        if args.prewarm_only:
            if sink is not None:
                sink.close()
            table, status = prewarm_table(args, results)
            print(table)
            sys.exit(status)
    lines, failed, not_run, measured = [header(args)], 0, 0, []
    for arch, size in cells:
        clock.check_a_cell_fits()
        try:
            figures = measure_cell(args, arch, size, sink, clock, earlier)
            lines.append(row(arch, size, figures))
            measured.append((arch, size, figures))
        except OutOfBudget:
            not_run += 1
            lines.append(note_row(arch, size, "not run: the time budget ran out"))
        except (RuntimeError, ValueError, KeyError) as error:
            failed += 1
            print(f"compare_stacks: {arch} {size} failed: {error}", file=sys.stderr)
            lines.append(note_row(arch, size, f"failed: {error}"))
    if sink is not None:
        sink.close()
    if not_run:
        print(
            f"compare_stacks: {not_run} cell(s) not run within --budget-s {args.budget_s:g}; "
            "run again with --resume to go on",
            file=sys.stderr,
        )
    phases = phase_table(measured)
    print("\n".join(lines + (["", phases] if phases else [])))
    sys.exit(1 if failed else 3 if not_run else 0)


if __name__ == "__main__":
    main()
