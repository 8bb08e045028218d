"""Inspect AI eval logs of an output (`runner export OUT --format inspect --out DIR`): one log per run,
written by Inspect's own types and writer (extra `inspect`), so `inspect view --log-dir DIR`, `read_eval_log`
and Inspect's dataframes read them as logs of its own.

A run is an eval: its task is the run's name, its model the run's (`provider/model`, Inspect's spelling; an
Atlas run's teacher as the model role `teacher`), its dataset the output's. Each result is a sample (the
record's id, its trial as the epoch) with:

- messages: the record's conversation (runner/report/exports/conversation.py), tool calls and results
  included; its input the first user message;
- scores: `success` as Inspect's CORRECT / INCORRECT (none for an unscored record) and each metric as a
  number, with the reason a failure failed (`runner show`'s words) as the success score's explanation;
- model_usage: the record's paid tokens and cost under the run's model (an Atlas record's student's and
  teacher's together: results do not split them);
- error: a result that ended in an error (or a cut turn) as Inspect's EvalError, the cause as its message.

The eval's results carry the run's success rate (Inspect's `accuracy`: successes among finished records, as
the runner's report counts it) with its 95 % interval, and each metric's mean.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from pathlib import Path
from typing import Any

from runner import __version__
from runner.errors import ConfigError
from runner.report.build import Analysis, analyse
from runner.report.exports.conversation import LoggedConversation, LoggedTurn, conversation
from runner.report.exports.junit import error_message, why_failed
from runner.results.manifest import Manifest, RunEntry, RunModel
from runner.results.result import Result, outcome, share_metrics

SCORER = "pgsandbox-runner"
EXTRA = "pip install 'pgsandbox-runner[inspect]'"


def _ensure_inspect() -> None:
    try:
        import inspect_ai.log  # noqa: F401
    except ImportError:
        raise ConfigError(
            f"--format inspect writes with Inspect AI's own library, which is not installed: {EXTRA}"
        ) from None


def model_name(spec: RunModel | None, run: str) -> str:
    """`provider/model` (Inspect's spelling) from the run's spec (RunEntry.provider_model); else the run's
    name under this package."""
    provider, model = spec.provider_model() if spec else (None, None)
    return f"{provider}/{model}" if provider and model else f"{SCORER}/{run}"


def _message(t: LoggedTurn, model: str) -> Any:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall, ToolCallError

    if t.role == "assistant":
        calls = [ToolCall(id=c.id, function=c.name, arguments=c.args) for c in t.calls]
        return ChatMessageAssistant(content=t.text, tool_calls=calls or None, model=model.split("/", 1)[-1])
    if t.role == "tool":
        return ChatMessageTool(
            content=t.text,
            tool_call_id=t.call_id or None,
            function=t.name or None,
            error=ToolCallError("unknown", t.text) if t.error else None,
        )
    if t.role == "system":
        return ChatMessageSystem(content=t.text)
    return ChatMessageUser(content=t.text)


def _usage(r: Result) -> Any:
    from inspect_ai.model import ModelUsage

    u = r.usage
    return ModelUsage(
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        input_tokens_cache_read=u.cache_read_tokens,
        input_tokens_cache_write=u.cache_write_tokens,
        total_tokens=u.input_tokens + u.output_tokens + u.cache_read_tokens + u.cache_write_tokens,
        total_cost=u.cost_usd,
    )


def _scores(r: Result, shares: set[str]) -> dict[str, Any] | None:
    from inspect_ai.scorer import CORRECT, INCORRECT, Score

    kind = outcome(r)
    if kind in ("error", "cut"):
        return None
    scores = {k: Score(value=v) for k, v in r.metrics.items() if v is not None}
    if kind in ("success", "failure"):
        scores["success"] = Score(
            value=CORRECT if kind == "success" else INCORRECT,
            explanation=why_failed(r, shares) if kind == "failure" else None,
        )
    return scores or None


_STOP = {"max_tokens": "max_tokens", "context_window": "model_length", "refusal": "content_filter"}


def sample(r: Result, model: str, shares: set[str]) -> Any:
    from inspect_ai.log import EvalError, EvalSample
    from inspect_ai.model import ChatCompletionChoice, ChatMessageAssistant, ModelOutput

    talk: LoggedConversation = conversation(r.output)
    messages = [_message(t, model) for t in talk.turns]
    last = talk.last_assistant()
    stop = _STOP.get(str(r.error_kind), "stop")
    output = (
        ModelOutput(
            model=model,
            choices=[
                ChatCompletionChoice(
                    message=_message(last, model) if last else ChatMessageAssistant(content=""),
                    stop_reason=stop,
                )
            ],
            usage=_usage(r),
        )
        if last or r.ok
        else ModelOutput(model=model)
    )
    error = (
        EvalError(message=error_message(r), traceback=r.error or "", traceback_ansi=r.error or "")
        if outcome(r) in ("error", "cut")
        else None
    )
    meta = {
        "run": r.run,
        "outcome": outcome(r),
        "attempt": r.attempt,
        "worker": r.worker,
        "groups": r.groups,
        "error_kind": r.error_kind,
        "llm_calls": r.usage.llm_calls,
        "cache_hits": r.usage.cache_hits,
        "retries": r.usage.retries,
        "rate_limited": r.usage.rate_limited,
    }
    return EvalSample(
        id=r.record_id,
        epoch=r.epoch,
        input=talk.first_user_text() or r.record_id,
        target="",
        messages=messages,
        output=output,
        scores=_scores(r, shares),
        metadata=meta,
        model_usage={model: _usage(r)},
        started_at=r.started_at,
        completed_at=r.finished_at,
        total_time=r.wall_seconds,
        working_time=r.wall_seconds,
        uuid=_id(r.run, r.record_id, str(r.epoch), str(r.attempt)),
        error=error,
    )


def _id(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:22]


def _results(rows: list[Result], m: dict[str, Any], reducer: str | None) -> Any:
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore

    lo, hi = m["success_ci95"] or (None, None)  # none where no record finished: no rate, not 0 %
    decided = m["successes"] + m["failures"]
    scores = [
        EvalScore(
            name="success",
            scorer=SCORER,
            reducer=reducer,
            scored_samples=decided,
            unscored_samples=len(rows) - decided,
            metrics={
                name: EvalMetric(name=name, value=v)
                for name, v in (("accuracy", m["success_rate"]), ("ci95_low", lo), ("ci95_high", hi))
                if v is not None
            },
        )
    ]
    scores += [
        EvalScore(name=k, scorer=SCORER, reducer=reducer, metrics={"mean": EvalMetric(name="mean", value=v)})
        for k, v in m["metrics"].items()
        if v is not None
    ]
    return EvalResults(total_samples=len(rows), completed_samples=m["ok"], scores=scores)


def eval_log(a: Analysis, out: Path, run: str, rows: list[Result]) -> Any:
    """One run of the output as an Inspect EvalLog."""
    from inspect_ai.log import EvalError, EvalLog, EvalPlan, EvalPlanStep, EvalStats

    man = a.manifest
    spec = next((s for s in man.runs if s.name == run), None)
    model = model_name(spec, run)
    shares = share_metrics(r for rs in a.runs.values() for r in rs)
    created = man.started_at or min(r.started_at for r in rows)
    epochs = max(r.epoch for r in rows)
    status, error = (
        ("cancelled", None)
        if man.interrupted
        else ("error", EvalError(message=man.error, traceback=man.error, traceback_ansi=man.error))
        if man.error
        else ("success", None)
    )
    return EvalLog(
        status=status,
        error=error,
        eval=_eval_spec(man, out, run, spec, rows, created),
        plan=EvalPlan(
            steps=[EvalPlanStep(solver=man.harness or "harness", params=spec.params if spec else {})]
        ),
        results=_results(rows, a.metrics[run], man.reducer if epochs > 1 else None),
        stats=EvalStats(
            started_at=created,
            completed_at=man.finished_at or max(r.finished_at for r in rows),
            model_usage={model: _total_usage(rows)},
        ),
        samples=[sample(r, model, shares) for r in sorted(rows, key=lambda r: (r.index, r.epoch))],
    )


def _eval_spec(
    man: Manifest, out: Path, run: str, spec: RunEntry | None, rows: list[Result], created: str
) -> Any:
    """What the run was: its task, model (and teacher), dataset, epochs and where it came from."""
    from inspect_ai.log import EvalConfig, EvalDataset, EvalSpec
    from inspect_ai.model import ModelConfig

    teacher = spec.teacher if spec else None
    epochs = max(r.epoch for r in rows)
    ids = list(dict.fromkeys(r.record_id for r in rows))
    return EvalSpec(
        created=created,
        task=run,
        task_id=_id(str(man.run_id), run),
        eval_id=_id(str(man.run_id), run, "eval"),
        run_id=man.run_id or _id(str(out)),
        model=model_name(spec, run),
        model_roles={"teacher": ModelConfig(model=model_name(teacher, "teacher"))} if teacher else None,
        dataset=EvalDataset(
            name=Path(man.dataset).stem if man.dataset else None,
            location=man.dataset,
            samples=len(ids),
            sample_ids=ids,
        ),
        config=EvalConfig(epochs=epochs, epochs_reducer=[man.reducer] if epochs > 1 else None),
        packages={"pgsandbox-runner": man.package_version or __version__},
        metadata={
            "pgsandbox_runner": {
                "output": str(out),
                "run": run,
                "mode": man.mode,
                "simulated": man.simulated,
                "harness": man.harness,
                "git_revision": man.git_revision,
            }
        },
    )


def _total_usage(rows: list[Result]) -> Any:
    """The run's tokens and cost summed (Inspect's ModelUsage); no cost where any result's is unknown."""
    from inspect_ai.model import ModelUsage

    each = [_usage(r) for r in rows]
    costs = [u.total_cost for u in each]
    fields = (
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "input_tokens_cache_read",
        "input_tokens_cache_write",
    )
    return ModelUsage(
        **{k: sum(getattr(u, k) for u in each) for k in fields},
        total_cost=None if None in costs else sum(c or 0.0 for c in costs),
    )


def log_name(created: str, task: str, task_id: str) -> str:
    """Inspect's own file naming, `{created}_{task}_{task_id}.eval` (underscores only between the parts):
    `inspect view` lists a log's task and id from it without opening the file."""
    stamp = dt.datetime.fromisoformat(created).astimezone(dt.UTC).strftime("%Y-%m-%dT%H-%M-%S+00-00")
    return f"{stamp}_{re.sub(r'[^A-Za-z0-9.+-]', '-', task)}_{task_id}.eval"


def write_inspect_logs(out: Path, dest: Path) -> list[Path]:
    """Every run of output `out` as an Inspect eval log in `dest`; returns the files."""
    _ensure_inspect()
    from inspect_ai.log import write_eval_log

    a = analyse(out)
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for run, rows in a.runs.items():
        if not rows:
            continue
        log = eval_log(a, out, run, rows)
        path = dest / log_name(log.eval.created, run, log.eval.task_id)
        write_eval_log(log, path, format="eval")
        written.append(path)
    return written
