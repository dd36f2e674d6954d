"""Worker threads for the adapters' async methods: :func:`asyncio.to_thread`, leaner.

``asyncio.to_thread`` goes through ``concurrent.futures``: a future with its
own condition variable, a work item, the executor's locks, and a second
(asyncio) future chained to the first by callbacks. For a store call of a few
hundred microseconds that is a tenth of the time. Here a job is a queue entry
and its outcome is set on the caller's asyncio future by
``loop.call_soon_threadsafe``, nothing else.

Like the default executor: a thread is started when no thread is idle, up to
:data:`MAX_THREADS` (then jobs wait in the queue); each job runs in a copy of
the caller's context. The threads are daemons, so an idle one never holds up
the interpreter's exit; at exit, the jobs submitted (a write and its sync)
are run to their end first, as ``concurrent.futures`` runs its queued work.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

_T = TypeVar("_T")

MAX_THREADS: Final = min(32, (os.cpu_count() or 1) + 4)
"""The most threads this module runs at once (the default executor's bound)."""

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", contextvars.Context, Callable[[], Any]]


class _Pool:
    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.idle = 0
        self.threads = 0
        self.pending = 0
        self.done = threading.Condition(self.lock)

    def submit(self, job: _Job) -> None:
        with self.lock:
            self.pending += 1
            if self.idle > 0:
                self.idle -= 1  # that thread takes this job
                start = False
            else:
                start = self.threads < MAX_THREADS
                if start:
                    self.threads += 1
        if start:
            threading.Thread(target=self._work, name="sessctl-worker", daemon=True).start()
        self.jobs.put(job)

    def _work(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            loop, fut, ctx, fn = job
            try:
                result = ctx.run(fn)
            except BaseException as exc:  # handed to the caller, like to_thread
                _deliver(loop, fut, None, exc)
            else:
                _deliver(loop, fut, result, None)
            finally:
                with self.lock:
                    self.pending -= 1
                    self.idle += 1
                    self.done.notify_all()

    def wait_for_pending(self) -> None:
        """Returns once every job submitted has run (at exit: let a write finish its sync)."""
        with self.lock:
            while self.pending:
                self.done.wait()


def _deliver(
    loop: asyncio.AbstractEventLoop,
    fut: asyncio.Future[Any],
    result: Any,
    exc: BaseException | None,
) -> None:
    def settle() -> None:
        if fut.cancelled():
            return
        if isinstance(exc, StopIteration):
            # A future refuses it (it would end the awaiting coroutine).
            fut.set_exception(RuntimeError(f"the job raised StopIteration: {exc!r}"))
        elif exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:
        pass  # the loop is closed: nobody awaits the outcome any more


_pool = _Pool()


def _after_fork() -> None:
    # The child has none of the parent's threads.
    global _pool
    _pool = _Pool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
atexit.register(lambda: _pool.wait_for_pending())


def run(fn: Callable[[], _T]) -> asyncio.Future[_T]:
    """``fn()`` in a worker thread, in a copy of the caller's context; its outcome as a future.

    Cancelling the future does not stop ``fn`` (a thread cannot be stopped);
    it only drops the outcome.
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[_T] = loop.create_future()
    _pool.submit((loop, fut, contextvars.copy_context(), fn))
    return fut
