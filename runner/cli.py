"""The `runner` command. Each subcommand turns flags into calls; no logic lives here."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import re
import shlex
import signal
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from loguru import logger

from runner import __version__, heap
from runner.budget.spend import BUDGET_WORDS
from runner.config import environment
from runner.errors import RunnerError
from runner.logfiles import add_console
from runner.resources import PARENT_ENV, die_with_parent

if TYPE_CHECKING:
    from runner.config import Config
    from runner.results.result import Result


def _setup_console_logging(verbose: bool) -> None:
    logger.remove()
    add_console(verbose)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="runner")
@click.option("-v", "--verbose", is_flag=True, help="Debug output on the console.")
def cli(verbose: bool) -> None:
    """Evaluate tool-using LLM agents in parallel, one disposable PostgreSQL per worker."""
    _setup_console_logging(verbose)
    if os.environ.get(PARENT_ENV):  # a server a run started: it goes when the run goes, even by kill -9
        die_with_parent(int(os.environ.pop(PARENT_ENV)))


def _closing_lines(results: dict[str, list[Result]], out: Path) -> None:
    """What matters at the end: per run, the records that failed, ended in an error or were flaky (the first
    ten), the command that runs the failed ones again, and where the report is. `results`: those the command
    was about (its runs, its records), so that the command it prints reruns exactly them (after --runs a,b it
    listed another run's failures and suggested a --lf that left that run out: it ran nothing)."""
    from runner.results.result import flaky, outcome

    def ids(rows: list[Result]) -> str:
        names = [r.record_id + (f"#{r.epoch}" if r.epoch > 1 else "") for r in rows]  # a later trial: id#N
        return ", ".join(names[:10]) + (f" (+{len(names) - 10} more)" if len(names) > 10 else "")

    for run, rows in results.items():
        for what, picked in (
            ("failed", [r for r in rows if outcome(r) == "failure"]),
            ("error(s) or cut turn(s)", [r for r in rows if outcome(r) in ("error", "cut")]),
            ("flaky (failed, then succeeded asked again)", [r for r in rows if flaky(r)]),
        ):
            if picked:
                click.echo(f"{run}: {len(picked)} {what}: {ids(picked)}")
    if any(outcome(r) in ("failure", "error", "cut") for rows in results.values() for r in rows):
        # the same command, for the records whose last result was not a success (pytest's --lf)
        # --lf asks the models again
        click.echo(f"to run those again: {_same_command('--lf', '--rerun-errors')}")
    click.echo(f"report: {(out / 'report.html').resolve()}")


def _id_list(value: str | None) -> list[str] | None:
    """--ids: a file of one id a line, or a comma-separated list."""
    if value is None:
        return None
    path = Path(value)
    text = path.read_text() if path.is_file() else value.replace(",", "\n")
    return [x.strip() for x in text.splitlines() if x.strip()]


def _thresholds(pairs: tuple[str, ...]) -> dict[str, float]:
    """--fail-under RUN=RATE, as many as given."""
    out = {}
    for pair in pairs:
        run, _, rate = pair.partition("=")
        try:
            out[run] = float(rate)
        except ValueError:
            raise click.BadParameter(
                f"{pair!r}: expected RUN=RATE, e.g. atlas=0.8", param_hint="--fail-under"
            ) from None
        if not run or not 0 <= out[run] <= 1:
            raise click.BadParameter(f"{pair!r}: RATE is a share from 0 to 1", param_hint="--fail-under")
    return out


def _overrides(**kw: object) -> dict[str, object]:
    return {k: v for k, v in kw.items() if v is not None}


def _select_runs(cfg: Config, names: str | None) -> Config:
    if not names:
        return cfg
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {r.name for r in cfg.runs}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        from runner.errors import ConfigError

        raise ConfigError(
            f"--runs: unknown run(s) {', '.join(unknown)}; the config has {', '.join(sorted(known))}"
        )
    return cfg.model_copy(update={"runs": [r for r in cfg.runs if r.name in wanted]})


class ConcurrencyType(click.ParamType):
    name = "N|auto"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if value == "auto":
            return "auto"
        try:
            n = int(str(value))
        except ValueError:
            n = 0
        if n < 1:
            self.fail(f"{value!r} is neither a positive number nor auto", param, ctx)
        return n


_RUN_OPTIONS = [
    click.argument("config", required=False, type=click.Path(dir_okay=False)),
    click.option("--workers", "-w", type=int, help="Worker processes, each with its own sandbox."),
    click.option(
        "--slots", type=int, help="Records each worker runs at once, each on its own database (default 1)."
    ),
    click.option(
        "--concurrency",
        "-c",
        type=ConcurrencyType(),
        help="Records in flight in all, split into workers x slots from cores and memory; 'auto': start "
        "small, grow while the slots are full and no 429s come, cut on 429s and rising latency.",
    ),
    click.option("--runs", help="Only these runs (comma-separated names from the config)."),
    click.option(
        "--sandbox",
        type=click.Choice(["auto", "docker", "local", "external"]),
        help="Where each worker's database runs (auto: docker if an engine answers, else local).",
    ),
    click.option("--dsn", help="Database for --sandbox external."),
    click.option(
        "--executor",
        type=click.Choice(["local", "ray"]),
        help="Where workers run: local processes (default), or Ray actors over a cluster (extra: ray).",
    ),
    click.option(
        "--ray-address", help="The Ray cluster for --executor ray (default: RAY_ADDRESS, else a local Ray)."
    ),
    click.option("--dataset", type=click.Path(dir_okay=False), help="Conversations JSONL."),
    click.option("--limit", type=int, help="Only the first K conversations (after sharding)."),
    click.option("--shard", help="i/n: this shard of the conversations (stable by id)."),
    click.option("--out", "output_dir", type=click.Path(file_okay=False), help="Output directory."),
    click.option(
        "--providers",
        "providers_mode",
        type=click.Choice(["auto", "real", "sim"]),
        help="auto: real APIs when keys are set, else the simulator.",
    ),
    click.option("--no-cache", is_flag=True, help="Do not read or write the response cache."),
    click.option(
        "--batch",
        is_flag=True,
        help="Every run's model calls through the providers' batch APIs: half the "
        "price, minutes to hours per step (batch: in the config).",
    ),
    click.option("--cache-dir", type=click.Path(file_okay=False), help="Where the response cache lives."),
    click.option(
        "--rerun-errors", is_flag=True, help="Redo conversations whose recorded result is an error."
    ),
    click.option(
        "-k",
        "select",
        metavar="EXPR",
        help="Only records whose id, tags or fields match EXPR: words joined "
        "by and, or, not, parentheses (pytest's -k).",
    ),
    click.option(
        "--ids",
        metavar="FILE|LIST",
        help="Only these record ids: a comma-separated list, or a file of one id a line.",
    ),
    click.option(
        "-x", "exitfirst", is_flag=True, help="Stop at the first result that fails (= --maxfail 1)."
    ),
    click.option(
        "--maxfail",
        type=click.IntRange(min=1),
        help="After N results that failed, were cut or ended in an "
        "error, start no more records (those in flight finish) and exit 1.",
    ),
    click.option(
        "--lf",
        "last_failed",
        is_flag=True,
        help="Only the records whose last result failed, was cut or ended in an error: run them again, "
        "asking the models again (the response cache is not used). Both results stay: one that then "
        "succeeds is marked flaky.",
    ),
    click.option(
        "--skip-invalid", is_flag=True, help="Skip bad dataset lines (written to DATASET.rejects.jsonl)."
    ),
    click.option(
        "--force-resume",
        "force",
        is_flag=True,
        help="Resume into an output dir written with another config or dataset.",
    ),
    click.option(
        "--timeout", "conversation_timeout_seconds", type=float, help="Per-conversation time limit (s)."
    ),
    click.option(
        "--original-models",
        is_flag=True,
        help="Run each run's original_model (the seeds' model ids) instead of its current model.",
    ),
    click.option("--allow-retired", is_flag=True, help="Start even if a model is past its retirement date."),
    click.option(
        "--no-prompt-cache", is_flag=True, help="No Anthropic cache_control breakpoints (pay full input)."
    ),
    click.option(
        "--fail-on-error/--no-fail-on-error",
        default=None,
        help="Exit 1 if any result ended in an error: provider, sandbox, harness, time limit (default: on "
        "where CI is set).",
    ),
    click.option(
        "--fail-under",
        "fail_under",
        multiple=True,
        metavar="RUN=RATE",
        help="Exit 1 if RUN's success rate is below RATE (0..1); repeatable. YAML: fail_under: {RUN: RATE}.",
    ),
    click.option(
        "--epochs",
        type=click.IntRange(min=1, max=100),
        help="Run each record N times, as independent "
        "trials (own cache keys): error bars clustered by record, pass@k, pass^k. YAML: epochs.",
    ),
    click.option(
        "--reducer",
        help="With --epochs, the headline success of a record's trials: mean (default), all, "
        "any, at_least_K. YAML: reducer.",
    ),
    click.option(
        "--budget",
        "budget_usd",
        type=click.FloatRange(min=0, min_open=True),
        metavar="USD",
        help="What the job may spend in all, at the models' prices: a call that would pass it is not sent, "
        "the run stops there (exit 6) and the same command with a higher --budget resumes. YAML: "
        "budget: {usd: ...}; per run: runs[].budget.",
    ),
    click.option(
        "--budget-tokens",
        type=click.IntRange(min=1),
        metavar="N",
        help="As --budget, in tokens (input and output). YAML: budget: {tokens: ...}.",
    ),
]


def _run_options(f: Any) -> Any:
    """The options `runner run` and `runner plan` share: a plan is of the run the same flags would start."""
    for option in reversed(_RUN_OPTIONS):
        f = option(f)
    return f


@cli.command()
@_run_options
@click.option(
    "--dry-run",
    is_flag=True,
    help="Say what the run would call, cost and take (as `runner plan`), and start nothing.",
)
@click.option("--wide", is_flag=True, help="The closing tables with every column, however wide the terminal.")
def run(config: str | None, runs: str | None, wide: bool, dry_run: bool, **o: Any) -> None:
    """Run the config's runs over its dataset, every worker with its own disposable PostgreSQL.

    Exit codes, as pytest's: 0 done; 1 done, but results ended in errors (with --fail-on-error), a run
    whose every result ended in an error, a run's success rate is under its --fail-under, or -x/--maxfail
    stopped it;
    2 the run stopped on an error (bad input, a sandbox that cannot boot, a fatal provider answer); 5 no
    record selected (-k, --ids, --shard or --limit chose none); 130 interrupted (run the same command again to
    finish). Whatever the code, results/, manifest.json and report.html agree."""
    cfg = _select_runs(_run_config(config, o), runs)
    if dry_run:
        _print_plan(cfg, (), {}, as_json=False)
        return
    from runner.engine.signals import SignalInbox
    from runner.run.home import RunHome

    # Everything the run makes in the temporary directory goes in one of its own, which a janitor removes
    # (with the run's sandboxes and harnesses) if the run is killed outright: first, before any process
    # starts. One inbox for the command: until the supervisor starts, Ctrl-C stops it as usual; from then on
    # it is counted, and the results' last rewrite, the manifest and the report are finished before exit 130
    with RunHome(cfg.output_dir / "logs"), SignalInbox(hold=False) as signals:
        if not (cfg.output_dir / "manifest.json").exists():  # a new output: its imports go on while ours do
            from runner.engine import forkserver

            forkserver.warm(cfg)
        summary, results, metrics = _run_and_report(cfg, wide, signals)
        late = bool(signals.take())  # after the supervisor's end: honoured once the report is whole
        _finish_run(cfg, summary, results, metrics, interrupted=summary.interrupted or late)


def _run_and_report(
    cfg: Config, wide: bool, signals: Any
) -> tuple[Any, dict[str, list[Result]], dict[str, Any]]:
    """The job, then its tables and reports (also after an error: report.html shows what results/ holds)."""
    from runner.report.build import (
        analyse,
        load_runs,
        print_gateway,
        print_summary,
        reports_current,
        write_reports,
    )
    from runner.report.renderer import WarmRenderer
    from runner.run.job import run_job

    renderer = WarmRenderer()  # the charts' engine warmed in its own process while the workers run
    try:
        summary = run_job(cfg, on_booted=renderer.start, signals=signals)
        results = load_runs(summary.out)  # read once for the table and the reports
        if not any(results.values()):
            return summary, results, {}
        # a resume with nothing to do leaves them as they are; the renderer reads the files `results` came
        # from, and draws while this process prints the summary
        drawing = not reports_current(summary.out, results)
        asked = drawing and renderer.ask(summary.out)
        analysis = analyse(summary.out, results)  # once, for the terminal and the reports
        metrics = print_summary(summary.out, analysis=analysis, wide=wide)
        print_gateway(summary.out)
        if drawing and (not asked or renderer.answer() != "ok"):
            write_reports(summary.out, analysis=analysis)
        return summary, results, metrics
    finally:
        renderer.stop()


def _finish_run(
    cfg: Config, summary: Any, results: dict[str, list[Result]], metrics: dict[str, Any], *, interrupted: bool
) -> None:
    """The closing lines and the exit code: the run's error (2), an interrupt (130), a run stopped by a
    refusal (2), -x/--maxfail (1), the gates (1), else 0."""
    summary.raise_error()
    if interrupted:
        click.echo("interrupted: run the same command again to finish the rest", err=True)
        sys.exit(INTERRUPTED)
    refused = {run: why for run, why in summary.stopped_runs.items() if not why.startswith(BUDGET_WORDS)}
    for run, why in refused.items():
        click.echo(
            f"run {run} stopped at its first refused call: {why} (fix the config; the same command then "
            "runs the rest)",
            err=True,
        )
    if refused:
        sys.exit(2)
    if summary.stopped_at_budget:
        _closing_lines(summary.about(results), summary.out)
        click.echo(
            f"{summary.stopped_at_budget}: what finished is recorded; the same command with a higher "
            "--budget (or runs[].budget) runs the rest",
            err=True,
        )
        sys.exit(STOPPED_AT_BUDGET)
    if summary.stopped_early:
        click.echo(
            f"stopped early (--maxfail {cfg.maxfail}): the same command without -x/--maxfail runs the rest",
            err=True,
        )
        sys.exit(1)
    mine = summary.about(results)
    _closing_lines(mine, summary.out)
    if _gates_failed(cfg, mine, metrics):
        sys.exit(1)


def _run_config(config: str | None, o: dict[str, Any]) -> Config:
    """`runner run`'s options over the config file's settings (a flag not given leaves the file's)."""
    from runner.config import load_config
    from runner.plan import parse_shard

    try:
        shard = parse_shard(o["shard"])
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--shard") from None
    cfg = load_config(
        config,
        _overrides(
            workers=o["workers"],
            slots=o["slots"],
            concurrency=o["concurrency"],
            sandbox=o["sandbox"],
            dsn=o["dsn"],
            executor=o["executor"],
            dataset=o["dataset"],
            limit=o["limit"],
            shard=shard,
            output_dir=o["output_dir"],
            providers_mode=o["providers_mode"],
            cache=False if o["no_cache"] else None,
            cache_dir=o["cache_dir"],
            rerun_errors=o["rerun_errors"] or None,
            skip_invalid=o["skip_invalid"] or None,
            force=o["force"] or None,
            conversation_timeout_seconds=o["conversation_timeout_seconds"],
            original_models=o["original_models"] or None,
            allow_retired=o["allow_retired"] or None,
            prompt_cache=False if o["no_prompt_cache"] else None,
            fail_on_error=o["fail_on_error"],
            fail_under=_thresholds(o["fail_under"]) or None,
            select=o["select"],
            ids=_id_list(o["ids"]),
            last_failed=o["last_failed"] or None,
            maxfail=1 if o["exitfirst"] else o["maxfail"],
            epochs=o["epochs"],
            reducer=o["reducer"],
        ),
    )
    if o["budget_usd"] is not None or o["budget_tokens"] is not None:
        from runner.config import SpendCap

        was = cfg.budget or SpendCap()
        cfg = cfg.model_copy(
            update={
                "budget": SpendCap(usd=o["budget_usd"] or was.usd, tokens=o["budget_tokens"] or was.tokens)
            }
        )
    if o["batch"]:
        cfg = cfg.model_copy(
            update={
                "batch": cfg.batch.model_copy(update={"enabled": True}),
                "runs": [r.model_copy(update={"batch": None}) for r in cfg.runs],
            }
        )
    if o["ray_address"]:
        ray = cfg.ray.model_copy(update={"address": o["ray_address"]})
        cfg = cfg.model_copy(update={"executor": "ray", "ray": ray})
    return cfg


def _same_command(flag: str, *instead_of: str) -> str:
    """This command as typed, with `flag` (--lf, --rerun-errors) at its end, in place of `instead_of`; a
    password in --dsn shown as *** (the line lands in CI logs)."""
    args = [a for a in sys.argv[1:] if a not in (flag, *instead_of)]
    args = [
        _hide_password(a) if i and (args[i - 1] == "--dsn" or a.startswith("--dsn=")) else a
        for i, a in enumerate(args)
    ]
    return " ".join(shlex.quote(a) for a in ["runner", *args, flag])


_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)|(://[^:/@\s]*:)([^@\s]*)(@)", re.I)


def _hide_password(dsn: str) -> str:
    """A libpq connection string or URL with its password as *** (password=..., or user:password@host)."""
    return _PASSWORD.sub(lambda m: f"{m[1]}***" if m[1] else f"{m[3]}***{m[5]}", dsn)


def _gates_failed(cfg: Config, results: dict[str, list[Result]], metrics: dict[str, dict[str, Any]]) -> bool:
    """What fails a finished run (exit 1), each said in one line: a run of this command whose every result
    ended in an error (nothing was measured: it exited 0 unless CI was set; a cut turn is the model's outcome,
    as for fail_on_error), errors
    left with fail_on_error (the default where CI is set), and a run's success under its fail_under."""
    from runner.results.result import outcome

    failed = False
    for run, rows in results.items():
        if rows and all(outcome(r) == "error" for r in rows):
            click.echo(
                f"ERROR   {run}: every one of its {len(rows)} result(s) ended in an error, not an outcome of "
                "the agent: nothing was measured",
                err=True,
            )
            failed = True
    errors = Counter(str(r.error_kind) for rows in results.values() for r in rows if outcome(r) == "error")
    if errors:  # never silent: an error is not the model's failure
        click.echo(
            f"ERROR   {sum(errors.values())} result(s) ended in an error, not an outcome of the agent "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(errors.items()))}); to run them again: "
            f"{_same_command('--rerun-errors')}",
            err=True,
        )
        failed = failed or (cfg.fail_on_error if cfg.fail_on_error is not None else environment().ci)
    for run, least in cfg.fail_under.items():
        rate = metrics.get(run, {}).get("success_rate")
        if rate is None or rate < least:
            click.echo(
                f"ERROR   {run}: success {'unknown' if rate is None else f'{rate:.1%}'} is under its "
                f"fail_under of {least:.1%}",
                err=True,
            )
            failed = True
    return failed


