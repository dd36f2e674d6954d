"""``sessctl.agents.SessctlSession``: the OpenAI Agents SDK session on a sessctl store.

Its history semantics are checked against the SDK's own ``SQLiteSession`` and
its branches against ``AdvancedSQLiteSession``, on the same operations: a user
switching classes must see the same items. Every test's store must pass
``fsck`` afterwards.
"""

from __future__ import annotations

import asyncio
import random
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.extensions.memory.advanced_sqlite_session import AdvancedSQLiteSession
from agents.items import ModelResponse, TResponseInputItem
from agents.memory import Session, SessionSettings, SQLiteSession
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

import sessctl
from sessctl.agents import (
    METADATA_BRANCH_ID,
    METADATA_SESSION_ID,
    SessctlSession,
    conversation_name,
    parse_conversation_name,
)

# ---- fixtures -------------------------------------------------------------------


@pytest.fixture
def store_path(tmp_path: Path) -> Iterator[Path]:
    """A directory for a file-backed store; the store there must be clean at the end."""
    path = tmp_path / "store"
    yield path
    if path.exists():
        report = sessctl.Store(path, create=False).fsck(full=True)
        assert report["clean"], report["problems"]


@pytest.fixture(params=["memory", "disk"])
def store(request: pytest.FixtureRequest, store_path: Path) -> Iterator[sessctl.Store]:
    """A store in memory or on disk; ``fsck`` must find it clean at the end."""
    s = sessctl.Store.memory() if request.param == "memory" else sessctl.Store(store_path)
    yield s
    report = s.fsck(full=True)
    assert report["clean"], report["problems"]


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SQLiteSession]:
    """The SDK's reference implementation, file-backed."""
    s = SQLiteSession("ref", tmp_path / "ref.db")
    yield s
    s.close()


def user(text: str) -> Any:
    """A user message (typed ``Any``: the SDK's item union is a wall of TypedDicts)."""
    return {"role": "user", "content": text}


def assistant(text: str) -> Any:
    """An assistant message."""
    return {"role": "assistant", "content": text}


def head_of(store: sessctl.Store, session: SessctlSession, branch: str | None = None) -> str:
    """The session a branch's conversation points at."""
    return store.resolve(session.conversation_name(branch))


# ---- the protocol ---------------------------------------------------------------


def test_is_an_agents_sdk_session(store: sessctl.Store) -> None:
    s = SessctlSession("chat-1", store)
    assert isinstance(s, Session)
    assert s.session_id == "chat-1"
    assert isinstance(s.session_settings, SessionSettings)
    assert s.session_settings.limit is None
    assert s.current_branch_id == "main"


async def test_a_path_opens_a_store(store_path: Path) -> None:
    s = SessctlSession("chat", str(store_path))
    await s.add_items([user("hi")])
    assert sessctl.Store(store_path).history(s.conversation_name()) == [user("hi")]


async def test_store_work_runs_off_the_event_loop(store: sessctl.Store) -> None:
    threads: set[int] = set()

    class Watching:
        def __getattr__(self, name: str) -> Any:
            method = getattr(store, name)

            def call(*args: Any, **kwargs: Any) -> Any:
                threads.add(threading.get_ident())
                return method(*args, **kwargs)

            return call

    s = SessctlSession("chat", store)
    s.store = Watching()  # type: ignore[assignment]
    await s.add_items([user("a"), assistant("b")])
    await s.get_items()
    await s.get_items(1)
    await s.pop_item()
    await s.clear_session()
    assert threads and threading.get_ident() not in threads


async def test_an_append_is_one_store_call_and_reads_nothing_back(store: sessctl.Store) -> None:
    calls: list[str] = []

    class Counting:
        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(store, name)

    s = SessctlSession("chat", store)
    await s.add_items([user("first")])  # starts the conversation (and reads its record once)
    s.store = Counting()  # type: ignore[assignment]
    for k in range(5):
        await s.add_items([user(f"u{k}"), assistant(f"a{k}")])
    assert calls == ["append"] * 5
    # What was written is what a read returns, from the object's own cache.
    assert await s.get_items(3) == [assistant("a3"), user("u4"), assistant("a4")]
    assert calls[5:] == ["resolve"]
    assert await SessctlSession("chat", store).get_items(3) == await s.get_items(3)


