"""The worker threads behind the adapters' async methods (sessctl._workers)."""

from __future__ import annotations

import asyncio
import contextvars
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from sessctl import _workers

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("WHO", default="nobody")


async def test_a_job_runs_off_the_loop_in_the_callers_context() -> None:
    WHO.set("caller")
    got = await _workers.run(lambda: (threading.get_ident(), WHO.get()))
    assert got[0] != threading.get_ident()
    assert got[1] == "caller"


async def test_an_exception_reaches_the_caller() -> None:
    def fail() -> None:
        raise KeyError("lost")

    with pytest.raises(KeyError, match="lost"):
        await _workers.run(fail)


async def test_more_jobs_than_threads_all_run_and_threads_are_reused() -> None:
    gate = threading.Barrier(min(4, _workers.MAX_THREADS))
    # Jobs that must run at once (a barrier): more than one thread is started.
    together = await asyncio.gather(*(_workers.run(gate.wait) for _ in range(gate.parties)))
    assert sorted(together) == list(range(gate.parties))
    many = await asyncio.gather(*(_workers.run(lambda k=k: k * k) for k in range(500)))
    assert many == [k * k for k in range(500)]
    assert _workers._pool.threads <= _workers.MAX_THREADS


async def test_a_cancelled_caller_drops_the_outcome_and_the_job_still_runs() -> None:
    ran = threading.Event()

    def slow() -> int:
        time.sleep(0.05)
        ran.set()
        return 1

    fut = _workers.run(slow)
    fut.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fut
    await asyncio.sleep(0.2)
    assert ran.is_set()
    assert await _workers.run(lambda: 2) == 2


def test_jobs_submitted_before_exit_run_to_their_end(tmp_path: Path) -> None:
    out = tmp_path / "written"
    code = textwrap.dedent(
        f"""
        import asyncio, time
        from sessctl import _workers

        def write():
            time.sleep(0.3)
            open({str(out)!r}, "w").write("done")

        async def main():
            _workers.run(write)  # never awaited: the program ends at once

        asyncio.run(main())
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert out.read_text() == "done"


async def test_stop_iteration_arrives_as_an_error_not_a_hang() -> None:
    with pytest.raises(RuntimeError, match="StopIteration"):
        await asyncio.wait_for(_workers.run(lambda: next(iter(()))), 10)
