"""The fault campaign (`make soak`): runs under random faults from a seeded schedule, each compared with a
clean run of the same job.

Two jobs take turns: the built-in CRM job (a baseline and an Atlas run on the simulator, 4 workers) and a
team's harness with slots (examples/helpdesk in its own virtualenv, 2 workers x 3 slots, its LLM judge on
through the gateway). Each round starts a job on a fresh output and injects 1-3 faults drawn from the
kinds that job has, each once a drawn share of its results is in:

- `worker_kill`: kill -9 of a worker process;
- `sandbox_kill`, `sandbox_pause`: `docker kill` of a ready worker's sandbox, or `docker pause` of it,
  thawed 2-10 s later (or never, if the runner removed it first);
- `postgres_kill`: a PostgreSQL process killed (-9) inside a sandbox: the server resets every session;
- `simulator_kill`, `gateway_kill`: kill -9 of the run's model simulator or its gateway;
- `sigint_resume`: SIGINT to the supervisor, then the same command again;
- `supervisor_kill_resume`: kill -9 of the supervisor, then the same command again.

A round ends when the run exits 0. Then against the clean run: records lost (in the clean run, not here),
duplicated (a (run, record, trial) on two lines), outcomes that differ (status or verdict), and what was
left behind once the run was gone (containers of any of its supervisors, processes it started, the
runner's directories in the temporary directory: a sandbox's socket, a warm interpreter's).

    python -m bench.soak --minutes 60 --seed 1 --out docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import ROOT, WORK, descendants, proc_text, servers, table, worker_pids

SAMPLE = ROOT / "data" / "crm-sample.jsonl"
HELPDESK = ROOT / "examples" / "helpdesk"
HELPDESK_PYTHON = ROOT / ".venv-helpdesk" / "bin" / "python"
FAULTS = ("worker_kill", "sandbox_kill", "sandbox_pause", "postgres_kill", "simulator_kill", "gateway_kill",
          "sigint_resume", "supervisor_kill_resume")
Key = tuple[str, str, int]  # (run, record, trial)


@dataclass(frozen=True)
class Job:
    name: str
    config: Path
    args: tuple[str, ...]
    runs: tuple[str, ...]
    faults: tuple[str, ...]


def crm_job(work: Path, records: int) -> Job:
    text = (f"dataset: {SAMPLE}\nproviders: sim\ncache: false\nworkers: 4\nconversation_timeout_seconds: 30\n"
            "heartbeat_timeout_seconds: 20\nshutdown_grace_seconds: 20\nmax_attempts: 4\n"
            "retry: {max_attempts: 8, base_seconds: 1.0}\nsimulator: {latency: {p50_ms: 60}}\nruns:\n"
            "  - {name: strong, provider: anthropic, model: claude-sonnet-5-5, sim_model: sim-strong}\n"
            "  - {name: atlas, agent: atlas, provider: openai, model: gpt-5.4-mini, sim_model: sim-mini,\n"
            "     teacher: {provider: anthropic, model: claude-sonnet-5-5, sim_model: sim-teacher}}\n")
    cfg = work / "crm.yaml"
    cfg.write_text(text)
    return Job("crm", cfg, ("--sandbox", "docker", "--limit", str(records)), ("strong", "atlas"),
               tuple(f for f in FAULTS if f != "gateway_kill"))


def helpdesk_job(work: Path, records: int) -> Job:
    text = (HELPDESK / "runner.yaml").read_text().replace("tickets.jsonl", str(HELPDESK / "tickets.jsonl"))
    text = text.replace("pythonpath: [.]", f"pythonpath: [{HELPDESK}]")
    text = text.replace("schema: [schema]", f"schema: [{HELPDESK / 'schema'}]")
    text = text.replace("${HELPDESK_PYTHON:-../../.venv-helpdesk}", str(HELPDESK_PYTHON))
    text = text.replace("workers: 4", "workers: 2\nslots: 3\nconversation_timeout_seconds: 10\nmax_attempts: 4\n"
                        "providers: sim\ngateway: true\ncache: false\nsimulator: {latency: {p50_ms: 60}}")
    cfg = work / "helpdesk.yaml"
    cfg.write_text(text)
    return Job("helpdesk", cfg, ("--sandbox", "docker", "--limit", str(records)), ("replay", "careless"), FAULTS)


def outcomes(out: Path, runs: tuple[str, ...]) -> tuple[dict[Key, tuple[Any, ...]], int]:
    """Each (run, record, trial)'s outcome (status, verdict, error kind), and how many lines repeat one."""
    got: dict[Key, tuple[Any, ...]] = {}
    repeated = 0
    for run in runs:
        path = out / "results" / f"{run}.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            r = json.loads(line)
            key = (run, r["record_id"], r.get("epoch", 1))
            repeated += key in got
            got[key] = (r["status"], r["success"], r.get("error_kind"))
    return got, repeated