@cli.command()
@_run_options
@click.option(
    "--measured",
    multiple=True,
    type=click.Path(file_okay=False),
    metavar="OUT",
    help="Also read what this earlier output (a pilot: runner run --limit 10 --out OUT) measured of the same "
    "runs; repeatable. The config's own output is always read.",
)
@click.option(
    "--tier",
    "tier_names",
    multiple=True,
    metavar="PROVIDER=TIER",
    help="The time floor under a provider's published tier (anthropic=start|build|scale, "
    "openai=tier1..tier5) instead of the config's rate_limits; repeatable.",
)
@click.option("--json", "as_json", is_flag=True, help="The plan as JSON, for scripts.")
def plan(
    config: str | None,
    runs: str | None,
    measured: tuple[str, ...],
    tier_names: tuple[str, ...],
    as_json: bool,
    **o: Any,
) -> None:
    """What a `runner run` with the same config and options would call, cost and take, before anything is
    spent: per run the records left to do, model calls, tokens, cost (low, expected, high; interactive, with
    prompt caching, batch) and the time the rate limits force. No model is called, no container started.
    Figures come from an earlier output of the same runs where there is one, else from the records."""
    cfg = _select_runs(_run_config(config, o), runs)
    tiers = {}
    for pair in tier_names:
        provider, sep, name = pair.partition("=")
        if not sep or provider not in ("anthropic", "openai") or not name:
            raise click.BadParameter(f"{pair!r}: PROVIDER=TIER, e.g. anthropic=build", param_hint="--tier")
        tiers[provider] = name
    _print_plan(cfg, measured, tiers, as_json=as_json)