# ---- names ----------------------------------------------------------------------

NAME_RULES = re.compile(r"[A-Za-z0-9._-]{1,128}")

AWKWARD_IDS = [
    "",
    "a",
    "main",
    "a.b",
    "..",
    ".hidden",
    "-dash",
    "user/42",
    "a_b",
    "_h",
    "_2e",
    "CON",
    "nul.txt",
    "HEAD",
    "café ☕",
    "日本語のセッション",
    "tab\tand\nnewline",
    "\x00",
    "x" * 80,
    "x" * 81,
    "é" * 200,
    "ab" * 1000,
]


@pytest.mark.parametrize("branch", ["main", "alt", "", "b" * 41, "ü/ü"])
def test_every_session_id_maps_to_a_valid_reversible_name(branch: str) -> None:
    names = set()
    for sid in AWKWARD_IDS:
        name = conversation_name(sid, branch)
        assert NAME_RULES.fullmatch(name), name
        assert ".." not in name and name[0] not in ".-"
        assert len(name.encode()) <= 128
        names.add(name)
        got_sid, got_branch = parse_conversation_name(name)  # type: ignore[misc]
        # A component is decoded exactly unless it had to be hashed.
        assert got_sid in (sid, None)
        assert got_branch in (branch, None)
        if len(sid.encode()) <= 26:
            assert got_sid == sid
    assert len(names) == len(AWKWARD_IDS), "two ids share a name"


def test_name_encoding_is_documented_and_strict() -> None:
    assert conversation_name("user/42 é") == "agents.user_2f42_20_c3_a9"
    assert conversation_name("a.b", "alt") == "agents.a_2eb.alt"
    assert conversation_name("") == "agents._"
    long = conversation_name("x" * 200)
    assert re.fullmatch(r"agents\.x{46}_h[0-9a-f]{32}", long), long
    assert parse_conversation_name(long) == (None, "main")
    for not_ours in [
        "fix",
        "agents.",
        "agents.a..b",
        "agents.a_2E",  # upper-case hex: not how we write it
        "agents.a_41",  # escapes a byte that is kept as it is
        "agents.a_4",
        "agents.a.main",  # main is never spelled out
        "agents.a.b.c",
        "agents.a_ff",  # not UTF-8
    ]:
        assert parse_conversation_name(not_ours) is None, not_ours


async def test_the_store_takes_every_name_and_records_the_real_id(store: sessctl.Store) -> None:
    for sid in AWKWARD_IDS:
        s = SessctlSession(sid, store)
        await s.add_items([user(sid)])
        record = store.conversation(s.conversation_name())
        assert record is not None
        assert record["metadata"] == {METADATA_SESSION_ID: sid}
        assert await s.get_items() == [user(sid)]


def test_an_id_without_a_utf8_form_is_refused(store: sessctl.Store) -> None:
    with pytest.raises(ValueError, match="not valid Unicode"):
        SessctlSession("\ud800", store)


# ---- history semantics, against SQLiteSession --------------------------------


async def both(a: Any, b: Any, op: str, *args: Any) -> Any:
    """Runs ``op`` on both sessions and requires the same answer."""
    got_a = await getattr(a, op)(*args)
    got_b = await getattr(b, op)(*args)
    assert got_a == got_b, (op, args, got_a, got_b)
    return got_a


