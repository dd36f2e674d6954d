"""The `sessctl.Store` binding: every method, every exception, as a user calls them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import sessctl
from sessctl import (
    Corrupt,
    InvalidInput,
    NotFound,
    RefOutOfDate,
    SessctlError,
    Store,
    StoreBusy,
)

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


@pytest.fixture(params=["disk", "memory"])
def store(request, tmp_path) -> Store:
    if request.param == "memory":
        return Store.memory()
    return Store(tmp_path / "store")


def test_exceptions_form_one_hierarchy():
    for e in (RefOutOfDate, NotFound, Corrupt, StoreBusy, InvalidInput):
        assert issubclass(e, SessctlError)
        assert issubclass(e, Exception)
    assert (RefOutOfDate.exit_code, InvalidInput.exit_code) == (1, 2)
    assert (Corrupt.exit_code, StoreBusy.exit_code) == (3, 4)


def test_open_create_and_reopen(tmp_path):
    with pytest.raises(NotFound):
        Store(tmp_path / "nothing", create=False)
    assert not (tmp_path / "nothing").exists()
    s = Store(tmp_path / "s")
    s.commit("fix", [user("hi")], new=True)
    again = Store(tmp_path / "s", create=False)
    assert again.history("fix") == [user("hi")]
    assert again.path == str(tmp_path / "s")
    assert Store.memory().path is None
    (tmp_path / "file").write_text("not a store")
    with pytest.raises(SessctlError):
        Store(tmp_path / "file")
    with pytest.raises(InvalidInput):
        Store(tmp_path / "s", wait=-1)
    with pytest.raises(InvalidInput):
        Store(tmp_path / "s", wait=1e20)


def test_commit_history_and_compare_and_swap(store):
    root = store.commit("fix", [user("the test is flaky")], new=True, title="Fix it")
    head = store.commit(
        "fix",
        [assistant("retrying"), user("still flaky")],
        usage={"input_tokens": 10, "output_tokens": 5},
        metadata={"model": "m1"},
        expected_head=root,
    )
    assert store.resolve("fix") == head
    assert store.resolve("fix~1") == root
    assert [m["content"] for m in store.history("fix")] == [
        "the test is flaky",
        "retrying",
        "still flaky",
    ]
    assert store.message_count("fix") == 3
    assert store.messages("fix", -2) == [assistant("retrying"), user("still flaky")]
    assert store.messages("fix", 1, 2) == [assistant("retrying")]
    assert store.messages("fix", 5) == []
    with pytest.raises(RefOutOfDate):
        store.commit("fix", [user("lost")], expected_head=root)
    assert store.resolve("fix") == head
    with pytest.raises(InvalidInput):
        store.commit("fix", [user("again")], new=True)
    with pytest.raises(NotFound):
        store.commit("nope", [user("x")])
    c = store.conversation("fix")
    assert c["title"] == "Fix it" and c["messages"] == 3
    assert c["usage"]["prompt_tokens"] == 10 and c["usage"]["total_tokens"] == 15
    shown = store.show("fix")
    assert shown["id"] == head and shown["metadata"]["extra"] == {"model": "m1"}
    assert [m["value"]["content"] for m in shown["shown_messages"]] == ["retrying", "still flaky"]
    assert len(store.show("fix", messages=True)["shown_messages"]) == 3
    assert store.conversation("nope") is None


def test_bad_input_is_one_clear_error_and_writes_nothing(store):
    store.commit("fix", [user("hi")], new=True)
    before = store.resolve("fix")
    for bad in (
        lambda: store.commit("bad name", [user("x")], new=True),
        lambda: store.commit("../up", [user("x")], new=True),
        lambda: store.commit("fix", user("not a list")),
        lambda: store.commit("fix", [object()]),
        lambda: store.commit("fix", [user("x")], usage={"tokens": 1}),
        lambda: store.commit("fix", [user("x")], usage={"prompt_tokens": -1}),
        lambda: store.commit("fix", [user("x")], expected_head="zz"),
        lambda: store.commit("fix", [user("x")], metadata=[1]),
        lambda: store.fork("fix", at_message=9),
        lambda: store.resolve("fix~9"),
        lambda: store.import_files("nonsense", []),
        lambda: store.gc(prune="yesterday-ish"),
        lambda: store.update_refs("x", [("HEAD", None, before)]),
        lambda: store.update_refs("x", [("refs/heads/fix", "*", None)]),
        lambda: store.put(reason="x", keep=1),
        lambda: store.put(reason="x", parent=before, keep=2),
        lambda: store.put(reason="x", keep=-1),
        lambda: store.put(reason="x", created_at=2**70),
        lambda: store.put(reason="x", tags=[("t", None)]),
        lambda: store.fork("fix", at_message=-1),
        lambda: store.log(limit=-1),
        lambda: store.conversations(limit=-1),
        lambda: store.messages("fix", 2**70),
        lambda: store.commit("fix", [{"n": float("nan")}]),
        lambda: store.commit("fix", [{"n": float("inf")}]),
        lambda: store.commit("fix", [{1: "int key"}]),
        lambda: store.commit("fix", [b"bytes"]),
        lambda: store.commit("fix", [2**64]),
        lambda: store.set_metadata("fix", [("k", 1)]),
    ):
        with pytest.raises(InvalidInput) as e:
            bad()
        assert str(e.value), "an error says what was wrong"
    with pytest.raises(NotFound):
        store.resolve("0" * 64)
    with pytest.raises(NotFound):
        store.history("missing")
    assert store.resolve("fix") == before
    assert store.fsck()["clean"]


def test_unicode_and_big_messages(store):
    text = "naïve 日本語 🚀 \u0000 and \U0010ffff " * 3
    big = {"role": "tool", "content": "x" * (8 << 20), "nested": {"k": [1, 2.5, None, True]}}
    store.commit("u", [user(text), big], new=True)
    got = store.history("u")
    assert got[0]["content"] == text
    assert got[1] == big
    assert store.log("u").__next__()["summary"].startswith("naïve")


def test_fork_log_merge_base_and_ancestry(store):
    a = store.commit("main", [user("one")], new=True)
    b = store.commit("main", [assistant("two")])
    c = store.commit("main", [user("three")])
    cut_name, cut = store.fork("main", at_message=2, name="cut")
    assert cut_name == "cut"
    assert store.history(cut) == [user("one"), assistant("two")]
    name, tip = store.fork("main~1", name="alt")
    assert (name, tip) == ("alt", b), "a fork without a cut is a new ref, no object"
    d = store.commit("alt", [user("three, differently")])
    assert store.merge_base("main", "alt") == b
    assert store.is_ancestor(a, "alt") and not store.is_ancestor(c, "alt")
    log = list(store.log("main"))
    assert [e["id"] for e in log] == [c, b, a]
    assert "refs/heads/main" in log[0]["refs"]
    assert [e["id"] for e in store.log("main", limit=2)] == [c, b]
    everything = {e["id"] for e in store.log(all=True)}
    assert {a, b, c, d} <= everything
    other = store.commit("lonely", [user("x")], new=True)
    assert store.merge_base("lonely", "main") is None
    assert other in everything or other in {e["id"] for e in store.log(all=True)}
    fork_name, at = store.fork("main")
    assert at == c and fork_name.startswith("fork-")


def test_archive_unarchive_delete_and_conversations(store):
    store.commit("a", [user("a")], new=True)
    b = store.commit("b", [user("b")], new=True)
    assert {c["name"] for c in store.conversations()} == {"a", "b"}
    assert len(store.conversations(limit=1)) == 1
    tip = store.archive("a")
    assert [c["name"] for c in store.conversations()] == ["b"]
    assert [c["name"] for c in store.conversations(archived=True)] == ["a"]
    with pytest.raises(InvalidInput):
        store.commit("a", [user("on an archived one")])
    with pytest.raises(InvalidInput):
        store.archive("a")
    assert store.unarchive("a") == tip
    assert store.delete("b") == b
    assert [c["name"] for c in store.conversations()] == ["a"]
    with pytest.raises(NotFound):
        store.delete("b")
    moves = store.reflog("a")
    assert [m["reason"] for m in moves][:2] == ["unarchive", "archive"]
    assert all(set(m) >= {"op", "ref", "old", "new", "hash", "prev"} for m in moves)


def test_checkout_writes_the_runtime_layout(store, tmp_path):
    store.commit("fix", [user("hi"), assistant("hello")], new=True)
    out = store.checkout("fix", tmp_path / "seed")
    state = json.loads((tmp_path / "seed" / "state.json").read_text())
    assert state["message_history"] == [user("hi"), assistant("hello")]
    assert Path(out["display_messages"]).exists()
    assert out["conversation"] == "fix"
    assert store.log().__next__()["id"] == store.resolve("fix")


def test_gc_and_fsck(tmp_path):
    s = Store(tmp_path / "s")
    s.commit("keep", [user("keep me")], new=True)
    s.commit("drop", [user("drop me")], new=True)
    s.delete("drop")
    dry = s.gc(dry_run=True, prune="now")
    assert dry["pruned"] == 0 or dry["objects"] >= dry["pruned"]
    report = s.fsck(full=True)
    assert report["clean"] and report["problems"] == []
    assert report["sessions"] >= 2


def test_corruption_is_an_error_naming_the_object(tmp_path):
    s = Store(tmp_path / "s")
    head = s.commit("fix", [user("precious words " * 50)], new=True)
    s.gc(prune="now")  # packs everything
    del s
    packs = [p for p in (tmp_path / "s" / "packs").iterdir() if p.suffix == ".pack"]
    assert packs
    for p in packs:
        data = bytearray(p.read_bytes())
        for k in range(len(data) // 2, len(data) // 2 + 16):
            data[k] ^= 0x55
        p.write_bytes(bytes(data))
    with pytest.raises(Corrupt) as e:
        Store(tmp_path / "s").history(head)
    assert str(e.value)
    assert not Store(tmp_path / "s").fsck()["clean"]


def test_put_refs_tags_and_sessions(store):
    root = store.put(
        reason="test put",
        messages=[user("q")],
        state={"channel": 1},
        metadata={"checkpoint": "c1"},
        conversation="lg.t",
        expected_head=None,
        tags={"lg.t.c1": None},
        conversation_metadata={"thread_id": "t"},
    )
    assert store.conversation("lg.t")["metadata"] == {"thread_id": "t"}
    child = store.put(
        reason="test put",
        parent=root,
        keep=1,
        messages=[assistant("a")],
        conversation="lg.t",
        expected_head=root,
        tags={"lg.t.c2": None},
    )
    s = store.session(child)
    assert s["parents"] == [root] and s["messages"] == 2 and s["added"] == 1
    assert s["state"] == {"channel": 1}, "a put without state keeps its parent's"
    assert store.session(root)["metadata"] == {"checkpoint": "c1"}
    # A fork inside the conversation: a real DAG fork, the head moves.
    fork = store.put(
        reason="test put", parent=root, keep=0, messages=[user("other")], conversation="lg.t"
    )
    assert store.history("lg.t") == [user("other")]
    assert store.merge_base(fork, child) == root
    with pytest.raises(RefOutOfDate):
        store.put(reason="x", parent=root, conversation="lg.t", expected_head=child)
    with pytest.raises(RefOutOfDate):
        store.put(reason="x", parent=root, tags={"lg.t.c1": None})
    assert store.refs("refs/tags/lg.t.") == [
        ("refs/tags/lg.t.c1", root),
        ("refs/tags/lg.t.c2", child),
    ]
    store.update_refs(
        "drop c1", [("refs/tags/lg.t.c1", root, None), ("refs/heads/lg.t", fork, child)]
    )
    assert store.refs("refs/tags/lg.t.") == [("refs/tags/lg.t.c2", child)]
    assert store.resolve("lg.t") == child
    with pytest.raises(RefOutOfDate):
        store.update_refs("x", [("refs/tags/lg.t.c2", root, None)])
    with pytest.raises(NotFound):
        store.update_refs("x", [("refs/heads/nope", "*", child)])
    from types import MappingProxyType

    store.set_metadata("lg.t", MappingProxyType({"thread_id": None, "extra": [1]}))
    assert store.conversation("lg.t")["metadata"] == {"extra": [1]}
    assert ("refs/heads/lg.t", child) in store.refs()
    assert store.fsck()["clean"]


def test_append_returns_the_messages_as_the_store_returns_them(store):
    # Floats stay floats, big ints stay ints, keys come back in bytewise order.
    odd = {"z": 1.0, "a": [2**64 - 1, -(2**63), 0.1, -0.0, 1e300], "é": "☕\n\u0000", "B": None}
    first, texts = store.append(
        "ag", [user("q"), odd], expected_head=None, conversation_metadata={"k": "v"}
    )
    assert store.conversation("ag")["metadata"] == {"k": "v"}
    assert [json.loads(t) for t in texts] == store.messages(first) == [user("q"), odd]
    assert [list(json.loads(t)) for t in texts] == [list(m) for m in store.messages(first)]
    second, texts = store.append("ag", (assistant("a"),), expected_head=first)
    assert [json.loads(t) for t in texts] == store.messages(second, -1) == [assistant("a")]
    s = store.session(second)
    assert s["parents"] == [first] and s["messages"] == 3 and s["added"] == 1
    assert store.reflog("ag")[0]["reason"] == "commit"
    # The same compare-and-swap as put's: a stale head or an existing
    # conversation loses and writes nothing.
    with pytest.raises(RefOutOfDate):
        store.append("ag", [user("late")], expected_head=first)
    with pytest.raises(RefOutOfDate):
        store.append("ag", [user("again")], expected_head=None)
    with pytest.raises(InvalidInput):
        store.append("ag", [float("nan")], expected_head=second)
    assert store.resolve("ag") == second and store.message_count("ag") == 3


def test_log_iterates_100k_sessions_without_loading_them(tmp_path):
    path = tmp_path / "big"
    s = Store(path, durable=False)
    n = 100_000
    s.commit("long", [user("turn 0")], new=True)
    for i in range(1, n):
        s.commit("long", [user(f"turn {i}")])
    it = s.log("long")
    assert len(it) == n
    first = next(it)
    assert first["summary"] == f"turn {n - 1}"
    assert len(it) == n - 1
    seen = 1
    for entry in it:
        seen += 1
    assert seen == n and entry["summary"] == "turn 0"
    # A fresh process that walks all 100k ids but reads 3 entries stays small:
    # only ids are held (32 bytes each), never the summaries.
    code = textwrap.dedent(
        f"""
        import resource, sessctl
        s = sessctl.Store({str(path)!r}, create=False)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        it = s.log("long")
        entries = [next(it) for _ in range(3)]
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(len(it), after - before)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.split()
    left, grown_kib = int(out[0]), int(out[1])
    assert left == n - 3
    assert grown_kib < 64 * 1024, f"walking 100k ids grew the process by {grown_kib} KiB"


