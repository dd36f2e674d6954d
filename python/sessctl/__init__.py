"""sessctl: storage for AI-agent sessions, built the way git stores commits.

A session is an immutable object named by the hash of its bytes; it names its
parent sessions, so sessions form a DAG, and it stores its messages as a delta
on its first parent's. A conversation is a ref to its newest session; every
ref move is compare-and-swapped and recorded in a hash-chained ref log. Any
number of processes open one store at once.

>>> import sessctl
>>> store = sessctl.Store.memory()
>>> head = store.commit("fix", [{"role": "user", "content": "hi"}], new=True)
>>> store.history("fix")
[{'role': 'user', 'content': 'hi'}]

Adapters: :mod:`sessctl.langgraph` (``SessctlSaver``) and :mod:`sessctl.agents`
(``SessctlSession``); they import their frameworks only when used.
"""

from __future__ import annotations

from ._native import (
    ANY,
    FORMAT_VERSION,
    Corrupt,
    InvalidInput,
    LogIterator,
    NotFound,
    RefOutOfDate,
    SessctlError,
    Store,
    StoreBusy,
    __version__,
)

__all__ = [
    "ANY",
    "FORMAT_VERSION",
    "Corrupt",
    "InvalidInput",
    "LogIterator",
    "NotFound",
    "RefOutOfDate",
    "SessctlError",
    "Store",
    "StoreBusy",
    "__version__",
]