async def test_add_get_pop_clear_match_sqlite(store: sessctl.Store, sqlite: SQLiteSession) -> None:
    s = SessctlSession("chat", store)
    for limit in [None, 0, 1, 3, -1]:
        await both(s, sqlite, "get_items", limit)
    assert await both(s, sqlite, "pop_item") is None
    await both(s, sqlite, "add_items", [user("one")])
    await both(s, sqlite, "add_items", [])
    await both(s, sqlite, "add_items", [assistant("two"), user("three"), assistant("four")])
    await both(
        s,
        sqlite,
        "add_items",
        [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}],
    )
    for limit in [None, 0, 1, 2, 4, 5, 6, 100, -1, -3]:
        await both(s, sqlite, "get_items", limit)
    assert await both(s, sqlite, "pop_item") == {
        "type": "function_call",
        "call_id": "c1",
        "name": "f",
        "arguments": "{}",
    }
    assert await both(s, sqlite, "pop_item") == assistant("four")
    await both(s, sqlite, "get_items")
    await both(s, sqlite, "add_items", [user("five")])
    await both(s, sqlite, "get_items", 2)
    await both(s, sqlite, "clear_session")
    assert await both(s, sqlite, "get_items") == []
    assert await both(s, sqlite, "pop_item") is None
    await both(s, sqlite, "clear_session")
    await both(s, sqlite, "add_items", [user("after clear")])
    assert await both(s, sqlite, "get_items") == [user("after clear")]
    for _ in range(2):
        await both(s, sqlite, "pop_item")
    await both(s, sqlite, "get_items")


@pytest.mark.parametrize("seed", range(6))
async def test_random_operations_match_sqlite(
    seed: int, store: sessctl.Store, sqlite: SQLiteSession
) -> None:
    rng = random.Random(seed)
    s = SessctlSession(f"chat-{seed}", store)
    counter = 0
    for _ in range(120):
        op = rng.choices(["add", "get", "pop", "clear"], weights=[8, 6, 4, 1])[0]
        if op == "add":
            items = []
            for _ in range(rng.choice([1, 1, 1, 2, 3, 5])):
                counter += 1
                items.append(rng.choice([user, assistant])(f"m{counter}"))
            await both(s, sqlite, "add_items", items)
        elif op == "get":
            await both(s, sqlite, "get_items", rng.choice([None, 0, 1, 2, 3, 7, 50, -1]))
        elif op == "pop":
            await both(s, sqlite, "pop_item")
        else:
            await both(s, sqlite, "clear_session")
    await both(s, sqlite, "get_items")


async def test_session_settings_limit_is_the_default(store: sessctl.Store, tmp_path: Path) -> None:
    s = SessctlSession("chat", store, session_settings={"limit": 2})
    ref = SQLiteSession("chat", tmp_path / "r.db", session_settings=SessionSettings(limit=2))
    try:
        await both(s, ref, "add_items", [user("a"), assistant("b"), user("c")])
        assert await both(s, ref, "get_items") == [assistant("b"), user("c")]
        assert await both(s, ref, "get_items", 3) == [user("a"), assistant("b"), user("c")]
    finally:
        ref.close()


async def test_unicode_and_a_big_item_round_trip(
    store: sessctl.Store, sqlite: SQLiteSession
) -> None:
    s = SessctlSession("ünïcödé ☕", store)
    items: list[Any] = [
        user("héllo wörld ☕ 日本語 עברית 😀👍🏽 e\u0301 \x00 \u2028"),
        {
            "role": "assistant",
            "content": [{"type": "output_text", "text": "🦀" * 1000, "annotations": []}],
        },
        {
            "type": "function_call_output",
            "call_id": "c",
            "output": {"nested": [1, 2.5, -3, True, None, {}]},
        },
        user("x" * (8 << 20)),  # 8 MiB
    ]
    for item in items:
        await both(s, sqlite, "add_items", [item])
    assert await both(s, sqlite, "get_items") == items
    assert await both(s, sqlite, "get_items", 1) == items[-1:]
    assert await both(s, sqlite, "pop_item") == items[-1]
    assert await both(s, sqlite, "get_items") == items[:-1]


