"""The harness contract: what the worker hands a harness, and what it gets back.

A harness lives in one worker process for the worker's whole life. The worker `attach`es it to
its sandbox (again after a replacement), then gives it chunks of tasks, each one record of one
run; the harness yields one Outcome per task as each finishes. Three kinds ship: the built-in
`crm` (the demo and benchmark workload), `python` (a user's function) and `command` (a user's
CLI). The core imports this module only; it never looks inside a harness.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

from runner.config import API_KEY_ENV, CLOUD_KEY_ENV, RunSpec, sdk_base_url
from runner.errors import ErrorKind
from runner.harness.settings import HarnessSettings
from runner.records import Check
from runner.results.result import Usage
from runner.sandbox.base import socket_dsn

# The variable each cloud's official client reads its address from (anthropic.AnthropicBedrock,
# anthropic.AnthropicVertex: with the API version, openai.AzureOpenAI: the resource's endpoint).
CLOUD_BASE_URL_ENV = {
    "bedrock": "ANTHROPIC_BEDROCK_BASE_URL",
    "vertex": "ANTHROPIC_VERTEX_BASE_URL",
    "azure": "AZURE_OPENAI_ENDPOINT",
}


def gateway_env(
    gateway: str, run: str, worker: int | str, *, token: str | None, clouds: Iterable[str] = ()
) -> dict[str, str]:
    """The variables the official SDKs and LiteLLM read, pointed at the gateway with run and worker in
    the path, and the run's token for it as their API keys: the gateway admits only the run's callers and
    calls the providers with the keys of its own environment (a harness never holds them). `clouds`: those
    the config sets up, whose clients get their base URL and the token as their credential too (a Bedrock
    API key; for Vertex, whose client reads no token from the environment, GOOGLE_OAUTH_ACCESS_TOKEN for the
    harness to pass as access_token); the others' variables are left alone (boto3 reads
    AWS_BEARER_TOKEN_BEDROCK too, for its own calls to Bedrock)."""
    base = f"{gateway}/run/{run}/worker/{worker}"
    env = {
        "ANTHROPIC_BASE_URL": base,
        "ANTHROPIC_API_BASE": base,
        "OPENAI_BASE_URL": f"{base}/v1",
        "OPENAI_API_BASE": f"{base}/v1",
    }
    env.update({CLOUD_BASE_URL_ENV[c]: sdk_base_url(base, c) for c in sorted(clouds)})
    if token is not None:
        env.update({name: token for name in API_KEY_ENV.values()})
        env.update({CLOUD_KEY_ENV[c]: token for c in sorted(clouds)})
    return env


@dataclass(frozen=True)
class Database:
    """Connection settings for one database of the worker's sandbox."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    name: str
    socket_dir: str | None = None  # the sandbox's Unix socket on this machine, if it has one

    def dsn(self) -> str:
        """Over TCP (what a user's harness is given: host and port work from anywhere)."""
        return psycopg.conninfo.make_conninfo(
            host=self.host, port=self.port, user=self.user, password=self.password, dbname=self.name
        )

    def local_dsn(self) -> str:
        """Over the Unix socket when there is one, else dsn(): no port proxy on every query."""
        return (
            socket_dsn(self.socket_dir, self.user, self.password, self.name)
            if self.socket_dir
            else self.dsn()
        )

    def url(self) -> str:
        auth = f"{quote(self.user, safe='')}:{quote(self.password, safe='')}"
        if self.host.startswith("/"):  # a socket directory (container_network: none): libpq's URI form for it
            where = f"host={quote(self.host, safe='')}&port={self.port}"
            return f"postgresql://{auth}@/{quote(self.name, safe='')}?{where}"
        return f"postgresql://{auth}@{self.host}:{self.port}/{quote(self.name, safe='')}"


@dataclass(frozen=True)
class SandboxInfo:
    """The worker's sandbox as a harness sees it: its databases, the first being the main one."""

    id: str
    databases: Mapping[str, Database]
    main: str

    @property
    def db(self) -> Database:
        return self.databases[self.main]


def sandbox_info(
    sb: Any, spec: Any, main: str | None = None, slot: int = 0, login: tuple[str, str] | None = None
) -> SandboxInfo:
    """What a harness sees of a started sandbox: the spec's databases at its endpoint, `main` first;
    a worker's slot n > 0 has its own copy of each (slot_database) but the shared ones, and logs in as
    `login` (user, password: its own role, sandbox/tenancy.py; default the sandbox's one role)."""
    e = sb.endpoint
    user, password = login or (e.user, e.password)
    main = main or spec.name
    names = (main, *(n for n in spec.databases if n != spec.name))
    return SandboxInfo(
        sb.id,
        {
            n: Database(
                e.host,
                e.port,
                user,
                password,
                n if n in spec.shared else slot_database(n, slot),
                e.socket_dir,
            )
            for n in names
        },
        main,
    )


def slot_database(name: str, slot: int) -> str:
    """The database `name` as slot `slot` of a worker has it (slot 0: the sandbox's own)."""
    return name if slot == 0 else f"{name}__s{slot}"


@dataclass(frozen=True)
class Task:
    item_id: int
    run: RunSpec
    record_id: str
    record: dict[str, Any]
    attempt: int
    epoch: int = 1


