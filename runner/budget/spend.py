"""A run's spending cap (`--budget USD`, `--budget-tokens N`, `runs[].budget`), shared by every process.

Before a call is sent, its expected cost is reserved: its prompt at the uncached input price and the usual
answer at the output price (the price of the API it goes to: the batch APIs' half for a batch run). A call
whose reservation would take what is spent and reserved past a cap, the job's or its run's, is refused:
nothing is sent, and the cap is marked reached with the words every later caller gets. Once answered, the
call's reservation gives way to what it cost; a call that failed costs nothing. So what a run spends stays
within its cap, but for what calls in flight cost over their reservations.

Scopes: the job (index 0) and each run. Spending of earlier invocations of the same output counts (the
manifest keeps it), so the same command with a higher cap resumes with what is left of it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from runner.budget.xlock import ProcessLock
from runner.interrupts import shielded

INF = float("inf")
(_CAP_USD, _CAP_TOKENS, _USD, _TOKENS, _HELD_USD, _HELD_TOKENS, _REACHED) = range(7)
_F = 7  # floats per scope
JOB = "job"
# how every refusal of a cap begins (the recorder, the CLI and the report read it)
BUDGET_WORDS = "stopped at budget"


class Spent(Exception):
    """A cap is reached: this call would take spending past it. The message says which, and how much;
    `scope`: JOB, or the run whose cap it is."""

    def __init__(self, words: str, scope: str) -> None:
        super().__init__(words)
        self.scope = scope


@dataclass(frozen=True)
class Cap:
    usd: float | None = None
    tokens: float | None = None


@dataclass(frozen=True)
class Ticket:
    """A call's reservation: its scopes (the job and its run) and what was held for it."""

    scopes: tuple[int, ...]
    usd: float
    tokens: float


class _Floats:
    """The file's doubles, read and written in place (every process of the run maps the same file)."""

    def __init__(self, m: mmap.mmap) -> None:
        self.m = m

    def __getitem__(self, i: int) -> float:
        value: float = struct.unpack_from("<d", self.m, i * 8)[0]
        return value

    def __setitem__(self, i: int, value: float) -> None:
        struct.pack_into("<d", self.m, i * 8, value)