WRITER = textwrap.dedent(
    """
    import sys, sessctl
    path, me, turns = sys.argv[1], sys.argv[2], int(sys.argv[3])
    s = sessctl.Store(path, create=False, wait=30)
    lost = 0
    for i in range(turns):
        s.commit(me, [{"role": "user", "content": f"{me} {i}"}])
        while True:  # the shared conversation: compare-and-swap, retry on a lost race
            head = s.resolve("shared")
            try:
                s.commit("shared", [{"role": "user", "content": f"{me} {i}"}], expected_head=head)
                break
            except sessctl.RefOutOfDate:
                lost += 1
    print(lost)
    """
)


def test_two_processes_commit_to_one_store(tmp_path):
    path = tmp_path / "s"
    s = Store(path)
    for name in ("p0", "p1", "shared"):
        s.commit(name, [user("start")], new=True)
    turns = 150
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), f"p{k}", str(turns)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(2)
    ]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    for k in range(2):
        assert s.message_count(f"p{k}") == turns + 1
    shared = [m["content"] for m in s.history("shared")]
    assert len(shared) == 2 * turns + 1, "no turn lost, none doubled"
    for k in range(2):
        mine = [t for t in shared if t.startswith(f"p{k} ")]
        assert mine == [f"p{k} {i}" for i in range(turns)], "each writer's turns in order"
    assert s.fsck()["clean"]


