"""The built-in CRM harness: the demo, the test bed and the benchmark workload.

Plugs in through the same contract as a user's harness. Its records are conversations; per
record it resets the CRM to the conversation's seed, runs the baseline or Atlas agent with the
runner's own model clients (shared budget, retries, response cache), and scores the outcome.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from runner.config import ModelRef, RunSpec
from runner.errors import ConversationFailed, SandboxBootError
from runner.harness.base import CallShape, Defaults, Harness, Outcome, SandboxInfo, Task, WorkerInfo
from runner.harness.crm import db
from runner.harness.crm.agents import telemetry
from runner.harness.crm.dataset import Conversation, check
from runner.harness.crm.episode import Expectations, run_episode, stats_delta, usage_of
from runner.harness.settings import HarnessSettings
from runner.models.client import ModelClient, client_over, make_provider
from runner.models.usage import Counts
from runner.records import Check
from runner.results.result import Usage
from runner.sandbox.schema import DatabaseSpec

SCHEMA = Path(__file__).resolve().parent / "schema.sql"
# Atlas telemetry only accumulates (each result exports its own session by id), so a worker's slots
# share one telemetry database: a copy per slot was ~7.5 MiB of catalogues, a third of a slot's memory.
DATABASE = DatabaseSpec(
    files=(SCHEMA,), name="crm", user="sandbox", extra=(("atlas", ()),), shared=("atlas",)
)
SCORES = ("tool_selection", "args_exact", "args_normalized", "state_match")


class CrmHarness(Harness):
    defaults = Defaults(
        success_field="success",
        metrics={k: f"scores.{k}" for k in SCORES},
        group_by={"difficulty": "record.difficulty", "tag": "record.tags"},
    )
    counts_own_calls = True  # its batch runs' calls go through the gateway, counted here all the same

    @classmethod
    def preload_for(cls, settings: HarnessSettings) -> tuple[str, ...]:
        """The SDKs of the providers the runs call only: anthropic alone is ~0.9 s of import, on the way
        to a job's first result (workers fork once the preload is in)."""
        return (*sorted(settings.providers), "runner.cache")

    def __init__(self, info: WorkerInfo) -> None:
        super().__init__(info)
        # What the slots of a worker share: the SDK clients (thread-safe HTTP pools), the cache's
        # SQLite connection, the telemetry connection. Each slot keeps its own counts (ModelClient).
        self.shared = _Shared.join(info)
        hs = info.settings
        self.cache = self.shared.cache
        self.clients: dict[str, tuple[ModelClient, ModelClient | None]] = {}
        batched = hs.batch_runs
        for run in hs.model_runs:
            via = run.name if run.name in batched else None  # its calls through the gateway's batches
            agent = self.shared.client(run.model_ref(), batch_run=via, gate=f"{run.name}/agent")
            teacher = (
                self.shared.client(run.teacher, batch_run=via, gate=f"{run.name}/teacher")
                if run.teacher
                else None
            )
            self.clients[run.name] = (agent, teacher)
        self.expectations = Expectations(self.cache)
        # the clients of the record being run, and their counts before it
        self.current: list[ModelClient] = []
        self.before: list[Counts] = []
        self.crm: psycopg.Connection[Any] | None = None
        self.telemetry: telemetry.Writer | None = None

    @staticmethod
    def record_check() -> Check | None:
        return check

    @staticmethod
    def expected_calls(record: dict[str, Any], run: RunSpec) -> list[CallShape] | None:
        from runner.harness.crm.estimate import expected_calls

        return expected_calls(record, run)

    def attach(self, sandbox: SandboxInfo) -> None:
        super().attach(sandbox)
        self.crm = db.connect(sandbox.databases["crm"].local_dsn())
        self.telemetry = self.shared.telemetry_writer(sandbox.databases["atlas"].local_dsn())
        self.expectations = Expectations(self.cache)  # a new sandbox: replay expectations there

    def detach(self) -> None:
        if self.crm is not None:
            with contextlib.suppress(Exception):
                self.crm.close()
        if self.telemetry is not None:
            self.shared.release(self.telemetry)
        self.crm = self.telemetry = None
        super().detach()

    def run(self, tasks: list[Task]) -> Iterator[tuple[Task, Outcome]]:
        for task in tasks:
            yield task, self._one(task)

    def _one(self, task: Task) -> Outcome:
        assert self.crm is not None
        agent, teacher = self.clients[task.run.name]
        self.current = [c for c in (agent, teacher) if c is not None]
        self.before = [c.stats.snapshot() for c in self.current]
        conv = Conversation.model_validate(task.record)
        try:
            output, usage = run_episode(
                conv,
                task.run,
                crm=self.crm,
                telemetry_out=self.telemetry,
                agent=agent,
                teacher=teacher,
                expectations=self.expectations,
            )
        except ConversationFailed as e:
            return Outcome.failed(str(e), e.kind, usage=self.spent())
        return Outcome(output, usage=usage)

    def spent(self) -> Usage:
        return usage_of(stats_delta(self.current, self.before), [])

    def close(self) -> None:
        self.detach()
        self.shared.leave()


