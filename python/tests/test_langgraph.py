"""SessctlSaver: LangGraph's conformance suite, a real graph, forks, two processes.

Every test runs on a fresh store (on disk in a tmp dir unless it says otherwise)
and ends with the store passing fsck.
"""

from __future__ import annotations

import asyncio
import base64
import operator
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langchain_core.messages import (  # noqa: E402
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    message_to_dict,
)
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langgraph.checkpoint.base import ERROR, INTERRUPT, empty_checkpoint  # noqa: E402
from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.graph.state import CompiledStateGraph  # noqa: E402
from langgraph.types import Command, Send, interrupt  # noqa: E402

from sessctl import RefOutOfDate, Store  # noqa: E402
from sessctl.langgraph import (  # noqa: E402
    SessctlSaver,
    checkpoint_key,
    namespace_key,
    thread_key,
)

# ---- helpers -------------------------------------------------------------------


@pytest.fixture
def store_dir(tmp_path: Path) -> Iterator[Path]:
    """A fresh on-disk store's directory; the store must pass fsck afterwards."""
    path = tmp_path / "store"
    Store(path)
    yield path
    report = Store(path).fsck(full=True)
    assert report["clean"], report["problems"]


@pytest.fixture
def saver(store_dir: Path) -> SessctlSaver:
    """A saver on a fresh on-disk store."""
    return SessctlSaver(Store(store_dir))


