"""The first call of each run (and role) goes alone: a request the API refuses stops its run after one call.

A paid run whose requests all carry a setting the model refuses (Claude Sonnet 5.5 answers 400 to
`thinking: disabled`) would otherwise send one such request per slot at once, and then one per record:
a thousand errored records, each of them billed for nothing learned. So every process that calls a model
for a run passes the run's gate first, in memory all of a run's processes share:

- the first PROBES callers of a gate probe: their calls go out, every other caller of that gate waits for
  an answer (a caller whose probe died is replaced: another one probes);
- an answer lets the gate open for good; a request error that will repeat (a 400 or 422 by its type) lets
  another caller probe once no probe is out any more, and only as many at once as refusals are still needed
  to shut the gate (after one refusal, one probe: two sent at once after a lone refusal were three refused
  records for one verdict) (while the other probe is out its verdict may shut the
  gate, and a third probe sent meanwhile would be one more refused record: the race that made a run whose
  every request was refused pay three), and when two probes' calls, two records', are refused in the same
  words, the gate shuts with them: the waiting callers and every later one get `Refused` without sending
  anything (two probes, so that one record's own refusal, its content or its length, never stops a run);
- once open, REFUSALS_IN_A_ROW refusals of a gate with the same words and no answer between shut it the
  same way (a run whose second role, or whose long conversations, all fail alike).

Anything else (a timeout, a 429 past the retries, a 5xx) is no verdict: the next caller probes again.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import struct
import tempfile
import time
from collections.abc import Iterable, Iterator
from typing import Any

from runner.budget.xlock import ProcessLock
from runner.config import Config
from runner.interrupts import shielded

PROBE_REFUSALS = 2  # probes refused alike before the gate shuts
# Probes out at once: as many as the refusals that shut the gate, so a request every record repeats costs
# no more refused records than probes one after the other did, and either verdict comes a round trip
# sooner: the first of two answers (every caller of the run waits for it, while the budget it would draw
# on sits full at the run's start: ~3 s of the seeds' job at half its real latency, one whole call).
PROBES = PROBE_REFUSALS
REFUSALS_IN_A_ROW = 5  # once open, refusals alike with no answer between before it shuts
MESSAGE_BYTES = 1024
POLL_SECONDS = 0.05
(UNTRIED, OPEN, SHUT) = range(3)  # untried: not answered yet, its probes (if any) out
HELD = -1  # a probe's place after its refusal, while another probe is out: nobody probes in it yet
# per gate: state, refusals in a row, digest of the last refusal's words, then each probe's pid (0: none)
_FORMAT = "<3q" + "q" * PROBES
_SLOT = struct.calcsize(_FORMAT)


class Refused(Exception):
    """This gate is shut: its run's requests are refused by the provider; the message says why."""


