"""Shared pieces of the benchmarks: configs, timing from results, percentiles, markdown."""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.analysis.metrics import percentile as pct
from runner.config import Config, Latency, Limits, ModelRef, RunSpec, SimSettings
from runner.harness.crm.dataset import write_conversations
from runner.harness.crm.generate import generate
from runner.resources import SERVER_COMM_PREFIX
from runner.results.result import Result
from runner.results.sink import read_results

ROOT = Path(__file__).resolve().parents[1]
WORK = Path(os.environ.get("BENCH_DIR", "/tmp/pgsandbox-bench"))
STRONG = RunSpec(name="strong", provider="anthropic", model="claude-sonnet-5-5", sim_model="sim-strong")


# The default job's mix as YAML runs: a baseline and an Atlas teacher/student run, on the simulator.
MIX_RUNS = ("runs:\n"
            "  - {name: strong, provider: anthropic, model: claude-sonnet-5-5, sim_model: sim-strong}\n"
            "  - {name: atlas, agent: atlas, provider: openai, model: gpt-5.4-mini, sim_model: sim-mini,\n"
            "     teacher: {provider: anthropic, model: claude-sonnet-5-5, sim_model: sim-teacher}}\n")


def descendants(pid: int) -> list[int]:
    """`pid` and every process under it."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    kids: dict[int, list[int]] = {}
    for line in out.splitlines():
        p, pp = (int(x) for x in line.split())
        kids.setdefault(pp, []).append(p)
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(kids.get(p, []))
    return found


def children(pid: int) -> list[tuple[int, str]]:
    """The processes `pid` started, with their command lines."""
    out = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [(int(x.split(None, 1)[0]), x.split(None, 1)[1]) for x in out.strip().splitlines()]


def forkserver(pid: int) -> int | None:
    """The process a supervisor (`runner run`, pid) forks its workers from (runner/run/job.py)."""
    return next((c for c, args in children(pid) if "forkserver" in args), None)


def worker_pids(pid: int) -> list[int]:
    """A supervisor's worker processes: its forkserver's children, but for a simulator forked there."""
    fs = forkserver(pid)
    if fs is None:
        return []
    return [c for c, _ in children(fs) if not proc_text(c, "comm").startswith(SERVER_COMM_PREFIX)]


SERVER_COMMANDS = {"simulator": "runner sim serve", "gateway": "runner gateway"}


def servers(pid: int, name: str) -> list[int]:
    """A run's `name` server processes (simulator, gateway): started as a command, or forked from its
    forkserver (named pgsr-NAME: runner/resources.py)."""
    return [p for p in descendants(pid) if p != pid and (SERVER_COMMANDS[name] in proc_text(p, "cmdline")
                                                         or proc_text(p, "comm") == SERVER_COMM_PREFIX + name)]


def proc_text(pid: int, what: str) -> str:
    """/proc/PID/WHAT (cmdline, comm) as text, NULs as spaces; "" once the process is gone."""
    try:
        return Path(f"/proc/{pid}/{what}").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def run_in_background(cfg: Path, out: Path) -> subprocess.Popen[bytes]:
    """`runner run cfg --out out` from scratch, on the simulator (no API key reaches it)."""
    subprocess.run(["rm", "-rf", str(out)])
    return subprocess.Popen([sys.executable, "-m", "runner", "run", str(cfg), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")})


def dataset(n: int, seed: int = 11) -> Path:
    path = WORK / f"dataset-{seed}-{n}.jsonl"
    if not path.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        write_conversations(generate(n, seed), path)
    return path


def uniform_dataset(n: int, seed: int = 21) -> Path:
    """Conversations of one shape (two turns, each a lookup then a write: six model calls for a
    strong model), so throughput compares like with like at every size."""
    from runner.harness.crm.generate import generate_one

    path = WORK / f"uniform-{seed}-{n}.jsonl"
    if path.exists():
        return path
    WORK.mkdir(parents=True, exist_ok=True)
    picked: list[Any] = []
    i = 0
    while len(picked) < n:
        c = generate_one(seed, i)
        i += 1
        if len(c.turns) == 2 and all(t.expect == "tools" and len(t.gold_calls) == 2
                                     and not any(g.expect_error for g in t.gold_calls) for t in c.turns):
            picked.append(c)
    write_conversations(picked, path)
    return path


def config(data: Path, out: Path, *, workers: int, runs: list[RunSpec] | None = None, p50_ms: float = 0,
           p95_ms: float | None = None, scale: float = 1.0, sandbox: str = "docker", cache: bool = False,
           cache_dir: Path | None = None, limits: dict[str, Limits] | None = None,
           rate_limits: dict[str, Any] | None = None) -> Config:
    return Config.model_validate({
        "dataset": data, "output_dir": out, "workers": workers, "runs": runs or [STRONG], "sandbox": sandbox,
        "providers_mode": "sim", "cache": cache, "cache_dir": cache_dir, "rate_limits": rate_limits or {},
        "simulator": SimSettings(latency=Latency(p50_ms=p50_ms, p95_ms=p95_ms, scale=scale), limits=limits or {}),
        "conversation_timeout_seconds": 600, "heartbeat_timeout_seconds": 120})


def atlas_run() -> RunSpec:
    return RunSpec(name="atlas", agent="atlas", provider="openai", model="gpt-5.4-mini", sim_model="sim-mini",
                   teacher=ModelRef(provider="anthropic", model="claude-sonnet-5-5", sim_model="sim-teacher"))


def seeds_runs() -> list[RunSpec]:
    """The seeds' job: the three baselines, named as in configs/default.yaml, and Atlas."""
    return [STRONG.model_copy(update={"name": "claude-sonnet-5-5"}),
            RunSpec(name="gpt-5.4", provider="openai", model="gpt-5.4", sim_model="sim-strong"),
            RunSpec(name="gpt-5.4-mini", provider="openai", model="gpt-5.4-mini", sim_model="sim-mini"), atlas_run()]


