"""A session store for the OpenAI Agents SDK, kept in a sessctl store.

:class:`SessctlSession` implements the SDK's ``Session`` protocol
(``agents.memory.Session``), so it goes wherever ``SQLiteSession`` does::

    from agents import Agent, Runner
    from sessctl import Store
    from sessctl.agents import SessctlSession

    store = Store(".sessctl")
    session = SessctlSession("user-42", store)
    result = await Runner.run(agent, "Hi", session=session)

and it has ``AdvancedSQLiteSession``'s branch methods
(:meth:`~SessctlSession.create_branch_from_turn`,
:meth:`~SessctlSession.switch_to_branch`, :meth:`~SessctlSession.list_branches`,
:meth:`~SessctlSession.delete_branch`, ...) with the same names, signatures and
errors, so either class is a one-line change.

**Layout.** The items of one Agents session are the messages of one sessctl
conversation, one branch per conversation (see :func:`conversation_name`):
``add_items`` commits one session holding exactly the new items, so the store
keeps each item once however long the conversation grows, and a branch is a
sessctl fork that shares its prefix with the conversation it came from,
copying nothing. ``sessctl ls``, ``log``, ``diff`` and ``reflog`` show them
like any other conversation.

**Nothing is destroyed.** :meth:`~SessctlSession.pop_item` and
:meth:`~SessctlSession.clear_session` move refs; every move is in the store's
hash-chained ref log with its reason (``pop``, ``clear``, ``delete``), and the
sessions they moved away from stay readable by id (``Store.history(old_head)``)
until ``gc`` drops what no ref or ref-log entry of the last 90 days reaches.

**Concurrency.** Any number of :class:`SessctlSession` objects, in any number of
processes, may use one session id at once. Appends never lose each other's
items (the store compare-and-swaps each commit and this module retries a lost
race); ``pop_item`` and ``clear_session`` compare-and-swap on the head they read,
so they apply to exactly the state they looked at, or retry on the new one. As
with ``SQLiteSession``, calls that one object has in flight at the same time
(not awaited one after the other) may land in either order.

Every call does its store work in a worker thread (as :func:`asyncio.to_thread`
would, with less machinery: :mod:`sessctl._workers`); the store releases the
GIL while it works. A write whose caller is cancelled
still finishes before the cancellation is raised, as in the SDK's sessions.

**Differences from the SQLite sessions.** Items must be JSON values (anything
else is ``sessctl.InvalidInput`` and nothing is written); they come back equal
(``==``) to what was added, with object keys in sorted order, since the store
keeps canonical JSON. ``pop_item`` and ``clear_session`` keep history (above).
Of ``AdvancedSQLiteSession``: the current branch is the object's, as there, but
``main`` always exists; a branch forked before turn 1 exists (and is listed)
while empty; a deleted branch's id may be used again; turns carry no
``timestamp`` (``None``); the usage analytics (``store_run_usage``,
``get_session_usage``, ``get_turn_usage``, ``get_tool_usage``) and
``get_conversation_by_turns`` are not provided.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import hashlib
import json
import os
import random
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar, cast

from agents.items import TResponseInputItem
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from . import _workers
from ._native import InvalidInput, NotFound, RefOutOfDate, Store

__all__ = [
    "CONVERSATION_PREFIX",
    "MAIN_BRANCH",
    "METADATA_BRANCH_ID",
    "METADATA_SESSION_ID",
    "SessctlSession",
    "conversation_name",
    "parse_conversation_name",
]

_T = TypeVar("_T")

MAIN_BRANCH: Final = "main"
"""The branch every session starts on, as in ``AdvancedSQLiteSession``."""

CONVERSATION_PREFIX: Final = "agents."
"""What every conversation name this module makes starts with."""

METADATA_SESSION_ID: Final = "agents.session_id"
"""The conversation-record metadata key that holds the Agents session id."""

METADATA_BRANCH_ID: Final = "agents.branch_id"
"""The conversation-record metadata key that holds the branch id; absent on ``main``.