def _print_plan(cfg: Config, measured: tuple[str, ...], tiers: dict[str, str], *, as_json: bool) -> None:
    import json

    from rich.console import Console

    from runner.forecast.forecast import forecast, gather
    from runner.forecast.render import table

    try:
        f = forecast(cfg, gather(cfg, measured_from=[Path(m) for m in measured], tier=tiers))
    except KeyError as e:  # a tier the table does not have
        raise click.BadParameter(str(e.args[0]), param_hint="--tier") from None
    if as_json:
        click.echo(json.dumps(f.as_dict(), indent=2))
    else:
        Console(width=max(100, Console().width)).print(table(f))


@cli.command()
@click.argument("dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option(
    "--out",
    "output_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="The merged output directory (created).",
)
def merge(dirs: tuple[str, ...], output_dir: str) -> None:
    """Merge shard outputs (e.g. a CI matrix) into one output, as if run unsharded."""
    from pathlib import Path

    from runner.report.build import print_summary
    from runner.results.merge import merge as do_merge

    counts = do_merge([Path(d) for d in dirs], Path(output_dir))
    each = ", ".join(f"{run} {n}" for run, n in counts.items())
    click.echo(f"merged {len(dirs)} outputs into {output_dir}: results per run: {each}")
    print_summary(Path(output_dir))