async def test_items_that_are_not_json_are_refused_and_nothing_is_written(
    store: sessctl.Store,
) -> None:
    s = SessctlSession("chat", store)
    with pytest.raises(sessctl.InvalidInput):
        await s.add_items([user(object())])  # type: ignore[arg-type]
    assert await s.get_items() == []
    await s.add_items([user("ok")])
    with pytest.raises(sessctl.InvalidInput):
        int_key: Any = {"role": "user", 3: "an int key"}
        await s.add_items([user("fine"), int_key])
    assert await s.get_items() == [user("ok")]


async def test_a_cancelled_add_still_lands_before_the_cancellation(store: sessctl.Store) -> None:
    s = SessctlSession("chat", store)
    task = asyncio.create_task(s.add_items([user("x")]))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await s.get_items() == [user("x")]


# ---- pop and clear keep history ------------------------------------------------


async def test_pop_of_a_one_item_head_moves_the_ref_to_its_parent(store: sessctl.Store) -> None:
    s = SessctlSession("chat", store)
    await s.add_items([user("a"), assistant("b")])
    first = head_of(store, s)
    await s.add_items([user("c")])
    second = head_of(store, s)

    assert await s.pop_item() == user("c")
    assert head_of(store, s) == first  # no new session: the ref moved back
    entry = store.reflog(s.conversation_name())[0]
    assert (entry["reason"], entry["old"], entry["new"]) == ("pop", second, first)
    # The popped item is still there, under the old head.
    assert store.history(second) == [user("a"), assistant("b"), user("c")]


async def test_pop_of_a_several_item_head_writes_a_session_that_keeps_the_rest(
    store: sessctl.Store,
) -> None:
    s = SessctlSession("chat", store)
    await s.add_items([user("a"), assistant("b"), user("c")])
    old = head_of(store, s)
    blobs = store.fsck()["blobs"]

    assert await s.pop_item() == user("c")
    new = head_of(store, s)
    info = store.session(new)
    assert info["parents"] == [old] and info["messages"] == 2 and info["added"] == 0
    assert store.fsck()["blobs"] == blobs, "a pop copies no message"
    entry = store.reflog(s.conversation_name())[0]
    assert (entry["reason"], entry["old"], entry["new"]) == ("pop", old, new)
    assert store.messages(old, -1) == [user("c")]

    assert await s.pop_item() == assistant("b")
    assert await s.pop_item() == user("a")
    assert await s.pop_item() is None
    assert await s.get_items() == []
    assert [e["reason"] for e in store.reflog(s.conversation_name())][:3] == ["pop"] * 3
    assert store.history(old) == [user("a"), assistant("b"), user("c")]


async def test_pop_retries_when_another_writer_moves_the_head(store: sessctl.Store) -> None:
    s = SessctlSession("chat", store)
    other = SessctlSession("chat", store)
    await s.add_items([user("a")])
    await s.add_items([assistant("b")])
    raced: list[str] = []

    class Racing:
        """The store, but another writer appends just before pop's first compare-and-swap."""

        def __getattr__(self, name: str) -> Any:
            method = getattr(store, name)
            if name not in ("update_refs", "put") or raced:
                return method

            def call(*args: Any, **kwargs: Any) -> Any:
                raced.append(name)
                asyncio.run(other.add_items([user("c")]))
                return method(*args, **kwargs)

            return call

    s.store = Racing()  # type: ignore[assignment]
    # pop read [a, b]; "c" lands first; the compare-and-swap fails and pop retries on [a, b, c].
    assert await s.pop_item() == user("c")
    assert raced == ["update_refs"]
    assert await other.get_items() == [user("a"), assistant("b")]
    reasons = [e["reason"] for e in store.reflog(s.conversation_name())]
    assert reasons[:2] == ["pop", "commit"]