class Run:
    """One job's command, started again after a fault that stops it; every process it started is noted."""

    def __init__(self, job: Job, out: Path, log: Path) -> None:
        self.job, self.out, self.log = job, out, log
        self.supervisors: list[int] = []
        self.seen: set[tuple[int, str]] = set()  # (pid, start time): a pid reused later is not ours
        self.p: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "CI"}
        with self.log.open("ab") as f:
            self.p = subprocess.Popen([sys.executable, "-m", "runner", "run", str(self.job.config), "--out",
                                       str(self.out), *self.job.args], stdout=f, stderr=subprocess.STDOUT,
                                      env=env, cwd=ROOT)
        self.supervisors.append(self.p.pid)

    @property
    def pid(self) -> int:
        assert self.p is not None
        return self.p.pid

    def note_processes(self) -> None:
        for pid in descendants(self.pid):
            if (st := _start_time(pid)) is not None:
                self.seen.add((pid, st))

    def results(self) -> int:
        return sum(len(p.read_text().splitlines()) for p in (self.out / "results").glob("*.jsonl")) \
            if (self.out / "results").exists() else 0

    def wait(self, timeout: float) -> int:
        assert self.p is not None
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.send_signal(signal.SIGUSR1)  # its threads' stacks into the log (runner/cli.py)
            time.sleep(1)
            self.p.kill()
            self.p.wait()
            raise


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True)


def ready_containers(run: Run) -> list[str]:
    """The current supervisor's containers whose worker said it is ready: a container killed while its
    worker still boots is a boot failure, which stops a run by design."""
    log = run.out / "logs" / "supervisor.log"
    ready = set(re.findall(r"ready: docker sandbox (\S+)", log.read_text() if log.exists() else ""))
    lines = _docker("ps", "--format", "{{.ID}} {{.Names}}", f"--filter=label=pgsandbox-runner.owner-pid={run.pid}",
                    "--filter=status=running").stdout.splitlines()
    return [line.split()[0] for line in lines if line.split()[1].removeprefix("pgsr-") in ready]


# One PostgreSQL child process, any (a backend, the checkpointer...): killing one with -9 makes the
# server end every session and recover, as a crash of one backend does.
_KILL_ONE_POSTGRES = ('for d in /proc/[0-9]*; do c=$(tr "\\0" " " < $d/cmdline 2>/dev/null); '
                      'case "$c" in "postgres: "*) kill -9 ${d#/proc/} && exit 0;; esac; done; exit 1')


def inject(kind: str, run: Run, rng: random.Random, thaws: list[threading.Timer]) -> bool:
    """One fault; False when it found nothing to hit (no ready sandbox yet, no server)."""
    if kind in ("sigint_resume", "supervisor_kill_resume"):
        os.kill(run.pid, signal.SIGINT if kind == "sigint_resume" else signal.SIGKILL)
        code = run.wait(180)
        if kind == "sigint_resume" and code == 0:
            return False  # it had finished: the interrupt found no work
        run.start()
        return True
    if kind == "worker_kill":
        return _kill_one(worker_pids(run.pid), rng)
    if kind in ("simulator_kill", "gateway_kill"):
        return _kill_one(servers(run.pid, kind.removesuffix("_kill")), rng)
    ready = ready_containers(run)
    if not ready:
        return False
    victim = rng.choice(ready)
    if kind == "sandbox_kill":
        return _docker("kill", victim).returncode == 0
    if kind == "sandbox_pause":
        if _docker("pause", victim).returncode != 0:
            return False
        thaw = threading.Timer(rng.uniform(2, 10), _docker, ("unpause", victim))
        thaw.start()
        thaws.append(thaw)
        return True
    return _docker("exec", victim, "sh", "-c", _KILL_ONE_POSTGRES).returncode == 0