@cli.command()
@click.argument("conversation_id")
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), help="The run config (default: built in)."
)
@click.option("--run", "run_name", help="Which run of the config plays it (default: the first).")
@click.option(
    "--sandbox",
    type=click.Choice(["auto", "docker", "local", "external"]),
    help="Where the database runs (auto: docker if an engine answers, else local).",
)
@click.option("--dsn", help="A database that is already running (with --sandbox external).")
@click.option("--dataset", type=click.Path(dir_okay=False), help="Conversations JSONL.")
@click.option(
    "--providers",
    "providers_mode",
    type=click.Choice(["auto", "real", "sim"]),
    help="auto: real APIs when keys are set, else the simulator.",
)
@click.option("--no-cache", is_flag=True, help="Do not read or write the response cache.")
def debug(
    conversation_id: str,
    config_path: str | None,
    run_name: str | None,
    sandbox: str | None,
    dsn: str | None,
    dataset: str | None,
    providers_mode: str | None,
    no_cache: bool,
) -> None:
    """Replay one record live in one sandbox and leave the database running: a CRM conversation with its
    transcript streamed, or a record of your own harness (python or command) with its result."""
    from rich.console import Console

    from runner.config import load_config
    from runner.run.debug import debug as do_debug

    cfg = load_config(
        config_path,
        _overrides(
            sandbox=sandbox or ("external" if dsn else None),
            dsn=dsn,
            dataset=dataset,
            providers_mode=providers_mode,
            cache=False if no_cache else None,
        ),
    )
    do_debug(cfg, conversation_id, run_name, Console())


