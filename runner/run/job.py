"""One `runner run`: check everything, prepare what workers share, supervise, finalize.

Everything that can fail on bad input fails here, before a worker starts: the records (and the
harness's own check of them), templates, retired models, the output directory's previous run.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger
from rich.console import Console

from runner.budget.concurrency import Layout, layout
from runner.budget.gates import Gates, gate_keys
from runner.budget.priority import PerItem, budget_preference
from runner.budget.ratelimit import build_limiter, limiter_key
from runner.budget.spend import JOB, Cap, Spend
from runner.budget.throttle import Throttle
from runner.clouds import azure_deployments, cloud_endpoints, clouds_used
from runner.config import API_OF, Config, check_harness_python, gateway_use, model_endpoints, resolve_mode
from runner.engine import forkserver
from runner.engine.pool import ProcessTransport, Transport, WorkerPool, restart_cap
from runner.engine.prestart import Prestart
from runner.engine.progress import Progress, RunProgress
from runner.engine.scheduler import Scheduler
from runner.engine.services import Service
from runner.engine.settings import engine_settings
from runner.engine.signals import SignalInbox
from runner.engine.supervisor import Supervisor
from runner.errors import ConfigError, DatasetError, NothingSelected, RunStopped
from runner.forecast.forecast import Forecast, Foresight, forecast, gather
from runner.forecast.render import seconds, usd
from runner.harness import database_spec, id_field, reading, record_check, record_source
from runner.harness.env import check_templates
from runner.harness.python import warm_interpreter
from runner.harness.settings import harness_settings
from runner.logfiles import add_log_file
from runner.models.live import Catalogue
from runner.models.preflight import (
    catalogue,
    check_keys,
    check_retirements,
    describe_requests,
    requests_sent,
    unpriced,
)
from runner.plan import WorkItem, in_scope, make_plan
from runner.records import file_hash, iter_records, record_offsets, rejects_path
from runner.results import manifest as manifests
from runner.results.manifest import ForecastEntry, InFlight, Manifest, Rejected, RunEntry
from runner.results.result import Result
from runner.results.sink import OutputLock, ResultSink, writing
from runner.run.model_ids import check_model_ids
from runner.sandbox.schema import DatabaseSpec
from runner.sandbox.settings import sandbox_settings
from runner.select import chosen
from runner.worker.main import WorkerSpec
from runner.worker.settings import slot_settings

# the servers (aiohttp) load only for runs that start them: a resume of a finished job does not
if TYPE_CHECKING:
    from runner.gateway.process import GatewayServer
    from runner.models.sim.process import SimServer


@dataclass
class Summary:
    out: Path
    counts: dict[str, int]
    interrupted: bool
    error: str | None
    sandbox_kind: str
    mode: str
    errors: dict[str, int] = field(default_factory=dict)  # failed results by error kind
    stopped_early: bool = False  # --maxfail reached
    stopped_runs: dict[str, str] = field(default_factory=dict)  # run -> the refusal every request of it met
    runs: list[str] = field(default_factory=list)  # this command's runs (--runs)
    scope: set[tuple[str, int]] = field(default_factory=set)  # its record trials (shard, --limit, -k, --ids)
    stopped_at_budget: str | None = None  # the cap a refused call reached (runner/budget/spend.py)

    def about(self, results: dict[str, list[Result]]) -> dict[str, list[Result]]:
        """Of an output's results, those this command was about: its runs, its records."""
        return {
            run: [r for r in rows if r.trial in self.scope]
            for run, rows in results.items()
            if run in self.runs
        }

    def raise_error(self) -> None:
        """The error that stopped the run, raised once its results, manifest and report are written (the
        supervisor logged it when it happened)."""
        if self.error:
            e = RunStopped(self.error)
            e.reported = True
            raise e


def run_job(
    cfg: Config,
    *,
    console: Console | None = None,
    on_booted: Callable[[], None] | None = None,
    signals: SignalInbox | None = None,
) -> Summary:
    """`on_booted`: called once the first workers are all ready (the CLI warms the report's renderer then,
    off the start-up's critical path and while the workers run records). `signals`: the command's, held
    from the supervisor's start (runner/engine/signals.py); without, the supervisor installs its own."""
    from runner.sandbox import resolve_kind

    kind = resolve_kind(cfg.sandbox)  # (`runner run` started the forkserver already for a new output)
    # bad input fails here, before the output directory is touched (and every model's provider is asked)
    records, offsets, warnings, picked, skipped, cat = _preflight(cfg)
    out = cfg.output_dir.resolve()
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
    with OutputLock(out):
        with writing(out / "logs"):
            (out / "logs").mkdir(exist_ok=True)
            log_id = add_log_file(out / "logs" / "supervisor.log")
        try:
            for warning in warnings:
                logger.warning("{}", warning)
            return _run(
                cfg,
                out,
                records,
                kind,
                console or Console(stderr=True),
                on_booted,
                picked,
                skipped,
                cat,
                signals,
                offsets,
            )
        finally:
            logger.remove(log_id)


