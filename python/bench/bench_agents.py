"""Benchmark: ``sessctl.agents.SessctlSession`` against the Agents SDK's ``SQLiteSession``.

Both file-backed and durable (sessctl syncs each write; SQLite runs in WAL
mode with its default ``synchronous``), in the same run on the same disk:

1. ``--n`` calls of ``add_items`` with one item each, awaited one after the other;
2. ``get_items(limit=50)``: the first call, then the median of ``--reads`` more;
3. the bytes each left on disk.

The two sessions take turns, ``--round`` calls at a time (which one goes
first alternates), so that both see the same disk and the same load from the
rest of the machine: on a shared machine the time an ``fdatasync`` takes can
change several-fold within seconds, and one session's 10,000 calls followed
by the other's would compare two different disks. Each system's time is the
sum of its turns; its CPU time (``time.process_time``, both threads) is
reported beside it, being less sensitive to that load, and so are the
median, p99 and slowest of the single calls.

It prints a table with the ratio sessctl / SQLite (below 1.0 means sessctl is
faster or smaller) and, with ``--json FILE``, writes the numbers there.
``--quick`` runs a small size in a few seconds: it checks that the harness
and both sessions work (both must return the same items), never the timings.
Time a release build of the extension (``maturin develop --release``).

    python bench/bench_agents.py [--n 10000] [--round 100] [--reads 200] [--json FILE] [--quick] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

from agents.memory import SQLiteSession

import sessctl
from sessctl.agents import SessctlSession

LIMIT = 50


class _Session(Protocol):
    async def add_items(self, items: list[Any]) -> None: ...
    async def get_items(self, limit: int | None = None) -> list[Any]: ...


def item(k: int) -> dict[str, Any]:
    """The ``k``-th item: alternating user and assistant messages of about 150 bytes."""
    role = "user" if k % 2 == 0 else "assistant"
    return {"role": role, "content": f"message {k}: " + "lorem ipsum dolor sit amet " * 5}


def disk_bytes(paths: list[Path]) -> int:
    """Bytes of every regular file under ``paths`` (files or directories)."""
    total = 0
    for p in paths:
        if p.is_file():
            total += p.stat().st_size
        elif p.is_dir():
            for root, _dirs, files in os.walk(p):
                total += sum(os.stat(os.path.join(root, f)).st_size for f in files)
    return total


async def add_turn(session: _Session, ks: range, each: list[int]) -> tuple[int, int]:
    """``add_items`` of item ``k`` for each ``k`` in ``ks``; (wall, CPU) ns.

    Each call's wall time (ns) goes to ``each``."""
    wall, cpu = time.perf_counter_ns(), time.process_time_ns()
    for k in ks:
        start = time.perf_counter_ns()
        await session.add_items([item(k)])
        each.append(time.perf_counter_ns() - start)
    return time.perf_counter_ns() - wall, time.process_time_ns() - cpu


async def read(session: _Session, reads: int) -> dict[str, Any]:
    """``get_items(limit=50)``: the first call, then ``reads`` more; times and items."""
    start = time.perf_counter()
    first = await session.get_items(limit=LIMIT)
    first_read_s = time.perf_counter() - start
    samples = []
    for _ in range(reads):
        start = time.perf_counter()
        got = await session.get_items(limit=LIMIT)
        samples.append(time.perf_counter() - start)
        assert got == first
    return {
        "get_items_first_us": first_read_s * 1e6,
        "get_items_median_us": statistics.median(samples) * 1e6 if samples else None,
        "items": first,
    }


