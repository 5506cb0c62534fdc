"""One training step's kernels, from the log cubecl's kernel profiler writes for cwm
(``CWM_KERNEL_PROFILE=FILE``, crates/models/src/kernel_profile.rs), as markdown tables.

    CWM_KERNEL_PROFILE=target/profile.log cwm model bench --device cuda --arch transformer \\
        --size d512 --batch 128 --seq 256 --warmup 2 --steps 3 --json
    python3 benches/python/kernel_profile.py target/profile.log --steps 3 [--top 30]

cubecl closes a table of the kernels run since the last one at every device barrier, and
``cwm model bench`` ends each step with one, so the last ``--steps`` tables of the log are the
timed steps (the warm-up's autotuning and cubecl's measurements of the device add tables of
their own before them). Their rows are
averaged: per kernel, launches and milliseconds per step and the share of the step's kernel
time; then the same per kind of kernel (the name without the hash cubecl appends), which is
what a change to cwm is judged by (element-wise fusions, matrix products, reductions,
random numbers). Each kernel is timed on its own under the profiler, so the kernel time is
not the step's time with the profiler off; the shares and the launch counts are what the
table is for. With ``--step-s`` (a step's time without the profiler, from ``cwm model bench``)
it also says what part of a step the kernels fill: far under 100 % means a step waits on the
host rather than on its kernels.

Exit status 1 when the log has fewer tables than ``--steps``, with what it has.
"""

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

UNITS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}
DURATION = re.compile(r"^([0-9.]+)(ns|µs|us|ms|s)$")
HASH = re.compile(r"_[0-9a-f]{8}$")
NOISE = re.compile(r"^(DynamicScalar|DynamicSize|__\w+|\(\))$")


def milliseconds(text):
    """Rust's `Duration` debug text ("741.425352ms", "63.006µs", "1.45s") in milliseconds."""
    match = DURATION.match(text.strip())
    if not match:
        raise ValueError(f"not a duration: {text!r}")
    return float(match.group(1)) * UNITS[match.group(2)]


def summary_tables(lines):
    """Every summary table of the log: a list of (name, milliseconds, launches) rows each.
    cubecl's own measurements of the device (`...DirectThroughput` kernels, run once per
    device and cached) are left out, and a table of nothing else with them."""
    tables, rows = [], None
    for line in lines:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if rows is None:
            if cells[-3:] == ["Duration", "Num Computed", "Ratio"]:
                rows = []
            continue
        if cells and cells[0] == "Total":
            if rows:
                tables.append(rows)
            rows = None
        elif len(cells) >= 4 and cells[-2].isdigit():
            # A kernel's name may hold "|" itself: the last three cells are the figures.
            name = short(" | ".join(cells[:-3]))
            if not kind(name).endswith("DirectThroughput"):
                rows.append((name, milliseconds(cells[-3]), int(cells[-2])))
    return tables


def per_step(tables, key=lambda name: name):
    """The rows of `tables` summed by `key` of the name and divided by the number of tables."""
    totals = defaultdict(lambda: [0.0, 0])
    for rows in tables:
        for name, ms, launches in rows:
            totals[key(name)][0] += ms
            totals[key(name)][1] += launches
    n = len(tables)
    return sorted(
        ((name, ms / n, launches / n) for name, (ms, launches) in totals.items()),
        key=lambda row: -row[1],
    )


def short(name):
    """The name without cubecl's generic-argument noise: a matrix product's name lists its
    every input's scalar and size types; its kernel family and partitioning say which it is."""
    parts = [p for p in name.split(" | ") if not NOISE.match(p)]
    if len(parts) > 4:
        families = [p for p in parts[2:-1] if p.endswith("Family")]
        parts = parts[:2] + families[:1] + ["…", parts[-1]]
    # "·" between the parts: a "|" would split a markdown table's cell.
    return " · ".join(parts)


def kind(name):
    return HASH.sub("", name)


def table(rows, total_ms, top, what):
    out = [f"| {what} | launches per step | ms per step | share |", "|---|---:|---:|---:|"]
    for name, ms, launches in rows[:top]:
        share = 100 * ms / total_ms if total_ms else 0.0
        out.append(f"| {name} | {launches:g} | {ms:.3f} | {share:.1f} % |")
    rest = rows[top:]
    if rest:
        ms = sum(row[1] for row in rest)
        launches = sum(row[2] for row in rest)
        share = 100 * ms / total_ms if total_ms else 0.0
        out.append(f"| ({len(rest)} more) | {launches:g} | {ms:.3f} | {share:.1f} % |")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="the file CWM_KERNEL_PROFILE named")
    parser.add_argument("--steps", type=int, default=3, help="timed steps at the log's end")
    parser.add_argument("--top", type=int, default=30, help="kernels listed by name")
    parser.add_argument("--step-s", type=float, help="the step's time without the profiler")
    args = parser.parse_args()
    if args.steps < 1 or args.top < 1:
        sys.exit("--steps and --top must be positive")
    try:
        lines = args.log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as err:
        sys.exit(
            f"kernel_profile: {args.log}: {err.strerror} (only cwm's cuda and cube-cpu builds "
            "write one, with CWM_KERNEL_PROFILE set)"
        )
    tables = summary_tables(lines)
    if len(tables) < args.steps:
        print(
            f"kernel_profile: {args.log} has {len(tables)} table(s), fewer than the "
            f"{args.steps} step(s) asked for (the process may have ended before cubecl wrote them)",
            file=sys.stderr,
        )
        sys.exit(1)
    steps = tables[-args.steps :]
    kernels = per_step(steps)
    total_ms = sum(row[1] for row in kernels)
    launches = sum(row[2] for row in kernels)
    print(
        f"Kernels of one step, mean of the last {args.steps} of {len(tables)} tables in "
        f"{args.log.name}: {launches:g} launches, {total_ms:.3f} ms of kernel time."
    )
    if args.step_s:
        print(
            f"A step without the profiler took {1000 * args.step_s:.3f} ms, so the kernels ran "
            f"for {100 * total_ms / (1000 * args.step_s):.0f} % of it; the rest the device "
            "waited (for launches, the host's bookkeeping, read-backs)."
        )
    print()
    print(table(per_step(steps, kind), total_ms, args.top, "kind of kernel"))
    print()
    print(table(kernels, total_ms, args.top, "kernel"))


if __name__ == "__main__":
    main()
