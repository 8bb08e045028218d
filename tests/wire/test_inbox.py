"""The inbox survives a worker killed in the middle of sending: the others' messages still arrive; the
tasks queue carries the supervisor's messages to a spawned worker as they were sent."""

from __future__ import annotations

import os
import queue
import signal
import time
from typing import Any

import multiprocess as mp
import pytest

from runner.wire.inbox import Inbox, Outbox, Tasks
from runner.wire.messages import Assign, Job, Stop


def _send(conn: Any, msg: Any) -> None:
    Outbox(conn).put(msg)
    time.sleep(30)  # stay alive: the test decides when this process ends


def _spawn(ctx: Any, inbox: Inbox, msg: Any) -> Any:
    writer = inbox.open(ctx)
    p = ctx.Process(target=_send, args=(writer, msg), daemon=True)
    p.start()
    writer.close()
    return p


def test_a_writer_killed_mid_message_breaks_only_its_own_pipe() -> None:
    ctx = mp.get_context("spawn")
    inbox = Inbox()
    big = _spawn(ctx, inbox, "x" * 20_000_000)  # far past a pipe's buffer: blocks mid-write, nobody reads yet
    time.sleep(1.5)
    os.kill(big.pid, signal.SIGKILL)
    big.join(5)
    small = _spawn(ctx, inbox, ("hello", 1))
    got = [inbox.get(10.0) for _ in range(2)]
    assert ("hello", 1) in got  # the torn message is dropped as end-of-file, never delivered half
    assert all(m is None or m == ("hello", 1) for m in got)
    small.kill()
    small.join(5)
    assert inbox.get(0.5) is None
    inbox.close()


def test_messages_from_one_worker_arrive_in_order_and_get_times_out() -> None:
    ctx = mp.get_context("spawn")
    inbox = Inbox()
    reader_writer = inbox.open(ctx)
    out = Outbox(reader_writer)
    for i in range(100):
        out.put(i)
    assert [inbox.get(1.0) for _ in range(100)] == list(range(100))
    t = time.monotonic()
    assert inbox.get(0.2) is None
    assert time.monotonic() - t >= 0.19
    reader_writer.close()
    assert inbox.get(0.1) is None  # end-of-file: the pipe is dropped, nothing raised
    inbox.close()


def _echo(tasks: Tasks, conn: Any) -> None:
    out = Outbox(conn)
    while not isinstance(msg := tasks.get(timeout=10), Stop):
        out.put(msg)


def test_tasks_reach_a_spawned_worker_as_sent_and_time_out_when_empty() -> None:
    ctx = mp.get_context("spawn")
    inbox, tasks = Inbox(), Tasks(ctx)
    writer = inbox.open(ctx)
    p = ctx.Process(target=_echo, args=(tasks, writer), daemon=True)
    p.start()
    writer.close()
    sent = [Assign((Job(1, "run", "r1", 0, 1),), slot=3), Assign((Job(2, "run", "r2", 1, 2),))]
    for m in sent:
        tasks.put(m)
    assert [inbox.get(10.0) for _ in sent] == sent
    tasks.put(Stop())
    p.join(10)
    assert p.exitcode == 0
    with pytest.raises(queue.Empty):
        tasks.get(timeout=0.05)
