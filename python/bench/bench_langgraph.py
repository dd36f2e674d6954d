"""Bench: SessctlSaver against SqliteSaver and InMemorySaver on one LangGraph run.

A graph over ``MessagesState`` whose one node appends a ~1.7 KB AI message and
loops, ``--steps`` super-steps in one invocation (one checkpoint and one
``put_writes`` a step), runs once per checkpointer, each on disk in a fresh
temporary directory (sessctl durable; SQLite in WAL mode, its default sync).

Reported per checkpointer: bytes on disk (the store's directory; the SQLite
database and its WAL), p50 latency of the run's ``put`` and ``put_writes``
calls, of ``get_tuple`` on ``--samples`` checkpoints spread evenly over the
thread ("get_tuple"), of ``get_tuple`` on the latest one ("get latest"), and
of ``get_tuple`` on the spread from a new saver on a new handle, nothing
cached ("get cold": what another process sees); each also as a ratio to
SqliteSaver's in the same run. The issue's targets: bytes <= 0.02x and
latency <= 1.0x SqliteSaver's.

Timings are printed, never asserted. What is checked (and fails the run) is
that every checkpointer ends with the same messages and that the sessctl
store passes fsck; ``--quick`` runs just that, in a few seconds, for CI.

    python bench/bench_langgraph.py                 # 500 steps
    python bench/bench_langgraph.py --steps 2000 --json out.json
    python bench/bench_langgraph.py --quick
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph

from sessctl import Store
from sessctl.langgraph import SessctlSaver

TARGET_BYTES = 0.02
"""The issue's target: bytes on disk at most this fraction of SqliteSaver's."""

TARGET_LATENCY = 1.0
"""The issue's target: each p50 latency at most this multiple of SqliteSaver's."""


def text(rng: random.Random, size: int, vocabulary: list[str]) -> str:
    """About ``size`` characters of word-like text (compresses like prose, not like padding)."""
    words: list[str] = []
    n = 0
    while n < size:
        w = vocabulary[min(int(rng.paretovariate(1.2)) - 1, len(vocabulary) - 1)]
        words.append(w)
        n += len(w) + 1
    return " ".join(words)[:size]


def make_graph(checkpointer: BaseCheckpointSaver, steps: int, msg_bytes: int) -> Any:
    """START -> agent -> agent -> ... (``steps`` times) -> END over MessagesState."""
    rng = random.Random(7)
    vocabulary = [
        "".join(rng.choice("etaoinshrdlucmfwypvbgkqjxz") for _ in range(rng.randint(2, 10)))
        for _ in range(2000)
    ]

    def agent(state: MessagesState) -> dict[str, list[AnyMessage]]:
        k = len(state["messages"])
        return {"messages": [AIMessage(content=text(random.Random(k), msg_bytes, vocabulary))]}

    def route(state: MessagesState) -> str:
        return END if len(state["messages"]) > steps else "agent"

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["agent", END])
    return g.compile(checkpointer=checkpointer), text(random.Random(-1), msg_bytes, vocabulary)


class Timer:
    """Records how long each call of a saver's methods takes."""

    def __init__(self, saver: BaseCheckpointSaver, names: tuple[str, ...]) -> None:
        self.samples: dict[str, list[float]] = {n: [] for n in names}
        for name in names:
            setattr(saver, name, self._wrap(name, getattr(saver, name)))

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        samples = self.samples[name]

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                samples.append(time.perf_counter() - t)

        return timed

    def p50_ms(self, name: str) -> float | None:
        s = self.samples[name]
        return statistics.median(s) * 1000 if s else None


