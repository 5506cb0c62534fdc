"""What cubecl's autotuner measured, from a kernel cache's database (``CWM_KERNEL_CACHE``,
crates/models/src/kernel_cache.rs; the session's ``kernel-cache.tar.xz`` unpacked), as
markdown tables:

    python3 benches/python/tuning_report.py target/kernel-cache/default.db [--op matmul]
    python3 benches/python/tuning_report.py DB --forget matmul

For each tuned shape of each operation (cubecl keys a shape by its dimensions rounded up to
powers of two, so one row can stand for several shapes): how many candidates were timed, how
many failed and how many were never timed (left out by their priority, or not reached
because the tuner stopped early), the fastest with its median time, the slowest timed one
against it, the time limit under which the tuner stops early and the peak that limit was
derived from. A row whose fastest time is under its limit with most candidates untimed is a
search the early stop ended. The last table is the device's peaks as cubecl measured them.

``--forget OP`` deletes the tuning results of the operations whose name contains OP (the
compiled kernels stay), so that the next process tunes those shapes again, for instance
with other autotuning settings. The database must not be in use. Its write-ahead log is folded
into it and removed with the index of it that cubecl's database engine (turso) keeps beside
it (``default.db-tshm``): an index left from before would make that engine drop every later
write without an error (seen on ``cube-cpu``: a process tuned again and kept none of it).

The database is SQLite; its keys and values are CBOR, read here by a small decoder of the
parts of CBOR that cubecl writes (no package needed). Exit status 1 when the file is not
such a database.
"""

import argparse
import sqlite3
import struct
import sys
from pathlib import Path


class CborError(ValueError):
    pass


def cbor(data):
    """The value CBOR `data` encodes (maps as dicts, arrays as lists)."""
    value, end = _item(data, 0)
    if end != len(data):
        raise CborError(f"{len(data) - end} byte(s) after the value")
    return value


BREAK = object()


def _length(data, pos, info):
    if info < 24:
        return info, pos
    sizes = {24: 1, 25: 2, 26: 4, 27: 8}
    if info not in sizes:
        raise CborError(f"additional information {info} at byte {pos - 1}")
    size = sizes[info]
    if pos + size > len(data):
        raise CborError("truncated")
    return int.from_bytes(data[pos : pos + size], "big"), pos + size


def _item(data, pos):
    if pos >= len(data):
        raise CborError("truncated")
    major, info = data[pos] >> 5, data[pos] & 31
    pos += 1
    if major == 7:
        return _simple(data, pos, info)
    if info == 31:
        return _indefinite(data, pos, major)
    n, pos = _length(data, pos, info)
    if major == 0:
        return n, pos
    if major == 1:
        return -1 - n, pos
    if major in (2, 3):
        if pos + n > len(data):
            raise CborError("truncated")
        raw = data[pos : pos + n]
        return (raw if major == 2 else raw.decode("utf-8")), pos + n
    if major == 4:
        items = []
        for _ in range(n):
            item, pos = _item(data, pos)
            items.append(item)
        return items, pos
    if major == 5:
        entries = {}
        for _ in range(n):
            key, pos = _item(data, pos)
            entries[_hashable(key)], pos = _item(data, pos)
        return entries, pos
    # major 6: a tag, whose item is the value
    return _item(data, pos)


def _simple(data, pos, info):
    if info == 31:
        return BREAK, pos
    floats = {25: (">e", 2), 26: (">f", 4), 27: (">d", 8)}
    if info in floats:
        fmt, size = floats[info]
        if pos + size > len(data):
            raise CborError("truncated")
        return struct.unpack(fmt, data[pos : pos + size])[0], pos + size
    simple = {20: False, 21: True, 22: None, 23: None}
    if info in simple:
        return simple[info], pos
    raise CborError(f"simple value {info}")


def _indefinite(data, pos, major):
    items = []
    while True:
        item, pos = _item(data, pos)
        if item is BREAK:
            break
        items.append(item)
    if major in (2, 3):
        return (b"" if major == 2 else "").join(items), pos
    if major == 4:
        return items, pos
    if major == 5:
        return {_hashable(k): v for k, v in zip(items[::2], items[1::2])}, pos
    raise CborError(f"indefinite length for major type {major}")


def _hashable(key):
    return repr(key) if isinstance(key, (dict, list)) else key


def duration_us(d):
    """A Rust `Duration` as cubecl serialises it ({secs, nanos}) in microseconds."""
    return d["secs"] * 1e6 + d["nanos"] / 1e3


def operation(namespace):
    """`autotune/<version>/<device>/<operation>` -> the operation."""
    return namespace.split("/")[-1]


def shape(key):
    """The tuned shape's short description from its key."""
    inner = key.get("key", key)
    inner = inner.get("matmul_key", inner)
    d = inner.get("definition")
    if isinstance(d, dict) and {"m", "n", "k"} <= d.keys():
        layouts = [d.get("matrix_layout_lhs"), d.get("matrix_layout_rhs")]
        layouts = "/".join(lay if isinstance(lay, str) else "permuted" for lay in layouts)
        extra = ""
        if "num_ops" in inner:
            extra = f", fused with {inner['num_ops']} op(s)"
        return f"{d['m']}×{d['n']}×{d['k']} {layouts}{extra}"
    reduce = inner.get("reduce")
    if isinstance(reduce, dict):
        return ", ".join(f"{k} {v}" for k, v in reduce.items() if not isinstance(v, dict))
    return ", ".join(f"{k} {v}" for k, v in inner.items() if not isinstance(v, dict))