def test_import_files_on_real_transcripts(tmp_path):
    files = sorted((SHARED / "claude-code").rglob("*.jsonl"))[:3]
    if not files:
        pytest.skip("../shared/data is not beside the repository")
    s = Store(tmp_path / "s")
    r = s.import_files("claude-code", files)
    assert r["files"] == len(files) and r["sessions_total"] > 0
    again = s.import_files("claude-code", files)
    assert again["sessions_written"] == 0, "importing twice writes nothing new"
    assert s.conversations()
    assert s.fsck()["clean"]


def test_gil_is_released_during_store_calls(tmp_path):
    import threading

    s = Store(tmp_path / "s", durable=True)
    s.commit("t", [user("0")], new=True)
    ticks = 0
    stop = threading.Event()

    def spin():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    t = threading.Thread(target=spin)
    t.start()
    before = ticks
    for i in range(200):
        s.commit("t", [user(str(i))])
    stop.set()
    t.join()
    assert ticks > before, "another Python thread ran while the store worked"


def test_package_is_typed():
    root = Path(sessctl.__file__).parent
    assert (root / "py.typed").exists()
    assert (root / "_native.pyi").exists()
    assert sessctl.__version__
    assert isinstance(sessctl.FORMAT_VERSION, int)
    assert os.path.basename(sessctl.__file__) == "__init__.py"
