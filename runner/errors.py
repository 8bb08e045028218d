"""Every failure the runner knows, in one tree.

Errors that fail one conversation are recorded as that conversation's result and the run goes
on; errors that stop the run end it cleanly (results so far are kept, containers removed).

    RunnerError
    ├── RunStopped                  the whole run cannot go on
    │   ├── ConfigError             bad config file or flag (names file:line and field)
    │   ├── DatasetError            malformed conversation file (names file:line and reason)
    │   ├── ResumeMismatch          output dir holds an incompatible run
    │   ├── SandboxBootError        no engine, no image, no binaries: a worker cannot boot
    │   ├── ImageBuildError         the sandbox image could not be built
    │   └── ProviderFatal           auth, permission, unknown model, quota, billing: every call would fail
    └── ConversationFailed          this conversation fails, the next one runs
        ├── ConversationTimeout     over the per-conversation time limit
        ├── SandboxLost             the worker's database went away mid-conversation
        ├── ProviderGaveUp          retries or the total retry time ran out
        └── ProviderRejected        the provider answered 400/413/422 to this conversation's request

Tool errors (unknown tool, invalid arguments, constraint violations) are not exceptions at
all: they go back to the model as structured tool results, as a real API would.
"""

from __future__ import annotations


class RunnerError(Exception):
    """Base of every error the runner raises on purpose."""


class RunStopped(RunnerError):
    """The run cannot go on: stop handing out work, keep what is done, clean up."""


class ConfigError(RunStopped):
    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class DatasetError(RunStopped):
    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.path, self.line = path, line
        loc = f"{path}:{line}" if path and line else (path or "")
        super().__init__(f"{loc}: {message}" if loc else message)


class ResumeMismatch(RunStopped):
    """The output dir was written by a run with another config or dataset."""


class SandboxBootError(RunStopped):
    """A sandbox could not start for reasons a retry will not fix."""


class ImageBuildError(RunStopped):
    """The sandbox image could not be built."""


class ProviderFatal(RunStopped):
    """The provider rejected the request in a way every later request would repeat."""


class ConversationFailed(RunnerError):
    """This conversation fails; the worker records it and takes the next one."""


class ConversationTimeout(ConversationFailed):
    pass


class SandboxLost(ConversationFailed):
    """The database connection broke mid-conversation (container or server died)."""


class ProviderGaveUp(ConversationFailed):
    """Retries were exhausted (attempts or total time) on transient or rate-limit errors."""


class ProviderRejected(ConversationFailed):
    """The provider refused this request itself (its message says why); other conversations go on."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