def _preflight(
    cfg: Config,
) -> tuple[
    dict[str, dict[str, Any]],
    dict[str, tuple[int, int]],
    list[str],
    set[str] | None,
    Rejected | None,
    Catalogue,
]:
    """The records by id in dataset order, where each one's line is (the workers read them there), warnings,
    the records -k / --ids choose (None: all), the dataset lines skip_invalid skipped (None: none) and what
    each model takes (its provider asked); raises on the first bad record (unless skip_invalid), on an empty
    dataset, a bad template, a model its provider does not have or a retired one."""
    rejected: list[tuple[int, str]] = []
    records = list(
        iter_records(
            cfg.dataset,
            id_field=id_field(cfg),
            check=record_check(cfg),
            skip_invalid=cfg.skip_invalid,
            rejected=rejected,
        )
    )
    order = {r.id: i for i, r in enumerate(records)}
    if not order:
        raise DatasetError("no records: nothing to run", path=str(cfg.dataset))
    picked = chosen(((r.id, r.data) for r in records), cfg.select, cfg.ids)
    if cfg.ids is not None and (unknown := sorted(set(cfg.ids) - set(order))):
        raise ConfigError(f"--ids: {', '.join(unknown[:10])} not in {cfg.dataset}", where="command line")
    _check_selected(cfg, order, picked)
    check_templates(harness_settings(cfg))
    check_harness_python(cfg)
    check_keys(cfg)
    # a typo named with the id it meant, before a provider is asked
    warnings = check_model_ids(cfg, _mode(cfg))
    cat = catalogue(cfg)
    warnings += list(cat.notes) + check_retirements(cfg, cat=cat)
    warnings += [
        f"no price known for {model}: its cost shows as unknown (add it under models: in the config)"
        for model in unpriced(cfg, cat)
    ]
    skipped = None
    if rejected:  # never silently: said at start, kept in the manifest, shown above the report's numbers
        lines = [n for n, _ in rejected]
        skipped = Rejected(count=len(rejected), lines=lines[:100], file=str(rejects_path(cfg.dataset)))
        warnings += [f"skipped (--skip-invalid): {why}" for _, why in rejected[:5]]  # why names file:line
        warnings.append(
            f"{len(rejected)} bad line(s) of {cfg.dataset} skipped (--skip-invalid): in no result "
            f"and no rate; written with their reasons to {skipped.file}"
        )
    return {r.id: r.data for r in records}, record_offsets(records), warnings, picked, skipped, cat


def _check_selected(cfg: Config, order: dict[str, int], picked: set[str] | None) -> None:
    """NothingSelected (exit 5, pytest's "no tests collected") when the shard and --limit leave no record, or
    -k / --ids choose none of those left: before, the command went on, printed "(240 already done)" and the
    whole table, and exited 0."""
    scope = {cid for _, cid in in_scope(cfg, order)}
    if not scope:
        raise NothingSelected(
            f"no record to run: {cfg.dataset} has {len(order)}, and shard {cfg.shard} holds none"
        )
    if picked is not None and not picked & scope:
        what = " and ".join(
            ([f"-k {cfg.select!r}"] if cfg.select else []) + (["--ids"] if cfg.ids is not None else [])
        )
        raise NothingSelected(
            f"{what}: no record matches, of the {len(scope)} in scope (-k matches words of a "
            "record's id, tags and text fields)"
        )