async def run(n: int, per_round: int, reads: int, root: Path) -> dict[str, Any]:
    """Both sessions on fresh files under ``root``; checks they agree, returns the results."""
    expected = [item(k) for k in range(max(0, n - LIMIT), n)]

    store_dir = root / "sessctl"
    db = root / "sqlite.db"
    sessions: dict[str, Any] = {
        "sessctl": SessctlSession("bench", sessctl.Store(store_dir)),
        "sqlite": SQLiteSession("bench", db),
    }
    wall = dict.fromkeys(sessions, 0)
    cpu = dict.fromkeys(sessions, 0)
    calls: dict[str, list[int]] = {name: [] for name in sessions}
    try:
        for turn, start in enumerate(range(0, n, per_round)):
            order = list(sessions) if turn % 2 == 0 else list(reversed(sessions))
            for name in order:
                ks = range(start, min(n, start + per_round))
                w, c = await add_turn(sessions[name], ks, calls[name])
                wall[name] += w
                cpu[name] += c
        results = {}
        for name in sessions:
            r = await read(sessions[name], reads)
            r["add_items_s"] = wall[name] / 1e9
            r["add_items_us_each"] = wall[name] / n / 1e3
            r["add_items_cpu_us_each"] = cpu[name] / n / 1e3
            each = sorted(calls[name])
            r["add_items_median_us"] = each[len(each) // 2] / 1e3
            r["add_items_p99_us"] = each[min(len(each) - 1, len(each) * 99 // 100)] / 1e3
            r["add_items_max_us"] = each[-1] / 1e3
            results[name] = r
    finally:
        sessions["sqlite"].close()
    ours, theirs = results["sessctl"], results["sqlite"]
    ours["bytes"] = disk_bytes([store_dir])
    theirs["bytes"] = disk_bytes([db, Path(f"{db}-wal"), Path(f"{db}-shm")])

    for name, got in (("sessctl", ours.pop("items")), ("sqlite", theirs.pop("items"))):
        if got != expected:
            raise SystemExit(
                f"bench_agents: {name} returned the wrong items for get_items(limit=50)"
            )

    def ratio(key: str) -> float | None:
        a, b = ours.get(key), theirs.get(key)
        return a / b if a is not None and b else None

    keys = [
        "add_items_s",
        "add_items_cpu_us_each",
        "add_items_median_us",
        "add_items_p99_us",
        "add_items_max_us",
        "get_items_first_us",
        "get_items_median_us",
        "bytes",
    ]
    with sqlite3.connect(":memory:") as probe:
        synchronous = probe.execute("PRAGMA synchronous").fetchone()[0]
    return {
        "n": n,
        "round": per_round,
        "reads": reads,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "sqlite_synchronous": synchronous,
        "sessctl": ours,
        "sqlite_session": theirs,
        "ratio": {k: ratio(k) for k in keys},
    }


def table(r: dict[str, Any]) -> str:
    """The results as a Markdown table."""
    ours, theirs, ratio = r["sessctl"], r["sqlite_session"], r["ratio"]

    def num(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    rows = [
        (f"add_items x {r['n']} (s)", "add_items_s", ",.2f"),
        ("add_items CPU time each (µs)", "add_items_cpu_us_each", ",.0f"),
        ("add_items one call, median (µs)", "add_items_median_us", ",.0f"),
        ("add_items one call, p99 (µs)", "add_items_p99_us", ",.0f"),
        ("add_items one call, max (µs)", "add_items_max_us", ",.0f"),
        ("get_items(limit=50), first (µs)", "get_items_first_us", ",.0f"),
        ("get_items(limit=50), median (µs)", "get_items_median_us", ",.0f"),
        ("bytes on disk", "bytes", ",.0f"),
    ]
    lines = [
        "| | SessctlSession | SQLiteSession | sessctl / SQLite |",
        "|---|---:|---:|---:|",
    ]
    for label, key, fmt in rows:
        cells = [num(ours[key], fmt), num(theirs[key], fmt), num(ratio[key], ".2f") + "×"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append(
        f"\nadd_items each: sessctl {ours['add_items_us_each']:,.0f} µs, "
        f"SQLite {theirs['add_items_us_each']:,.0f} µs; "
        f"turns of {r['round']} calls "
        f"(Python {r['python']}, SQLite {r['sqlite']}, "
        f"PRAGMA synchronous={r['sqlite_synchronous']})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parses the arguments, runs the benchmark, prints the table (and writes ``--json``)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--n", type=int, default=10_000, help="add_items calls, one item each")
    p.add_argument(
        "--round", type=int, default=100, help="add_items calls a session makes in one turn"
    )
    p.add_argument("--reads", type=int, default=200, help="timed get_items(limit=50) calls")
    p.add_argument("--json", metavar="FILE", help="also write the results to FILE")
    p.add_argument("--quick", action="store_true", help="a small run that checks correctness")
    p.add_argument("--dir", help="where to put the files (default: a temporary directory)")
    args = p.parse_args(argv)
    n, reads = (200, 20) if args.quick else (args.n, args.reads)
    if n < 1 or reads < 0 or args.round < 1:
        p.error("--n and --round must be at least 1 and --reads at least 0")

    def go(root: Path) -> dict[str, Any]:
        return asyncio.run(run(n, args.round, reads, root))

    if args.dir:
        root = Path(args.dir)
        if (root / "sessctl").exists() or (root / "sqlite.db").exists():
            p.error(f"{root} holds an earlier run; give an empty or new directory")
        root.mkdir(parents=True, exist_ok=True)
        results = go(root)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-agents-") as tmp:
            results = go(Path(tmp))
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