def _kill_one(pids: list[int], rng: random.Random) -> bool:
    if not pids:
        return False
    try:
        os.kill(rng.choice(pids), signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


@dataclass
class Round:
    job: str
    seconds: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    missed: Counter[str] = field(default_factory=Counter)  # drawn, but nothing to hit at that moment
    lost: int = 0
    duplicated: int = 0
    differing: int = 0
    containers_left: int = 0
    processes_left: int = 0
    dirs_left: int = 0  # the runner's directories in the temporary directory (a sandbox's socket, a warm interpreter's)
    notes: list[str] = field(default_factory=list)


def faulted_round(job: Job, clean: dict[Key, tuple[Any, ...]], rng: random.Random, work: Path,
                  n: int) -> Round:
    out, log = work / f"round-{n}", work / f"round-{n}.log"
    subprocess.run(["rm", "-rf", str(out), str(log)])
    rnd, t0, dirs_before = Round(job.name), time.monotonic(), _our_dirs()
    total = len(clean)
    plan = sorted((rng.uniform(0.05, 0.85), rng.choice(job.faults)) for _ in range(rng.randint(1, 3)))
    run, thaws = Run(job, out, log), list[threading.Timer]()
    for share, kind in plan:
        while run.results() < share * total and run.p is not None and run.p.poll() is None:
            run.note_processes()
            time.sleep(0.1)
        if run.p is None or run.p.poll() is not None:
            break
        ok = inject(kind, run, rng, thaws)
        (rnd.faults if ok else rnd.missed)[kind] += 1
    _finish(run, rnd, thaws)
    got, rnd.duplicated = outcomes(out, job.runs)
    rnd.lost = len(clean.keys() - got.keys())
    differ = [k for k in clean if k in got and got[k] != clean[k]]
    rnd.differing = len(differ)
    rnd.notes += [f"{k}: clean {clean[k]}, here {got[k]}" for k in differ[:5]]
    _left_behind(run, rnd, dirs_before)
    rnd.seconds = time.monotonic() - t0
    return rnd


def _finish(run: Run, rnd: Round, thaws: list[threading.Timer]) -> None:
    """Wait for the run's exit; a run stopped by a fault's side effect is resumed by the same command, as a
    user would (and counted in the notes)."""
    for _ in range(5):
        while run.p is not None and run.p.poll() is None:
            run.note_processes()
            time.sleep(0.2)
        try:
            code = run.wait(600)
        except subprocess.TimeoutExpired:
            code = None  # hung: a bug to read in its log (its threads' stacks are there)
        if code == 0:
            break
        rnd.notes.append(f"{'hung, killed' if code is None else f'exit {code}'}: resumed (see {run.log})")
        run.start()
    for t in thaws:
        t.join()


def _left_behind(run: Run, rnd: Round, dirs_before: set[str]) -> None:
    deadline = time.monotonic() + 15  # the kernel and the engine finish what a clean exit started
    while True:
        containers = [c for pid in run.supervisors for c in
                      _docker("ps", "-aq", f"--filter=label=pgsandbox-runner.owner-pid={pid}").stdout.split()]
        alive = [pid for pid, st in run.seen if _start_time(pid) == st]
        dirs = _our_dirs() - dirs_before
        if (not containers and not alive and not dirs) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    rnd.containers_left, rnd.processes_left, rnd.dirs_left = len(containers), len(alive), len(dirs)
    rnd.notes += [f"left: {proc_text(pid, 'cmdline')[:100]}" for pid in alive[:3]]
    rnd.notes += [f"left: {d}" for d in sorted(dirs)[:3]]


def _our_dirs() -> set[str]:
    return {str(p) for p in Path(tempfile.gettempdir()).glob("pgsr-*")}


def clean_run(job: Job, work: Path) -> dict[Key, tuple[Any, ...]]:
    out, log = work / f"clean-{job.name}", work / f"clean-{job.name}.log"
    subprocess.run(["rm", "-rf", str(out), str(log)])
    run = Run(job, out, log)
    code = run.wait(900)
    if code != 0:
        raise SystemExit(f"the clean {job.name} run exited {code}: see {log}")
    got, repeated = outcomes(out, job.runs)
    assert repeated == 0, f"the clean {job.name} run repeated {repeated} results"
    return got


GOAL_ZERO = ("lost", "duplicated", "differing", "containers_left", "processes_left", "dirs_left")


def soak(minutes: float, seed: int, records: tuple[int, int] = (12, 30)) -> dict[str, Any]:
    """Rounds until `minutes` are spent (a round in progress finishes). records: per job (crm, helpdesk)."""
    work = WORK / "soak"
    work.mkdir(parents=True, exist_ok=True)
    jobs = [crm_job(work, records[0]), helpdesk_job(work, records[1])]
    t0 = time.monotonic()
    cleans = {j.name: clean_run(j, work) for j in jobs}
    rng = random.Random(seed)
    rounds: list[Round] = []
    while time.monotonic() - t0 < minutes * 60 or not rounds:
        job = jobs[len(rounds) % len(jobs)]
        rounds.append(faulted_round(job, cleans[job.name], rng, work, len(rounds) + 1))
        r = rounds[-1]
        print(f"round {len(rounds)} {r.job}: {dict(r.faults)} in {r.seconds:.0f} s; lost {r.lost}, duplicated "
              f"{r.duplicated}, differing {r.differing}, left {r.containers_left}+{r.processes_left}+{r.dirs_left}"
              + (f"; {'; '.join(r.notes)}" if r.notes else ""), flush=True)
    return _summary(rounds, seed, minutes, time.monotonic() - t0, {j.name: len(cleans[j.name]) for j in jobs})


def _summary(rounds: list[Round], seed: int, minutes: float, wall: float, items: dict[str, int]) -> dict[str, Any]:
    faults: Counter[str] = Counter()
    missed: Counter[str] = Counter()
    for r in rounds:
        faults.update(r.faults)
        missed.update(r.missed)
    return {"seed": seed, "minutes": minutes, "wall_s": round(wall, 1), "rounds": len(rounds),
            "rounds_by_job": dict(Counter(r.job for r in rounds)), "items": items,
            "faults": dict(faults), "missed": dict(missed),
            **{k: sum(getattr(r, k) for r in rounds) for k in GOAL_ZERO},
            "notes": [f"round {i + 1} ({r.job}): {note}" for i, r in enumerate(rounds) for note in r.notes][:30]}


def render(s: dict[str, Any]) -> str:
    met = all(s.get(k, 0) == 0 for k in GOAL_ZERO)
    rows = [[kind, s["faults"].get(kind, 0), s["missed"].get(kind, 0)] for kind in FAULTS]
    jobs = ", ".join(f"{name} {n} rounds ({s['items'][name]} results each)" for name, n in s["rounds_by_job"].items())
    notes = "".join(f"- {n}\n" for n in s["notes"])
    return (f"### Fault campaign: {s['rounds']} rounds in {s['wall_s'] / 60:.0f} minutes, seed {s['seed']}\n\n"
            f"`make soak SOAK_MINUTES={s['minutes']:g}` (bench/soak.py): {jobs}. Each round drew 1-3 faults, each "
            "injected once a drawn share of the results was in, and ended compared with a clean run of its job.\n\n"
            + table(["fault", "injected", "drawn but nothing to hit"], rows) + "\n\n"
            + f"- records lost: **{s['lost']}**, duplicated: **{s['duplicated']}**, outcomes that differ: "
              f"**{s['differing']}** (goal 0, 0, 0)\n"
            + f"- left behind once each run was gone: **{s['containers_left']}** containers, "
              f"**{s['processes_left']}** processes, **{s.get('dirs_left', 0)}** directories (goal 0)\n"
            + f"- verdict: {'met' if met else 'MISSED'}\n"
            + (f"\nNotes:\n{notes}" if notes else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="rounds are started until this time is spent")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, help="replace (or add) the campaign's section of this markdown document")
    args = ap.parse_args()
    s = soak(args.minutes, args.seed)
    text = render(s)
    print(text)
    (WORK / "soak.json").write_text(json.dumps(s, indent=2))
    if args.out:
        from bench.all import _replace_sections

        _replace_sections(args.out, [text], f"make soak SOAK_MINUTES={args.minutes:g}", s["wall_s"])
    failed = any(s.get(k, 0) for k in GOAL_ZERO)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