def _run(
    cfg: Config,
    out: Path,
    records: dict[str, dict[str, Any]],
    kind: str,
    console: Console,
    on_booted: Callable[[], None] | None = None,
    picked: set[str] | None = None,
    skipped: Rejected | None = None,
    cat: Catalogue | None = None,
    signals: SignalInbox | None = None,
    offsets: dict[str, tuple[int, int]] | None = None,
) -> Summary:
    cat = cat or Catalogue()
    run_id = uuid.uuid4().hex[:12]
    mode, spec = _mode(cfg), database_spec(cfg)
    if kind == "external" and ((cfg.workers or 1) > 1 or (cfg.slots or 1) > 1 or cfg.concurrency):
        logger.warning("the external sandbox is one database: using 1 worker with 1 slot")
    sink = _sink(cfg, out)
    manifest = _manifest(cfg, out, mode, kind, run_id, skipped, cat)
    order = {rid: i for i, rid in enumerate(records)}
    foresight = Foresight(cfg, records)
    plan, done = _what_to_do(cfg, sink, order, picked, foresight.work())
    ahead = forecast(cfg, gather(cfg, records=records, results=sink.seen, foresight=foresight), items=plan)
    _say_start(cfg, plan, len(done), run_id, mode, kind, manifest, spec.user)
    _say_forecast(ahead)
    if plan:
        manifest.forecasts = [
            *manifest.forecasts,
            ForecastEntry.model_validate({"run_id": run_id, **ahead.as_dict()}),
        ]
        forkserver.warm(cfg)  # at the latest: before the image check and the servers, not at the first spawn
    image = _image(spec, kind, manifest) if plan else None
    sup: Supervisor | None = None
    with contextlib.ExitStack() as stack:
        if plan:
            chunk = cfg.harness.chunk
            lay = layout(cfg, items=len(plan), chunk=chunk, kind=kind)
            specs, spawnable = _specs(cfg, spec, kind, image, run_id, out, lay, stack, cat, offsets)
            transport, limiter, host = _transport(cfg, lay.workers, stack, manifest.spent)
            # not waited for (workers start meanwhile; the supervisor's watch holds them to their boot
            # timeout)
            sim, gateway = model_servers(
                cfg, mode, out / "logs", stack, host=host, wait=False, transport=transport, gates_of=limiter
            )
            sim_url, gateway_url = (sim.url if sim else None), (gateway.url if gateway else None)
            token = gateway.token if gateway else None
            # where model calls went (a user harness's through the gateway)
            manifest.endpoints = _endpoints(cfg, sim_url, gateway_url)
            sup = _supervisor(
                cfg,
                plan,
                sink,
                console,
                run_id,
                kind,
                out,
                lambda w: specs(w, sim_url, gateway_url, token),
                [s for s in (sim, gateway) if s is not None],
                transport,
                limiter,
                lay,
                spawnable,
                signals,
                ahead,
            )
            sup.on_booted = on_booted
            sup.on_done = lambda: sink.finalize(order)  # `_finish` finds it done
            _show_spend(sup, getattr(limiter, "spend", None), ahead)
            if gateway is not None and cfg.batch_runs():
                _watch_batches(gateway, sup.progress, stack)
            with sup.progress:
                try:
                    sup.run()
                finally:
                    _remove_containers(kind, run_id)
            manifest.stopped_runs = dict(sup.recorder.stopped_runs)
            _note_spend(manifest, getattr(limiter, "spend", None))
            _note_invocation(manifest, sup, sim, gateway)
    return _ended(cfg, sink, order, out, manifest, picked, kind, mode, sup)


def _show_spend(sup: Supervisor, spend: Spend | None, ahead: Forecast) -> None:
    """The progress line's spend, against the job's cap and the forecast (a shared budget's spend only)."""
    if spend is None:
        return
    sup.progress.spent = lambda: spend.spent()[JOB][0]
    sup.progress.spent_before = spend.spent()[JOB][0]
    sup.progress.budget_usd, sup.progress.forecast_usd = spend.cap()[0], ahead.cost()


def _ended(
    cfg: Config,
    sink: ResultSink,
    order: dict[str, int],
    out: Path,
    manifest: Manifest,
    picked: set[str] | None,
    kind: str,
    mode: str,
    sup: Supervisor | None,
) -> Summary:
    """How this invocation ended (`sup`: its supervisor, if one ran): the results in dataset order, the
    manifest's last word, and the Summary of both, scoped to the records it was about."""
    error, interrupted, stopped_early = (
        (sup.error, sup.interrupted, sup.stopped_early) if sup else (None, False, False)
    )
    stopped_runs = dict(sup.recorder.stopped_runs) if sup else {}
    expected = {
        (cid, epoch)
        for _, cid in in_scope(cfg, order)
        if picked is None or cid in picked
        for epoch in range(1, cfg.epochs + 1)
    }
    counts = _finish(
        sink, order, out, manifest, interrupted, error, expected, cfg.maxfail if stopped_early else None
    )
    return Summary(
        cfg.output_dir,
        counts,
        interrupted,
        error,
        kind,
        mode,
        dict(sink.errors),
        stopped_early,
        stopped_runs,
        [r.name for r in cfg.runs],
        expected,
        manifest.stopped_at_budget if sup else None,
    )