def dir_bytes(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@dataclass
class Result:
    """One checkpointer's numbers."""

    name: str
    bytes: int | None
    put_ms: float | None
    put_writes_ms: float | None
    get_tuple_ms: float | None
    get_latest_ms: float | None
    get_cold_ms: float | None
    run_s: float
    checkpoints: int
    extra: dict[str, Any] = field(default_factory=dict)


def run_one(
    name: str,
    saver: BaseCheckpointSaver,
    reopen: Callable[[], BaseCheckpointSaver] | None,
    size: Callable[[], int | None],
    steps: int,
    msg_bytes: int,
    samples: int,
) -> tuple[Result, list[str]]:
    """Runs the graph on ``saver`` and reads it back; returns its numbers and final messages."""
    graph, first = make_graph(saver, steps, msg_bytes)
    cfg = {"configurable": {"thread_id": "bench"}, "recursion_limit": steps + 10}
    timer = Timer(saver, ("put", "put_writes", "get_tuple"))
    t = time.perf_counter()
    graph.invoke({"messages": [HumanMessage(first)]}, cfg, durability="sync")
    run_s = time.perf_counter() - t
    timer.samples["get_tuple"].clear()  # the run's one read of an empty thread

    ids = [
        c.config["configurable"]["checkpoint_id"]
        for c in saver.list({"configurable": {"thread_id": "bench"}})
    ]
    pick = ids[:: max(1, len(ids) // samples)][:samples]
    for cid in pick:
        saver.get_tuple(
            {"configurable": {"thread_id": "bench", "checkpoint_ns": "", "checkpoint_id": cid}}
        )
    spread = timer.p50_ms("get_tuple")
    timer.samples["get_tuple"].clear()
    for _ in range(max(5, samples // 5)):
        latest = saver.get_tuple({"configurable": {"thread_id": "bench", "checkpoint_ns": ""}})
    latest_ms = timer.p50_ms("get_tuple")
    assert latest is not None
    messages = [m.content for m in latest.checkpoint["channel_values"]["messages"]]
    cold = None
    if reopen is not None:
        # Another process's view: a new handle, nothing cached.
        fresh = reopen()
        cold_timer = Timer(fresh, ("get_tuple",))
        for cid in pick:
            fresh.get_tuple(
                {"configurable": {"thread_id": "bench", "checkpoint_ns": "", "checkpoint_id": cid}}
            )
        cold = cold_timer.p50_ms("get_tuple")
    return (
        Result(
            name=name,
            bytes=size(),
            put_ms=timer.p50_ms("put"),
            put_writes_ms=timer.p50_ms("put_writes"),
            get_tuple_ms=spread,
            get_latest_ms=latest_ms,
            get_cold_ms=cold,
            run_s=run_s,
            checkpoints=len(ids),
        ),
        messages,
    )


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def main(argv: list[str] | None = None) -> int:
    """Runs the bench; prints a table (and writes ``--json``). Non-zero only if results disagree."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--steps", type=int, default=500, help="super-steps (messages) in the run (default 500)"
    )
    ap.add_argument(
        "--msg-bytes", type=int, default=1700, help="characters in each message (default 1700)"
    )
    ap.add_argument(
        "--samples",
        type=int,
        default=100,
        help="checkpoints read back with get_tuple (default 100)",
    )
    ap.add_argument(
        "--quick", action="store_true", help="20 steps, 10 samples: a correctness run for CI"
    )
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    ap.add_argument(
        "--dir", metavar="DIR", help="where the temporary stores go (default: the system's tmp)"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.samples = 20, 10

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-langgraph-") as tmp:
        root = Path(tmp)
        store_dir = root / "sessctl"
        db = root / "checkpoints.sqlite"
        store = Store(store_dir, durable=True)
        conn = sqlite3.connect(str(db), check_same_thread=False)
        conns = [conn]

        def reopen_sqlite() -> BaseCheckpointSaver:
            conns.append(sqlite3.connect(str(db), check_same_thread=False))
            return SqliteSaver(conns[-1])

        runs: list[
            tuple[
                str,
                BaseCheckpointSaver,
                Callable[[], BaseCheckpointSaver] | None,
                Callable[[], int | None],
            ]
        ] = [
            (
                "SessctlSaver",
                SessctlSaver(store),
                lambda: SessctlSaver(Store(store_dir)),
                lambda: dir_bytes(store_dir),
            ),
            (
                "SqliteSaver",
                SqliteSaver(conn),
                reopen_sqlite,
                lambda: sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists()),
            ),
            ("InMemorySaver", InMemorySaver(), None, lambda: None),
        ]
        results: list[Result] = []
        finals: dict[str, list[str]] = {}
        for name, saver, reopen, size in runs:
            result, final = run_one(
                name, saver, reopen, size, args.steps, args.msg_bytes, args.samples
            )
            results.append(result)
            finals[name] = final
        fsck = store.fsck()
        for c in conns:
            c.close()

    ok = True
    if not fsck["clean"]:
        print(f"sessctl fsck found problems: {fsck['problems']}", file=sys.stderr)
        ok = False
    expected = finals["InMemorySaver"]
    for name, final in finals.items():
        if final != expected or len(final) != args.steps + 1:
            print(
                f"{name} ended with {len(final)} messages, not the run's {args.steps + 1}",
                file=sys.stderr,
            )
            ok = False

    base = next(r for r in results if r.name == "SqliteSaver")
    cols = ("bytes", "put_ms", "put_writes_ms", "get_tuple_ms", "get_latest_ms", "get_cold_ms")
    for r in results:
        r.extra = {f"{c}_vs_sqlite": ratio(getattr(r, c), getattr(base, c)) for c in cols}

    print(
        f"{args.steps} steps, ~{args.msg_bytes} B messages, {results[0].checkpoints} checkpoints; "
        f"p50 latencies in ms; (x) = ratio to SqliteSaver"
    )
    head = (
        f"{'checkpointer':<14} {'bytes on disk':>22} {'put':>14} {'put_writes':>14} "
        f"{'get_tuple':>14} {'get latest':>14} {'get cold':>14} {'run s':>7}"
    )
    print(head)
    print("-" * len(head))

    def cell(v: float | None, x: float | None, width: int, show: Callable[[float], str]) -> str:
        if v is None:
            return f"{'-':>{width}}"
        s = show(v) + (f" ({x:.3f}x)" if x is not None else "")
        return f"{s:>{width}}"

    for r in results:
        e = r.extra
        print(
            f"{r.name:<14} "
            f"{cell(r.bytes, e['bytes_vs_sqlite'], 22, lambda v: fmt_bytes(int(v)))} "
            f"{cell(r.put_ms, e['put_ms_vs_sqlite'], 14, lambda v: f'{v:.2f}')} "
            f"{cell(r.put_writes_ms, e['put_writes_ms_vs_sqlite'], 14, lambda v: f'{v:.2f}')} "
            f"{cell(r.get_tuple_ms, e['get_tuple_ms_vs_sqlite'], 14, lambda v: f'{v:.2f}')} "
            f"{cell(r.get_latest_ms, e['get_latest_ms_vs_sqlite'], 14, lambda v: f'{v:.2f}')} "
            f"{cell(r.get_cold_ms, e['get_cold_ms_vs_sqlite'], 14, lambda v: f'{v:.2f}')} "
            f"{r.run_s:>7.2f}"
        )
    mine = results[0].extra
    checks = [
        ("bytes", mine["bytes_vs_sqlite"], TARGET_BYTES),
        ("put p50", mine["put_ms_vs_sqlite"], TARGET_LATENCY),
        ("get_tuple p50", mine["get_tuple_ms_vs_sqlite"], TARGET_LATENCY),
    ]
    print(
        "targets: "
        + ", ".join(
            f"{what} <= {target}x: {'met' if x <= target else 'MISSED'} ({x:.3f}x)"
            for what, x, target in checks
            if x is not None
        )
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "steps": args.steps,
                    "msg_bytes": args.msg_bytes,
                    "samples": args.samples,
                    "results": [asdict(r) for r in results],
                    "targets": {"bytes": TARGET_BYTES, "latency": TARGET_LATENCY},
                    "consistent": ok,
                },
                indent=2,
            )
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