@cli.command()
@click.argument("record_id")
@click.argument("out_dir", default="out/default", type=click.Path(file_okay=False))
@click.option("--run", "run_name", help="Only this run's result (default: every run's).")
def show(record_id: str, out_dir: str, run_name: str | None) -> None:
    """Why RECORD_ID ended as it did in an output (default out/default): every run's outcome and, for a
    failure, the expected against the actual calls and the database's difference (report.html's view)."""
    import difflib

    from rich.console import Console

    from runner.errors import ConfigError
    from runner.report.build import load_runs
    from runner.report.explain import show_record

    out = Path(out_dir)
    if not (out / "results").is_dir():
        raise ConfigError(f"{out}: no results here (an output directory of `runner run`, e.g. out/default)")
    runs = load_runs(out)
    if run_name is not None:
        if run_name not in runs:
            raise ConfigError(f"--run {run_name}: no such run in {out} (runs: {', '.join(runs) or 'none'})")
        runs = {run_name: runs[run_name]}
    ids = {r.record_id for rows in runs.values() for r in rows}
    if record_id not in ids:
        near = difflib.get_close_matches(record_id, sorted(ids), n=3)
        raise ConfigError(
            f"{record_id}: no result for this record in {out}"
            + (f"; did you mean {', '.join(near)}?" if near else "")
        )
    console = Console()
    show_record(console, runs, record_id)
    _show_foreseen(console, out, runs, record_id)


def _show_foreseen(console: Any, out: Path, runs: dict[str, list[Result]], record_id: str) -> None:
    """The record's foresight beside its results, and each run's forecast beside what it did."""
    from runner.records import iter_records
    from runner.report.build import analyse
    from runner.report.foreseen import foreseen, foreseen_lines, record_lines
    from runner.results import manifest as manifests

    manifest = manifests.read(out)
    record = None
    if manifest.dataset and Path(manifest.dataset).is_file():
        with contextlib.suppress(RunnerError, ValueError):
            record = next((r.data for r in iter_records(manifest.dataset) if r.id == record_id), None)
    mine = {run: [r for r in rows if r.record_id == record_id] for run, rows in runs.items()}
    lines = record_lines(manifest, record, mine)
    if (fc := foreseen(manifest, analyse(out, runs).metrics)) is not None:
        lines += foreseen_lines(fc)
    if lines:
        console.rule("forecast against result")
        for line in lines:
            console.print(line, markup=False)


