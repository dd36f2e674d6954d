"""A LangGraph checkpointer that keeps checkpoints in a sessctl store.

:class:`SessctlSaver` maps LangGraph's model onto sessctl's:

* a thread and checkpoint namespace is a **conversation**, named
  ``lg.<tkey>.<nkey>`` (see :func:`thread_key`), whose record metadata holds
  the real ``thread_id`` and ``checkpoint_ns`` under ``"langgraph"``;
* a checkpoint is a **session** whose parent is the session of its parent
  checkpoint, so ``update_state`` and time travel make real forks in the DAG.
  The messages channel (``"messages"`` by default) is the session's message
  history, stored as a delta on the parent's. Every other channel goes to the
  session's state, keyed by channel: a value that changed since the parent
  checkpoint (a channel in ``new_versions``, or one whose version differs from
  the parent's) as ``[type, base64]`` from ``serde``; an unchanged one as
  ``{"at": <session id>}``, naming the ancestor session (through first
  parents, so it stays reachable as long as this one is) whose state holds
  the value itself, so an unchanged value is stored once. A root session
  (the first checkpoint, or one ``prune`` rewrote) holds every value. The
  checkpoint's own fields and metadata go to the session's metadata under
  ``"langgraph"`` (record format 2; format 1, every value inline, still reads);
* tag ``lg.<tkey>.<nkey>.<ckey>`` names each checkpoint's session, and tag
  ``lgw.<tkey>.<nkey>.<ckey>`` the newest of its pending-writes sessions: each
  ``put_writes`` that adds anything writes one session holding only its own
  entries, whose parent is the previous writes session of that checkpoint (the
  first one's is the checkpoint's session), and moves the tag to it
  (compare-and-swapped);
* every ``put`` moves the conversation's ref compare-and-swapped against the
  head this saver observed when it last read or wrote the *parent*
  checkpoint (``get_tuple`` returning it, or the ``put`` that wrote it), so
  two writers that continue one thread from the same checkpoint, in one
  saver or in two processes, never fork it silently: the second gets
  :class:`sessctl.RefOutOfDate`.

LangChain messages are stored as ``message_to_dict`` JSON, and plain dict
messages (OpenAI style) as themselves when JSON carries them exactly (what
``sessctl show`` reads); values JSON cannot carry exactly go through the
saver's ``serde`` as ``{"__sessctl_serde__": [type, base64]}``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import math
import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Generic, TypeVar

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    SerializerProtocol,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)

from ._native import ANY, NotFound, RefOutOfDate, Store

__all__ = ["SessctlSaver", "thread_key", "namespace_key", "checkpoint_key"]

SERDE_KEY = "__sessctl_serde__"
"""The key of a value stored through the saver's serde: ``{SERDE_KEY: [type, base64]}``."""

_MESSAGE_CLASSES: dict[str, type[BaseMessage]] = {
    "human": HumanMessage,
    "ai": AIMessage,
    "AIMessageChunk": AIMessageChunk,
    "system": SystemMessage,
    "tool": ToolMessage,
    "function": FunctionMessage,
    "chat": ChatMessage,
}
"""``message_to_dict`` types read back without re-validating (see ``_dec_message``)."""

RECORD_KEY = "langgraph"
"""The key under which sessions and conversation records carry LangGraph's fields."""

RECORD_FORMAT = 2
"""Version of the ``"langgraph"`` record written into each checkpoint session: 2 lets
the state name the ancestor holding an unchanged channel value (``{"at": id}``)."""

_READABLE_FORMATS = frozenset({1, RECORD_FORMAT})
"""Record formats this module reads: 1 keeps every channel value inline."""

WRITES_KEY = RECORD_KEY + "_writes"
"""The metadata key that marks a pending-writes session."""

_KEY_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_MAX_KEY = 40
_HEX = frozenset("0123456789abcdef")
_MISSING: Any = object()
_NO_CHECKPOINT = ""
"""The checkpoint key standing for "no checkpoint" (an empty thread); no real key is empty."""
_CAS_RETRIES = 8
_WRITES_PATIENCE = 10.0
"""Seconds ``put_writes`` keeps merging with other writers of one checkpoint."""
_TAGS = "refs/tags/"
_HEADS = "refs/heads/"


# ---- names ----------------------------------------------------------------


def _is_hashed(key: str) -> bool:
    return len(key) == 33 and key[0] == "h" and all(c in _HEX for c in key[1:])


@lru_cache(maxsize=8192)
def _encode_key(text: str) -> str:
    raw = text.encode("utf-8", "surrogatepass")
    if not raw:
        return "__"
    key = "".join(chr(b) if b in _KEY_BYTES else f"_{b:02x}" for b in raw)
    # A key that already looks like a hashed one is hashed too, so that no
    # two texts share a key.
    if len(key) > _MAX_KEY or _is_hashed(key):
        return "h" + hashlib.sha256(raw).hexdigest()[:32]
    return key