def ts(s: str) -> float:
    return dt.datetime.fromisoformat(s).timestamp()


@dataclass
class Timing:
    n: int
    span: float  # first start to last finish (s)
    p50: float
    p95: float
    steady: float  # completions/s while every worker is busy (see timing_of)
    window: tuple[float, float] = (0.0, 0.0)  # that all-busy window (wall-clock times)
    inside: int = 0  # completions in it

    @property
    def throughput(self) -> float:
        return self.n / self.span if self.span > 0 else 0.0


def serialized_timing(rows: list[tuple[Any, float, float]]) -> Timing:
    """For a design whose conversations run one at a time (the seeds' lock): the steady rate is the
    spacing of completions, (n - 1) / (last finish - first finish), whatever the number of processes."""
    t = timing_of(rows)
    ends = sorted(e for _, _, e in rows)
    t.steady = (len(ends) - 1) / (ends[-1] - ends[0]) if len(ends) > 1 and ends[-1] > ends[0] else t.throughput
    return t


def timing_of(rows: list[tuple[Any, float, float]]) -> Timing:
    """From (worker, start, end) of each conversation.

    Steady state is the window in which every worker is busy: from the moment the last worker
    started its first conversation to the moment the first worker finished its last one (start-up
    stagger and the final stragglers fall outside it). Completions in it / its length.
    """
    durations = [e - s for _, s, e in rows]
    firsts: dict[Any, float] = {}
    lasts: dict[Any, float] = {}
    for w, s, e in rows:
        firsts[w] = min(firsts.get(w, s), s)
        lasts[w] = max(lasts.get(w, e), e)
    t_a, t_b = max(firsts.values()), min(lasts.values())
    inside = sum(1 for _, _, e in rows if t_a <= e <= t_b)
    steady = inside / (t_b - t_a) if t_b > t_a and inside >= 2 else 0.0
    return Timing(len(rows), max(e for _, _, e in rows) - min(s for _, s, _ in rows), pct(durations, 0.5),
                  pct(durations, 0.95), steady, (t_a, t_b), inside)


def full_timing(rows: list[tuple[Any, float, float]], level: int) -> Timing:
    """From (worker, start, end) of each conversation, for workers running several at once (slots):
    steady state is the window from the first to the last moment `level` conversations were in flight
    (slots still copying their databases at start-up and the final stragglers fall outside)."""
    t = timing_of(rows)
    # (time, -1) sorts before (time, +1): at one instant an end before a start, a hand-off is no overlap
    events = sorted([(s, 1) for _, s, _ in rows] + [(e, -1) for _, _, e in rows])
    n, a, b = 0, None, None
    for when, step in events:
        n, before = n + step, n
        if n >= level and a is None:
            a = when
        if before >= level > n:
            b = when
    if a is None or b is None:
        return t
    inside = sum(1 for _, _, e in rows if a <= e <= b)
    t.steady = inside / (b - a) if b > a and inside >= 2 else 0.0
    t.window, t.inside = (a, b), inside
    return t


def result_rows(out: Path) -> list[Result]:
    rows: list[Result] = []
    for p in sorted((out / "results").glob("*.jsonl")):
        rows += read_results(p)
    return rows


def result_timing(out: Path, level: int | None = None) -> Timing:
    """Timing of a run's ok results: the all-busy window by worker, or by `level` in flight (slots)."""
    rows = [(r.worker, ts(r.started_at), ts(r.finished_at)) for r in result_rows(out) if r.ok]
    return full_timing(rows, level) if level else timing_of(rows)


def machine() -> str:
    cpu = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, {platform.platform()}, Python "
            f"{platform.python_version()}, git {rev.strip() or '?'}")


def repeated(source: Path, id_field: str, prefix: str, n: int) -> Path:
    """n records: an example's own, repeated under new ids (same shapes, so rates compare)."""
    path = WORK / f"{prefix}-{n}.jsonl"
    base = [json.loads(x) for x in source.read_text().splitlines()]
    WORK.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({**base[i % len(base)], id_field: f"{prefix}-{i:05d}"}) + "\n")
    return path


def table(headers: list[str], rows: list[list[Any]]) -> str:
    def fmt(v: Any) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