@cli.command()
@click.argument("out_dir", type=click.Path(exists=True, file_okay=False))
@click.argument("other", required=False, type=click.Path(exists=True, file_okay=False))
@click.option(
    "--allow-different-datasets",
    is_flag=True,
    help="Compare outputs of different dataset files (refused by default).",
)
@click.option("--wide", is_flag=True, help="Every column, however wide the terminal (default: what fits).")
@click.option(
    "--json", "as_json", is_flag=True, help="report.json on standard output, no tables (for scripts)."
)
@click.option(
    "--junit",
    "junit_path",
    type=click.Path(dir_okay=False),
    help="Also write JUnit XML for CI test reports: a testcase per record, a testsuite per run.",
)
@click.option(
    "--summary",
    "summary_path",
    type=click.Path(dir_okay=False),
    help="Also write the summary and comparisons as markdown (- : standard output); appended to "
    "$GITHUB_STEP_SUMMARY when that is set.",
)
def report(
    out_dir: str,
    other: str | None,
    allow_different_datasets: bool,
    wide: bool,
    as_json: bool,
    junit_path: str | None,
    summary_path: str | None,
) -> None:
    """Tables, report.json and report.html for OUT_DIR; with OTHER, each run of OTHER against the same run of
    OUT_DIR on the records both have (difference in success with its interval, McNemar, won and lost
    records, cost and latency), written to OTHER/compare.json and shown in OTHER/report.html. --junit and
    --summary write OTHER's (else OUT_DIR's) results for a CI job (docs/ci.md)."""
    import json
    from pathlib import Path

    from runner.report.build import analyse, print_summary, write_reports
    from runner.report.compare import compare

    for d in (out_dir, other):
        if d and not any(p.stat().st_size for p in (Path(d) / "results").glob("*.jsonl")):
            from runner.errors import ConfigError

            raise ConfigError(f"{d} holds no results (results/*.jsonl): nothing to report")
    if other:
        doc = compare(Path(out_dir), Path(other), allow_different_datasets=allow_different_datasets)
        target = Path(other) / "compare.json"
        target.write_text(json.dumps(doc, indent=2))
        _, h = write_reports(Path(other))  # B's report.html shows the comparison with A
        click.echo(f"wrote {target} and {h}")
        _ci_reports(Path(other), junit_path, summary_path, baseline=doc)
        return
    analysis = analyse(Path(out_dir))
    if as_json:
        j, _ = write_reports(Path(out_dir), analysis=analysis)
        click.echo(j.read_text())
        _ci_reports(Path(out_dir), junit_path, summary_path, analysis=analysis)
        return
    print_summary(Path(out_dir), analysis=analysis, wide=wide)
    j, h = write_reports(Path(out_dir), analysis=analysis)
    click.echo(f"wrote {j} and {h}")
    _ci_reports(Path(out_dir), junit_path, summary_path, analysis=analysis)


def _ci_reports(out: Path, junit: str | None, summary: str | None, **given: Any) -> None:
    from runner.report.exports.ci import write_ci_reports

    for where in write_ci_reports(out, junit=junit, summary=summary, **given):
        click.echo(f"wrote {where}", err=True)  # stderr: --json keeps stdout for the JSON


@cli.group()
def dataset() -> None:
    """Conversation datasets."""


@dataset.command("generate")
@click.option("--n", "n", default=1200, show_default=True, type=int, help="How many conversations.")
@click.option("--seed", default=7, show_default=True, type=int, help="The same seed gives the same file.")
@click.option(
    "-o", "--out", "out", required=True, type=click.Path(dir_okay=False), help="The JSONL file to write."
)
def dataset_generate(n: int, seed: int, out: str) -> None:
    """Generate N deterministic CRM conversations."""
    from runner.harness.crm.dataset import Conversation
    from runner.harness.crm.generate import generate_one

    with open(out, "w", encoding="utf-8") as f:
        for i in range(n):
            conv: Conversation = generate_one(seed, i)
            f.write(conv.model_dump_json() + "\n")
    click.echo(f"wrote {n} conversations to {out}")


@dataset.command("validate")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--skip-invalid", is_flag=True, help="Write bad lines to PATH.rejects.jsonl and go on.")
def dataset_validate(path: str, skip_invalid: bool) -> None:
    """Check every line of a conversations file; the first bad line is named file:line."""
    from collections import Counter

    from runner.harness.crm.dataset import iter_conversations
    from runner.records import rejects_path

    n, turns, diff = 0, 0, Counter[str]()
    rejected: list[tuple[int, str]] = []
    for c in iter_conversations(path, skip_invalid=skip_invalid, rejected=rejected):
        n, turns = n + 1, turns + len(c.turns)
        diff[c.difficulty] += 1
    click.echo(f"{path}: {n} valid conversations, {turns} turns, difficulty {dict(diff)}")
    if rejected:  # skipped, never silently: which lines, why, and where they went
        for _, why in rejected[:10]:
            click.echo(f"skipped: {why}", err=True)  # why names file:line
        click.echo(f"{len(rejected)} bad line(s) skipped, written to {rejects_path(path)}", err=True)
        sys.exit(1)


@cli.group()
def cache() -> None:
    """The response cache shared by all workers."""


def _cache(cache_dir: str | None):  # type: ignore[no-untyped-def]
    from runner.cache import DEFAULT_DIR, ResponseCache

    return ResponseCache(cache_dir or DEFAULT_DIR)


@cache.command("stats")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Where the response cache lives.")
def cache_stats(cache_dir: str | None) -> None:
    """Entries and size, by provider and model."""
    import json

    with _cache(cache_dir) as c:
        click.echo(json.dumps(c.stats(), indent=2))


