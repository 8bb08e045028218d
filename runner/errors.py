"""Every failure the runner knows, in one tree.

Errors that fail one conversation are recorded as that conversation's result and the run goes
on; errors that stop the run end it cleanly (results so far are kept, containers removed).

    RunnerError
    ├── RunStopped                  the whole run cannot go on
    │   ├── ConfigError             bad config file or flag (names file:line and field)
    │   ├── DatasetError            malformed conversation file (names file:line and reason)
    │   ├── NothingSelected         -k, --ids, --shard or --limit chose no record (exit 5, as pytest)
    │   ├── ResumeMismatch          output dir holds an incompatible run
    │   ├── OutputInUse             another live run writes the same output dir
    │   ├── OutputUnwritable        the output or cache dir: read-only, full, not ours (names it)
    │   ├── SandboxBootError        no engine, no image, no binaries: a worker cannot boot
    │   ├── ImageBuildError         the sandbox image could not be built
    │   └── ProviderFatal           auth, permission, unknown model, quota, billing: every call fails
    ├── ExportRefused               `runner export`: the receiver (an OTLP collector) refused it
    ├── SlotProcessDied             a slot's own process died holding its record: the record is run
    │                               again (as a lost sandbox's), never charged to a neighbour
    └── ConversationFailed          this record fails, the next one runs (each carries its ErrorKind)
        ├── ProviderGaveUp          retries or the total retry time ran out
        ├── ProviderRejected        the provider answered 400/413/422 to this record's request
        │   └── RunRefused          ...as it would every request of the run: the run stops (its other
        │                           records are not sent; the runner's other runs go on)
        ├── TurnCut                 the model did not finish a turn: output limit, refusal, context
        └── BadRecord               the record's own data cannot run (a gold call failing on its seed)

A result that failed carries one of the ErrorKind values (below), so reports group failures by cause. Some
causes are not exceptions of ours: a time limit (SIGALRM in the worker), a sandbox that did not serve
the whole record (the worker's witness checks it around every record, whatever the harness said: the
result is discarded and the record run again; `sandbox_lost` once its attempts are spent), a harness
that raised or wrote no result, a worker that died; the worker or supervisor names them by kind.

Tool errors (unknown tool, invalid arguments, constraint violations) are not exceptions at
all: they go back to the model as structured tool results, as a real API would.
"""

from __future__ import annotations

from typing import Literal

# Why a record's result is an error: the one list results, reports and tests use.
ErrorKind = Literal[
    "timeout",  # over the per-record time limit
    "database",  # a query failed on a database that is still up
    "sandbox_lost",  # the sandbox did not serve the whole record, on every attempt
    "provider_rejected",  # the API refused this record's request (400/413/422)
    "provider_gave_up",  # retries ran out on transient errors or 429s
    "bad_record",  # the record's own data is wrong (a dataset check cannot see it until it runs)
    "harness_error",  # the harness raised (its traceback is the error) or wrote no/garbage output
    "worker_died",  # the worker process died holding this record, on every attempt
    "slot_died",  # the slot's own process (a python harness's) died holding this record, on every attempt
    # the model did not finish a turn (its stop reason): an outcome of its own, neither success nor error
    "max_tokens",  # cut by the output limit (max_tokens / finish_reason length): thinking included
    "refusal",  # the model refused (stop_reason refusal, a content filter, OpenAI's refusal field)
    "context_window",  # the transcript outgrew the model's context window
    "pause_turn",  # the API paused a long turn (server tools) and the agent does not resume it
    "not_run",  # not sent: its run stopped on a refusal every request of it repeats (never written)
]
# Turns the model did not finish: reported apart from the machine's and the provider's errors.
CUT_KINDS: tuple[ErrorKind, ...] = ("max_tokens", "refusal", "context_window", "pause_turn")


class RunnerError(Exception):
    """Base of every error the runner raises on purpose. `exit_code`: the command's (runner/cli.py)."""

    exit_code: int = 2


class RunStopped(RunnerError):
    """The run cannot go on: stop handing out work, keep what is done, clean up.

    `reported`: the supervisor already said why on the console as it happened; the exit message
    then points to it instead of repeating it."""

    reported: bool = False


class ConfigError(RunStopped):
    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class DatasetError(RunStopped):
    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.path, self.line = path, line
        loc = f"{path}:{line}" if path and line else (path or "")
        super().__init__(f"{loc}: {message}" if loc else message)


class NothingSelected(RunStopped):
    """-k, --ids, --shard or --limit left no record to run: pytest's exit 5, "no tests collected"."""

    exit_code = 5


class ResumeMismatch(RunStopped):
    """The output dir was written by a run with another config or dataset."""


class OutputInUse(RunStopped):
    """Another live run holds the output directory's lock."""


class OutputUnwritable(RunStopped):
    """A file the run must write cannot be written (read-only file system, disk full, permissions)."""

    def __init__(self, path: object, error: OSError) -> None:
        self.path = str(path)
        super().__init__(f"cannot write {error.filename or path}: {error.strerror or error}")


class SandboxBootError(RunStopped):
    """A sandbox could not start for reasons a retry will not fix."""


class ImageBuildError(RunStopped):
    """The sandbox image could not be built."""


class ProviderFatal(RunStopped):
    """The provider rejected the request in a way every later request would repeat."""


class WorkerClosing(RunnerError):
    """The worker is stopping (told to, or at the end of the grace period): a slot whose record met the
    sandbox removed under it ends quietly instead of starting another; the record's result is not sent."""


class SlotProcessDied(RunnerError):
    """The process a python harness runs one slot's records in died during a record (a segfault, an
    os._exit, a kill): only that record is affected; its result is discarded and it runs again, alone."""


class ExportRefused(RunnerError):
    """An output's results were sent elsewhere (runner/report/exports/) and not taken."""


class ConversationFailed(RunnerError):
    """This conversation fails; the worker records it, under `kind`, and takes the next one."""

    kind: ErrorKind = "harness_error"


class ProviderGaveUp(ConversationFailed):
    """Retries were exhausted (attempts or total time) on transient or rate-limit errors."""

    kind: ErrorKind = "provider_gave_up"


class BadRecord(ConversationFailed):
    """The record cannot run as written (a gold call that fails on its own seed): fix the dataset."""

    kind: ErrorKind = "bad_record"


class TurnCut(ConversationFailed):
    """The model's answer stopped short of a whole turn (its stop reason says why): the record ends there."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class ProviderRejected(ConversationFailed):
    """The provider refused this request itself (its message says why); other conversations go on."""

    kind: ErrorKind = "provider_rejected"

    def __init__(self, message: str, *, status: int | None = None, words: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.words = words or message  # the refusal in the provider's words, the same for every request alike


class RunRefused(ProviderRejected):
    """The provider refused a request of this run in a way every request of it repeats (the run's first
    call's 400, or the same refusal REFUSALS_IN_A_ROW times): the run stops. `sent` False: this record's
    call waited at the run's gate and was never sent (the record is not run, and not recorded)."""

    def __init__(self, message: str, *, run: str, status: int | None = None, sent: bool = True) -> None:
        super().__init__(message, status=status, words=message)
        self.run, self.sent = run, sent
        if not sent:
            self.kind = "not_run"