class _Shared:
    """One per worker process, joined by each slot's harness, closed when the last one leaves."""

    joined: dict[int, _Shared] = {}  # by id of the worker's settings: every slot of a worker has the same

    def __init__(self, info: WorkerInfo) -> None:
        hs = self.settings = info.settings
        self.info, self.members = info, 0
        self.client_settings = hs.client  # what its model clients are made with
        self.cache = None
        if hs.cache:
            from runner.cache import DEFAULT_DIR, ResponseCache

            self.cache = ResponseCache(hs.cache_dir or DEFAULT_DIR)
        self.providers: dict[tuple[str, str, str, str], tuple[Any, str]] = {}
        self.telemetry_sink: psycopg.Connection[Any] | None = None
        self.telemetry_lock = threading.Lock()  # one write at a time on the shared telemetry connections
        # sandbox's telemetry DSN -> (conn, users)
        self.atlas: dict[str, tuple[psycopg.Connection[Any], int]] = {}
        if hs.telemetry_dsn:
            try:
                self.telemetry_sink = db.connect(hs.telemetry_dsn)
                telemetry.ensure_schema(self.telemetry_sink)
            except psycopg.Error as e:
                raise SandboxBootError(f"cannot reach the telemetry database: {e}") from e

    @classmethod
    def join(cls, info: WorkerInfo) -> _Shared:
        shared = cls.joined.get(id(info.settings)) or cls.joined.setdefault(id(info.settings), cls(info))
        shared.members += 1
        return shared

    def client(self, ref: ModelRef, *, batch_run: str | None = None, gate: str | None = None) -> ModelClient:
        """A client of its own (its counts are one slot's), over the process's one SDK client for ref. A batch
        run's calls go to the gateway, which holds them for the providers' batch APIs: no per-minute budget
        is drawn, each waits as long as its batch takes, and is billed at the batch price."""
        key = (ref.provider, ref.model, ref.sim_model or "", batch_run or "")
        if key not in self.providers:
            via = None
            if batch_run is not None:
                if self.info.gateway_url is None:
                    raise SandboxBootError(f"run {batch_run} is in batch mode, but no gateway was started")
                via = f"{self.info.gateway_url}/run/{batch_run}/worker/{self.info.worker}"
            self.providers[key] = make_provider(
                ref, self.client_settings, self.info.sim_url, via=via, via_token=self.info.gateway_token
            )
        provider, wire_model = self.providers[key]
        gates = getattr(self.info.limiter, "gates", None)
        return client_over(
            provider,
            wire_model,
            ref,
            self.client_settings,
            limiter=None if batch_run else self.info.limiter,
            cache=self.cache,
            batch=batch_run is not None,
            catalogue=self.info.catalogue,
            gate=(gates, gate) if gates is not None and gate is not None else None,
            run=gate.split("/", 1)[0] if gate is not None else None,
        )

    def telemetry_writer(self, dsn: str) -> telemetry.Writer:
        """A slot's way to the telemetry databases: one connection to its sandbox's, shared by every slot
        on that sandbox (a replacement sandbox gets its own), and the long-lived sink."""
        with self.telemetry_lock:
            conn, users = self.atlas.get(dsn, (None, 0))
            if conn is None or conn.closed:
                conn = db.connect(dsn)
                telemetry.ensure_schema(conn)
            self.atlas[dsn] = (conn, users + 1)
        return telemetry.Writer(conn, self.telemetry_sink, self.telemetry_lock, dsn)

    def release(self, writer: telemetry.Writer) -> None:
        """A slot leaves its sandbox: the sandbox's telemetry connection closes with its last slot."""
        with self.telemetry_lock:
            if writer.dsn not in self.atlas:
                return
            conn, users = self.atlas.pop(writer.dsn)
            if users > 1:
                self.atlas[writer.dsn] = (conn, users - 1)
                return
            with contextlib.suppress(Exception):
                conn.close()

    def leave(self) -> None:
        self.members -= 1
        if self.members > 0:
            return
        _Shared.joined.pop(id(self.settings), None)
        for provider, _ in self.providers.values():
            with contextlib.suppress(Exception):
                provider.close()  # the SDKs' HTTP connection pools
        if self.telemetry_sink is not None:
            with contextlib.suppress(Exception):
                self.telemetry_sink.close()
        if self.cache is not None:
            self.cache.close()