def _decode_key(key: str) -> str | None:
    """The text :func:`_encode_key` made ``key`` from; ``None`` for a hashed key."""
    if _is_hashed(key):
        return None
    if key == "__":
        return ""
    out = bytearray()
    i = 0
    while i < len(key):
        if key[i] == "_":
            out.append(int(key[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(key[i]))
            i += 1
    return out.decode("utf-8", "surrogatepass")


def thread_key(thread_id: str) -> str:
    """The ``tkey`` of a thread: ``[A-Za-z0-9-]`` kept, every other UTF-8 byte as
    ``_`` and two hex digits, ``__`` for ``""``; ``h`` and 32 hex digits of its
    SHA-256 when that is longer than 40 characters."""
    return _encode_key(str(thread_id))


def namespace_key(checkpoint_ns: str) -> str:
    """The ``nkey`` of a checkpoint namespace: ``_`` for the root namespace ``""``,
    else encoded as :func:`thread_key` does."""
    return "_" if checkpoint_ns == "" else _encode_key(checkpoint_ns)


def checkpoint_key(checkpoint_id: str) -> str:
    """The ``ckey`` of a checkpoint id, encoded as :func:`thread_key` does."""
    return _encode_key(checkpoint_id)


def _conversation(t: str, n: str) -> str:
    return f"lg.{t}.{n}"


def _checkpoint_tag(t: str, n: str, c: str) -> str:
    return f"{_TAGS}lg.{t}.{n}.{c}"


def _writes_tag(t: str, n: str, c: str) -> str:
    return f"{_TAGS}lgw.{t}.{n}.{c}"


def _split_tag(ref: str) -> tuple[str, str, str] | None:
    parts = ref[len(_TAGS) :].split(".")
    if len(parts) != 4:
        return None
    return parts[1], parts[2], parts[3]


def _split_head(ref: str) -> tuple[str, str] | None:
    parts = ref[len(_HEADS) :].split(".")
    if len(parts) != 3:
        return None
    return parts[1], parts[2]


# ---- JSON ---------------------------------------------------------------------


def _is_json(v: Any) -> bool:
    """Whether ``v`` survives the store's JSON exactly (same types back)."""
    t = type(v)
    if t is str:
        return v.isascii() or _utf8(v)
    if t is bool or v is None:
        return True
    if t is int:
        return -(2**63) <= v < 2**64
    if t is float:
        return math.isfinite(v)
    if t is list:
        return all(_is_json(x) for x in v)
    if t is dict:
        return all(type(k) is str and _is_json(k) and _is_json(x) for k, x in v.items())
    return False


def _utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _copy_json(v: Any) -> Any:
    if type(v) is dict:
        return {k: _copy_json(x) for k, x in v.items()}
    if type(v) is list:
        return [_copy_json(x) for x in v]
    return v


def _is_serde(v: Any) -> bool:
    return type(v) is dict and len(v) == 1 and SERDE_KEY in v


def _is_plain_message(m: dict[str, Any]) -> bool:
    """Whether a dict message can be stored as itself: JSON carries it exactly and
    reading it back cannot mistake it for something else (a serde value or a
    ``message_to_dict`` form)."""
    if _is_serde(m) or ("type" in m and type(m.get("data")) is dict):
        return False
    return _is_json(m)


def _created_at(ts: Any) -> int | None:
    if not isinstance(ts, str):
        return None
    try:
        return int(datetime.fromisoformat(ts).timestamp() * 1000)
    except (ValueError, OverflowError, OSError):
        return None


# ---- small caches -----------------------------------------------------------

K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A bounded, thread-safe least-recently-used map."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, default: Any = None) -> Any:
        """The value under ``key`` (which may be ``None``), else ``default``."""
        with self._lock:
            value = self._items.get(key, _MISSING)
            if value is _MISSING:
                return default
            self._items.move_to_end(key)
            return value

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def pop(self, key: K) -> None:
        with self._lock:
            self._items.pop(key, None)

    def pop_where(self, pred: Any) -> None:
        with self._lock:
            for key in [k for k in self._items if pred(k)]:
                del self._items[key]


@dataclass
class _Written:
    """The message list of the session a thread last wrote or read."""

    session: str
    messages: list[Any]
    prints: list[Any]


@dataclass(frozen=True)
class _Entry:
    """One checkpoint found by a listing: its tag and where its pieces are."""

    t: str
    n: str
    c: str
    session: str
    writes: str | None
    checkpoint_id: str


# ---- the saver ----------------------------------------------------------------


class SessctlSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer on a sessctl :class:`~sessctl.Store`.

    ``store`` is an open store (or a path, opened and created if absent).
    ``messages_channel`` names the channel kept as the session's message
    history. ``serde`` serializes every other value (LangGraph's
    ``JsonPlusSerializer`` by default).

    Any number of savers, in any number of processes, may share one store.
    ``put`` raises :class:`sessctl.RefOutOfDate` when another writer (another
    run through this saver, or another saver) moved the thread since this
    saver read or wrote the parent checkpoint; read the thread again
    (``get_tuple``) to continue from there. When this saver has no such
    observation (it never read the parent, or forgot it: it keeps the last
    ``expectations`` of them), ``put`` reads the thread's head just before
    writing: the compare-and-swap then only catches a writer that moves the
    thread between that read and the write. The async methods run the sync
    ones in a worker thread (the store releases the GIL).

    Caveat: the messages channel's common prefix with the parent checkpoint is
    found by object identity (then equality), checked against each message's
    id and content; a message changed in place in any other field after it was
    saved is not noticed.
    """

    store: Store
    messages_channel: str

    def __init__(
        self,
        store: Store | str | os.PathLike[str],
        *,
        messages_channel: str = "messages",
        serde: SerializerProtocol | None = None,
        expectations: int = 8192,
    ) -> None:
        super().__init__(serde=serde)
        self.store = store if isinstance(store, Store) else Store(store)
        self.messages_channel = messages_channel
        # (tkey, nkey, ckey) -> the thread's head when this saver last read or
        # wrote that checkpoint (None: no head), which a put continuing from
        # it expects; ckey _NO_CHECKPOINT: when it found the thread empty.
        self._expect: _Lru[tuple[str, str, str], str | None] = _Lru(expectations)
        # writes session id -> every write of its chain, by (task_id, idx).
        self._write_sets: _Lru[str, dict[tuple[str, int], list[Any]]] = _Lru(256)
        self._written: _Lru[tuple[str, str], _Written] = _Lru(256)
        self._sessions: _Lru[str, dict[str, Any]] = _Lru(1024)
        # session id -> its message history as stored (lists share their dicts).
        self._histories: _Lru[str, list[Any]] = _Lru(1024)
        self._groups: _Lru[str, tuple[str, str]] = _Lru(4096)
        self._locks = [threading.RLock() for _ in range(64)]

    # ---- plumbing -------------------------------------------------------------

    def _lock(self, *key: str) -> threading.RLock:
        return self._locks[hash(key) % len(self._locks)]

    def _ref(self, ref: str) -> str | None:
        for name, target in self.store.refs(ref):
            if name == ref:
                return target
        return None

    def _session(self, sid: str) -> dict[str, Any]:
        sess = self._sessions.get(sid)
        if sess is None:
            sess = self.store.session(sid)
            self._sessions.put(sid, sess)
        return sess

    def _record(self, sid: str) -> dict[str, Any] | None:
        rec = (self._session(sid).get("metadata") or {}).get(RECORD_KEY)
        if not isinstance(rec, dict) or rec.get("format") not in _READABLE_FORMATS:
            return None
        return rec

    def _dump(self, value: Any) -> list[str]:
        type_, data = self.serde.dumps_typed(value)
        return [type_, base64.b64encode(data).decode("ascii")]

    def _load(self, typed: list[str]) -> Any:
        return self.serde.loads_typed((typed[0], base64.b64decode(typed[1])))

    def _enc(self, value: Any) -> Any:
        """A value as JSON: itself when JSON carries it exactly, else through serde."""
        if _is_json(value) and not _is_serde(value):
            return value
        return {SERDE_KEY: self._dump(value)}

    def _dec(self, value: Any) -> Any:
        if _is_serde(value):
            return self._load(value[SERDE_KEY])
        return _copy_json(value)

    def _enc_message(self, m: Any) -> Any:
        if type(m) is dict and _is_plain_message(m):
            return m
        if isinstance(m, BaseMessage):
            try:
                d = message_to_dict(m)
                if _is_json(d):
                    back = self._dec_message(d)
                    if type(back) is type(m) and back == m:
                        return d
            except Exception:  # noqa: BLE001 - anything odd goes through serde
                pass
        return {SERDE_KEY: self._dump(m)}

    def _dec_message(self, d: Any) -> Any:
        if _is_serde(d):
            return self._load(d[SERDE_KEY])
        if type(d) is dict and "type" in d and type(d.get("data")) is dict:
            # The cached dict stays the cache's: the message gets copies of
            # whatever its constructor would share (nested containers).
            data = {
                k: _copy_json(v) if type(v) in (dict, list) and v else v
                for k, v in d["data"].items()
            }
            cls = _MESSAGE_CLASSES.get(d["type"])
            if cls is not None:
                # The dict is a valid message's own dump (put checked that it
                # reads back equal), so validation is skipped: most of a
                # get_tuple is building these objects.
                return cls.model_construct(**data)
            return messages_from_dict([{"type": d["type"], "data": data}])[0]
        return _copy_json(d)

    def _print(self, m: Any) -> Any:
        """What must still hold of a message the cache kept for it to be unchanged."""
        if isinstance(m, BaseMessage):
            content = m.content
            return (
                type(m),
                m.id,
                hash(content) if type(content) is str else len(content),
            )
        if type(m) is dict:
            content = m.get("content")
            mid = m.get("id")
            return (
                dict,
                tuple(m),
                mid if type(mid) is str else None,
                hash(content)
                if type(content) is str
                else len(content)
                if type(content) in (list, dict)
                else None,
            )
        return self._enc_message(m)

    def _group(self, t: str, n: str) -> tuple[str, str] | None:
        """The real (thread_id, checkpoint_ns) of a key pair, from the conversation record."""
        name = _conversation(t, n)
        found = self._groups.get(name)
        if found is not None:
            return found
        conv = self.store.conversation(name)
        rec = ((conv or {}).get("metadata") or {}).get(RECORD_KEY)
        if isinstance(rec, dict) and "thread_id" in rec and "checkpoint_ns" in rec:
            found = (str(rec["thread_id"]), str(rec["checkpoint_ns"]))
        else:
            thread_id = _decode_key(t)
            ns = "" if n == "_" else _decode_key(n)
            if thread_id is None or ns is None:
                return None
            found = (thread_id, ns)
        self._groups.put(name, found)
        return found

    @staticmethod
    def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }

    def _history(self, sid: str) -> list[Any]:
        """A session's message history as stored (JSON); sessions never change, so
        it is cached. Callers must not change what it returns."""
        hist = self._histories.get(sid)
        if hist is None:
            hist = self.store.history(sid)
            self._histories.put(sid, hist)
        return hist

    def _messages(self, sid: str) -> list[Any]:
        return [self._dec_message(d) for d in self._history(sid)]

    def _write_entries(self, wsid: str | None) -> dict[tuple[str, int], list[Any]]:
        """Every write of the chain of writes sessions ending at ``wsid``, by
        ``(task_id, idx)``: the oldest entry of a key wins, except for the special
        channels' negative ``idx``, where the newest does (as InMemorySaver).
        Entries are ``[task_id, idx, channel, [type, base64], task_path]``.
        Callers must not change what it returns."""
        if wsid is None:
            return {}
        found = self._write_sets.get(wsid)
        if found is not None:
            return found
        chain: list[list[Any]] = []
        base: dict[tuple[str, int], list[Any]] = {}
        sid = wsid
        while True:
            s = self._session(sid)
            if WRITES_KEY not in (s.get("metadata") or {}):
                break  # the checkpoint's own session: the chain's start
            chain.append((s.get("state") or {}).get("writes") or [])
            parents = s.get("parents") or []
            if not parents:
                break
            sid = parents[0]
            cached = self._write_sets.get(sid)
            if cached is not None:
                base = cached
                break
        merged = dict(base)
        for entries in reversed(chain):
            for e in entries:
                k = (e[0], e[1])
                if k[1] >= 0 and k in merged:
                    continue
                merged[k] = e
        self._write_sets.put(wsid, merged)
        return merged

    def _writes(self, wsid: str | None) -> list[PendingWrite]:
        entries = sorted(
            self._write_entries(wsid).values(), key=lambda e: writes_sort_key(e[4], e[0], e[1])
        )
        return [(e[0], e[2], self._load(e[3])) for e in entries]

    def _held(self, channel: str, stored: Any) -> Any:
        """A channel's ``[type, base64]`` from a state entry: itself, or, for a
        reference ``{"at": id}``, the value session ``id``'s state holds."""
        if type(stored) is dict and "at" in stored:
            return (self._session(stored["at"]).get("state") or {})[channel]
        return stored

    def _tuple(
        self, thread_id: str, ns: str, sid: str, wsid: str | None
    ) -> tuple[CheckpointTuple, list[Any] | None] | None:
        rec = self._record(sid)
        if rec is None:
            return None
        checkpoint: dict[str, Any] = {k: self._dec(v) for k, v in rec["checkpoint"].items()}
        state = self._session(sid).get("state") or {}
        values = {k: self._load(self._held(k, v)) for k, v in state.items()}
        messages = None
        if rec.get("messages") is not None:
            messages = self._messages(sid)
            values[rec["messages"]] = messages
        checkpoint["channel_values"] = values
        metadata = {k: self._dec(v) for k, v in rec["metadata"].items()}
        parent = rec.get("parent")
        tup = CheckpointTuple(
            config=self._config(thread_id, ns, checkpoint["id"]),
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=metadata,  # type: ignore[arg-type]
            parent_config=self._config(thread_id, ns, parent) if parent else None,
            pending_writes=self._writes(wsid),
        )
        return tup, messages

    def _remember(
        self,
        key: tuple[str, str],
        sid: str,
        messages: list[Any] | None,
        prints: list[Any] | None = None,
    ) -> None:
        if messages is None:
            self._written.pop(key)
            return
        if prints is None:
            prints = [self._print(m) for m in messages]
        self._written.put(key, _Written(sid, list(messages), prints))

    def _delta(
        self, key: tuple[str, str], parent: str | None, messages: list[Any]
    ) -> tuple[int | None, list[Any], list[Any]]:
        """``(keep, added, prints)``: the messages as a delta on the parent
        session's history, and each message's :meth:`_print`."""
        if parent is None:
            return (
                None,
                [self._enc_message(m) for m in messages],
                [self._print(m) for m in messages],
            )
        prints: list[Any] = []
        last = self._written.get(key)
        if last is not None and last.session == parent:
            for a, b, p in zip(messages, last.messages, last.prints):
                if a is not b:
                    try:
                        same = bool(a == b)
                    except Exception:  # noqa: BLE001 - incomparable is different
                        same = False
                    if not same:
                        break
                mine = self._print(a)
                if mine != p:
                    break
                prints.append(mine)
        else:
            # Not the list this saver last saw: compare with the stored history.
            for m, d in zip(messages, self._history(parent)):
                try:
                    mine = message_to_dict(m) if isinstance(m, BaseMessage) else None
                except Exception:  # noqa: BLE001 - then it was stored through serde
                    mine = None
                if mine != d and self._enc_message(m) != d:
                    break
                prints.append(self._print(m))
        keep = len(prints)
        prints += [self._print(m) for m in messages[keep:]]
        return keep, [self._enc_message(m) for m in messages[keep:]], prints

    # ---- the checkpointer API -------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, else the thread's
        latest), with its pending writes; ``None`` when there is none.

        Records the thread's current head as the one a ``put`` continuing from
        the returned checkpoint expects (for an empty thread: one continuing
        from no checkpoint), so that reading an old checkpoint lets a run
        continue from it (time travel), while a read of the latest leaves alone
        what this saver expects for the checkpoints its runs are at.
        """
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        t, n = thread_key(thread_id), namespace_key(ns)
        key = (t, n)
        head = self._ref(_HEADS + _conversation(t, n))
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            c = checkpoint_key(checkpoint_id)
            sid = self._ref(_checkpoint_tag(t, n, c))
        else:
            sid = head
            rec = self._record(sid) if sid is not None else None
            c = checkpoint_key(rec["checkpoint"]["id"]) if rec else _NO_CHECKPOINT
            if sid is None:
                self._expect.put((t, n, _NO_CHECKPOINT), None)
        if sid is None:
            return None
        found = self._tuple(thread_id, ns, sid, self._ref(_writes_tag(t, n, c)))
        if found is None:
            return None
        tup, messages = found
        self._expect.put((t, n, c), head)
        self._remember(key, sid, messages)
        return tup

    def _candidates(
        self, config: RunnableConfig | None, before: RunnableConfig | None
    ) -> tuple[list[_Entry], str | None, str | None]:
        """Checkpoints ``list`` considers, newest first, before any metadata filter."""
        thread_id: str | None = None
        ns: str | None = None
        only: str | None = None
        if config is None:
            prefix = "lg."
        else:
            conf = config["configurable"]
            thread_id = str(conf["thread_id"])
            ns = conf.get("checkpoint_ns")
            only = get_checkpoint_id(config)
            prefix = f"lg.{thread_key(thread_id)}."
            if ns is not None:
                prefix += namespace_key(ns) + "."
        writes = {}
        for ref, wsid in self.store.refs(_TAGS + "lgw." + prefix[3:]):
            parts = _split_tag(ref)
            if parts is not None:
                writes[parts] = wsid
        before_id = get_checkpoint_id(before) if before else None
        entries = []
        for ref, sid in self.store.refs(_TAGS + prefix):
            parts = _split_tag(ref)
            if parts is None:
                continue
            cid = _decode_key(parts[2])
            if cid is None:
                rec = self._record(sid)
                if rec is None:
                    continue
                cid = rec["checkpoint"]["id"]
            if only and cid != only:
                continue
            if before_id and cid >= before_id:
                continue
            entries.append(_Entry(*parts, sid, writes.get(parts), cid))
        entries.sort(key=lambda e: e.checkpoint_id, reverse=True)
        return entries, thread_id, ns

    def _materialize(
        self,
        entry: _Entry,
        thread_id: str | None,
        ns: str | None,
        filter: dict[str, Any] | None,
    ) -> CheckpointTuple | None:
        if filter:
            rec = self._record(entry.session)
            if rec is None:
                return None
            md = rec["metadata"]
            for k, want in filter.items():
                if (self._dec(md[k]) if k in md else None) != want:
                    return None
        if thread_id is None or ns is None:
            group = self._group(entry.t, entry.n)
            if group is None:
                return None
            thread_id = thread_id if thread_id is not None else group[0]
            ns = ns if ns is not None else group[1]
        found = self._tuple(thread_id, ns, entry.session, entry.writes)
        return found[0] if found else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id): of ``config``'s thread (and
        namespace, when it names one), or of every thread when ``config`` is
        ``None``; only those whose metadata has every ``filter`` item, older than
        ``before``, at most ``limit``. Records nothing a ``put`` expects."""
        entries, thread_id, ns = self._candidates(config, before)
        left = limit
        for entry in entries:
            if left is not None and left <= 0:
                return
            tup = self._materialize(entry, thread_id, ns, filter)
            if tup is None:
                continue
            if left is not None:
                left -= 1
            yield tup

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Writes ``checkpoint`` as a session under its parent's and moves the
        thread's conversation to it. Channels neither in ``new_versions`` nor at
        a version other than the parent's are stored as references to the
        ancestor session holding their value.

        Raises :class:`sessctl.RefOutOfDate` when the thread's head is no longer
        the one this saver observed when it read or wrote the parent checkpoint
        (another writer moved it); see the class docstring for a parent this
        saver never saw.
        """
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        parent_id = conf.get("checkpoint_id")
        t, n = thread_key(thread_id), namespace_key(ns)
        key = (t, n)
        name = _conversation(t, n)
        c = checkpoint_key(checkpoint["id"])
        tag = _checkpoint_tag(t, n, c)
        pc = checkpoint_key(parent_id) if parent_id else _NO_CHECKPOINT

        values = dict(checkpoint["channel_values"])
        messages = values.pop(self.messages_channel, _MISSING)
        if messages is not _MISSING and type(messages) is not list:
            values[self.messages_channel] = messages
            messages = _MISSING
        record = {
            "format": RECORD_FORMAT,  # what the state's entries may be
            "checkpoint": {k: self._enc(v) for k, v in checkpoint.items() if k != "channel_values"},
            "metadata": {
                k: self._enc(v) for k, v in get_checkpoint_metadata(config, metadata).items()
            },
            "parent": parent_id,
            "messages": None if messages is _MISSING else self.messages_channel,
        }

        with self._lock(t, n):
            parent = (
                self._ref(_checkpoint_tag(t, n, checkpoint_key(parent_id))) if parent_id else None
            )
            keep: int | None
            added: list[Any]
            prints: list[Any] | None
            if messages is _MISSING:
                keep, added, prints = (None if parent is None else 0), [], None
            else:
                keep, added, prints = self._delta(key, parent, messages)
            # Always a state, even {}: a session without one inherits its parent's.
            state = self._state(parent, values, checkpoint, new_versions)
            expected = self._expect.get((t, n, pc), _MISSING)
            if expected is _MISSING:
                # Never saw the parent (or forgot it): the head as it is now.
                expected = self._ref(_HEADS + name)
            tags: dict[str, str | None] = {tag[len(_TAGS) :]: None}
            for attempt in range(2):
                try:
                    sid = self.store.put(
                        reason="langgraph put",
                        parent=parent,
                        keep=keep,
                        messages=added,
                        state=state,
                        metadata={RECORD_KEY: record},
                        created_at=_created_at(checkpoint.get("ts")),
                        conversation=name,
                        expected_head=expected,
                        tags=tags,
                        conversation_metadata={
                            RECORD_KEY: {"thread_id": thread_id, "checkpoint_ns": ns}
                        },
                    )
                    break
                except RefOutOfDate:
                    # Re-putting a checkpoint id replaces it, as InMemorySaver
                    # does; a head that moved is the caller's to see.
                    current = self._ref(tag)
                    if attempt or current is None:
                        raise
                    tags = {tag[len(_TAGS) :]: current}
                except NotFound as e:
                    # The thread this saver saw was deleted meanwhile.
                    if expected is not None and self._ref(_HEADS + name) is None:
                        raise RefOutOfDate(
                            f"{_HEADS}{name} moved: expected {expected}, found nothing"
                        ) from e
                    raise
            self._expect.put((t, n, c), sid)
            self._remember(key, sid, None if messages is _MISSING else messages, prints)
            if messages is not _MISSING:
                base = self._histories.get(parent) if parent is not None else []
                if base is not None and len(base) >= (keep or 0):
                    self._histories.put(sid, base[: keep or 0] + added)
        return self._config(thread_id, ns, checkpoint["id"])

    def _state(
        self,
        parent: str | None,
        values: dict[str, Any],
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
    ) -> dict[str, Any]:
        """The session state of a checkpoint with these channel ``values``: each
        changed value itself, each unchanged one a reference to its holder."""
        prec = self._record(parent) if parent is not None else None
        pversions = prec["checkpoint"].get("channel_versions") if prec else None
        pstate = (self._session(parent).get("state") or {}) if prec and parent else {}
        versions = checkpoint.get("channel_versions") or {}
        state: dict[str, Any] = {}
        for k, v in values.items():
            held = pstate.get(k)
            if (
                held is not None
                and k not in new_versions
                and type(pversions) is dict
                and versions.get(k) is not None
                and pversions.get(k) == versions.get(k)
            ):
                # Unchanged since the parent: name whoever holds the value
                # (never a reference to a reference).
                if type(held) is list:
                    state[k] = {"at": parent}
                    continue
                if type(held) is dict and "at" in held:
                    state[k] = {"at": held["at"]}
                    continue
            state[k] = self._dump(v)
        return state

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Adds a task's writes to the checkpoint ``config`` names, as one
        session holding only the entries it adds, on top of the checkpoint's
        previous writes session.

        Idempotent per ``(task_id, index)``; writes to the special channels
        (errors, interrupts, ...) replace the earlier one. Another process
        adding writes at once is retried (compare-and-swap on the writes tag).
        """
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = conf["checkpoint_id"]
        t, n, c = thread_key(thread_id), namespace_key(ns), checkpoint_key(checkpoint_id)
        tag = _writes_tag(t, n, c)
        with self._lock(t, n, c):
            deadline = time.monotonic() + _WRITES_PATIENCE
            tries = 0
            while True:
                current = self._ref(tag)
                stored = self._write_entries(current)
                fresh: dict[tuple[str, int], list[Any]] = {}
                for idx, (channel, value) in enumerate(writes):
                    k = (task_id, WRITES_IDX_MAP.get(channel, idx))
                    if k[1] >= 0 and (k in stored or k in fresh):
                        continue
                    fresh[k] = [task_id, k[1], channel, self._dump(value), task_path]
                added = [e for k, e in fresh.items() if stored.get(k) != e]
                if not added:
                    return
                try:
                    self.store.put(
                        reason="langgraph put_writes",
                        parent=current if current is not None else self._ref(
                            _checkpoint_tag(t, n, c)
                        ),
                        state={"writes": added},
                        metadata={WRITES_KEY: {"checkpoint_id": checkpoint_id}},
                        tags={tag[len(_TAGS) :]: current},
                    )
                    return
                except RefOutOfDate:
                    # Another writer added writes first: merge with theirs.
                    tries += 1
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(random.uniform(0, min(0.05, 0.001 * 2**tries)))

    # ---- deletes and copies ----------------------------------------------------

    def _forget(self, t: str, n: str | None = None) -> None:
        """Drops what this saver observed of thread ``t`` (in namespace ``n``, or all)."""
        self._expect.pop_where(lambda k: k[0] == t and (n is None or k[1] == n))
        self._written.pop_where(lambda k: k[0] == t and (n is None or k[1] == n))

    def _remove(self, thread_ids: Sequence[str], keep_latest: bool) -> None:
        """Removes the threads' checkpoints (all, or all but each namespace's latest)."""
        tkeys = {thread_key(str(tid)) for tid in thread_ids}
        for _ in range(_CAS_RETRIES):
            edits: list[tuple[str, str | None, str | None]] = []
            gone: list[str] = []
            # Each kept conversation's (checkpoint key, head) after this, as a
            # put continuing from the kept checkpoint expects.
            moved: dict[tuple[str, str], tuple[str, str]] = {}
            for t in tkeys:
                heads = {
                    hp: h
                    for ref, h in self.store.refs(f"{_HEADS}lg.{t}.")
                    if (hp := _split_head(ref))
                }
                tags = [(ref, sid) for ref, sid in self.store.refs(f"{_TAGS}lg.{t}.")]
                wtags = {
                    parts: (ref, sid)
                    for ref, sid in self.store.refs(f"{_TAGS}lgw.{t}.")
                    if (parts := _split_tag(ref))
                }
                kept: set[tuple[str, str, str]] = set()
                if keep_latest:
                    by_group: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
                    for ref, sid in tags:
                        parts = _split_tag(ref)
                        if parts is not None:
                            by_group.setdefault(parts[:2], []).append(
                                (self._checkpoint_id(parts[2], sid), parts[2], sid)
                            )
                    for group, found in by_group.items():
                        head = heads.get(group)
                        at_head = [f for f in found if f[2] == head]
                        latest = max(at_head or found)
                        kept.add((*group, latest[1]))
                        # The kept checkpoint becomes a root holding its whole
                        # history (its blobs are shared, so only one session
                        # object is written): nothing then names the pruned
                        # sessions, and gc frees them once the ref log lets go.
                        root = self._squash(latest[2])
                        if root != latest[2]:
                            tag = f"{_TAGS}lg.{group[0]}.{group[1]}.{latest[1]}"
                            edits.append((tag, latest[2], root))
                        # Its pending writes become one session on the root.
                        w = wtags.get((*group, latest[1]))
                        if w is not None and self._session(w[1])["parents"] != [root]:
                            edits.append((w[0], w[1], self._squash_writes(w[1], root)))
                        if head is not None:
                            moved[group] = (latest[1], root)
                            if head != root:
                                edits.append((_HEADS + _conversation(*group), head, root))
                for ref, sid in tags:
                    parts = _split_tag(ref)
                    if parts is not None and parts not in kept:
                        edits.append((ref, sid, None))
                for parts, (ref, sid) in wtags.items():
                    if parts not in kept:
                        edits.append((ref, sid, None))
                kept_groups = {k[:2] for k in kept}
                gone += [_conversation(*hp) for hp in heads if hp not in kept_groups]
            # Conversations first: a writer racing this delete then fails its
            # compare-and-swap instead of writing into a thread being removed.
            for name in gone:
                try:
                    self.store.delete(name)
                except NotFound:
                    pass
            try:
                if edits:
                    self.store.update_refs(
                        "langgraph prune" if keep_latest else "langgraph delete_thread", edits
                    )
            except RefOutOfDate:
                continue
            for t in tkeys:
                self._forget(t)
            for (t, n), (c, head) in moved.items():
                self._expect.put((t, n, c), head)
            return
        raise RefOutOfDate("the threads kept changing while being deleted")

    def _squash(self, sid: str) -> str:
        """A root session with ``sid``'s whole history, metadata and state, every
        channel value inline (a root has no ancestor to name), and no parent
        checkpoint (``sid`` itself when it is a root already)."""
        s = self._session(sid)
        if not s["parents"]:
            return sid
        state = s["state"]
        if isinstance(state, dict):
            state = {k: self._held(k, v) for k, v in state.items()}
        metadata = dict(s["metadata"] or {})
        rec = metadata.get(RECORD_KEY)
        if isinstance(rec, dict):
            # Its parent checkpoint is pruned: parent_config becomes None.
            metadata[RECORD_KEY] = {**rec, "parent": None}
        return self.store.put(
            reason="langgraph prune",
            messages=self.store.history(sid),
            state=state,
            metadata=metadata,
            created_at=s["created_at"],
        )

    def _squash_writes(self, wsid: str, root: str) -> str:
        """The chain of pending-writes sessions ending at ``wsid`` as one session
        holding every entry, on top of the squashed ``root``."""
        w = self._session(wsid)
        return self.store.put(
            reason="langgraph prune",
            parent=root,
            state={"writes": list(self._write_entries(wsid).values())},
            metadata=w["metadata"],
            created_at=w["created_at"],
        )

    def _checkpoint_id(self, c: str, sid: str) -> str:
        cid = _decode_key(c)
        if cid is None:
            rec = self._record(sid)
            cid = rec["checkpoint"]["id"] if rec else ""
        return cid

    def delete_thread(self, thread_id: str) -> None:
        """Removes every checkpoint and write of the thread, in every namespace
        (its conversations and tags; the sessions stay until ``gc``)."""
        self._remove([thread_id], keep_latest=False)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Removes every checkpoint whose metadata ``run_id`` is one of ``run_ids``,
        with its writes; a conversation whose latest checkpoint goes moves to
        its newest remaining one, and goes when none remains."""
        runs = set(run_ids)
        if not runs:
            return
        for _ in range(_CAS_RETRIES):
            heads = {
                hp: h for ref, h in self.store.refs(f"{_HEADS}lg.") if (hp := _split_head(ref))
            }
            wtags = {
                parts: (ref, sid)
                for ref, sid in self.store.refs(f"{_TAGS}lgw.")
                if (parts := _split_tag(ref))
            }
            groups: dict[tuple[str, str], list[tuple[str, str, str, bool]]] = {}
            for ref, sid in self.store.refs(f"{_TAGS}lg."):
                parts = _split_tag(ref)
                rec = self._record(sid) if parts else None
                if parts is None or rec is None:
                    continue
                run = rec["metadata"].get("run_id")
                try:
                    doomed = run is not None and self._dec(run) in runs
                except TypeError:  # an unhashable run_id is none of them
                    doomed = False
                groups.setdefault(parts[:2], []).append((rec["checkpoint"]["id"], ref, sid, doomed))
            edits: list[tuple[str, str | None, str | None]] = []
            gone: list[str] = []
            moved: dict[tuple[str, str], tuple[str, str]] = {}
            for group, found in groups.items():
                if not any(f[3] for f in found):
                    continue
                for _, ref, sid, doomed in found:
                    if doomed:
                        edits.append((ref, sid, None))
                        w = wtags.get(_split_tag(ref))  # type: ignore[arg-type]
                        if w is not None:
                            edits.append((w[0], w[1], None))
                left = [f for f in found if not f[3]]
                head = heads.get(group)
                if not left:
                    if head is not None:
                        gone.append(_conversation(*group))
                elif head is not None and head not in {f[2] for f in left}:
                    newest_id, _, newest, _ = max(left)
                    edits.append((_HEADS + _conversation(*group), head, newest))
                    moved[group] = (checkpoint_key(newest_id), newest)
            for name in gone:
                try:
                    self.store.delete(name)
                except NotFound:
                    pass
            try:
                if edits:
                    self.store.update_refs("langgraph delete_for_runs", edits)
            except RefOutOfDate:
                continue
            for name in gone:
                self._forget(*name.split(".")[1:])
            for (t, n), (c, newest) in moved.items():
                self._expect.put((t, n, c), newest)
            for group in groups:
                self._written.pop(group)
            return
        raise RefOutOfDate("the threads kept changing while runs were deleted")

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Gives the target thread every checkpoint and write of the source, in
        every namespace, without copying anything: its conversations and tags
        name the source's sessions. Tags the target already has are replaced."""
        src, dst = str(source_thread_id), str(target_thread_id)
        ts, td = thread_key(src), thread_key(dst)
        heads = {
            hp: h for ref, h in self.store.refs(f"{_HEADS}lg.{ts}.") if (hp := _split_head(ref))
        }
        edits: list[tuple[str, str | None, str | None]] = []
        for prefix in ("lg.", "lgw."):
            for ref, sid in self.store.refs(f"{_TAGS}{prefix}{ts}."):
                parts = _split_tag(ref)
                if parts is not None:
                    edits.append((f"{_TAGS}{prefix}{td}.{parts[1]}.{parts[2]}", ANY, sid))
        for (_, n), head in heads.items():
            group = self._group(ts, n)
            ns = group[1] if group else ""
            name = _conversation(td, n)
            with self._lock(td, n):
                current = self._ref(_HEADS + name)
                if current is None:
                    self.store.fork(head, name=name)
                elif current != head:
                    edits.append((_HEADS + name, current, head))
                self.store.set_metadata(name, {RECORD_KEY: {"thread_id": dst, "checkpoint_ns": ns}})
                self._forget(td, n)
                rec = self._record(head)
                if rec is not None:
                    self._expect.put((td, n, checkpoint_key(rec["checkpoint"]["id"])), head)
        if edits:
            self.store.update_refs("langgraph copy_thread", edits)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keeps only each namespace's latest checkpoint (the
        conversation's head) and its writes; ``"delete"``: removes the threads.

        The kept checkpoint is rewritten as a root session holding its whole
        history (the messages are shared) and every channel value itself, with
        no parent checkpoint (``parent_config`` is ``None``), and its pending
        writes as one session on top of it, so nothing names the pruned
        checkpoints any more: ``gc`` frees them once the ref log's entries that
        still name them expire (90 days by default, as git's reflog)."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(
                f"unknown prune strategy {strategy!r}: expected 'keep_latest' or 'delete'"
            )
        if thread_ids:
            self._remove(thread_ids, keep_latest=strategy == "keep_latest")

    def get_next_version(self, current: int | str | None, channel: None) -> Any:
        """The next channel version: integers from 1, as the base saver does;
        a string version (from another saver) continues in InMemorySaver's form."""
        if current is None:
            return 1
        if isinstance(current, str):
            n = int(current.split(".")[0]) + 1
            return f"{n:032}.{random.random():016}"
        return current + 1

    # ---- async ---------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple` in a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list`, each step in a worker thread."""
        entries, thread_id, ns = await asyncio.to_thread(self._candidates, config, before)
        left = limit
        for entry in entries:
            if left is not None and left <= 0:
                return
            tup = await asyncio.to_thread(self._materialize, entry, thread_id, ns, filter)
            if tup is None:
                continue
            if left is not None:
                left -= 1
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put` in a worker thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes` in a worker thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread` in a worker thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs` in a worker thread."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread` in a worker thread."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune` in a worker thread."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