(The store copies a conversation's record into the operation of each commit,
so every byte of it is paid once per ``add_items``.)"""

# Byte budgets of the two name components: "agents." (7) + session (80) + "." (1)
# + branch (40) = 128, the longest name the store takes (objects-format.md, "Refs").
_SESSION_BUDGET: Final = 80
_BRANCH_BUDGET: Final = 40
# A hashed component ends in "_h" and 32 hex digits (128 bits of SHA-256).
_HASH_MARK: Final = "_h"
_DIGEST_HEX: Final = 32
_EMPTY: Final = "_"
_KEPT: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_ESCAPE: Final = re.compile(r"_([0-9a-f]{2})")

# A lost compare-and-swap wrote nothing, so retrying it is always safe; the
# bound only turns a livelock into an error.
_CAS_ATTEMPTS: Final = 64


def _encode_component(text: str, budget: int) -> str:
    """One name component: ``[A-Za-z0-9-]`` bytes as they are, any other byte as ``_`` + 2 hex."""
    raw = text.encode("utf-8")
    if not raw:
        return _EMPTY
    parts = [chr(b) if b in _KEPT else f"_{b:02x}" for b in raw]
    encoded = "".join(parts)
    if len(encoded) <= budget:
        return encoded
    # Too long: a readable prefix (never half an escape), then the digest of the whole.
    room = budget - len(_HASH_MARK) - _DIGEST_HEX
    kept: list[str] = []
    used = 0
    for part in parts:
        if used + len(part) > room:
            break
        kept.append(part)
        used += len(part)
    digest = hashlib.sha256(raw).hexdigest()[:_DIGEST_HEX]
    return "".join(kept) + _HASH_MARK + digest


def _decode_component(component: str) -> str | None:
    """The text ``component`` encodes (``None``: hashed); ``ValueError`` if we never write it."""
    if component == _EMPTY:
        return ""
    if _HASH_MARK in component:
        # "_h" cannot occur in a plain component: every "_" there starts a hex escape.
        return None
    raw = bytearray()
    at = 0
    while at < len(component):
        c = component[at]
        if c == "_":
            m = _ESCAPE.match(component, at)
            if m is None:
                raise ValueError(f"bad escape at byte {at} of name component {component!r}")
            b = int(m.group(1), 16)
            if b in _KEPT:
                raise ValueError(f"{component!r} escapes {chr(b)!r}, which is kept as it is")
            raw.append(b)
            at += 3
        elif ord(c) < 128 and ord(c) in _KEPT:
            raw.append(ord(c))
            at += 1
        else:
            raise ValueError(f"{c!r} cannot occur in an encoded name component")
    return raw.decode("utf-8")


def conversation_name(session_id: str, branch_id: str = MAIN_BRANCH) -> str:
    """The sessctl conversation that holds ``branch_id`` of Agents session ``session_id``.

    The name is ``agents.`` + the encoded session id, and for a branch other than
    ``main``, ``.`` + the encoded branch id. Encoding keeps each UTF-8 byte of
    ``[A-Za-z0-9-]`` and writes every other byte as ``_`` and two lowercase hex
    digits (``a.b`` -> ``a_2eb``, ``é`` -> ``_c3_a9``; the empty string is
    ``_``), so encoded components hold no ``.`` and the name is always valid:
    ``[A-Za-z0-9._-]``, no ``..``, no leading ``.`` or ``-``, at most 128 bytes.
    A component longer than its budget (80 bytes for the session id, 40 for the
    branch id) is cut, without splitting an escape, and ends in ``_h`` + 32 hex
    digits of the SHA-256 of the whole id; ``_h`` never occurs otherwise.

    Decoding (:func:`parse_conversation_name`) inverts this exactly except for
    a hashed component, whose id is in the conversation's record metadata under
    :data:`METADATA_SESSION_ID` and :data:`METADATA_BRANCH_ID`.
    """
    name = CONVERSATION_PREFIX + _encode_component(session_id, _SESSION_BUDGET)
    if branch_id != MAIN_BRANCH:
        name += "." + _encode_component(branch_id, _BRANCH_BUDGET)
    return name


def parse_conversation_name(name: str) -> tuple[str | None, str | None] | None:
    """``(session_id, branch_id)`` that :func:`conversation_name` made ``name`` from.

    A hashed component comes back as ``None`` (read it from the conversation's
    metadata); a name that :func:`conversation_name` cannot make gives ``None``.
    """
    if not name.startswith(CONVERSATION_PREFIX):
        return None
    parts = name[len(CONVERSATION_PREFIX) :].split(".")
    if len(parts) > 2 or not all(parts):
        return None
    try:
        session_id = _decode_component(parts[0])
        branch_id = _decode_component(parts[1]) if len(parts) == 2 else MAIN_BRANCH
    except ValueError:  # UnicodeDecodeError included
        return None
    if branch_id == MAIN_BRANCH and len(parts) == 2:
        return None  # "main" is never spelled out
    if session_id is not None and branch_id is not None:
        if conversation_name(session_id, branch_id) != name:
            return None  # not how conversation_name spells it
    return session_id, branch_id


def _utc_timestamp(ms: int) -> str:
    """``ms`` since the epoch as SQLite's ``CURRENT_TIMESTAMP`` writes it (UTC)."""
    t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S")