@cache.command("clear")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Where the response cache lives.")
@click.option("--yes", is_flag=True, help="Do not ask (needed where no terminal can answer).")
def cache_clear(cache_dir: str | None, yes: bool) -> None:
    """Delete every cached response (asks first: a cold rerun pays for every call again)."""
    with _cache(cache_dir) as c:
        if not yes:
            if not sys.stdin.isatty():
                raise click.UsageError(
                    "cache clear asks before it deletes, and nothing here can answer (no "
                    "terminal): pass --yes to delete every cached response"
                )
            n = c.stats().get("entries", "all")
            click.confirm(f"delete {n} cached responses? A rerun then pays for every call again", abort=True)
        click.echo(f"removed {c.clear()} entries")


@cli.group()
def image() -> None:
    """The sandbox image."""


def _database(config: str | None):  # type: ignore[no-untyped-def]
    from runner.config import load_config
    from runner.harness import database_spec

    return database_spec(load_config(config))


@image.command("build")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--rebuild", "force", is_flag=True, help="Build again even if the image exists.")
@click.option(
    "--also-tag", help="Another name for the image (compose/ uses pgsandbox-runner/sandbox:compose)."
)
def image_build(config: str | None, force: bool, also_tag: str | None) -> None:
    """Build the sandbox image for CONFIG's database (default: the built-in CRM's) if missing; print the
    tag."""
    from runner.sandbox.image import ensure_image

    click.echo(ensure_image(_database(config), force=force, also_tag=also_tag))


@image.command("tag")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
def image_tag_cmd(config: str | None) -> None:
    """Print the tag CONFIG's database inputs hash to."""
    from runner.sandbox.image import image_tag

    click.echo(image_tag(_database(config)))


@cli.command()
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (keep it local).")
@click.option("--port", default=8790, show_default=True, type=int, help="0 = any free port")
@click.option("--upstream-sim", "sim_url", help="Send calls to this simulator instead of the real APIs.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the response cache.")
@click.option(
    "--settings-json", hidden=True, help="The gateway's settings as JSON (used when a run starts it)."
)
@click.option(
    "--listen-fd", type=int, hidden=True, help="Serve on this inherited listening socket (a run's)."
)
def gateway(
    config: str | None,
    host: str,
    port: int,
    sim_url: str | None,
    no_cache: bool,
    settings_json: str | None,
    listen_fd: int | None,
) -> None:
    """One local endpoint for Anthropic and OpenAI SDK calls: CONFIG's rate limits as one budget, retries,
    response cache. Point SDKs at it with ANTHROPIC_BASE_URL / OPENAI_BASE_URL and give them its token as
    their API key (RUNNER_GATEWAY_TOKEN sets it; else one is made and printed): it calls the providers with
    the keys of its own environment (docs/gateway.md)."""
    import secrets

    from runner.config import load_config
    from runner.gateway import GatewaySettings, build_gateway, gateway_settings
    from runner.gateway.server import serve
    from runner.gateway.settings import TOKEN_ENV

    if settings_json:
        settings = GatewaySettings.model_validate_json(settings_json)
    else:
        cfg = load_config(config, gateway_only=True)
        settings = gateway_settings(cfg, sim_url=sim_url, cache=False if no_cache else None)
    token = os.environ.get(TOKEN_ENV) or None
    made = token is None and not settings_json
    if made:
        token = secrets.token_urlsafe(24)
    line = f"token: {token} (your SDKs' API key for this gateway; set {TOKEN_ENV} to choose it)"
    gw = build_gateway(settings, token=token)
    _until_interrupted(lambda: serve(gw, host, port, listen_fd=listen_fd, token_line=line if made else None))


@cli.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="Show this config's `models:` overrides applied (with --live: ask about its models only).",
)
@click.option(
    "--live",
    is_flag=True,
    help="Ask each provider's models endpoint (the SDKs' models API) and show its "
    "answer beside the table: the real APIs when their keys are set, else the simulator's.",
)
def models(config_path: str | None, live: bool) -> None:
    """The models table: what each model takes (sampling, thinking), its limits, prices (with their date and
    source) and retirement, as the runner uses them (docs/configuration.md#models)."""
    from rich.console import Console

    from runner.config import load_config
    from runner.models.table import models_table
    from runner.report.narrow import fitted

    cfg = load_config(config_path) if config_path else None
    console = Console()
    if not live:
        console.print(fitted(models_table(cfg.model_overrides() if cfg else None), console))
        return
    from runner.models.table import ask_live

    answers, where = ask_live(cfg)
    from runner.models.table import live_table

    console.print(fitted(live_table(answers, where), console))


@cli.group()
def sim() -> None:
    """The offline model simulator (Anthropic and OpenAI wire formats)."""


@sim.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (keep it local).")
@click.option("--port", default=8765, show_default=True, type=int, help="0 = any free port")
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), help="Take simulator: from this config."
)
@click.option("--settings-json", hidden=True, help="Settings as JSON (used when a run starts the simulator).")
@click.option(
    "--listen-fd", type=int, hidden=True, help="Serve on this inherited listening socket (a run's)."
)
@click.option(
    "--warm",
    help="The wire formats to resolve the SDK types of at start (anthropic,openai; default "
    "both); another is resolved when first asked.",
)
def sim_serve(
    host: str,
    port: int,
    config_path: str | None,
    settings_json: str | None,
    listen_fd: int | None,
    warm: str | None,
) -> None:
    """Serve POST /v1/messages, POST /v1/chat/completions, GET /stats until interrupted."""
    from runner.config import SimSettings, load_config
    from runner.models.sim.server import serve

    if settings_json:
        settings = SimSettings.model_validate_json(settings_json)
    else:
        base = load_config(config_path).simulator if config_path else SimSettings()
        settings = base.model_copy(update={"host": host, "port": port})
    _until_interrupted(lambda: serve(settings, listen_fd=listen_fd, apis=warm.split(",") if warm else None))