class Sampler:
    """Takes `read()` every `every_s` seconds in the background (and once more at the end), so any
    window inside the block can be read afterwards: the steady window, without start-up."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.samples: list[tuple[float, Any]] = []  # (wall-clock time, what read() returned)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def read(self) -> Any:
        raise NotImplementedError

    def _sample(self) -> None:
        while True:
            self.samples.append((time.time(), self.read()))
            if self._stop.wait(self.every_s):
                self.samples.append((time.time(), self.read()))
                return

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class CpuMeter(Sampler):
    """Machine-wide busy CPU seconds (every process: workers, simulator, PostgreSQL, the engine's
    port proxy), from /proc/stat."""

    def __init__(self, every_s: float = 0.2) -> None:
        super().__init__(every_s)

    def read(self) -> float:
        return _cpu_busy_s()

    def busy_between(self, a: float, b: float) -> float:
        """Busy CPU seconds between wall-clock times a and b (linear between samples)."""
        def at(t: float) -> float:
            for (t0, c0), (t1, c1) in itertools.pairwise(self.samples):
                if t0 <= t <= t1:
                    return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
            return self.samples[0][1] if t < self.samples[0][0] else self.samples[-1][1]
        return at(b) - at(a)


# Who a process is, for CPU per conversation by part: first match of its command line wins.
PARTS = (("simulator", ("runner sim serve", SERVER_COMM_PREFIX + "simulator")), ("postgres", ("postgres",)),
         ("engine", ("docker-proxy", "dockerd", "containerd")),
         ("harness", ("shim.py", "zygote.py", "heavyharness", ".venv-helpdesk")), ("runner", ("python",)))


SELF = (-1, 0)  # ProcessCpu's key for its own reading time


class ProcessCpu(Sampler):
    """CPU seconds per part (runner: supervisor and workers; simulator; postgres; engine: the Docker
    engine and its port proxies; other: kernel threads and the rest), sampled from /proc/<pid>/stat
    so any window inside the block can be read afterwards. Processes are keyed by (pid, start time):
    pids wrap around during long runs.

    The benches run the supervisor in their own process, so its CPU holds this sampler's too (a read
    walks every process in /proc: ~1-4 ms, a quarter of the supervisor's CPU at 64 in flight): the
    sampler's thread times itself and that is taken off the runner's part, counted nowhere."""

    def __init__(self, every_s: float = 0.5, *, watcher: bool = False) -> None:
        """`watcher`: this process only watches others (a bench that launches the runner as a user does):
        its CPU, polling for results, is no part's."""
        super().__init__(every_s)
        self._part: dict[tuple[int, int], str] = {}
        self._own = 0.0  # this thread's CPU seconds spent reading
        self._skip = os.getpid() if watcher else -1

    def read(self) -> dict[tuple[int, int], float]:
        started = time.thread_time()
        out = {SELF: self._own}
        tick = os.sysconf("SC_CLK_TCK")
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    comm, _, rest = f.read().partition(" (")[2].rpartition(")")
                fields = rest.split()
                key = (int(name), int(fields[19]))  # start time: after "(comm)", field 22 of proc(5)
                if comm.startswith(SERVER_COMM_PREFIX):
                    # a server forked from the forkserver: its name says which, its command line is the
                    # forkserver's; named a moment after its fork, so asked at every read
                    self._part[key] = _part_of(comm)
                elif key not in self._part:
                    with open(f"/proc/{name}/cmdline", "rb") as f:
                        cmdline = f.read()
                    # empty for kernel threads (children of kthreadd, pid 2), and for a moment while a
                    # new process execs: that one is asked again at the next read
                    if cmdline or fields[1] in ("0", "2"):
                        self._part[key] = _part_of(cmdline.replace(b"\0", b" ").decode(errors="replace"))
            except (OSError, IndexError, ValueError):  # exited meanwhile
                continue
            out[key] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        self._own += time.thread_time() - started
        return out

    def between(self, a: float, b: float) -> dict[str, float]:
        """CPU seconds per part between the samples nearest to wall-clock times a and b; a process that
        exited in between counts up to its last sample (its CPU after that, < one interval, is lost)."""
        times = [t for t, _ in self.samples]
        i, j = (min(range(len(times)), key=lambda k: abs(times[k] - t)) for t in (a, b))
        first, latest = self.samples[i][1], {}
        for _, snap in self.samples[i:j + 1]:
            latest.update(snap)
        parts = dict.fromkeys([p for p, _ in PARTS] + ["other"], 0.0)
        for key, used in latest.items():
            if key != SELF and key[0] != self._skip:
                parts[self._part.get(key, "other")] += used - first.get(key, 0.0)
        if self._skip < 0:
            parts["runner"] -= latest.get(SELF, 0.0) - first.get(SELF, 0.0)
        return parts


def _part_of(cmdline: str) -> str:
    return next((part for part, marks in PARTS if any(m in cmdline for m in marks)), "other")


def _cpu_busy_s() -> float:
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is already inside user


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def save_json(name: str, data: Any) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / f"{name}.json").write_text(json.dumps(data, indent=2, default=str))
