"""Typed surface of the compiled extension (``sessctl._native``).

Everything here is re-exported by :mod:`sessctl`. Ids are 64-digit lowercase
hex strings; messages, metadata and states are JSON values (``dict``,
``list``, ``str``, ``int``, ``float``, ``bool``, ``None``). Every call releases
the GIL while the store works.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, Literal

Json = Any
"""A JSON value: what :func:`json.loads` returns."""

ANY: Final[str]
"""``"*"``: as an expected ref value, "whatever it is now" (no check)."""

__version__: Final[str]
FORMAT_VERSION: Final[int]
"""The store format version this build writes (``FORMAT`` in a store's directory)."""

class SessctlError(Exception):
    """Every error the store raises. ``exit_code`` is the CLI's for it."""

    exit_code: int

class RefOutOfDate(SessctlError):
    """A compare-and-swap lost: a ref was not at the expected value (CLI exit 1)."""

class NotFound(SessctlError):
    """No such conversation, ref, revision or object."""

class Corrupt(SessctlError):
    """Stored bytes fail their hash or do not decode; names the object."""

class StoreBusy(SessctlError):
    """Another process held the store's write lock for longer than ``wait``."""

class InvalidInput(SessctlError):
    """A bad name, revision, argument or message (nothing was written)."""

class LogIterator(Iterator[dict[str, Json]]):
    """Session summaries, newest first, read lazily (the walk holds only ids)."""

    def __iter__(self) -> LogIterator: ...
    def __next__(self) -> dict[str, Json]: ...
    def __len__(self) -> int:
        """How many entries are left."""

class Store:
    """A sessctl store: a directory any number of processes open at once.

    ``Store(path)`` opens the store at ``path`` and creates it first when
    ``create`` is true and nothing is there. ``wait`` bounds how long a write
    waits for another process's write lock (seconds, like ``--wait``);
    ``durable=False`` skips ``fdatasync`` (a crash may lose the newest
    writes, never corrupt older ones). A write returns once it is durable;
    the upkeep it makes due (packing full journal segments, writing index
    tables) runs on a thread of the handle's own, which the handle waits
    for when it is dropped.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        create: bool = True,
        *,
        wait: float = 5.0,
        durable: bool = True,
    ) -> None: ...
    @staticmethod
    def memory() -> Store:
        """A store that lives in this process only."""
    @property
    def path(self) -> str | None:
        """The store's directory; ``None`` for :meth:`memory`."""

    # ---- conversations -------------------------------------------------
    def commit(
        self,
        conversation: str,
        messages: Sequence[Json],
        *,
        new: bool = False,
        title: str | None = None,
        usage: Mapping[str, int] | None = None,
        metadata: Mapping[str, Json] | None = None,
        expected_head: str | None = None,
    ) -> str:
        """Appends ``messages`` to ``conversation`` as one new session; returns its id.

        ``new=True`` starts the conversation (``InvalidInput`` if it exists).
        ``expected_head`` makes the commit a compare-and-swap: ``RefOutOfDate``
        unless the head is still that session. ``usage`` takes
        ``prompt_tokens``/``completion_tokens``/``total_tokens``/``requests``
        (or Anthropic's ``input_tokens``/``output_tokens``).
        """
    def fork(
        self, rev: str, *, at_message: int | None = None, name: str | None = None
    ) -> tuple[str, str]:
        """A new conversation from any revision; returns ``(name, tip id)``.

        ``at_message=k`` keeps the first ``k`` messages of ``rev``'s history.
        """
    def history(self, rev: str) -> list[Json]:
        """The messages of ``rev``'s whole history, oldest first (each hash-verified)."""
    def messages(self, rev: str, start: int = 0, end: int | None = None) -> list[Json]:
        """``history(rev)[start:end]`` reading only those messages (negative indexes count from the end)."""
    def message_count(self, rev: str) -> int:
        """How many messages ``rev``'s history has, without reading them."""
    def log(
        self, rev: str | None = None, *, all: bool = False, limit: int | None = None
    ) -> LogIterator:
        """Sessions reachable from ``rev`` (default ``HEAD``; ``all=True``: every ref), newest first.

        Each item is the dict of one ``sessctl log --json`` line.
        """
    def conversations(self, limit: int | None = None, archived: bool = False) -> list[dict[str, Json]]:
        """Conversations by latest activity (``sessctl ls --json``); ``archived=True`` lists the archived ones."""
    def conversation(self, name: str) -> dict[str, Json] | None:
        """One conversation as :meth:`conversations` lists it, or ``None``."""
    def show(self, rev: str, *, messages: bool = False) -> dict[str, Json]:
        """``sessctl show --json``: the session's fields, its conversation name, the refs at it,
        and the messages it added (``messages=True``: its whole history) under ``shown_messages``."""
    def archive(self, name: str) -> str:
        """Moves ``name`` to the archive; returns its tip."""
    def unarchive(self, name: str) -> str:
        """Brings ``name`` back from the archive; returns its tip."""
    def delete(self, name: str) -> str:
        """Removes the conversation's ref and record (its sessions stay until gc); returns the tip it had."""
    def checkout(self, rev: str, directory: str | os.PathLike[str]) -> dict[str, Json]:
        """Writes ``rev`` in the runtime layout (``state.json``, ``display_messages.json``) into ``directory``."""
    def resolve(self, rev: str) -> str:
        """The session id a revision names (``fix``, ``fix~2``, ``HEAD^2``, a hex prefix, ...)."""
    def merge_base(self, a: str, b: str) -> str | None:
        """The best common ancestor of two revisions, or ``None``."""
    def is_ancestor(self, a: str, b: str) -> bool:
        """Whether ``a`` is ``b`` or one of its ancestors."""
    def reflog(self, name: str | None = None) -> list[dict[str, Json]]:
        """The hash-chained ref log, newest first; ``name`` keeps one ref's entries (``fix`` or ``refs/tags/x``).

        Each entry is ``sessctl reflog --json``'s: ``op`` (the operation's number), ``ref``,
        ``old`` and ``new`` (ids, ``ref: NAME`` or ``None``), ``time`` (ms), ``actor``,
        ``reason``, ``prev`` (the previous entry's hash) and ``hash``."""
    def gc(self, dry_run: bool = False, *, prune: str | None = None) -> dict[str, Json]:
        """Removes what no ref reaches past the grace period (``prune``: ``"now"``, ``"2.weeks.ago"``)."""
    def fsck(self, *, full: bool = False) -> dict[str, Json]:
        """Verifies every object and the ref-log chain: ``{"clean": bool, "problems": [...], ...}``."""
    def import_files(
        self, fmt: str, paths: Sequence[str | os.PathLike[str]]
    ) -> dict[str, Json]:
        """Imports agent transcripts (``claude-code``, ``codex``, ``openai``, ``swe-agent``) like ``sessctl import``."""

    # ---- building blocks for adapters ------------------------------------
    def put(
        self,
        *,
        reason: str,
        parent: str | None = None,
        keep: int | None = None,
        messages: Sequence[Json] = (),
        state: Json = None,
        title: str | None = None,
        metadata: Mapping[str, Json] | None = None,
        created_at: int | None = None,
        conversation: str | None = None,
        expected_head: str | None = "*",
        tags: Mapping[str, str | None] | None = None,
        conversation_metadata: Mapping[str, Json] | None = None,
    ) -> str:
        """Writes one session under any parent and moves refs to it, atomically; returns its id.

        The session keeps the first ``keep`` messages of ``parent``'s history
        (default: all of them) and adds ``messages``; ``state`` (any JSON, or
        ``None`` for none) is its context state, stored once per distinct
        value; ``metadata`` goes to the session's free metadata.

        ``conversation`` moves that conversation to the session, creating it
        when it does not exist. ``expected_head``: ``"*"`` (default) takes any
        head, ``None`` requires that the conversation not exist, an id
        requires that head (else ``RefOutOfDate``). ``HEAD`` does not move.

        ``tags`` points each named tag (``refs/tags/NAME``) at the session;
        each value is the tag's expected current target (``None``: must not
        exist, ``"*"``: any). ``conversation_metadata`` is the new
        conversation's record metadata when ``put`` creates it (ignored otherwise).
        """
    def append(
        self,
        conversation: str,
        messages: Sequence[Json],
        *,
        expected_head: str | None,
        reason: str = "commit",
        conversation_metadata: Mapping[str, Json] | None = None,
    ) -> tuple[str, list[str]]:
        """Appends ``messages`` to ``conversation`` as one session; returns its id and the messages as JSON text.

        The same write as ``put(reason=reason, parent=expected_head,
        messages=messages, conversation=conversation,
        expected_head=expected_head, conversation_metadata=...)``: an id
        requires that head and builds on it (else ``RefOutOfDate``), ``None``
        requires that the conversation not exist and starts it, with
        ``conversation_metadata`` as its record metadata. The texts are each
        message as the store returns it (``json.loads`` of one equals what
        ``messages(id)`` gives for it), so that a caller that keeps what it
        wrote need not read it back.
        """
    def set_metadata(self, name: str, metadata: Mapping[str, Json]) -> None:
        """Merges keys into conversation ``name``'s record metadata (a ``None`` value removes its key)."""
    def update_refs(
        self, reason: str, edits: Sequence[tuple[str, str | None, str | None]]
    ) -> None:
        """Moves several refs in one compare-and-swap transaction (all or none).

        Each edit is ``(ref, expected, new)``: ``ref`` is ``refs/tags/NAME`` or a
        conversation's ``refs/heads/NAME`` (which must exist); ``expected`` is
        an id, ``None`` (must not exist) or ``"*"``; ``new`` is an id or
        ``None`` to delete the tag. A conversation is removed with :meth:`delete`.
        """
    def refs(self, prefix: str = "") -> list[tuple[str, str]]:
        """``(full ref name, target id)`` of every ref whose full name starts with ``prefix``, sorted by name."""
    def session(self, id: str) -> dict[str, Json]:
        """One session's own fields: ``id``, ``parents``, ``conversation``, ``created_at``,
        ``title``, ``status``, ``messages`` (history length), ``added`` (how many it
        added), ``metadata`` (its free metadata) and ``state`` (its context state, or ``None``)."""