def _sink(cfg: Config, out: Path) -> ResultSink:
    """Where results go: with `otel.endpoint`, also each one's trace as it is written."""
    runs = [r.name for r in cfg.runs]
    if cfg.otel.endpoint is None:
        return ResultSink(out, runs)
    from runner.report.exports.otel import TracedSink

    return TracedSink(
        out,
        runs,
        {r.name: r for r in run_entries(cfg)},
        cfg.otel.endpoint,
        capture_content=cfg.otel.capture_content,
    )


def run_entries(cfg: Config) -> list[RunEntry]:
    """The config's runs as the manifest keeps them."""
    return [RunEntry.model_validate(r.model_dump(mode="json")) for r in cfg.runs]


def _manifest(
    cfg: Config, out: Path, mode: str, kind: str, run_id: str, skipped: Rejected | None, cat: Catalogue
) -> Manifest:
    """This invocation's manifest over the output's own (a resume of another configuration refused)."""
    return manifests.check(
        out,
        Manifest.new(
            config_fingerprint=cfg.fingerprint(),
            config_parts=cfg.fingerprint_parts(),
            dataset=str(cfg.dataset),
            dataset_sha256=file_hash(cfg.dataset),
            shard=list(cfg.shard) if cfg.shard else None,
            mode=mode,
            sandbox=kind,
            run_id=run_id,
            harness=cfg.harness.kind,
            runs=run_entries(cfg),
            requests=requests_sent(cfg, cat),
            rejected=skipped,
            compare_to=cfg.compare_to or cfg.runs[0].name,
            epochs=cfg.epochs,
            reducer=cfg.reducer,
            batch_runs=sorted(cfg.batch_runs()),
        ),
        force=cfg.force,
    )


def _what_to_do(
    cfg: Config,
    sink: ResultSink,
    order: dict[str, int],
    picked: set[str] | None,
    work: dict[str, float] | None = None,
) -> tuple[list[Any], set[Any]]:
    """The plan (what is left to run, with --lf only what did not succeed last; `work`: each record's
    foreseen length, the longest first) and what is done."""
    done, failed = sink.standing(rerun_errors=cfg.rerun_errors)
    chosen_items: set[str] | set[tuple[str, str]] | None = picked
    if cfg.last_failed:  # the records whose last result was not a success, run again (and nothing else)
        done -= failed
        chosen_items = {(run, rid) for run, rid, _ in failed if picked is None or rid in picked}
    return make_plan(cfg, order, done, chosen_items, work), done


def _say_start(
    cfg: Config, plan: list[Any], done: int, run_id: str, mode: str, kind: str, manifest: Manifest, user: str
) -> None:
    logger.info(
        "run {}: {} records x {} runs{} = {} items to do ({} already done); harness: {}; providers: {}; "
        "sandbox: {}",
        run_id,
        len({w.record_id for w in plan}),
        len(cfg.runs),
        f" x {cfg.epochs} trials" if cfg.epochs > 1 else "",
        len(plan),
        done,
        cfg.harness.kind,
        _providers(cfg, mode),
        kind,
    )
    sent = {run: [q.model_dump() for q in qs] for run, qs in manifest.requests.items()}
    for line in describe_requests(sent):  # what each run's models are sent, and left out
        logger.info("  {}", line)
    if cfg.last_failed:
        logger.info(
            "--lf: {}",
            f"{len(plan)} result(s) that did not succeed last time, the models asked again (the "
            "response cache is not used); the results they replace are kept beside them"
            if plan
            else "no result in scope failed last time: nothing to run again",
        )
    if cfg.batch_runs() and cfg.conversation_timeout_seconds is None:
        logger.info(
            "batch mode: a conversation may take {:g} h in all (each step waits on a batch); "
            "conversation_timeout_seconds sets another limit",
            cfg.conversation_limit() / 3600,
        )
    if user == "postgres":
        logger.warning(
            "the harness logs in as postgres, the superuser (allow_superuser: true): its SQL, or a model's "
            "through it, can run programs in the sandbox (COPY ... TO PROGRAM) and read the server's files"
        )