def _until_interrupted(serve: Callable[[], None]) -> None:
    """A server's life; its end by SIGINT or SIGTERM is an interrupt (130), not aiohttp's GracefulExit (a
    SystemExit of code 1)."""
    from aiohttp.web_runner import GracefulExit

    try:
        serve()
    except GracefulExit:
        raise KeyboardInterrupt from None


@cli.command()
@click.argument("out_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--format",
    "fmt",
    required=True,
    type=click.Choice(["inspect", "otel"]),
    help="inspect: an Inspect AI eval log per run (extra: inspect); otel: OpenTelemetry traces over "
    "OTLP/HTTP, a trace per record (extra: otel).",
)
@click.option(
    "--out",
    "dest",
    type=click.Path(file_okay=False),
    help="inspect: the log directory to write (default OUT_DIR/inspect).",
)
@click.option(
    "--endpoint",
    help="otel: the OTLP/HTTP collector (default: OTEL_EXPORTER_OTLP_ENDPOINT, else http://127.0.0.1:4318).",
)
@click.option(
    "--capture-content",
    is_flag=True,
    help="otel: tool calls' arguments and results on their spans (they may hold what the records hold).",
)
def export(out_dir: str, fmt: str, dest: str | None, endpoint: str | None, capture_content: bool) -> None:
    """OUT_DIR's results where other tools read them: Inspect AI eval logs (`inspect view --log-dir DIR`) or
    OpenTelemetry traces with the GenAI semantic conventions' names (docs/exports.md)."""
    if fmt == "inspect":
        from runner.report.exports.inspect_log import write_inspect_logs

        for path in write_inspect_logs(Path(out_dir), Path(dest) if dest else Path(out_dir) / "inspect"):
            click.echo(f"wrote {path}")
        return
    from runner.report.exports.otel import export_output

    sent = export_output(Path(out_dir), endpoint, capture_content=capture_content)
    click.echo(f"sent {sent.traces} trace(s), {sent.spans} span(s) to {sent.endpoint}")


def _verbose(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        _setup_console_logging(True)


def _verbose_everywhere(group: click.Group) -> None:
    """-v after the subcommand too (`runner run -v`), as before it (`runner -v run`)."""
    for cmd in group.commands.values():
        if isinstance(cmd, click.Group):
            _verbose_everywhere(cmd)
        elif not any("--verbose" in p.opts for p in cmd.params):
            cmd.params.append(
                click.Option(
                    ["-v", "--verbose"],
                    is_flag=True,
                    expose_value=False,
                    is_eager=True,
                    callback=_verbose,
                    help="Debug output on the console.",
                )
            )


_verbose_everywhere(cli)


INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command Ctrl-C stopped
STOPPED_AT_BUDGET = 6  # a spending cap (--budget, runs[].budget) stopped the run: a higher one resumes


def main() -> None:
    # A run that seems stuck: `kill -USR1 <pid>` prints where each of its threads is, and it goes on
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    try:
        code = _exit_code(lambda: cli.main(standalone_mode=False))
    finally:
        heap.before_exit()
    # The command is over and its files are whole: a Ctrl-C while the interpreter winds down (its atexit
    # hooks, its threads' end; ~0.03 s) is ignored, so that it exits with the code it chose. A handler of
    # ours is reset to the default there (CPython's _PySignal_Fini; an ignored signal stays ignored), and the
    # process then died by SIGINT (-2) after it had printed its last line.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)


def _exit_code(command: Any) -> int:
    """The command's exit code as documented (pytest's): 2 for an error of ours or bad usage, 5 for nothing
    selected, 130 for Ctrl-C or SIGTERM, wherever it lands (click's own standalone mode printed "Aborted!"
    and exited 1)."""
    try:
        code = command()
        return code if isinstance(code, int) else 0
    except SystemExit as e:  # a command's own sys.exit(N)
        if isinstance(e.code, str):
            click.echo(e.code, err=True)
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    except click.exceptions.Abort as e:
        if isinstance(e.__cause__, KeyboardInterrupt):
            click.echo("interrupted", err=True)
            return INTERRUPTED
        click.echo("Aborted!", err=True)  # a question answered no (cache clear)
        return 1
    except KeyboardInterrupt:  # outside a command (while click parses)
        click.echo("interrupted", err=True)
        return INTERRUPTED
    except click.ClickException as e:
        e.show()
        return e.exit_code
    # OSError: a file we were told to read or write (a report, a merge); its message names the file.
    except (RunnerError, OSError) as e:
        if isinstance(e, BrokenPipeError):  # `runner models | head`: the reader has what it wanted
            return 1
        if getattr(e, "reported", False):
            logger.error("the run stopped (why: above); what finished is kept, and the same command resumes")
        else:
            logger.error("{}", e)
        return getattr(e, "exit_code", 2)