def _content_preview(content: Any, max_length: int | None = None) -> str:
    """A user message's ``content`` as text, cut like ``AdvancedSQLiteSession`` cuts it."""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if max_length is not None and len(text) > max_length:
        return text[:max_length] + "..."
    return text


def _require_utf8(what: str, text: str) -> None:
    """``ValueError`` unless ``text`` has a UTF-8 form (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} {text!r} is not valid Unicode: {e.reason}") from None


def _is_user_message(item: Any) -> bool:
    """A turn starts at each user message, as ``AdvancedSQLiteSession`` counts turns."""
    return isinstance(item, dict) and item.get("role") == "user"


def _backoff(attempt: int) -> None:
    """Sleeps a little, more after each lost race, so racing writers spread out."""
    time.sleep(random.uniform(0, 0.0005 * (1 << min(attempt, 6))))


def _in_thread(fn: Callable[[], _T]) -> asyncio.Future[_T]:
    """``fn()`` in a worker thread (:mod:`sessctl._workers`), as a future."""
    return _workers.run(fn)


async def _settle(fn: Callable[[], _T]) -> _T:
    """Runs the write ``fn()`` in a worker thread and awaits its end even
    when the caller is cancelled meanwhile.

    The worker thread cannot be stopped, so a cancelled caller that returned at
    once could not know whether the write happened; like the SDK's sessions,
    we wait for the outcome and then re-raise the cancellation. (A shield on
    the thread's own future: no task, no ``asyncio.wait``, until a
    cancellation comes.)
    """
    fut = _in_thread(fn)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError as exc:
        cancelled = exc
    while not fut.done():
        try:
            await asyncio.wait((fut,))
        except asyncio.CancelledError:
            pass
    if not fut.cancelled():
        fut.exception()  # seen: the caller gets the cancellation instead
    raise cancelled


_TAIL: Final = 256
"""How many of a conversation's newest items a session object keeps in memory."""


@dataclasses.dataclass
class _Tail:
    """The newest items of a conversation at one head, as canonical JSON text."""

    head: str
    count: int
    items: list[str]


def _text(item: Any) -> str:
    """An item as canonical JSON text (keys sorted as the store returns them)."""
    return json.dumps(item, sort_keys=True, ensure_ascii=False, allow_nan=False)