async def test_concurrent_pops_take_each_item_once(store_path: Path) -> None:
    writer = SessctlSession("chat", sessctl.Store(store_path))
    expected = [user(f"m{k}") for k in range(30)]
    for item in expected:
        await writer.add_items([item])
    poppers = [SessctlSession("chat", sessctl.Store(store_path)) for _ in range(3)]

    async def drain(p: SessctlSession) -> list[Any]:
        got = []
        while (item := await p.pop_item()) is not None:
            got.append(item)
        return got

    results = await asyncio.gather(*(drain(p) for p in poppers))
    popped = [item for r in results for item in r]
    assert sorted(popped, key=str) == sorted(expected, key=str)
    for r in results:  # each popper saw the tail newest first
        assert r == sorted(r, key=lambda i: -int(i["content"][1:]))
    assert await writer.get_items() == []


async def test_clear_keeps_history_reachable_and_the_reflog_shows_it(store: sessctl.Store) -> None:
    s = SessctlSession("chat", store)
    await s.add_items([user("a"), assistant("b")])
    await s.create_branch_from_turn(1, "alt")
    await s.add_items([user("a2")])
    await s.switch_to_branch("main")
    old = head_of(store, s)
    alt_name = s.conversation_name("alt")
    alt_tip = store.resolve(alt_name)

    await s.clear_session()
    assert s.current_branch_id == "main"
    assert await s.get_items() == []
    assert [b["branch_id"] for b in await s.list_branches()] == ["main"]
    main_entry = store.reflog(s.conversation_name())[0]
    assert main_entry["reason"] == "clear" and main_entry["old"] == old
    assert store.session(main_entry["new"])["parents"] == [old]
    alt_entry = store.reflog(alt_name)[0]
    assert alt_entry["reason"] == "delete" and alt_entry["old"] == alt_tip
    # Nothing was destroyed.
    assert store.history(old) == [user("a"), assistant("b")]
    assert store.history(alt_tip) == [user("a2")]
    record = store.conversation(s.conversation_name())
    assert record is not None and record["metadata"][METADATA_SESSION_ID] == "chat"
    # Clearing what is empty writes nothing.
    ops = len(store.reflog())
    await s.clear_session()
    assert len(store.reflog()) == ops


# ---- a real run ----------------------------------------------------------------


