#!/usr/bin/env python3
"""The table docs/gpu.md carries, from the JSON lines of ``compare_stacks.py --json-out``.

    python3 benches/python/session_table.py target/gpu-session-state/compare-stacks.jsonl

A session times cwm's step in several variants (its default, ``--products cublas``, ...,
``compare_stacks.py --cwm-args`` and ``--cwm-env``) beside one measurement of the reference
stack per cell. This prints, per family and size, the fastest variant's tokens per second
beside the reference's, their ratio and both sides' device memory, then every variant's ratio
with the number of rounds behind it: the figures of the table in "Where cwm stands against the
reference" without copying them from each step's table by hand. Each side's figure is the median
over its rounds; cwm's memory the most any of the variant's rounds held, the reference's the last
round's (reserved, with allocated in brackets). Cells measured at other shapes or settings
(``--batch``, ``--seq``, ...) get a table of their own. A cell without a reference figure, or
without any of cwm's, is listed with what it lacks. Nothing is printed for a file without
measurements (the prewarm's lines are not measurements).
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

# What a cell's key holds besides its family and size: what makes two cells' figures comparable.
SETTINGS = ("device", "stack", "batch", "seq", "warmup", "steps", "threads")


def variant(cell):
    """The name of the variant a cwm line measured: its ``--cwm-args`` and ``--cwm-env``, or
    ``default``."""
    words = [cell.get("cwm_args", "")]
    words += [f"{name}={value}" for name, value in sorted(cell.get("cwm_env", {}).items())]
    return " ".join(word for word in words if word) or "default"


def read(path):
    """The measurements of ``path`` grouped: {settings: {(family, size): {"torch": [lines],
    "cwm": {variant: [lines]}}}}, in the order the file first names them."""
    groups = {}
    for number, text in enumerate(path.read_text().splitlines(), 1):
        try:
            line = json.loads(text)
            side, cell = line["side"], line["cell"]
            settings = tuple(cell[name] for name in SETTINGS)
            where = (cell["family"], cell["size"])
            line["tokens_per_s"] = float(line["tokens_per_s"])
        except (ValueError, KeyError, TypeError):
            print(f"session_table: {path}:{number}: not a measurement, left out", file=sys.stderr)
            continue
        if side not in ("cwm", "torch"):
            continue
        figures = groups.setdefault(settings, {}).setdefault(where, {"torch": [], "cwm": {}})
        if side == "torch":
            figures["torch"].append(line)
        else:
            figures["cwm"].setdefault(variant(cell), []).append(line)
    return groups


def mib(value):
    return "" if value is None else f"{value / 1_048_576:,.0f}"


def tokens(lines):
    return statistics.median(line["tokens_per_s"] for line in lines)


def reference_memory(lines):
    last = lines[-1]
    text = mib(last.get("peak_reserved_bytes"))
    if last.get("peak_allocated_bytes") is not None:
        text += f" ({mib(last['peak_allocated_bytes'])})"
    return text


def row(family, size, figures):
    """One cell's row: the fastest variant beside the reference, then every variant."""
    variants = figures["cwm"]
    if not variants:
        return f"| {family} | {size} | no figure of cwm's |  |  |  |  |  |  |"
    best = max(variants, key=lambda name: tokens(variants[name]))
    ours = tokens(variants[best])
    held = max((line.get("peak_reserved_bytes") or 0 for line in variants[best]), default=0)
    if not figures["torch"]:
        each = "; ".join(f"{name} ({len(lines)})" for name, lines in variants.items())
        return (
            f"| {family} | {size} | {ours:,.0f} | no reference figure |  | {mib(held or None)} "
            f"|  | {best} | {each} |"
        )
    theirs = tokens(figures["torch"])
    each = "; ".join(
        f"{name} {tokens(lines) / theirs:.2f}× ({len(lines)})" for name, lines in variants.items()
    )
    return (
        f"| {family} | {size} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f}× | "
        f"{mib(held or None)} | {reference_memory(figures['torch'])} | {best} | {each} |"
    )


def table(path, settings, cells):
    named = dict(zip(SETTINGS, settings))
    title = (
        f"The fastest of cwm's variants in each cell against the {named['stack']} stack "
        f"({path}): training tokens/s at batch {named['batch']} × {named['seq']} tokens on "
        f"{named['device']}, {named['steps']} timed step(s) after {named['warmup']} warm-up, "
        "each side's median over its rounds; then each variant's ratio (its rounds)"
    )
    return "\n".join(
        [
            title,
            "",
            "| family | size | cwm tokens/s | reference tokens/s | ratio | cwm MiB | reference MiB "
            "reserved (allocated) | cwm's variant | each variant's ratio (rounds) |",
            "|---|---|---:|---:|---:|---:|---:|---|---|",
            *(row(family, size, figures) for (family, size), figures in cells.items()),
        ]
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jsonl", type=Path, help="compare_stacks.py's --json-out file")
    args = parser.parse_args()
    if not args.jsonl.is_file():
        parser.error(f"{args.jsonl} is not a file")
    groups = read(args.jsonl)
    if groups:
        print("\n\n".join(table(args.jsonl, s, cells) for s, cells in groups.items()))


if __name__ == "__main__":
    main()