class SessctlSession:
    """An OpenAI Agents SDK session (``agents.memory.Session``) kept in a sessctl store.

    ``session_id`` is any string; ``store`` is an open :class:`sessctl.Store` or
    the path of one (created if missing). ``session_settings`` works as in
    ``SQLiteSession`` (its ``limit`` is the default of :meth:`get_items`).

    The items of each branch are the messages of one conversation, named by
    :func:`conversation_name`; the object starts on branch ``main`` (the current
    branch, like ``AdvancedSQLiteSession``'s, belongs to the object, not to the
    store). Items must be JSON values (the SDK's item dicts are).
    """

    session_id: str
    """The Agents SDK session id."""

    session_settings: SessionSettings | None
    """Settings for session operations (``limit``: the default for :meth:`get_items`)."""

    store: Store
    """The sessctl store the items live in."""

    def __init__(
        self,
        session_id: str,
        store: Store | str | os.PathLike[str],
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        """Opens ``session_id`` in ``store`` (a :class:`sessctl.Store` or a path); reads nothing.

        ``ValueError`` if ``session_id`` is not valid Unicode (a lone surrogate
        has no UTF-8 form, so neither a name nor the metadata could hold it).
        """
        _require_utf8("session_id", session_id)
        self.session_id = session_id
        self.store = store if isinstance(store, Store) else Store(store)
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self._branch_id = MAIN_BRANCH
        # Names whose hashed component this object has matched against the
        # record's metadata (a digest collision must not merge two sessions).
        self._verified: set[str] = set()
        self._names: dict[str, str] = {}
        # The head each conversation had when this object last wrote it: the
        # next append compare-and-swaps on it (a stale one costs a retry).
        self._heads: dict[str, str] = {}
        # Each conversation's ``conversation_id`` (its first session's id) when
        # this object first wrote it: a branch deleted and created again under
        # the same name is another conversation, which an append must not
        # land in.
        self._born: dict[str, str] = {}
        # The newest items of each conversation this object read or wrote, at
        # the head it saw (see ``_tail_items``).
        self._tails: dict[str, _Tail] = {}

    def __repr__(self) -> str:
        """The session id, the branch and the store's path."""
        return (
            f"SessctlSession({self.session_id!r}, branch={self._branch_id!r}, "
            f"store={self.store.path!r})"
        )

    # ---- names -----------------------------------------------------------

    @property
    def current_branch_id(self) -> str:
        """The branch this object reads and writes (``"main"`` until a switch)."""
        return self._branch_id

    def conversation_name(self, branch_id: str | None = None) -> str:
        """The sessctl conversation of ``branch_id`` (default: the current branch)."""
        branch = self._branch_id if branch_id is None else branch_id
        name = self._names.get(branch)
        if name is None:
            name = self._names[branch] = conversation_name(self.session_id, branch)
        return name

    def _record_ids(self, name: str, branch_id: str) -> None:
        """Writes the session and branch ids into conversation ``name``'s record metadata.

        ``set_metadata`` compare-and-swaps on the head, which a concurrent
        append may move: retry, since setting the same keys again is harmless.
        """
        ids = {METADATA_SESSION_ID: self.session_id}
        if branch_id != MAIN_BRANCH:
            ids[METADATA_BRANCH_ID] = branch_id
        for attempt in range(_CAS_ATTEMPTS):
            try:
                self.store.set_metadata(name, ids)
                return
            except RefOutOfDate:
                _backoff(attempt)
        raise RuntimeError(f"{name}: lost the race to set its metadata {_CAS_ATTEMPTS} times")

    def _checked_name(self, branch_id: str) -> str:
        """The conversation name of ``branch_id``, refusing a digest collision with another id."""
        name = self.conversation_name(branch_id)
        if _HASH_MARK not in name or name in self._verified:
            return name
        record = self.store.conversation(name)
        if record is not None:
            meta = record.get("metadata") or {}
            found = (meta.get(METADATA_SESSION_ID), meta.get(METADATA_BRANCH_ID, MAIN_BRANCH))
            if METADATA_SESSION_ID in meta and found != (self.session_id, branch_id):
                raise ValueError(
                    f"conversation {name} holds session {found[0]!r} branch {found[1]!r}, "
                    f"not {self.session_id!r} branch {branch_id!r} (a digest collision)"
                )
        self._verified.add(name)
        return name

    def _tail_items(self, name: str, head: str, want: int | None) -> list[Any] | None:
        """The last ``want`` items (``None``: all) of conversation ``name`` at
        ``head`` from this object's cache, or ``None`` when it does not hold them.

        A session id fixes its whole history, so what was read (verified) or
        written at ``head`` is what the store would return for it; the cache
        holds canonical JSON text, and each call gets fresh objects."""
        tail = self._tails.get(name)
        if tail is None or tail.head != head:
            return None
        whole = len(tail.items) == tail.count
        if want is None:
            return [json.loads(t) for t in tail.items] if whole else None
        if want <= len(tail.items) or whole:
            return [json.loads(t) for t in tail.items[-want:]]
        return None

    def _extend_tail(self, name: str, parent: str | None, head: str, added: list[str]) -> None:
        """After this object appended ``added`` (the items as JSON text, as
        ``Store.append`` returns them: as the store returns them) moving
        ``name`` from ``parent`` to ``head``: the cache follows, without
        reading anything back."""
        tail = self._tails.get(name)
        if parent is None:
            tail = _Tail("", 0, [])
        elif tail is None or tail.head != parent:
            self._tails.pop(name, None)
            return
        items = tail.items + added
        if len(items) > _TAIL:
            del items[: len(items) - _TAIL]
        self._tails[name] = _Tail(head, tail.count + len(added), items)

    def _forget_conversation(self, name: str) -> None:
        """Drops what this object remembers of conversation ``name`` (it removed it)."""
        self._heads.pop(name, None)
        self._born.pop(name, None)

    def _check_same_branch(self, name: str, branch: str) -> None:
        """Raises ``ValueError`` when conversation ``name`` is not the one this
        object last wrote (removed, or created again since: its record's
        ``conversation_id`` changed)."""
        seen = self._born.get(name)
        record = self.store.conversation(name)
        born = None if record is None else record.get("conversation_id")
        if seen is not None and born != seen:
            raise ValueError(
                f"Branch '{branch}' was deleted (and perhaps created again) by another writer"
            )

    def _head(self, name: str) -> str | None:
        """The session conversation ``name`` points at, or ``None`` when it does not exist."""
        try:
            return self.store.resolve(name)
        except NotFound:
            return None

    # ---- the Session protocol ----------------------------------------------

    async def get_items(
        self, limit: int | None = None, branch_id: str | None = None
    ) -> list[TResponseInputItem]:
        """The items of the current branch (or ``branch_id``), oldest first.

        ``limit=n`` returns the last ``n`` items and reads only those; ``None``
        uses ``session_settings.limit`` and then means all. As in
        ``SQLiteSession``, ``0`` gives none and a negative limit gives all.
        A branch or session that does not exist has no items.
        """
        session_limit = resolve_session_limit(limit, self.session_settings)
        branch = self._branch_id if branch_id is None else branch_id

        def read() -> list[TResponseInputItem]:
            if session_limit == 0:
                return []
            name = self._checked_name(branch)
            try:
                head = self.store.resolve(name)
            except NotFound:
                return []
            want = None if session_limit is None or session_limit < 0 else session_limit
            cached = self._tail_items(name, head, want)
            if cached is not None:
                return cached
            # Read at the id just resolved: one consistent history.
            items = self.store.messages(head) if want is None else self.store.messages(head, -want)
            count = len(items) if want is None else self.store.message_count(head)
            self._tails[name] = _Tail(head, count, [_text(i) for i in items[-_TAIL:]])
            return cast(list[TResponseInputItem], items)

        return await _in_thread(read)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Appends ``items`` to the current branch as one new sessctl session.

        One ``Store.append`` compare-and-swapped on the head this object last
        wrote or read (a lost race re-reads it and retries); ``HEAD`` does not
        move. The first call on ``main`` starts its conversation with the
        session id in its record metadata, in the same transaction. A branch
        must exist (``ValueError`` if another object deleted it).
        """
        if not items:
            return
        batch = list(items)
        branch = self._branch_id  # a later switch must not redirect this append

        def write() -> None:
            name = self._checked_name(branch)
            head = self._heads.get(name)
            for attempt in range(_CAS_ATTEMPTS):
                if head is None:
                    head = self._head(name)
                try:
                    if head is None:
                        if branch != MAIN_BRANCH:
                            raise ValueError(f"Branch '{branch}' does not exist")
                        new, texts = self.store.append(
                            name,
                            batch,
                            expected_head=None,
                            conversation_metadata={METADATA_SESSION_ID: self.session_id},
                        )
                    else:
                        new, texts = self.store.append(name, batch, expected_head=head)
                    self._heads[name] = new
                    self._extend_tail(name, head, new, texts)
                    if name not in self._born:
                        record = self.store.conversation(name)
                        if record is not None and record.get("conversation_id"):
                            self._born[name] = record["conversation_id"]
                    return
                except (RefOutOfDate, NotFound):
                    # Another writer moved (or removed) the conversation
                    # between our read of its head and our write. Appending to
                    # the new head is right unless the branch itself was
                    # replaced (deleted and created again under its id).
                    self._heads.pop(name, None)
                    head = None
                    self._check_same_branch(name, branch)
                    _backoff(attempt)
            raise RuntimeError(
                f"{name}: lost the race to append {_CAS_ATTEMPTS} times in a row; giving up"
            )

        await _settle(write)

    async def pop_item(self) -> TResponseInputItem | None:
        """Removes the newest item of the current branch and returns it (``None`` if empty).

        The conversation's ref moves back; nothing is deleted. When the head
        session added exactly that one item on top of its parent, the ref moves
        to the parent (``Store.update_refs("pop", ...)``); otherwise a new
        session that keeps all but the last item of the head (whose parent is
        the head) becomes the head (``Store.put(reason="pop", ...)``). Either
        way the ref log records the move with reason ``pop`` and the old head,
        which still holds the item. The move is a compare-and-swap on the head
        read, so a concurrent writer makes it retry on the new head.
        """
        branch = self._branch_id

        def pop() -> TResponseInputItem | None:
            name = self._checked_name(branch)
            ref = "refs/heads/" + name
            for attempt in range(_CAS_ATTEMPTS):
                head = self._head(name)
                if head is None:
                    return None
                info = self.store.session(head)
                length = int(info["messages"])
                if length == 0:
                    return None
                item = self.store.messages(head, length - 1)[0]
                parent = self._pop_target(info)
                try:
                    if parent is not None:
                        self.store.update_refs("pop", [(ref, head, parent)])
                    else:
                        self.store.put(
                            reason="pop",
                            parent=head,
                            keep=length - 1,
                            conversation=name,
                            expected_head=head,
                        )
                except RefOutOfDate:
                    _backoff(attempt)
                    continue
                return cast(TResponseInputItem, item)
            raise RuntimeError(
                f"{name}: lost the race to pop {_CAS_ATTEMPTS} times in a row; giving up"
            )

        return await _settle(pop)

    def _pop_target(self, info: dict[str, Any]) -> str | None:
        """The parent to move the ref back to, if the head (``info``) is exactly it plus one item.

        The head must have added one item (``added``) on top of all of its first
        parent's, and carry the same conversation; a session that cut or
        rewrote its parent's history (a fork, a pop, a compaction) does not
        qualify, and neither does one whose delta the binding does not report.
        """
        parents = info.get("parents") or []
        added = info.get("added")
        if not parents or added != 1:
            return None
        parent = str(parents[0])
        if self.store.message_count(parent) != int(info["messages"]) - 1:
            return None
        if self.store.session(parent).get("conversation") != info.get("conversation"):
            return None  # another conversation's session (a fork's source)
        return parent

    async def clear_session(self) -> None:
        """Empties the session: every branch goes and the object is back on ``main``.

        ``main`` moves to a new, empty session whose parent is its old head
        (ref-log reason ``clear``), so the conversation, its metadata and its
        whole history stay (``sessctl log`` still walks it); the next
        :meth:`add_items` continues from empty. Each other branch's
        conversation is removed with ``Store.delete`` (reason ``delete``): its
        sessions stay in the store, reachable from the ref log, until ``gc``.
        """

        def clear() -> None:
            main = self._checked_name(MAIN_BRANCH)
            for ref, _tip in self.store.refs(f"refs/heads/{main}."):
                try:
                    self.store.delete(ref[len("refs/heads/") :])
                    self._forget_conversation(ref[len("refs/heads/") :])
                except NotFound:
                    pass  # another object deleted it first
            for attempt in range(_CAS_ATTEMPTS):
                head = self._head(main)
                if head is None or int(self.store.session(head)["messages"]) == 0:
                    return
                try:
                    self.store.put(
                        reason="clear", parent=head, keep=0, conversation=main, expected_head=head
                    )
                    return
                except RefOutOfDate:
                    _backoff(attempt)
            raise RuntimeError(
                f"{main}: lost the race to clear {_CAS_ATTEMPTS} times in a row; giving up"
            )

        try:
            await _settle(clear)
        finally:
            self._branch_id = MAIN_BRANCH

    def close(self) -> None:
        """Does nothing: the store holds no lock or connection for this object.

        Here so that code written for ``SQLiteSession`` runs unchanged.
        """

    # ---- branches (AdvancedSQLiteSession's API) ---------------------------

    async def create_branch_from_turn(
        self, turn_number: int, branch_name: str | None = None
    ) -> str:
        """Forks a branch holding the items before user turn ``turn_number`` and switches to it.

        Turns are counted as ``AdvancedSQLiteSession`` counts them: turn ``t``
        starts at the ``t``-th user message (``role == "user"``) of the current
        branch, counting from 1; items before the first user message belong to
        turn 0. The branch keeps every item before that message, so its next
        :meth:`add_items` replaces turn ``t``. It is a sessctl fork
        (``Store.fork(head, at_message=k)``): it shares those items with the
        source, copying none.

        ``branch_name`` defaults to ``branch_from_turn_<t>_<unix time>``.
        Returns the branch id. ``ValueError`` if turn ``t`` has no user message,
        if ``branch_name`` is blank, or if a branch of that name exists.
        """
        if branch_name is not None and not branch_name.strip():
            raise ValueError("Branch name cannot be empty")
        if branch_name is not None:
            _require_utf8("branch_name", branch_name)
        source = self._branch_id

        def create() -> str:
            name = self._checked_name(source)
            head = self._head(name)
            history = self.store.history(head) if head is not None else []
            starts = [k for k, item in enumerate(history) if _is_user_message(item)]
            if not 1 <= turn_number <= len(starts):
                raise ValueError(
                    f"Turn {turn_number} does not contain a user message in branch '{source}'"
                )
            assert head is not None  # a user message was found, so there is a head
            branch = branch_name if branch_name is not None else self._free_branch_id(turn_number)
            target = self._checked_name(branch)
            if branch == MAIN_BRANCH or self.store.conversation(target) is not None:
                raise ValueError(
                    f"Branch ID '{branch}' has already been used. Choose a new branch ID."
                )
            try:
                self.store.fork(head, at_message=starts[turn_number - 1], name=target)
            except InvalidInput:
                if self.store.conversation(target) is not None:
                    raise ValueError(
                        f"Branch ID '{branch}' has already been used. Choose a new branch ID."
                    ) from None
                raise
            self._record_ids(target, branch)
            return branch

        branch = await _settle(create)
        self._branch_id = branch
        return branch

    def _free_branch_id(self, turn_number: int) -> str:
        """``AdvancedSQLiteSession``'s default branch id, with ``_2``, ``_3``... while taken."""
        base = f"branch_from_turn_{turn_number}_{int(time.time())}"
        branch = base
        suffix = 1
        while self.store.conversation(conversation_name(self.session_id, branch)) is not None:
            suffix += 1
            branch = f"{base}_{suffix}"
        return branch

    async def create_branch_from_content(
        self, search_term: str, branch_name: str | None = None
    ) -> str:
        """:meth:`create_branch_from_turn` at the first user turn whose text has ``search_term``.

        ``ValueError`` if no user turn matches.
        """
        matches = await self.find_turns_by_content(search_term)
        if not matches:
            raise ValueError(f"No user turns found containing '{search_term}'")
        return await self.create_branch_from_turn(int(matches[0]["turn"]), branch_name)

    async def switch_to_branch(self, branch_id: str) -> None:
        """Makes ``branch_id`` the current branch. ``ValueError`` if it does not exist.

        ``main`` always exists (it is empty until the first :meth:`add_items`).
        """

        def check() -> None:
            if branch_id == MAIN_BRANCH:
                return
            if self.store.conversation(self._checked_name(branch_id)) is None:
                raise ValueError(f"Branch '{branch_id}' does not exist")

        await _in_thread(check)
        self._branch_id = branch_id

    async def delete_branch(self, branch_id: str, force: bool = False) -> None:
        """Deletes branch ``branch_id``: ``Store.delete`` of its conversation (reason ``delete``).

        Its sessions stay in the store, reachable from the ref log, until
        ``gc``. ``ValueError`` for ``main``, for a branch that does not exist,
        and for the current branch unless ``force`` (then the object switches
        to ``main`` first).
        """
        if not branch_id or not branch_id.strip():
            raise ValueError("Branch ID cannot be empty")
        if branch_id == MAIN_BRANCH:
            raise ValueError("Cannot delete the 'main' branch")
        if branch_id == self._branch_id and not force:
            raise ValueError(
                f"Cannot delete current branch '{branch_id}'. "
                "Use force=True or switch branches first"
            )

        def delete() -> None:
            try:
                self.store.delete(self._checked_name(branch_id))
                self._forget_conversation(self._checked_name(branch_id))
            except NotFound:
                raise ValueError(f"Branch '{branch_id}' does not exist") from None

        if branch_id == self._branch_id:
            exists = await _in_thread(
                lambda: self.store.conversation(self._checked_name(branch_id)) is not None
            )
            if not exists:
                raise ValueError(f"Branch '{branch_id}' does not exist")
            self._branch_id = MAIN_BRANCH
        await _settle(delete)

    async def list_branches(self) -> list[dict[str, Any]]:
        """Every branch of this session, oldest first, as ``AdvancedSQLiteSession`` lists them.

        Each is ``{"branch_id", "message_count", "user_turns", "is_current",
        "created_at"}``; ``created_at`` is UTC ``YYYY-MM-DD HH:MM:SS``.
        ``main`` is listed once it has a conversation, and a branch forked
        before turn 1 is listed while still empty. Counting ``user_turns``
        reads every branch's items.
        """

        def list_all() -> list[dict[str, Any]]:
            main = self._checked_name(MAIN_BRANCH)
            names = [main] if self.store.conversation(main) is not None else []
            names += [
                ref[len("refs/heads/") :] for ref, _ in self.store.refs(f"refs/heads/{main}.")
            ]
            rows: list[tuple[int, int, dict[str, Any]]] = []
            for order, name in enumerate(names):
                record = self.store.conversation(name)
                if record is None:
                    continue  # deleted meanwhile
                branch = self._branch_of(name, record)
                if branch is None:
                    continue  # not one of ours: a name made elsewhere
                history = self.store.history(name)
                created_at = int(record.get("created_at") or 0)
                rows.append(
                    (
                        created_at,
                        order,
                        {
                            "branch_id": branch,
                            "message_count": len(history),
                            "user_turns": sum(1 for item in history if _is_user_message(item)),
                            "is_current": branch == self._branch_id,
                            "created_at": _utc_timestamp(created_at),
                        },
                    )
                )
            rows.sort(key=lambda row: (row[0], row[1]))
            return [row[2] for row in rows]

        return await _in_thread(list_all)

    def _branch_of(self, name: str, record: dict[str, Any]) -> str | None:
        """The branch id conversation ``name`` holds: from its metadata, else from its name."""
        meta = record.get("metadata") or {}
        if meta.get(METADATA_SESSION_ID) == self.session_id:
            return str(meta.get(METADATA_BRANCH_ID, MAIN_BRANCH))
        parsed = parse_conversation_name(name)
        if parsed is None or parsed[0] != self.session_id:
            return None
        return parsed[1]

    async def get_conversation_turns(self, branch_id: str | None = None) -> list[dict[str, Any]]:
        """The user turns of the current branch (or ``branch_id``), to choose where to branch.

        Each is ``{"turn", "content" (at most 100 characters), "full_content",
        "timestamp", "can_branch": True}``. ``timestamp`` is ``None``: sessctl
        dates sessions, not single items.
        """
        return await self._turns(branch_id, None, 100)

    async def find_turns_by_content(
        self, search_term: str, branch_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The user turns whose text contains ``search_term`` (ASCII case-insensitive).

        Same shape as :meth:`get_conversation_turns`, with ``content`` uncut.
        """
        pattern = re.compile(re.escape(search_term), re.IGNORECASE | re.ASCII)
        return await self._turns(branch_id, pattern, None)

    async def _turns(
        self, branch_id: str | None, pattern: re.Pattern[str] | None, preview: int | None
    ) -> list[dict[str, Any]]:
        branch = self._branch_id if branch_id is None else branch_id

        def scan() -> list[dict[str, Any]]:
            try:
                history = self.store.history(self._checked_name(branch))
            except NotFound:
                return []
            found: list[dict[str, Any]] = []
            turn = 0
            for item in history:
                if not _is_user_message(item):
                    continue
                turn += 1
                content = item.get("content", "")
                if pattern is not None and not any(
                    pattern.search(text) for text in _texts(content)
                ):
                    continue
                found.append(
                    {
                        "turn": turn,
                        "content": _content_preview(content, preview),
                        "full_content": content,
                        "timestamp": None,
                        "can_branch": True,
                    }
                )
            return found

        return await _in_thread(scan)


def _texts(content: Any) -> list[str]:
    """The searchable texts of a message ``content``: the string, or each part's ``text``."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, Sequence):
        return [str(part.get("text", "")) for part in content if isinstance(part, dict)]
    return []