class EchoModel(Model):
    """A model that answers with how many input items it was given: no network."""

    def __init__(self) -> None:
        self.seen: list[list[Any]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        items = [input] if isinstance(input, str) else list(input)
        self.seen.append(items)
        message = ResponseOutputMessage(
            id=f"msg_{len(self.seen)}",
            type="message",
            role="assistant",
            status="completed",
            content=[
                ResponseOutputText(type="output_text", text=f"saw {len(items)}", annotations=[])
            ],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("EchoModel does not stream")
        yield  # an async generator, as the interface wants


async def run_two_turns(session: Any) -> tuple[list[str], list[Any]]:
    """Two ``Runner.run`` turns on ``session`` with a fresh :class:`EchoModel`."""
    agent = Agent(name="echo", instructions="Count.", model=EchoModel())
    config = RunConfig(tracing_disabled=True)
    outputs = []
    for text in ["hello", "again"]:
        result = await Runner.run(agent, text, session=session, run_config=config)
        outputs.append(result.final_output)
    return outputs, await session.get_items()


async def test_runner_run_remembers_the_first_turn(
    store: sessctl.Store, sqlite: SQLiteSession
) -> None:
    s = SessctlSession("run", store)
    outputs, items = await run_two_turns(s)
    # Turn 2 saw turn 1's user message and answer, then its own input.
    assert outputs == ["saw 1", "saw 3"]
    assert [
        i.get("content") if i.get("role") == "user" else i["content"][0]["text"] for i in items
    ] == ["hello", "saw 1", "again", "saw 3"]
    ref_outputs, ref_items = await run_two_turns(sqlite)
    assert (outputs, items) == (ref_outputs, ref_items)
    # One sessctl session per add_items: each turn's input, then its output.
    assert store.conversation(s.conversation_name())["sessions"] == 4  # type: ignore[index]


# ---- branches, against AdvancedSQLiteSession -----------------------------------

TURNS = [
    [user("What is 2+2?"), assistant("4")],
    [user("And 3+3?"), assistant("6")],
    [user("Tell me about CATS"), assistant("Cats purr.")],
]


def branch_view(branches: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What both classes must agree on (not the timestamps)."""
    keys = ("branch_id", "message_count", "user_turns", "is_current")
    return sorted(tuple(b[k] for k in keys) for b in branches)


def turn_view(turns: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What both classes must agree on of a turn listing (not the timestamps)."""
    return [(t["turn"], t["content"], t["full_content"], t["can_branch"]) for t in turns]


async def test_branches_match_advanced_sqlite_session(store: sessctl.Store, tmp_path: Path) -> None:
    s = SessctlSession("chat", store)
    ref = AdvancedSQLiteSession(session_id="chat", db_path=tmp_path / "adv.db", create_tables=True)
    try:
        for turn in TURNS:
            await both(s, ref, "add_items", turn)
        assert turn_view(await s.get_conversation_turns()) == turn_view(
            await ref.get_conversation_turns()
        )
        assert turn_view(await s.find_turns_by_content("cats")) == turn_view(
            await ref.find_turns_by_content("cats")
        )

        assert await both(s, ref, "create_branch_from_turn", 2, "alt") == "alt"
        assert s.current_branch_id == "alt"
        assert await both(s, ref, "get_items") == TURNS[0]
        await both(s, ref, "add_items", [user("And 4+4?"), assistant("8")])
        assert branch_view(await s.list_branches()) == branch_view(await ref.list_branches())
        assert await both(s, ref, "pop_item") == assistant("8")
        await both(s, ref, "get_items")

        await both(s, ref, "switch_to_branch", "main")
        assert await both(s, ref, "get_items") == [i for t in TURNS for i in t]
        assert await both(s, ref, "get_items", 2, "alt") == [assistant("4"), user("And 4+4?")]
        assert branch_view(await s.list_branches()) == branch_view(await ref.list_branches())

        name = await both(s, ref, "create_branch_from_content", "cats", "cats")
        assert name == "cats"
        await both(s, ref, "get_items")
        await both(s, ref, "switch_to_branch", "alt")
        await both(s, ref, "delete_branch", "cats")
        assert branch_view(await s.list_branches()) == branch_view(await ref.list_branches())
        await both(s, ref, "delete_branch", "alt", True)
        assert s.current_branch_id == "main"
        await both(s, ref, "get_items")
        assert branch_view(await s.list_branches()) == branch_view(await ref.list_branches())
    finally:
        ref.close()


async def test_branch_errors_match_advanced_sqlite_session(
    store: sessctl.Store, tmp_path: Path
) -> None:
    s = SessctlSession("chat", store)
    ref = AdvancedSQLiteSession(session_id="chat", db_path=tmp_path / "adv.db", create_tables=True)

    async def both_refuse(op: str, *args: Any) -> None:
        with pytest.raises(ValueError) as ours:
            await getattr(s, op)(*args)
        with pytest.raises(ValueError) as theirs:
            await getattr(ref, op)(*args)
        assert str(ours.value) == str(theirs.value)

    try:
        for turn in TURNS:
            await both(s, ref, "add_items", turn)
        await both_refuse("create_branch_from_turn", 4)
        await both_refuse("create_branch_from_turn", 0)
        await both_refuse("create_branch_from_turn", 1, "  ")
        await both_refuse("create_branch_from_content", "dogs")
        await both_refuse("switch_to_branch", "nope")
        await both_refuse("delete_branch", "main")
        await both_refuse("delete_branch", "")
        await both_refuse("delete_branch", "nope")
        await both(s, ref, "create_branch_from_turn", 2, "alt")
        await both_refuse("delete_branch", "alt")  # the current one
        await both(s, ref, "switch_to_branch", "main")
        await both_refuse("create_branch_from_turn", 2, "alt")  # taken
        auto = await s.create_branch_from_turn(3)
        assert re.fullmatch(r"branch_from_turn_3_\d+", auto)
        await s.switch_to_branch("main")
        again = await s.create_branch_from_turn(3)
        assert again in (auto + "_2", f"branch_from_turn_3_{int(auto.split('_')[-1]) + 1}")
    finally:
        ref.close()


async def test_a_branch_is_a_fork_that_shares_its_prefix(store: sessctl.Store) -> None:
    s = SessctlSession("chat", store)
    heads = []
    for turn in TURNS:
        await s.add_items(turn)
        heads.append(head_of(store, s))
    main_head = heads[-1]
    blobs = store.fsck()["blobs"]

    await s.create_branch_from_turn(3, "alt")
    tip = head_of(store, s, "alt")
    # Its parent is the session holding exactly the items it keeps (turns 1
    # and 2), so ancestry tells the truth: main's head, which has more, is
    # no ancestor of the branch.
    assert store.session(tip)["parents"] == [heads[1]]
    assert store.session(tip)["messages"] == 4
    assert store.fsck()["blobs"] == blobs, "a branch copies no message"
    assert store.is_ancestor(heads[1], tip)
    assert not store.is_ancestor(main_head, tip)
    record = store.conversation(s.conversation_name("alt"))
    assert record is not None
    assert record["metadata"] == {METADATA_SESSION_ID: "chat", METADATA_BRANCH_ID: "alt"}
    assert [e["reason"] for e in store.reflog(s.conversation_name("alt"))] == ["fork"]

    # A pop on the branch moves the branch only; main keeps its items.
    await s.add_items([user("other 3")])
    assert await s.pop_item() == user("other 3")
    assert await s.pop_item() == assistant("6")
    assert await s.get_items() == TURNS[0] + [user("And 3+3?")]
    assert await s.get_items(None, "main") == [i for t in TURNS for i in t]
    assert head_of(store, s, "main") == main_head


async def test_the_current_branch_belongs_to_the_object(store: sessctl.Store) -> None:
    a = SessctlSession("chat", store)
    b = SessctlSession("chat", store)
    await a.add_items(TURNS[0] + TURNS[1])
    await a.create_branch_from_turn(2, "alt")
    assert (a.current_branch_id, b.current_branch_id) == ("alt", "main")
    await a.add_items([user("on alt")])
    assert await b.get_items() == TURNS[0] + TURNS[1]
    assert await b.get_items(branch_id="alt") == TURNS[0] + [user("on alt")]
    await b.switch_to_branch("alt")
    assert await b.pop_item() == user("on alt")
    assert await a.get_items() == TURNS[0]


async def test_adding_to_a_branch_another_object_deleted_fails(store: sessctl.Store) -> None:
    a = SessctlSession("chat", store)
    b = SessctlSession("chat", store)
    await a.add_items(TURNS[0])
    await a.create_branch_from_turn(1, "alt")
    await b.delete_branch("alt")
    with pytest.raises(ValueError, match="Branch 'alt' does not exist"):
        await a.add_items([user("lost?")])


# ---- many writers ----------------------------------------------------------------


async def test_two_objects_on_one_store_see_each_other(store_path: Path) -> None:
    a = SessctlSession("chat", sessctl.Store(store_path))
    b = SessctlSession("chat", sessctl.Store(store_path))
    c = SessctlSession("chat", a.store)
    await a.add_items([user("from a")])
    await b.add_items([assistant("from b")])
    await c.add_items([user("from c")])
    expected = [user("from a"), assistant("from b"), user("from c")]
    for s in (a, b, c):
        assert await s.get_items() == expected
    assert await b.pop_item() == user("from c")
    assert await a.get_items() == expected[:2]

    # Concurrent appends from all three: none is lost.
    await asyncio.gather(
        *(s.add_items([user(f"{tag}{k}")]) for k in range(20) for tag, s in zip("abc", (a, b, c)))
    )
    items: list[Any] = await a.get_items()
    assert len(items) == 62
    assert sorted(i["content"] for i in items[2:]) == sorted(
        f"{t}{k}" for t in "abc" for k in range(20)
    )


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    import sessctl
    from sessctl.agents import SessctlSession

    async def main(path, tag, n):
        s = SessctlSession("shared", sessctl.Store(path))
        for k in range(n):
            await s.add_items([{"role": "user", "content": f"{tag}{k}"},
                               {"role": "assistant", "content": f"{tag}{k}!"}])

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


async def test_two_processes_append_to_one_session(store_path: Path) -> None:
    n = 40
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(store_path), tag, str(n)])
        for tag in ("p", "q")
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    items: list[Any] = await SessctlSession("shared", sessctl.Store(store_path)).get_items()
    assert len(items) == 4 * n
    for tag in ("p", "q"):
        mine = [i["content"] for i in items if i["content"].startswith(tag)]
        assert mine == [c for k in range(n) for c in (f"{tag}{k}", f"{tag}{k}!")]
    # Each add_items stayed whole: an answer always follows its question.
    for question, answer in zip(items[::2], items[1::2]):
        assert answer["content"] == question["content"] + "!"


async def test_an_append_never_lands_in_a_branch_deleted_and_created_again(
    store: sessctl.Store,
) -> None:
    """Another object replaced branch ``x`` under the same id: this object's
    next append is refused, not written into the other conversation."""
    a = SessctlSession("s", store)
    b = SessctlSession("s", store)
    await a.add_items(
        [
            {"role": "user", "content": "u1"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "u2"},
        ]
    )
    await a.create_branch_from_turn(2, "x")
    await a.add_items([{"role": "user", "content": "A's u2'"}])
    await b.switch_to_branch("main")
    await b.delete_branch("x")
    await b.create_branch_from_turn(1, "x")
    await b.add_items([{"role": "user", "content": "B's fresh start"}])
    with pytest.raises(ValueError, match="deleted"):
        await a.add_items([{"role": "assistant", "content": "A's answer"}])
    assert [i["content"] for i in await b.get_items(branch_id="x")] == ["B's fresh start"]
    # The object that deleted a branch may create it again and append to it.
    await b.switch_to_branch("main")
    await b.delete_branch("x")
    await b.create_branch_from_turn(1, "x")
    await b.add_items([{"role": "user", "content": "again"}])
    assert [i["content"] for i in await b.get_items(branch_id="x")] == ["again"]


async def test_the_tail_cache_answers_what_the_store_would(store_path: Path) -> None:
    """A session object keeps the newest items it read or wrote; every answer
    it gives from them equals a fresh object's answer from the store."""
    a = SessctlSession("cache", sessctl.Store(store_path))
    b = SessctlSession("cache", sessctl.Store(store_path))
    # More items than the object keeps (256), in batches, some numbers the
    # store writes canonically (1.0 comes back as the store returns it).
    for k in range(0, 300, 3):
        await a.add_items([user(f"u{k}"), assistant(f"a{k}"), {"role": "user", "content": [1.0, k]}])

    def fresh() -> SessctlSession:
        return SessctlSession("cache", sessctl.Store(store_path))

    for limit in (None, 1, 50, 255, 256, 257, 299, 300, 301, -1):
        assert await a.get_items(limit) == await fresh().get_items(limit), limit
    # The returned lists are the caller's own: changing one changes no later answer.
    got = await a.get_items(2)
    got[0]["content"] = "changed"
    assert await a.get_items(2) == await fresh().get_items(2)

    # Another object moves the head (append, then pop two): the cache follows.
    await b.add_items([user("from b")])
    assert (await a.get_items(1)) == [user("from b")]
    await b.pop_item()
    await b.pop_item()
    for limit in (None, 3, 256):
        assert await a.get_items(limit) == await fresh().get_items(limit), limit