def tuning_row(key, value):
    """One tuned shape: counts, the fastest, the slowest timed, the limit and its peak."""
    timed, failed, untimed = [], [], 0
    for result in value.get("results", []):
        outcome = result.get("outcome", {})
        if "Ok" in outcome:
            ok = outcome["Ok"]
            timed.append((duration_us(ok["computation"]["median"]), ok["name"]))
        elif "Skip" in outcome.get("Err", {}):
            untimed += 1
        else:
            failed.append(outcome.get("Err"))
    timed.sort()
    limit = value.get("limit")
    bounds = (value.get("bounds") or {}).get("bounds") or []
    peak = bounds[0]["resource"]["peak_per_s"] if bounds else None
    return {
        "shape": shape(key),
        "timed": len(timed),
        "failed": len(failed),
        "untimed": untimed,
        "fastest": timed[0] if timed else None,
        "slowest": timed[-1] if timed else None,
        "limit_us": duration_us(limit) if limit else None,
        "peak": peak,
    }


def entries(db):
    try:
        return list(db.execute("SELECT namespace, key, value FROM entries"))
    except sqlite3.DatabaseError as err:
        raise SystemExit(f"not a kernel cache's database: {err}") from err


def report(db, op):
    by_op = {}
    probes = []
    for namespace, key, value in entries(db):
        if namespace.startswith("autotune/") and op in operation(namespace):
            row = tuning_row(cbor(key), cbor(value))
            by_op.setdefault(operation(namespace), []).append(row)
        elif namespace.startswith("throughput/"):
            probes.append((cbor(key), cbor(value)))
    if not by_op:
        print(f"No tuning results of an operation named like {op!r}.")
    for name, rows in sorted(by_op.items()):
        rows.sort(key=lambda r: -(r["fastest"] or (0, ""))[0])
        stopped = sum(1 for r in rows if r["untimed"] and below_limit(r))
        print(f"## {name}: {len(rows)} shape(s), {stopped} with untimed candidates and a fastest "
              "time under the early stop's limit\n")
        print("| shape | timed | failed | untimed | fastest | µs | slowest timed / fastest "
              "| limit µs | peak, ops/s |")
        print("|---|---:|---:|---:|---|---:|---:|---:|---:|")
        for r in rows:
            print(row_text(r))
        print()
    print_probes(probes)


def below_limit(r):
    return r["fastest"] is not None and r["limit_us"] is not None and r["fastest"][0] < r["limit_us"]


def row_text(r):
    fastest_us, fastest = r["fastest"] or (None, "—")
    spread = f"{r['slowest'][0] / fastest_us:.2f}×" if fastest_us else "—"
    us = f"{fastest_us:,.1f}" if fastest_us is not None else "—"
    limit = f"{r['limit_us']:,.1f}" if r["limit_us"] is not None else "—"
    peak = f"{r['peak']:.3g}" if r["peak"] else "—"
    return (f"| {r['shape']} | {r['timed']} | {r['failed']} | {r['untimed']} | {fastest} "
            f"| {us} | {spread} | {limit} | {peak} |")


def print_probes(probes):
    if not probes:
        return
    print("## The device's peaks as cubecl measured them\n")
    print("| probe | operations | ns | per second |")
    print("|---|---:|---:|---:|")
    for key, value in sorted(probes, key=lambda p: repr(p[0])):
        mode = key.get("mode", key)
        ns = value["duration"]["secs"] * 1e9 + value["duration"]["nanos"]
        rate = f"{value['ops_count'] / ns * 1e9:.3g}" if ns else "—"
        print(f"| {describe_probe(mode)} | {value['ops_count']:,} | {ns:,.0f} | {rate} |")


def describe_probe(mode):
    if isinstance(mode, str):
        return mode
    (kind, detail), = mode.items()
    if isinstance(detail, dict):
        inner = ", ".join(f"{k} {v}" for k, v in detail.items())
        return f"{kind} ({inner})"
    return f"{kind} ({detail})"


def forget(db, path, op):
    doomed = [ns for (ns,) in db.execute("SELECT DISTINCT namespace FROM entries")
              if ns.startswith("autotune/") and op in operation(ns)]
    total = 0
    for ns in doomed:
        total += db.execute("DELETE FROM entries WHERE namespace = ?", (ns,)).rowcount
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    for suffix in ("-wal", "-tshm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    print(f"Forgot {total} tuning result(s) of {len(doomed)} operation(s) named like {op!r}.")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db", type=Path, help="the kernel cache's default.db")
    parser.add_argument("--op", default="", help="only operations whose name contains this")
    parser.add_argument("--forget", metavar="OP", help="delete these operations' results")
    args = parser.parse_args()
    if not args.db.is_file():
        raise SystemExit(f"{args.db}: no such file")
    db = sqlite3.connect(args.db)
    try:
        if args.forget is not None:
            entries(db)
            forget(db, args.db, args.forget)
        else:
            report(db, args.op)
    except CborError as err:
        raise SystemExit(f"{args.db}: an entry is not CBOR as cubecl writes it: {err}") from err


if __name__ == "__main__":
    sys.exit(main())