def _note_invocation(manifest: Manifest, sup: Supervisor, sim: Any, gateway: Any) -> None:
    """What this invocation adds to the manifest: its records in flight over time (the report draws them),
    results thrown away because their sandbox did not serve the whole record, and what the gateway and
    the simulator served (all invocations added up)."""
    manifest.in_flight = InFlight(capacity=sup.progress.capacity, samples=sup.progress.timeline())
    manifest.discarded = dict(Counter(manifest.discarded) + sup.discarded)
    if gateway is not None:
        manifest.gateway = _added(_counts(gateway, "gateway"), manifest.gateway)
        if manifest.batch_runs:
            try:
                now = gateway.batches()
            except OSError as e:
                logger.warning("could not read the gateway's batch counts: {}", e)
                now = {}
            manifest.batches = _added({"all": now}, {"all": manifest.batches})["all"]
    if sim is not None:  # what the stand-in for the APIs served: the run's bill, simulated
        manifest.simulator = _added(_counts(sim, "simulator", "played"), manifest.simulator)


def _finish(
    sink: ResultSink,
    order: dict[str, int],
    out: Path,
    manifest: Manifest,
    interrupted: bool,
    error: str | None,
    expected: set[tuple[str, int]],
    stopped_early: int | None = None,
) -> dict[str, int]:
    """Results in dataset order and the manifest's last word (the run's own error is the Summary's, raised
    once the report is written too). `stopped_early`: the --maxfail that stopped the run."""
    try:
        counts = sink.finalize(order)
        # what a reader must know before reading a rate: some records have no result in some runs
        missing = {run: n for run in counts if (n := len(expected - sink.present.get(run, set())))}
        manifest.finished_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        manifest.interrupted, manifest.error, manifest.counts = interrupted, error, counts
        manifest.stopped_early = stopped_early  # set each time: a resume without --maxfail clears it
        manifest.missing, manifest.complete = missing, not (missing or interrupted or error)
        manifests.write(out, manifest)
    except RunStopped:
        if error:  # the disk that filled mid-run is still full: the first error is the one to read
            e = RunStopped(error)
            e.reported = True
            raise e from None
        raise
    return counts


def _providers(cfg: Config, mode: str) -> str:
    if mode == "none":
        return (
            "none (the runner calls no model and sets no API variables: gateway: true routes the harness's)"
        )
    if mode == "real":
        return "REAL APIs"
    return "simulator (providers: sim)" if cfg.providers_mode == "sim" else "simulator (no API keys set)"


def _image(spec: DatabaseSpec, kind: str, manifest: Manifest) -> str | None:
    if kind == "local":
        from runner.sandbox.local import remove_stale_local

        if stale := remove_stale_local():
            logger.info("removed {} local sandbox directories left by killed runs", stale)
    if kind != "docker":
        return None
    from runner.sandbox.docker import remove_stale
    from runner.sandbox.image import ensure_image

    stale = remove_stale()
    if stale:
        logger.info("removed {} containers left by crashed runs", stale)
    image = ensure_image(spec)
    manifest.image = image
    return image


def _uses_gateway(cfg: Config) -> bool:
    return gateway_use(cfg) is not None


def _mode(cfg: Config) -> str:
    """real or sim for a run that calls models through the runner; none for a harness that does not."""
    return resolve_mode(cfg) if cfg.model_runs() or _uses_gateway(cfg) else "none"


def model_servers(
    cfg: Config,
    mode: str,
    log_dir: Path | None,
    stack: contextlib.ExitStack,
    *,
    host: str = "127.0.0.1",
    wait: bool = True,
    transport: Transport | None = None,
    gates_of: Any = None,
) -> tuple[SimServer | None, GatewayServer | None]:
    """The simulator (offline, for whoever calls a model) and, for a user's harness, the gateway its SDK
    calls go through: one budget, retries and cache (docs/gateway.md). Both stop with the stack; both
    listen on `host` (this machine only, unless workers on other nodes must reach them). `wait=False`:
    started, not waited for; a call made before one serves waits in its backlog. `transport`: the
    workers'; the simulator is forked from its forkserver when that has loaded an SDK the simulator
    resolves the types of (the workers' calls are all it answers): one import of it, not two."""
    from runner.gateway.process import GatewayServer
    from runner.models.sim.process import SimServer

    def log(name: str) -> str | None:
        return str(log_dir / f"{name}.log") if log_dir else None

    sim = None
    if mode == "sim" and (cfg.model_runs() or _uses_gateway(cfg)):
        # its batches kept in the output, as a provider keeps them: a run resumed after kill -9 collects them
        kept = str(log_dir.parent / "simulator") if log_dir else None
        # the wire formats it will be asked in: the runs' own providers, or (a harness's SDK calls) either
        apis = None if _uses_gateway(cfg) else tuple(sorted({API_OF[p] for p in cfg.providers_called()}))
        # local workers' forkserver (a Ray executor's are on other nodes)
        ctx = getattr(transport, "ctx", None)
        shared = ctx is not None and apis is not None and bool(set(apis) & forkserver.preloaded(cfg))
        served = cfg.simulator.model_copy(
            update={
                "host": host,
                "state_dir": kept,
                "deployments": {**azure_deployments(cfg), **cfg.simulator.deployments},
            }
        )
        sim = stack.enter_context(
            SimServer(served, log_path=log("simulator"), wait=wait, apis=apis, fork=ctx if shared else None)
        )
    if not _uses_gateway(cfg):
        return sim, None
    from runner.gateway import gateway_settings
    from runner.gateway.process import new_token

    gates = getattr(gates_of, "gates", None) if gates_of is not None else None
    spend = getattr(gates_of, "spend", None) if gates_of is not None else None
    settings = gateway_settings(
        cfg,
        sim_url=sim.url if sim else None,
        gates=(gates.path, gates.keys) if gates is not None else None,
        spend=(spend.path, spend.scopes[1:]) if spend is not None else None,
    )
    gw = stack.enter_context(
        GatewayServer(settings, new_token(), log_path=log("gateway"), host=host, wait=wait)
    )
    clouds = sorted(clouds_used(cfg))
    also = f"; for {', '.join(clouds)}, their clients' base URLs and the token as well" if clouds else ""
    logger.info(
        "model gateway at {} ({}; {}): each record gets ANTHROPIC_BASE_URL, OPENAI_BASE_URL (and "
        "*_API_BASE) and, as ANTHROPIC_API_KEY and OPENAI_API_KEY, the run's token{} (it calls "
        "the providers with the keys of this environment{})",
        gw.url,
        "to the simulator" if sim else "to the real APIs",
        gateway_use(cfg),
        also,
        ", or stand-ins" if sim else "",
    )
    return sim, gw