class Spend:
    """In a file every process of the run maps (workers, the gateway, the supervisor): made by the supervisor,
    it travels as its path and scopes."""

    def __init__(
        self,
        runs: list[str],
        caps: Mapping[str, Cap] | None = None,
        spent: Mapping[str, tuple[float, float]] | None = None,
        path: str | None = None,
    ) -> None:
        """`caps`: by scope (JOB or a run's name); `spent`: what earlier invocations spent, by scope; `path`:
        the file of a Spend made elsewhere (then neither caps nor spent)."""
        self.scopes = [JOB, *runs]
        made = path is None
        if path is None:
            fd, path = tempfile.mkstemp(prefix="pgsr-spend-")
            os.close(fd)
            with open(path, "r+b") as f:
                f.truncate(len(self.scopes) * _F * 8)
        self.path = path
        self._lock = ProcessLock(path + ".lock")  # released by the kernel if a holder dies inside
        self._map: mmap.mmap | None = None
        self._pid = -1
        if made:
            a = self._floats()
            for i, scope in enumerate(self.scopes):
                cap = (caps or {}).get(scope, Cap())
                usd, tokens = (spent or {}).get(scope, (0.0, 0.0))
                a[i * _F + _CAP_USD] = cap.usd if cap.usd is not None else INF
                a[i * _F + _CAP_TOKENS] = cap.tokens if cap.tokens is not None else INF
                a[i * _F + _USD], a[i * _F + _TOKENS] = usd, tokens

    def __getstate__(self) -> dict[str, Any]:
        return {"runs": self.scopes[1:], "path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["runs"], path=state["path"])  # type: ignore[misc]

    def _floats(self) -> _Floats:
        if self._map is None or self._pid != os.getpid():
            with open(self.path, "r+b") as f:
                self._map = mmap.mmap(f.fileno(), 0)
            self._pid = os.getpid()
        return _Floats(self._map)

    @property
    def _arr(self) -> _Floats:
        return self._floats()

    @property
    def capped(self) -> bool:
        a = self._arr
        return any(a[i * _F + c] != INF for i in range(len(self.scopes)) for c in (_CAP_USD, _CAP_TOKENS))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[_Floats]:
        with shielded(), self._lock.held():  # a time limit landing inside would leave the counts torn
            yield self._floats()

    def _of(self, run: str | None) -> tuple[int, ...]:
        return (0, self.scopes.index(run)) if run in self.scopes[1:] else (0,)

    def reserve(self, run: str | None, usd: float, tokens: float) -> Ticket:
        """Hold `usd` and `tokens` for a call of `run`; Spent if that takes a scope past its cap. With no cap
        anywhere nothing is held (no lock taken): what the call costs is still counted when it settles, so an
        uncapped invocation's spending counts against a later one's cap."""
        scopes = self._of(run)
        if not self.capped:
            return Ticket(scopes, 0.0, 0.0)
        with self._locked() as a:
            for i in scopes:
                b = i * _F
                for cap_i, used_i, held_i, amount in (
                    (_CAP_USD, _USD, _HELD_USD, usd),
                    (_CAP_TOKENS, _TOKENS, _HELD_TOKENS, tokens),
                ):
                    if a[b + _REACHED] or a[b + used_i] + a[b + held_i] + amount > a[b + cap_i]:
                        a[b + _REACHED] = 1.0
                        raise Spent(self._words(i), self.scopes[i])
            for i in scopes:
                a[i * _F + _HELD_USD] += usd
                a[i * _F + _HELD_TOKENS] += tokens
        return Ticket(scopes, usd, tokens)

    def settle(self, ticket: Ticket, usd: float, tokens: float) -> None:
        """The call ended: what it cost (0 for a call that failed) replaces what was held for it."""
        with self._locked() as a:
            for i in ticket.scopes:
                b = i * _F
                a[b + _HELD_USD] = max(0.0, a[b + _HELD_USD] - ticket.usd)
                a[b + _HELD_TOKENS] = max(0.0, a[b + _HELD_TOKENS] - ticket.tokens)
                a[b + _USD] += usd
                a[b + _TOKENS] += tokens

    @contextlib.contextmanager
    def held(self, ticket: Ticket) -> Iterator[list[tuple[float, float]]]:
        """Settle `ticket` however the block ends: with the cost appended to the yielded list, else as nothing
        spent (a call that failed)."""
        cost: list[tuple[float, float]] = []
        try:
            yield cost
        finally:
            self.settle(ticket, *(cost[-1] if cost else (0.0, 0.0)))

    def _words(self, i: int) -> str:
        b = i * _F
        a = self._arr
        what = "the job" if i == 0 else f"run {self.scopes[i]}"
        if a[b + _USD] + a[b + _HELD_USD] >= a[b + _CAP_USD] or a[b + _CAP_TOKENS] == INF:
            return f"{BUDGET_WORDS}: ${a[b + _USD]:.4f} of ${a[b + _CAP_USD]:.2f} spent ({what}'s --budget)"
        return (
            f"{BUDGET_WORDS}: {a[b + _TOKENS]:,.0f} of {a[b + _CAP_TOKENS]:,.0f} tokens "
            f"({what}'s --budget-tokens)"
        )

    def spent(self) -> dict[str, tuple[float, float]]:
        """By scope: USD and tokens spent (earlier invocations' included)."""
        with self._locked() as a:
            return {s: (a[i * _F + _USD], a[i * _F + _TOKENS]) for i, s in enumerate(self.scopes)}

    def reached(self) -> dict[str, str]:
        """The scopes whose cap a refused call reached, with the words it was refused in."""
        with self._locked() as a:
            hit = [i for i in range(len(self.scopes)) if a[i * _F + _REACHED]]
        return {self.scopes[i]: self._words(i) for i in hit}

    def cap(self, scope: str = JOB) -> tuple[float | None, float | None]:
        i = self.scopes.index(scope)
        usd, tokens = self._arr[i * _F + _CAP_USD], self._arr[i * _F + _CAP_TOKENS]
        return (None if usd == INF else usd), (None if tokens == INF else tokens)