def dir_bytes(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def echo(state: MessagesState) -> dict[str, list[AnyMessage]]:
    """A model stand-in: answers the last message with a reply computed from it."""
    last = state["messages"][-1]
    return {"messages": [AIMessage(content=f"echo ({len(state['messages'])}): {last.content}")]}


def chat_graph(checkpointer: Any) -> CompiledStateGraph:
    """START -> agent (echo) -> END over MessagesState."""
    g = StateGraph(MessagesState)
    g.add_node("agent", echo)
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    return g.compile(checkpointer=checkpointer)


def thread(tid: str, checkpoint_id: str | None = None) -> RunnableConfig:
    """A config for thread ``tid`` (at ``checkpoint_id``)."""
    conf: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def put(
    saver: SessctlSaver,
    tid: str,
    values: dict[str, Any],
    parent: str | None = None,
    **metadata: Any,
) -> RunnableConfig:
    """Puts a checkpoint with ``values`` under ``parent``; returns its config."""
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = {k: 1 for k in values}
    md = {"source": "loop", "step": 0, "parents": {}, **metadata}
    return saver.put(thread(tid, parent), cp, md, dict(cp["channel_versions"]))  # type: ignore[arg-type]


def session_of(saver: SessctlSaver, tid: str, checkpoint_id: str, ns: str = "") -> str:
    """The session a checkpoint's tag names."""
    ref = f"refs/tags/lg.{thread_key(tid)}.{namespace_key(ns)}.{checkpoint_key(checkpoint_id)}"
    found = dict(saver.store.refs(ref))
    return found[ref]


# ---- conformance -----------------------------------------------------------------


def run_conformance(make_store: Any) -> None:
    @checkpointer_test(name="SessctlSaver")
    async def factory() -> Any:
        yield SessctlSaver(make_store())

    report = asyncio.run(validate(factory))
    if not report.passed_all():
        report.print_report()
        for cap, result in report.results.items():
            for failure in result.failures:
                print(f"{cap}: {failure}")
    assert report.conformance_level() == "FULL"
    assert len(report.results) == 8
    for cap, result in report.results.items():
        assert result.detected, f"{cap} not detected"
        assert result.passed is True, (cap, result.failures)
        assert result.tests_failed == 0 and result.tests_skipped == 0, cap
        assert result.tests_passed > 0, cap


def test_conformance_disk_store(tmp_path: Path) -> None:
    stores: list[Path] = []

    def make() -> Store:
        stores.append(tmp_path / f"s{len(stores)}")
        return Store(stores[-1])

    run_conformance(make)
    assert len(stores) == 8
    for path in stores:
        assert Store(path).fsck(full=True)["clean"], path


def test_conformance_memory_store() -> None:
    run_conformance(Store.memory)


# ---- names ---------------------------------------------------------------------


def test_keys() -> None:
    assert thread_key("abc-DEF-123") == "abc-DEF-123"
    assert thread_key("a b.c_d") == "a_20b_2ec_5fd"
    assert thread_key("") == "__"
    assert thread_key("é") == "_c3_a9"
    assert namespace_key("") == "_"
    assert namespace_key("child:1") == "child_3a1"
    long = thread_key("x" * 41)
    assert long.startswith("h") and len(long) == 33
    # A text that looks like a hashed key is hashed too: no two texts share a key.
    lookalike = "h" + "0" * 32
    assert thread_key(lookalike) != lookalike
    uuid = "1f1e8c3e-9091-6ef7-bfff-389574b71db8"
    assert checkpoint_key(uuid) == uuid


@pytest.mark.parametrize(
    "tid", ["plain", "with space/and:colon", "ünïcødé ✓", "", "h" + "a" * 32, "long-" * 30]
)
def test_any_thread_id_round_trips(saver: SessctlSaver, tid: str) -> None:
    cfg = put(saver, tid, {"x": 1}, None)
    put(saver, tid, {"x": 2}, cfg["configurable"]["checkpoint_id"])
    tup = saver.get_tuple(thread(tid))
    assert tup is not None and tup.checkpoint["channel_values"] == {"x": 2}
    assert tup.config["configurable"]["thread_id"] == tid
    everything = list(saver.list(None))
    assert [t.config["configurable"]["thread_id"] for t in everything] == [tid, tid]
    for name, _ in saver.store.refs("refs/"):
        sessctl_name = name.split("/", 2)[2]
        assert len(sessctl_name) <= 128


def test_saver_opens_a_path_and_counts_versions(tmp_path: Path) -> None:
    saver = SessctlSaver(tmp_path / "by-path")
    assert saver.store.path is not None and Path(saver.store.path).is_dir()
    assert saver.get_next_version(None, None) == 1
    assert saver.get_next_version(41, None) == 42
    assert str(saver.get_next_version("00000000000000000000000000000007.0.5", None)).startswith(
        "00000000000000000000000000000008."
    )
    assert saver.store.fsck()["clean"]


# ---- values ---------------------------------------------------------------------


def test_messages_round_trip_and_are_readable(saver: SessctlSaver) -> None:
    odd = AIMessage(content="bytes inside", additional_kwargs={"raw": b"\x00\x01"})
    messages: list[Any] = [
        HumanMessage("hi", id="h1"),
        AIMessage(
            content="",
            id="a1",
            tool_calls=[{"name": "search", "args": {"q": "x"}, "id": "call1"}],
            usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
        ),
        ToolMessage("found", tool_call_id="call1", id="t1"),
        odd,
        {"role": "user", "content": "a dict"},
        datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
    ]
    values = {"messages": messages, "other": {"n": 1, "when": b"bytes"}, "none": None}
    cfg = put(saver, "m", values)
    tup = saver.get_tuple(cfg)
    assert tup is not None
    assert tup.checkpoint["channel_values"] == values
    assert [type(m) for m in tup.checkpoint["channel_values"]["messages"]] == [
        type(m) for m in messages
    ]
    # What `sessctl show` reads: LangChain's own dict form.
    history = saver.store.history(session_of(saver, "m", cfg["configurable"]["checkpoint_id"]))
    assert history[:3] == [message_to_dict(m) for m in messages[:3]]
    assert history[4] == {"role": "user", "content": "a dict"}  # a plain dict is itself
    assert [list(h) for h in (history[3], history[5])] == [["__sessctl_serde__"]] * 2


def test_messages_are_stored_as_a_delta(saver: SessctlSaver, store_dir: Path) -> None:
    msgs: list[BaseMessage] = [HumanMessage(f"m{i}", id=f"m{i}") for i in range(3)]
    c1 = put(saver, "d", {"messages": list(msgs)})
    msgs.append(AIMessage("a3", id="a3"))
    c2 = put(saver, "d", {"messages": list(msgs)}, c1["configurable"]["checkpoint_id"])
    s2 = saver.store.session(session_of(saver, "d", c2["configurable"]["checkpoint_id"]))
    assert (s2["messages"], s2["added"]) == (4, 1)

    # A saver that never saw the thread finds the prefix in the store.
    other = SessctlSaver(Store(store_dir))
    msgs2 = [*msgs, HumanMessage("m4", id="m4")]
    other.get_tuple(thread("d"))  # observes the head
    other._written.pop((thread_key("d"), "_"))  # and forgets the list it read
    c3 = other.put(
        thread("d", c2["configurable"]["checkpoint_id"]),
        {**empty_checkpoint(), "channel_values": {"messages": msgs2}},
        {"source": "loop", "step": 2},
        {},
    )
    s3 = other.store.session(session_of(other, "d", c3["configurable"]["checkpoint_id"]))
    assert (s3["messages"], s3["added"]) == (5, 1)

    # A message replaced in the middle: kept up to it, the rest added again.
    # `other` continued from c2 already: continuing from c2 again is a fork,
    # which takes reading c2 first (time travel), not just the latest.
    with pytest.raises(RefOutOfDate):
        put(saver, "d", {"messages": msgs2}, c2["configurable"]["checkpoint_id"])
    saver.get_tuple(c2)
    msgs3 = [msgs2[0], AIMessage("edited", id="m1"), *msgs2[2:]]
    c4 = put(saver, "d", {"messages": msgs3}, c2["configurable"]["checkpoint_id"])
    s4 = saver.store.session(session_of(saver, "d", c4["configurable"]["checkpoint_id"]))
    assert (s4["messages"], s4["added"]) == (5, 4)
    # ... and one changed in place is noticed too.
    msgs3[2].content = "changed in place"
    c5 = put(saver, "d", {"messages": msgs3}, c4["configurable"]["checkpoint_id"])
    s5 = saver.store.session(session_of(saver, "d", c5["configurable"]["checkpoint_id"]))
    assert (s5["messages"], s5["added"]) == (5, 3)
    tup = saver.get_tuple(c5)
    assert tup is not None and tup.checkpoint["channel_values"]["messages"][2].content == (
        "changed in place"
    )


def test_reput_same_checkpoint_id_replaces_it(saver: SessctlSaver) -> None:
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": 1}
    saver.put(thread("r"), cp, {"source": "input", "step": -1}, {})
    cp2 = {**cp, "channel_values": {"x": 2}}
    saver.put(thread("r"), cp2, {"source": "input", "step": -1}, {})  # type: ignore[arg-type]
    listed = list(saver.list(thread("r")))
    assert len(listed) == 1
    assert listed[0].checkpoint["channel_values"] == {"x": 2}


# ---- a real graph ------------------------------------------------------------------


def test_graph_history_fork_and_bytes(saver: SessctlSaver, store_dir: Path) -> None:
    graph = chat_graph(saver)
    reference = chat_graph(InMemorySaver())
    cfg = thread("chat")
    pad = "lorem ipsum dolor sit amet " * 40  # ~1 KB a message
    for i in range(50):
        turn = {"messages": [HumanMessage(f"turn {i}: {pad}")]}
        graph.invoke(turn, cfg)
        reference.invoke(turn, cfg)

    history = list(graph.get_state_history(cfg))
    expected = list(reference.get_state_history(cfg))
    assert len(history) == len(expected) == 150  # input, start, agent: 3 per turn
    steps = [(h.metadata or {})["step"] for h in history]
    assert steps == sorted(steps, reverse=True) and steps[-1] == -1
    for newer, older in zip(history, history[1:]):
        assert newer.parent_config is not None
        assert (
            newer.parent_config["configurable"]["checkpoint_id"]
            == (older.config["configurable"]["checkpoint_id"])
        )
    assert history[-1].parent_config is None
    for mine, theirs in zip(history, expected):
        assert [(type(m), m.content) for m in mine.values.get("messages", [])] == [
            (type(m), m.content) for m in theirs.values.get("messages", [])
        ]
        assert set(mine.values) == set(theirs.values)
        assert mine.next == theirs.next and mine.metadata == theirs.metadata
    assert len(history[0].values["messages"]) == 100

    # Bytes grow with new content, not with the history's length.
    full_snapshot = len(saver.serde.dumps_typed(history[0].values["messages"])[1])
    used = dir_bytes(store_dir)
    assert used < 0.1 * len(history) * full_snapshot, (used, full_snapshot)

    # Time travel: continue from the end of turn 25.
    middle = next(h for h in history if (h.metadata or {})["step"] == 3 * 25 + 1)
    assert middle.next == () and len(middle.values["messages"]) == 52
    old_tip = history[0].config["configurable"]["checkpoint_id"]
    graph.invoke({"messages": [HumanMessage("a different turn 26")]}, middle.config)

    latest = graph.get_state(cfg)
    messages = latest.values["messages"]
    assert messages[:52] == middle.values["messages"]
    assert [m.content for m in messages[52:]] == [
        "a different turn 26",
        "echo (53): a different turn 26",
    ]
    listed = [t.checkpoint["id"] for t in saver.list(cfg)]
    assert len(listed) == 153 and old_tip in listed
    old = graph.get_state(thread("chat", old_tip))
    assert len(old.values["messages"]) == 100

    # In the store the fork is a fork: both tips descend from the middle session.
    store = saver.store
    mid_s = session_of(saver, "chat", middle.config["configurable"]["checkpoint_id"])
    new_s = session_of(saver, "chat", latest.config["configurable"]["checkpoint_id"])
    old_s = session_of(saver, "chat", old_tip)
    assert store.merge_base(old_s, new_s) == mid_s
    assert not store.is_ancestor(old_s, new_s)
    assert store.resolve("lg.chat._") == new_s
    assert store.message_count(new_s) == 54
    assert store.history(new_s)[-1] == message_to_dict(messages[-1])


def test_graph_async(saver: SessctlSaver) -> None:
    graph = chat_graph(saver)

    async def run() -> Any:
        for i in range(5):
            await graph.ainvoke({"messages": [HumanMessage(f"hi {i}")]}, thread("async"))
        return [s async for s in graph.aget_state_history(thread("async"))]

    history = asyncio.run(run())
    assert len(history) == 15
    assert len(history[0].values["messages"]) == 10


class Fanned(TypedDict):
    """State of the subgraph test: items from every branch, and an answer."""

    items: Annotated[list[str], operator.add]
    answer: str


def ask(state: Fanned) -> dict[str, Any]:
    """Asks a human (an interrupt) inside a subgraph."""
    name = interrupt({"question": "name?"})
    return {"answer": name, "items": [f"asked:{name}"]}


class Job(TypedDict):
    """What a Send gives one worker."""

    x: int


def work(state: Job) -> dict[str, Any]:
    """One of the parallel branches a Send starts."""
    return {"items": [f"work:{state['x']}"]}


def fanned_graph(checkpointer: Any) -> CompiledStateGraph:
    """Three parallel workers (Send), then a subgraph that interrupts."""
    sub = StateGraph(Fanned)
    sub.add_node("ask", ask)
    sub.add_edge(START, "ask")
    sub.add_edge("ask", END)
    g = StateGraph(Fanned)
    g.add_node("sub", sub.compile())
    g.add_node("worker", work)
    g.add_conditional_edges(
        START, lambda s: [Send("worker", Job(x=i)) for i in range(3)], ["worker"]
    )
    g.add_edge("worker", "sub")
    g.add_edge("sub", END)
    return g.compile(checkpointer=checkpointer)


def test_subgraph_interrupt_and_sends_match_in_memory(saver: SessctlSaver) -> None:
    runs = []
    for cp in (saver, InMemorySaver()):
        graph = fanned_graph(cp)
        cfg = thread("fan")
        first = graph.invoke({"items": ["start"]}, cfg)
        paused = graph.get_state(cfg, subgraphs=True)
        namespaces = len(saver.store.refs("refs/heads/lg.fan."))
        done = graph.invoke(Command(resume="bob"), cfg)
        history = [
            (h.values, h.next, (h.metadata or {}).get("step")) for h in graph.get_state_history(cfg)
        ]
        runs.append(
            (
                first["items"],
                [i.value for i in first["__interrupt__"]],
                [t.name for t in paused.tasks],
                done,
                history,
            )
        )
        if cp is saver:
            assert namespaces == 2  # the root and the subgraph's, while paused
    assert runs[0] == runs[1]
    assert runs[0][3] == {
        "items": ["start", "work:0", "work:1", "work:2"] * 2 + ["asked:bob"],
        "answer": "bob",
    }


# ---- writers that race ---------------------------------------------------------------


def test_second_saver_on_a_moved_thread_gets_ref_out_of_date(store_dir: Path) -> None:
    a = SessctlSaver(Store(store_dir))
    b = SessctlSaver(Store(store_dir))
    root = put(a, "t", {"x": 0})
    root_id = root["configurable"]["checkpoint_id"]
    assert a.get_tuple(thread("t")) is not None
    assert b.get_tuple(thread("t")) is not None
    put(a, "t", {"x": 1}, root_id)
    with pytest.raises(RefOutOfDate):
        put(b, "t", {"x": 2}, root_id)
    assert len(list(a.list(thread("t")))) == 2
    # Having read the thread again, b continues from its new head.
    latest = b.get_tuple(thread("t"))
    assert latest is not None and latest.checkpoint["channel_values"] == {"x": 1}
    put(b, "t", {"x": 3}, latest.config["configurable"]["checkpoint_id"])

    # A thread deleted under a saver is a moved thread, too.
    b.delete_thread("t")
    with pytest.raises(RefOutOfDate):
        put(a, "t", {"x": 4}, root_id)
    assert a.get_tuple(thread("t")) is None
    put(a, "t", {"x": 5})


def test_one_saver_two_runs_from_one_checkpoint_do_not_fork(saver: SessctlSaver) -> None:
    root = put(saver, "t", {"x": 0})
    root_id = root["configurable"]["checkpoint_id"]
    assert saver.get_tuple(thread("t")) is not None  # both runs start here
    put(saver, "t", {"x": 1}, root_id)
    with pytest.raises(RefOutOfDate):
        put(saver, "t", {"x": 2}, root_id)
    latest = saver.get_tuple(thread("t"))
    assert latest is not None and latest.checkpoint["channel_values"] == {"x": 1}


def test_reading_the_latest_does_not_let_a_run_overwrite_another(store_dir: Path) -> None:
    a = SessctlSaver(Store(store_dir))
    b = SessctlSaver(Store(store_dir))
    assert a.get_tuple(thread("t")) is None
    a1 = put(a, "t", {"by": "a1"})["configurable"]["checkpoint_id"]  # a's run, step 0
    assert b.get_tuple(thread("t")) is not None
    put(b, "t", {"by": "b2"}, a1)  # b continues the thread
    assert a.get_tuple(thread("t")) is not None  # a status poll in a's process
    assert len(list(a.list(thread("t")))) == 2
    with pytest.raises(RefOutOfDate):
        put(a, "t", {"by": "a2"}, a1)  # a's run goes on from its own a1
    # Reading a1 itself (time travel) makes continuing from it a deliberate fork.
    assert a.get_tuple(thread("t", a1)) is not None
    put(a, "t", {"by": "a2"}, a1)
    latest = b.get_tuple(thread("t"))
    assert latest is not None and latest.checkpoint["channel_values"] == {"by": "a2"}


def test_concurrent_runs_through_one_saver_lose_no_turn(saver: SessctlSaver) -> None:
    async def slow(state: MessagesState) -> dict[str, list[AnyMessage]]:
        await asyncio.sleep(0.05)
        return {"messages": [AIMessage(f"re: {state['messages'][-1].content}")]}

    g = StateGraph(MessagesState)
    g.add_node("agent", slow)
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    graph = g.compile(checkpointer=saver)
    cfg = thread("double-send")
    turns = ["first", "second", "third"]

    async def run() -> tuple[list[Any], Any]:
        await graph.ainvoke({"messages": [HumanMessage("hello")]}, cfg)
        results = await asyncio.gather(
            *(graph.ainvoke({"messages": [HumanMessage(w)]}, cfg) for w in turns),
            return_exceptions=True,
        )
        return results, await graph.aget_state(cfg)

    results, state = asyncio.run(run())
    assert all(not isinstance(r, BaseException) or isinstance(r, RefOutOfDate) for r in results)
    landed = [w for w, r in zip(turns, results) if not isinstance(r, BaseException)]
    assert landed
    contents = [m.content for m in state.values["messages"]]
    for w in landed:
        assert w in contents and f"re: {w}" in contents, (landed, contents)


def test_expectations_are_bounded_and_safe_to_forget_under_threads(store_dir: Path) -> None:
    saver = SessctlSaver(Store(store_dir), expectations=2000)
    for i in range(3000):
        saver.get_tuple(thread(f"empty-{i}"))
    assert len(saver._expect) == 2000
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader(k: int) -> None:
        i = 0
        try:
            while not stop.is_set():
                saver.get_tuple(thread(f"r{k}-{i}"))
                i += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    try:
        for j in range(30):
            saver.delete_thread(f"gone-{j}")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert len(saver._expect) <= 2000
    # A forgotten expectation means "read the head now": the put still lands.
    root = put(saver, "t", {"x": 0})
    for i in range(2000):
        saver.get_tuple(thread(f"evict-{i}"))
    put(saver, "t", {"x": 1}, root["configurable"]["checkpoint_id"])
    latest = saver.get_tuple(thread("t"))
    assert latest is not None and latest.checkpoint["channel_values"] == {"x": 1}


_RACER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from langgraph.checkpoint.base import empty_checkpoint
    from sessctl import RefOutOfDate, Store
    from sessctl.langgraph import SessctlSaver

    path, me, other = sys.argv[1], sys.argv[2], sys.argv[3]
    saver = SessctlSaver(Store(path))
    cfg = {"configurable": {"thread_id": "shared", "checkpoint_ns": ""}}
    tup = saver.get_tuple(cfg)
    Path(path, "ready-" + me).touch()
    deadline = time.time() + 30
    while not Path(path, "ready-" + other).exists() and time.time() < deadline:
        time.sleep(0.001)
    cp = empty_checkpoint()
    cp["channel_values"] = {"by": me}
    try:
        saver.put(tup.config, cp, {"source": "loop", "step": 1, "by": me}, {})
        print("ok")
    except RefOutOfDate as e:
        print("RefOutOfDate", e)
    """
)


def test_two_processes_continue_one_thread(store_dir: Path) -> None:
    saver = SessctlSaver(Store(store_dir))
    root = put(saver, "shared", {"by": "root"})
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(store_dir), me, other],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me, other in (("a", "b"), ("b", "a"))
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    results = sorted(out.split()[0] for out, _ in outs)
    assert results == ["RefOutOfDate", "ok"], outs
    for f in store_dir.glob("ready-*"):
        f.unlink()

    listed = list(saver.list(thread("shared")))
    assert len(listed) == 2
    winner = listed[0]
    assert winner.parent_config == {
        "configurable": {
            "thread_id": "shared",
            "checkpoint_ns": "",
            "checkpoint_id": root["configurable"]["checkpoint_id"],
        }
    }
    latest = saver.get_tuple(thread("shared"))
    assert latest is not None and latest.checkpoint["id"] == winner.checkpoint["id"]


# ---- pending writes ---------------------------------------------------------------------


def test_put_writes_is_idempotent(saver: SessctlSaver) -> None:
    cfg = put(saver, "w", {})
    tag = f"refs/tags/lgw.w._.{checkpoint_key(cfg['configurable']['checkpoint_id'])}"
    saver.put_writes(cfg, [("a", 1), ("b", 2)], "task1", "p")
    first = dict(saver.store.refs(tag))[tag]
    saver.put_writes(cfg, [("a", 1), ("b", 2)], "task1", "p")
    saver.put_writes(cfg, [("a", "other")], "task1", "p")  # same (task, idx): ignored
    assert dict(saver.store.refs(tag))[tag] == first  # nothing was written again
    saver.put_writes(cfg, [(ERROR, "boom")], "task2")
    saver.put_writes(cfg, [(ERROR, "boom again")], "task2")  # special channels replace
    saver.put_writes(cfg, [(INTERRUPT, {"q": 1})], "task2")
    tup = saver.get_tuple(cfg)
    assert tup is not None
    assert sorted(tup.pending_writes or []) == sorted(
        [
            ("task1", "a", 1),
            ("task1", "b", 2),
            ("task2", ERROR, "boom again"),
            ("task2", INTERRUPT, {"q": 1}),
        ]
    )
    assert len(saver.store.reflog(tag)) == 4


def test_put_writes_from_many_writers_all_land(store_dir: Path) -> None:
    first = SessctlSaver(Store(store_dir))
    cfg = put(first, "w", {})
    savers = [SessctlSaver(Store(store_dir)) for _ in range(6)]
    start = threading.Barrier(len(savers))
    errors: list[BaseException] = []

    def write(i: int, s: SessctlSaver) -> None:
        try:
            start.wait()
            for j in range(5):
                s.put_writes(cfg, [(f"ch{j}", i * 10 + j)], f"task-{i}-{j}")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i, s)) for i, s in enumerate(savers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    tup = first.get_tuple(cfg)
    assert tup is not None and len(tup.pending_writes or []) == 30


def writes_stored(saver: SessctlSaver, tag: str) -> list[int]:
    """How many entries each writes session of the chain behind ``tag`` holds, newest first."""
    store = saver.store
    sid: str | None = dict(store.refs(tag))[tag]
    counts = []
    while sid is not None:
        s = store.session(sid)
        if "langgraph_writes" not in s["metadata"]:
            break
        counts.append(len(s["state"]["writes"]))
        sid = s["parents"][0] if s["parents"] else None
    return counts


def test_fan_out_writes_store_each_value_once(saver: SessctlSaver, store_dir: Path) -> None:
    tasks = 80
    payload = 4000
    cfg = put(saver, "fan", {"results": []})
    before = dir_bytes(store_dir)
    for i in range(tasks):
        value = base64.b64encode(os.urandom(payload)).decode()
        saver.put_writes(cfg, [("results", value)], f"task-{i}")
    tag = f"refs/tags/lgw.fan._.{checkpoint_key(cfg['configurable']['checkpoint_id'])}"
    counts = writes_stored(saver, tag)
    assert counts == [1] * tasks  # each session holds its own entry only
    grew = dir_bytes(store_dir) - before
    assert grew < 3 * tasks * payload, grew  # O(tasks); the whole list each time was ~tasks/2 x
    tup = saver.get_tuple(cfg)
    assert tup is not None and len(tup.pending_writes or []) == tasks
    # A fresh saver (no cache) reads the same chain.
    other = SessctlSaver(Store(store_dir))
    assert other.get_tuple(cfg).pending_writes == tup.pending_writes  # type: ignore[union-attr]
    # prune flattens the chain into one session on the kept root.
    saver.prune(["fan"])
    assert writes_stored(saver, tag) == [tasks]
    kept = saver.get_tuple(cfg)
    assert kept is not None and kept.pending_writes == tup.pending_writes
    wsid = dict(saver.store.refs(tag))[tag]
    root = session_of(saver, "fan", cfg["configurable"]["checkpoint_id"])
    assert saver.store.session(wsid)["parents"] == [root]
    assert saver.store.session(root)["parents"] == []


def test_put_writes_match_in_memory(saver: SessctlSaver) -> None:
    calls: list[tuple[list[tuple[str, Any]], str]] = [
        ([("a", 1), ("b", 2)], "t1"),
        ([("a", 9), ("b", 8), ("c", 7)], "t1"),  # idx 0, 1 kept; idx 2 is new
        ([(ERROR, "e1")], "t2"),
        ([(ERROR, "e2"), ("c", 3)], "t2"),  # the newer error wins
        ([(INTERRUPT, 1), (INTERRUPT, 2)], "t3"),  # within one call, too
        ([("a", 1)], "t4"),
        ([(ERROR, "e2")], "t2"),  # nothing new
    ]
    results = []
    mine = put(saver, "w", {"x": 1})
    for cp in (saver, InMemorySaver()):
        cfg = mine if cp is saver else put(cp, "w", {"x": 1})  # type: ignore[arg-type]
        for writes, task in calls:
            cp.put_writes(cfg, writes, task)
        tup = cp.get_tuple(cfg)
        assert tup is not None
        results.append(sorted(tup.pending_writes or [], key=repr))
    assert results[0] == results[1]
    tag = f"refs/tags/lgw.w._.{checkpoint_key(mine['configurable']['checkpoint_id'])}"
    assert writes_stored(saver, tag) == [1, 1, 2, 1, 1, 2]  # newest first


# ---- channel values -----------------------------------------------------------------------


class Docs(TypedDict):
    """A big channel nothing changes, and a counter."""

    docs: str
    n: int


def count_up(state: Docs) -> dict[str, Any]:
    """Touches only ``n``."""
    return {"n": state["n"] + 1}


def test_unchanged_channels_are_stored_once(saver: SessctlSaver, store_dir: Path) -> None:
    g = StateGraph(Docs)
    g.add_node("step", count_up)
    g.add_edge(START, "step")
    g.add_edge("step", END)
    graph = g.compile(checkpointer=saver)
    big = base64.b64encode(os.urandom(150_000)).decode()
    cfg = thread("docs")
    graph.invoke({"docs": big, "n": 0}, cfg)
    before = dir_bytes(store_dir)
    for i in range(10):
        graph.invoke({"n": i}, cfg)
    grew = dir_bytes(store_dir) - before
    assert grew < 0.5 * len(big), grew  # every step rewrote it: ~30 x len(big)

    store = saver.store
    holders = set()
    for _, sid in store.refs("refs/tags/lg.docs."):
        held = (store.session(sid)["state"] or {}).get("docs")
        if held is None:
            continue
        holders.add(held["at"] if isinstance(held, dict) else sid)
    assert len(holders) == 1  # one session holds it, every other names that one
    (holder,) = holders
    assert isinstance(store.session(holder)["state"]["docs"], list)
    listed = list(saver.list(cfg))
    assert len(listed) == 33
    assert all(t.checkpoint["channel_values"].get("docs") in (None, big) for t in listed)
    assert graph.get_state(cfg).values == {"docs": big, "n": 10}

    # A copy shares the sessions and reads the same.
    saver.copy_thread("docs", "docs2")
    graph.invoke({"n": 100}, thread("docs2"))
    assert graph.get_state(thread("docs2")).values == {"docs": big, "n": 101}

    # prune's kept root holds every value itself, and survives gc.
    saver.prune(["docs"])
    (kept,) = store.refs("refs/tags/lg.docs.")
    assert all(isinstance(v, list) for v in store.session(kept[1])["state"].values())
    store.gc(prune="now")
    assert graph.get_state(cfg).values == {"docs": big, "n": 10}
    assert graph.get_state(thread("docs2")).values == {"docs": big, "n": 101}


def test_unchanged_channel_of_a_deleted_run_still_reads(saver: SessctlSaver) -> None:
    cp1 = empty_checkpoint()
    cp1["channel_values"] = {"x": "big", "y": 1}
    cp1["channel_versions"] = {"x": 1, "y": 1}
    c1 = saver.put(thread("r"), cp1, {"source": "loop", "step": 0, "run_id": "r1"}, {"x": 1, "y": 1})
    cp2 = empty_checkpoint()
    cp2["channel_values"] = {"x": "big", "y": 2}
    cp2["channel_versions"] = {"x": 1, "y": 2}
    saver.put(c1, cp2, {"source": "loop", "step": 1, "run_id": "r2"}, {"y": 2})
    s2 = session_of(saver, "r", cp2["id"])
    assert saver.store.session(s2)["state"]["x"] == {"at": session_of(saver, "r", cp1["id"])}
    # A channel whose version moved is stored again even if new_versions omits it.
    cp3 = empty_checkpoint()
    cp3["channel_values"] = {"x": "other", "y": 2}
    cp3["channel_versions"] = {"x": 2, "y": 2}
    saver.put(thread("r", cp2["id"]), cp3, {"source": "loop", "step": 2, "run_id": "r2"}, {})
    assert saver.store.session(session_of(saver, "r", cp3["id"]))["state"]["x"][0] != "at"
    saver.delete_for_runs(["r1"])
    tup = saver.get_tuple(thread("r", cp2["id"]))
    assert tup is not None and tup.checkpoint["channel_values"] == {"x": "big", "y": 2}
    latest = SessctlSaver(saver.store).get_tuple(thread("r"))
    assert latest is not None and latest.checkpoint["channel_values"] == {"x": "other", "y": 2}


def test_format_1_records_still_read(saver: SessctlSaver) -> None:
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": 1}
    cp["channel_versions"] = {"x": 1}
    record = {
        "format": 1,
        "checkpoint": {k: v for k, v in cp.items() if k != "channel_values"},
        "metadata": {"source": "input", "step": -1},
        "parent": None,
        "messages": None,
    }
    old = saver.store.put(
        reason="format 1",
        state={"x": saver._dump(1)},
        metadata={"langgraph": record},
        conversation="lg.old._",
        expected_head=None,
        tags={f"lg.old._.{checkpoint_key(cp['id'])}": None},
        conversation_metadata={"langgraph": {"thread_id": "old", "checkpoint_ns": ""}},
    )
    tup = saver.get_tuple(thread("old"))
    assert tup is not None and tup.checkpoint["channel_values"] == {"x": 1}
    cp2 = empty_checkpoint()
    cp2["channel_values"] = {"x": 1}
    cp2["channel_versions"] = {"x": 1}
    saver.put(tup.config, cp2, {"source": "loop", "step": 0}, {})
    assert saver.store.session(session_of(saver, "old", cp2["id"]))["state"] == {"x": {"at": old}}
    again = saver.get_tuple(thread("old"))
    assert again is not None and again.checkpoint["channel_values"] == {"x": 1}


def test_dict_messages_are_stored_as_themselves(saver: SessctlSaver) -> None:
    plain = [{"role": "user" if i % 2 else "assistant", "content": f"m{i}"} for i in range(20)]
    odd: list[Any] = [
        {"type": "human", "data": {"content": "looks like message_to_dict"}},
        {"role": "user", "content": "raw", "raw": b"\x00"},
        {"__sessctl_serde__": ["x", "y"]},
    ]
    dumps = 0
    real = saver.serde.dumps_typed

    def counting(value: Any) -> tuple[str, bytes]:
        nonlocal dumps
        dumps += 1
        return real(value)

    saver.serde.dumps_typed = counting  # type: ignore[method-assign]
    c1 = put(saver, "dm", {"messages": list(plain)})
    c2 = put(saver, "dm", {"messages": [*plain, {"role": "user", "content": "m20"}]}, c1["configurable"]["checkpoint_id"])
    assert dumps == 0  # neither stored nor fingerprinted through serde
    c3 = put(saver, "dm", {"messages": [*plain, *odd]}, c2["configurable"]["checkpoint_id"])
    sid = session_of(saver, "dm", c3["configurable"]["checkpoint_id"])
    history = saver.store.history(sid)
    assert history[:20] == plain
    assert all(list(h) == ["__sessctl_serde__"] for h in history[20:])
    shown = saver.store.show(session_of(saver, "dm", c2["configurable"]["checkpoint_id"]))
    assert [m["value"] for m in shown["shown_messages"]] == [{"role": "user", "content": "m20"}]
    tup = SessctlSaver(saver.store).get_tuple(c3)
    assert tup is not None and tup.checkpoint["channel_values"]["messages"] == [*plain, *odd]
    s2 = saver.store.session(session_of(saver, "dm", c2["configurable"]["checkpoint_id"]))
    assert (s2["messages"], s2["added"]) == (21, 1)


# ---- deletes and copies -----------------------------------------------------------------------


def test_delete_for_runs_moves_the_head_back(saver: SessctlSaver) -> None:
    c1 = put(saver, "runs", {"x": 1}, None, run_id="r1")
    c2 = put(saver, "runs", {"x": 2}, c1["configurable"]["checkpoint_id"], run_id="r2")
    saver.put_writes(c2, [("a", 1)], "t")
    saver.delete_for_runs(["r2"])
    latest = saver.get_tuple(thread("runs"))
    assert latest is not None and latest.checkpoint["channel_values"] == {"x": 1}
    assert not saver.store.refs("refs/tags/lgw.runs.")
    put(saver, "runs", {"x": 3}, c1["configurable"]["checkpoint_id"], run_id="r3")
    saver.delete_for_runs(["r1", "r3"])
    assert saver.get_tuple(thread("runs")) is None
    assert saver.store.conversation("lg.runs._") is None


def test_copy_thread_shares_sessions(saver: SessctlSaver) -> None:
    graph = chat_graph(saver)
    for i in range(3):
        graph.invoke({"messages": [HumanMessage(f"hi {i}")]}, thread("src"))
    before = saver.store.fsck()["objects"]
    saver.copy_thread("src", "dst")
    assert saver.store.fsck()["objects"] == before  # nothing was copied
    src = dict(saver.store.refs("refs/tags/lg.src."))
    dst = dict(saver.store.refs("refs/tags/lg.dst."))
    assert sorted(src.values()) == sorted(dst.values()) and len(dst) == 9
    assert (saver.store.conversation("lg.dst._") or {})["metadata"]["langgraph"] == {
        "thread_id": "dst",
        "checkpoint_ns": "",
    }
    # Both threads go on independently.
    graph.invoke({"messages": [HumanMessage("only in dst")]}, thread("dst"))
    assert len(graph.get_state(thread("dst")).values["messages"]) == 8
    assert len(graph.get_state(thread("src")).values["messages"]) == 6
    assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {"src", "dst"}


def test_prune_keep_latest_keeps_the_head(saver: SessctlSaver) -> None:
    graph = chat_graph(saver)
    for i in range(3):
        graph.invoke({"messages": [HumanMessage(f"hi {i}")]}, thread("p"))
    latest = saver.get_tuple(thread("p"))
    saver.prune(["p"])
    listed = list(saver.list(thread("p")))
    assert [t.checkpoint["id"] for t in listed] == [latest.checkpoint["id"]]  # type: ignore[union-attr]
    assert len(listed[0].checkpoint["channel_values"]["messages"]) == 6
    assert listed[0].checkpoint == latest.checkpoint  # type: ignore[union-attr]
    assert listed[0].metadata == latest.metadata  # type: ignore[union-attr]
    assert listed[0].pending_writes == latest.pending_writes  # type: ignore[union-attr]
    assert listed[0].parent_config is None  # its parent was pruned
    # The kept checkpoint is a root now: no ref reaches a pruned session.
    store = saver.store
    kept = session_of(saver, "p", latest.checkpoint["id"])  # type: ignore[union-attr]
    assert store.session(kept)["parents"] == []
    reachable = {e["id"] for e in store.log(all=True)}
    thread_sessions = {
        sid for ref, sid in store.refs() if ref.startswith(("refs/heads/lg.", "refs/tags/lg"))
    }
    assert reachable >= thread_sessions
    assert len(reachable) <= 2, "the kept root and its pending writes, nothing pruned"
    graph.invoke({"messages": [HumanMessage("after prune")]}, thread("p"))
    assert len(graph.get_state(thread("p")).values["messages"]) == 8
    with pytest.raises(ValueError):
        saver.prune(["p"], strategy="sometimes")
    saver.prune(["p"], strategy="delete")
    assert saver.get_tuple(thread("p")) is None


def test_list_filters(saver: SessctlSaver) -> None:
    parent: str | None = None
    for i in range(6):
        c = put(saver, "f", {"i": i}, parent, step=i, even=i % 2 == 0)
        parent = c["configurable"]["checkpoint_id"]
    put(saver, "g", {"i": 0})
    ids = [t.checkpoint["id"] for t in saver.list(thread("f"))]
    assert ids == sorted(ids, reverse=True) and len(ids) == 6
    assert [t.metadata["step"] for t in saver.list(thread("f"), filter={"even": True})] == [4, 2, 0]
    assert [
        t.metadata["step"] for t in saver.list(thread("f"), filter={"even": True}, limit=2)
    ] == [4, 2]
    before: RunnableConfig = {"configurable": {"checkpoint_id": ids[1]}}
    assert [t.checkpoint["id"] for t in saver.list(thread("f"), before=before)] == ids[2:]
    assert len(list(saver.list(None))) == 7
    assert len(list(saver.list(None, filter={"missing": None}))) == 7