@dataclass
class Outcome:
    """One task's answer: the harness's dict, or why there is none."""

    output: dict[str, Any] | None
    error: str | None = None
    error_kind: ErrorKind | None = None
    usage: Usage = field(default_factory=Usage)

    @classmethod
    def failed(cls, error: str, kind: ErrorKind = "harness_error", usage: Usage | None = None) -> Outcome:
        """A record that failed still cost what its calls cost: usage keeps them counted."""
        return cls(None, error, kind, usage or Usage())


@dataclass(frozen=True)
class CallShape:
    """One model call a record is expected to make, as its harness foresees it from the record alone (no
    model, no database): who makes it, how long its prompt is, how much of it a prompt cache may hold, and
    the visible answer's length. Tokens are the client-side estimate (compact JSON, ~4 characters a token);
    thinking is the forecast's to add, from the run's settings.

    Two prefixes, as the providers' caches differ: `prefix_tokens` is what this prompt shares with the same
    role's previous prompt (a cache of any prefix reads it: OpenAI's); `marked_prefix_tokens` is the longest
    of it that ends where an earlier prompt ended or at the fixed part (tools and system prompt), the only
    places a cache entry is written where the runner marks the end of each prompt (Anthropic's)."""

    role: str  # "agent"; Atlas: "student" or "teacher"
    prompt_tokens: int
    prefix_tokens: int
    answer_tokens: int
    marked_prefix_tokens: int


@dataclass(frozen=True)
class Defaults:
    """What a harness knows about its own output, used where the config says nothing."""

    success_field: str | None = None
    metrics: Mapping[str, str] = field(default_factory=dict)
    group_by: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerInfo:
    """The worker around a harness: its id, what it reads of the config, and where it may write."""

    worker: int
    settings: HarnessSettings
    scratch: Path
    run_id: str
    sim_url: str | None = None
    limiter: Any = None
    gateway_url: str | None = None  # a user harness's SDK calls go here (runner/gateway)
    gateway_token: str | None = None  # ...presenting this as their API key
    slot: int = 0  # one of the worker's K slots (runner/worker/slot.py); slots > 0 run in threads
    slots: int = 1
    warm: str | None = None  # harness.python: the run's warm interpreter's socket (proc/warm.py)
    catalogue: Any = None  # runner.models.live.Catalogue: what each model takes, its provider asked at start

    @property
    def caller(self) -> str:
        """Who the gateway counts this slot's calls to: the worker, and its slot when it has several."""
        return str(self.worker) if self.slot == 0 else f"{self.worker}.{self.slot}"


class Harness(ABC):
    """One per worker process. Subclasses: harness/crm, harness/python, harness/command."""

    defaults = Defaults()
    chunk_size = 1
    # A harness whose model calls the runner cannot see (a user's SDK) has them counted by the gateway; one
    # that makes them through the runner's own clients (the built-in CRM) counts its own, batched or not.
    counts_own_calls = False

    @classmethod
    def preload_for(cls, settings: HarnessSettings) -> tuple[str, ...]:
        """Modules this config's workers import anyway: imported once, in the process workers are forked
        from (runner/engine/forkserver.py), instead of once per worker (an SDK is ~1 s of CPU)."""
        return ()

    def __init__(self, info: WorkerInfo) -> None:
        self.info = info
        self.sandbox: SandboxInfo | None = None

    @staticmethod
    def record_check() -> Check | None:
        """A check run on every record when the file is loaded (before any worker starts)."""
        return None

    @staticmethod
    def expected_calls(record: dict[str, Any], run: RunSpec) -> list[CallShape] | None:
        """The model calls `record` should take on `run`, from the record alone (`runner plan`); None: this
        harness cannot know (a user's code: only what an earlier output measured can say)."""
        return None

    def gateway_env(self, run: str) -> dict[str, str]:
        """SDK base URLs through the runner's gateway, when the run has one."""
        info = self.info
        if info.gateway_url is None:
            return {}
        return gateway_env(
            info.gateway_url, run, info.caller, token=info.gateway_token, clouds=info.settings.clouds
        )

    def attach(self, sandbox: SandboxInfo) -> None:
        """The worker's sandbox is (newly) up: connect, warm caches."""
        self.sandbox = sandbox

    def before_threads(self, sandbox: SandboxInfo) -> None:  # noqa: B027 - optional hook
        """Called once, on the worker's main thread, before its slot threads start (slots > 1): what must
        change process-wide (the environment) changes here, never from a slot thread."""

    def detach(self) -> None:
        """The sandbox is going away (replacement or shutdown): drop connections to it."""
        self.sandbox = None

    @abstractmethod
    def run(self, tasks: list[Task]) -> Iterator[tuple[Task, Outcome]]:
        """Run the tasks (all of one run); yield each with its outcome as soon as it has one.

        Errors of one record become failed Outcomes; an exception out of here means the sandbox
        or the worker is in trouble (the worker checks the sandbox and retries or gives up).
        """

    def spent(self) -> Usage:
        """What the record being run has cost so far: the worker asks when it cuts one short (its
        time limit, a lost database), so a failed record's calls and tokens are still counted."""
        return Usage()

    def close(self) -> None:  # noqa: B027 - optional hook: most harnesses hold nothing to close
        """The worker is exiting."""