class Gates:
    """One gate per key (`run/role` for the built-in agents, `run` for a harness's calls through the gateway),
    in a file of the run's every process maps (the workers, the gateway, the supervisor): created by the
    supervisor, it travels as its path and keys."""

    def __init__(self, keys: Iterable[str], path: str | None = None, lock: ProcessLock | None = None) -> None:
        self.keys = sorted(set(keys))
        if path is None:
            fd, path = tempfile.mkstemp(prefix="pgsr-gates-")
            os.close(fd)
        self.path = path
        self._lock = lock or ProcessLock(path + ".lock")  # released by the kernel if a holder dies inside
        size = max(1, len(self.keys)) * (_SLOT + MESSAGE_BYTES)
        with open(path, "r+b") as f:
            if os.fstat(f.fileno()).st_size < size:
                f.truncate(size)
        self._map: mmap.mmap | None = None
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:
        return {"keys": self.keys, "path": self.path, "lock": self._lock}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["keys"], state["path"], state["lock"])  # type: ignore[misc]

    def __contains__(self, key: str) -> bool:
        return key in self.keys

    def _mapped(self) -> mmap.mmap:
        if self._map is None or self._pid != os.getpid():
            with open(self.path, "r+b") as f:
                self._map = mmap.mmap(f.fileno(), 0)
            self._pid = os.getpid()
        return self._map

    @contextlib.contextmanager
    def _locked(self) -> Iterator[mmap.mmap]:
        with shielded(), self._lock.held():  # a time limit landing inside would leave the counts torn
            yield self._mapped()

    def _at(self, key: str) -> int:
        return self.keys.index(key) * (_SLOT + MESSAGE_BYTES)

    @staticmethod
    def _read(m: mmap.mmap, at: int) -> list[int]:
        return list(struct.unpack_from(_FORMAT, m, at))

    @staticmethod
    def _write(m: mmap.mmap, at: int, values: list[int]) -> None:
        struct.pack_into(_FORMAT, m, at, *values)

    def message(self, key: str) -> str:
        with self._locked() as m:
            at = self._at(key) + _SLOT
            return bytes(m[at : at + MESSAGE_BYTES]).split(b"\0", 1)[0].decode(errors="replace")

    def enter(self, key: str, deadline: float | None = None) -> bool:
        """Pass the gate: True if this caller probes (its call decides), False if the gate is open. Waits
        while the gate's probes are out; raises Refused once it is shut. A key this run has no gate for is
        open."""
        while (passed := self.try_enter(key)) is None:
            if deadline is not None and time.monotonic() > deadline:
                return False  # waited as long as the caller may: its call goes (its budget still applies)
            time.sleep(POLL_SECONDS)
        return passed

    def try_enter(self, key: str) -> bool | None:
        """`enter` without the wait: None while the probes are out (an event loop waits its own way)."""
        if key not in self.keys:
            return False
        at = self._at(key)
        with self._locked() as m:
            state, count, digest, *probes = self._read(m, at)
            if state == OPEN:
                return False
            if state == UNTRIED:
                # a dead one: no verdict (and -1 is no pid: kill(-1, 0) would signal every process)
                probes = _settled([pid if pid == HELD or (pid > 0 and _alive(pid)) else 0 for pid in probes])
                # never more probes out than refusals still needed to shut: after one refusal alike, one more
                # probe decides (two at once would send a third refused record: `assert 3 == 2`)
                if 0 in probes and sum(p > 0 for p in probes) < max(1, PROBE_REFUSALS - count):
                    probes[probes.index(0)] = os.getpid()
                    self._write(m, at, [state, count, digest, *probes])
                    return True
        if state == SHUT:
            raise Refused(self.message(key))
        return None

    def answered(self, key: str) -> None:
        """A call of this gate was answered: the gate is open, its refusals in a row start again."""
        if key not in self.keys:
            return
        at = self._at(key)
        with self._locked() as m:
            state, _, digest, *_ = self._read(m, at)
            if state != SHUT:
                self._write(m, at, [OPEN, 0, digest, *[0] * PROBES])

    def no_verdict(self, key: str, probing: bool) -> None:
        """The call ended with neither an answer nor a refusal: a probe lets the next caller probe."""
        if not probing or key not in self.keys:
            return
        at = self._at(key)
        with self._locked() as m:
            state, count, digest, *probes = self._read(m, at)
            if state == UNTRIED:
                self._write(m, at, [state, count, digest, *_settled(_without_me(probes))])

    def refused(self, key: str, words: str, *, probing: bool) -> bool:
        """A request of this gate was refused in a way that repeats: True once the gate is shut
        (PROBE_REFUSALS probes refused alike, or REFUSALS_IN_A_ROW calls alike once open)."""
        if key not in self.keys:
            return False
        at = self._at(key)
        new = int.from_bytes(hashlib.sha256(words.encode()).digest()[:7], "big")
        with self._locked() as m:
            state, count, digest, *probes = self._read(m, at)
            if state == SHUT:
                return True
            probing = probing and state == UNTRIED  # a probe that ended after another one's answer opened it
            count = count + 1 if digest == new else 1
            if probing:  # the next caller probes (another record) once the other probe is back; words kept
                probes = _settled(_without_me(probes, HELD if any(p > 0 for p in _without_me(probes)) else 0))
            if count < (PROBE_REFUSALS if probing else REFUSALS_IN_A_ROW):
                self._write(m, at, [state, count, new, *probes])
                return False
            self._write(m, at, [SHUT, count, new, *[0] * PROBES])
            raw = words.encode()[: MESSAGE_BYTES - 1] + b"\0"
            m[at + _SLOT : at + _SLOT + len(raw)] = raw
            return True

    def close(self, words: str, run: str | None = None) -> None:
        """Shut the gates of `run` (None: every run's) with `words`, whatever their state: its budget is spent
        (runner/budget/spend.py), and no call of it may go."""
        raw = words.encode()[: MESSAGE_BYTES - 1] + b"\0"
        keys = [k for k in self.keys if run is None or k == run or k.startswith(run + "/")]
        with self._locked() as m:
            for key in keys:
                at = self._at(key)
                state, count, digest, *_ = self._read(m, at)
                if state != SHUT:
                    self._write(m, at, [SHUT, count, digest, *[0] * PROBES])
                    m[at + _SLOT : at + _SLOT + len(raw)] = raw

    def shut(self) -> dict[str, str]:
        """Every shut gate and why."""
        with self._locked() as m:
            states = {key: self._read(m, self._at(key))[0] for key in self.keys}
        return {key: self.message(key) for key, state in states.items() if state == SHUT}


def _without_me(probes: list[int], leave: int = 0) -> list[int]:
    """The probes' pids less one of this process's (two slots of one worker may both probe), its place left
    free (0) or HELD."""
    probes = list(probes)
    if os.getpid() in probes:
        probes[probes.index(os.getpid())] = leave
    return probes


def _settled(probes: list[int]) -> list[int]:
    """Held places freed once no probe is out: nothing is left to decide before another record probes."""
    return probes if any(p > 0 for p in probes) else [0 if p == HELD else p for p in probes]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def gate_keys(cfg: Config) -> list[str]:
    """A gate per run and role of the built-in agents (`run/agent`, `run/teacher`), per run for a harness
    whose calls go through the gateway (`run`)."""
    keys = []
    for r in cfg.model_runs():
        keys.append(f"{r.name}/agent")
        if r.teacher is not None:
            keys.append(f"{r.name}/teacher")
    if cfg.harness.kind != "crm":
        keys += [r.name for r in cfg.runs]
    return keys