def _endpoints(cfg: Config, sim_url: str | None, gateway_url: str | None) -> dict[str, str]:
    """Where model calls went (the manifest's `endpoints`): each provider's and each cloud's SDK base URL,
    and a user harness's gateway."""
    return {
        **model_endpoints(cfg, sim_url),
        **cloud_endpoints(cfg, sim_url),
        **({"gateway": gateway_url} if gateway_url else {}),
    }


def _watch_batches(gateway: GatewayServer, progress: Progress, stack: contextlib.ExitStack) -> None:
    """Batch mode's state in the progress display, from the gateway's counts every few seconds (off the
    supervisor's loop: a slow answer must not hold it)."""
    done = threading.Event()
    stack.callback(done.set)

    def watch() -> None:
        while not done.wait(3.0):
            with contextlib.suppress(OSError, ValueError):
                b = gateway.batches()
                progress.batches = (
                    f"{int(b.get('held_now', 0))} call(s) held for the next batch, "
                    f"{int(b.get('out_now', 0))} in {int(b.get('batches_out', 0))} batch(es) out, "
                    f"{int(b.get('batches_ended', 0))} ended"
                )

    threading.Thread(target=watch, name="batch-watch", daemon=True).start()


def _counts(
    server: GatewayServer | SimServer, name: str, key: str | None = None
) -> dict[str, dict[str, float]]:
    """Per-run (gateway) or per-model (simulator, `played`) counters of a server of this run."""
    try:
        stats: Any = server.stats()
    except OSError as e:
        logger.warning("could not read the {}'s counts: {}", name, e)
        return {}
    stats = stats.get(key, {}) if key else stats
    return {
        k: {n: v for n, v in c.items() if isinstance(v, int | float)}
        for k, c in stats.items()
        if isinstance(c, dict)
    }


def _added(now: dict[str, dict[str, float]], before: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """This invocation's counts added to a resumed run's earlier ones."""
    totals: dict[str, dict[str, Any]] = {k: dict(v) for k, v in before.items()}
    for group, counts in now.items():
        mine = totals.setdefault(group, {})
        for k, v in counts.items():
            mine[k] = round(mine.get(k, 0) + v, 6)
    return totals


def _specs(
    cfg: Config,
    spec: DatabaseSpec,
    kind: str,
    image: str | None,
    run_id: str,
    out: Path,
    lay: Layout,
    stack: contextlib.ExitStack,
    cat: Catalogue,
    offsets: dict[str, tuple[int, int]] | None = None,
) -> tuple[Callable[[int, str | None, str | None, str | None], WorkerSpec], Callable[[int], bool] | None]:
    """Worker w's spec, given the model servers' addresses (known once they are up). Locally, each first
    worker's sandbox is launched now (engine/prestart.py): it boots while the servers start and the
    worker's process is made, and the worker takes it over. A python harness in its own interpreter gets
    the run's warm interpreter now too (proc/warm.py): its libraries import meanwhile."""
    if cfg.executor == "ray":  # a worker on another node starts elsewhere: no relative paths
        cfg = cfg.model_copy(
            update={"dataset": cfg.dataset.resolve(), "config_dir": cfg.config_dir.resolve()}
        )
    sandbox = sandbox_settings(
        cfg, spec, kind=kind, image=image, run_id=run_id, owner_pid=os.getpid(), slots=lay.slots
    )
    slot, harness = slot_settings(cfg), harness_settings(cfg)

    def base(wid: int) -> WorkerSpec:
        return WorkerSpec(
            wid,
            record_source(cfg),
            sandbox,
            slot,
            harness,
            reading(cfg),
            None,
            str(out / "logs"),
            str(out / "scratch"),
            catalogue=cat,
            offsets=offsets,
        )

    prestart = warm = None
    if kind == "docker" and cfg.executor == "local":
        prestart = stack.enter_context(Prestart([base(w) for w in range(lay.workers)]))
    if cfg.executor == "local" and (interpreter := warm_interpreter(harness)) is not None:
        warm = stack.enter_context(interpreter).socket or None

    def make_spec(wid: int, sim_url: str | None, gateway_url: str | None, token: str | None) -> WorkerSpec:
        return replace(
            base(wid),
            sim_url=sim_url,
            gateway_url=gateway_url,
            gateway_token=token,
            warm=warm,
            launched=prestart.take(wid) if prestart else None,
        )

    return make_spec, (prestart.launched if prestart else None)


def _supervisor(
    cfg: Config,
    plan: list[WorkItem],
    sink: ResultSink,
    console: Console,
    run_id: str,
    kind: str,
    out: Path,
    make_spec: Callable[[int], WorkerSpec],
    services: list[Service],
    transport: Transport,
    limiter: Any,
    lay: Layout,
    spawnable: Callable[[int], bool] | None,
    signals: SignalInbox | None = None,
    ahead: Forecast | None = None,
) -> Supervisor:
    if cfg.cache and cfg.model_runs():
        from runner.cache import DEFAULT_DIR, ResponseCache

        with writing(cfg.cache_dir or DEFAULT_DIR):  # created once, before workers race for it
            ResponseCache(cfg.cache_dir or DEFAULT_DIR).close()
    chunk = cfg.harness.chunk
    workers = lay.workers
    logger.info(
        "{} worker(s) x {} slot(s) = {} records in flight at most ({})",
        lay.workers,
        lay.slots,
        lay.in_flight,
        lay.why,
    )
    pool = WorkerPool(
        transport,
        make_spec,
        limiter,
        heartbeat_timeout=cfg.heartbeat_timeout_seconds,
        max_restarts=restart_cap(cfg.max_worker_restarts, lay.workers),
        spawnable=spawnable,
    )
    totals = {r.name: sum(1 for w in plan if w.run == r.name) for r in cfg.runs}
    progress = Progress(
        {k: RunProgress(v) for k, v in totals.items()},
        console,
        capacity=lay.in_flight * chunk,
        status_path=out / "logs" / "status.json",
    )
    throttle = None
    if cfg.concurrency == "auto":
        capacity = lay.in_flight * chunk
        throttle = Throttle(
            capacity=capacity,
            floor=lay.workers * chunk,
            step=lay.workers * chunk,
            window=cfg.concurrency_window_seconds,
            round_trip=limiter.round_trip,
            tally=limiter.tally,
            target=_first_target(cfg, limiter, capacity),
        )
        progress.target, progress.target_why = throttle.target, "start"
    scheduler = Scheduler(plan, max_attempts=cfg.max_attempts, chunk_size=chunk)
    return Supervisor(
        engine_settings(cfg),
        scheduler,
        pool,
        sink,
        progress,
        transport.inbox,
        workers=workers,
        services=services,
        throttle=throttle,
        prefer=budget_preference(cfg, limiter, _per_item(cfg, ahead)),
        gates=getattr(limiter, "gates", None),
        signals=signals,
        on_worker_lost=(lambda w: _remove_containers(kind, run_id, w)) if kind == "docker" else None,
    )


def _first_target(cfg: Config, limiter: Any, capacity: int) -> int:
    """--concurrency auto's first target: where every budget the runs draw on has its limits set, every
    ready slot: the budget paces the calls (more records only wait in it), so nothing says to hold fewer,
    and a ramp held the records below the slots already up (from a quarter of them, the seeds' job sat at
    64 and 128 in flight for its first 15 s with 256 slots up after 12 s). 0: the throttle's own start (a
    budget of unknown limits is found by the ramp)."""
    keys = getattr(limiter, "keys", [])
    return capacity if keys and all(k in cfg.rate_limits for k in keys) else 0


def _per_item(cfg: Config, ahead: Forecast | None) -> PerItem | None:
    """What the forecast expects an item of each run to ask of each budget (None: it cannot know)."""
    if ahead is None or any(r.source == "unknown" for r in ahead.runs):
        return None
    return ahead.per_item(lambda provider, model: limiter_key(cfg, provider, model))


def _say_forecast(f: Forecast) -> None:
    """The forecast in one line at the start (`runner plan` says it all)."""
    if not any(r.items for r in f.runs):
        return
    cost = f.cost()
    top = f.floor
    logger.info(
        "forecast: {} expected ({} to {}), from {}; {}; expected wall {} ({} in flight)",
        usd(cost),
        usd(f.cost("low")),
        usd(f.cost("high")),
        ", ".join(sorted({r.source for r in f.runs if r.items})),
        f"rate-limit floor {seconds(top.seconds)} ({top.key}: {top.bound_by})"
        if top and top.bound_by
        else "no rate limit binds",
        seconds(f.wall_seconds),
        f.concurrency,
    )


def _transport(
    cfg: Config, workers: int, stack: contextlib.ExitStack, spent: dict[str, list[float]] | None = None
) -> tuple[Transport, Any, str]:
    """Where workers run, the budget they draw from (shared memory locally, an actor on Ray), and the
    address the simulator and gateway listen on (this machine's loopback, or this node's address on
    a cluster, so that workers on other nodes reach them)."""
    if cfg.executor == "ray":
        if cfg.budget is not None or any(r.budget for r in cfg.runs):
            raise ConfigError(
                "budget: the spending caps are kept on this machine, for local workers only (executor: "
                "local); on Ray, cap the spend at the providers' consoles"
            )
        try:
            from runner.engine.ray_executor import RayTransport
        except ImportError as e:
            raise ConfigError(
                f"executor: ray needs Ray installed (pip install 'pgsandbox-runner[ray]'): {e}"
            ) from None
        ray_transport = stack.enter_context(RayTransport(cfg, lanes=workers))
        return ray_transport, ray_transport.budget, ray_transport.node_address()
    # Workers are forked from a forkserver (engine/forkserver.py), not from the supervisor.
    limiter = build_limiter(cfg, lanes=workers)
    limiter.gates = Gates(gate_keys(cfg))  # each run's first call alone (runner/budget/gates.py)
    # the caps on what the job and each run spend (runner/budget/spend.py)
    limiter.spend = _spend(cfg, spent or {})
    return ProcessTransport(forkserver.context(cfg)), limiter, "127.0.0.1"


def _note_spend(manifest: Manifest, spend: Spend | None) -> None:
    """What the job and each run have spent so far (this invocation's and earlier ones'), and the cap a
    refused call reached, if one did."""
    if spend is None:
        return
    manifest.spent = {scope: [round(usd, 6), tokens] for scope, (usd, tokens) in spend.spent().items()}
    reached = spend.reached()
    manifest.stopped_at_budget = reached.get(JOB) or next(iter(reached.values()), None)
    if manifest.stopped_at_budget:
        logger.warning(
            "{}: the same command with a higher cap resumes (what is recorded stays)",
            manifest.stopped_at_budget,
        )


def _spend(cfg: Config, spent: dict[str, list[float]]) -> Spend:
    """The spending caps of the job and its runs, with what earlier invocations of this output spent."""
    caps = {JOB: Cap(cfg.budget.usd, cfg.budget.tokens)} if cfg.budget is not None else {}
    caps.update({r.name: Cap(r.budget.usd, r.budget.tokens) for r in cfg.runs if r.budget is not None})
    return Spend([r.name for r in cfg.runs], caps, {k: (v[0], v[1]) for k, v in spent.items()})


def _remove_containers(kind: str, run_id: str, worker: int | None = None) -> None:
    if kind == "docker":
        from runner.sandbox.docker import remove_stale

        removed = remove_stale(run_id=run_id, worker=worker)
        if removed:
            logger.info(
                "removed {} container(s) of this run{}",
                removed,
                f" (of worker {worker}, dead)" if worker is not None else "",
            )
        # At the end, crashed runs' containers again: a run killed while its workers were starting sandboxes
        # leaves the engine finishing them after its start-up sweep (the fault campaign found them).
        if worker is None and (late := remove_stale()):
            logger.info("removed {} container(s) left by crashed runs", late)
