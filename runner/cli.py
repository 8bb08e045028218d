"""The `runner` command. Each subcommand turns flags into calls; no logic lives here."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click
from loguru import logger

from runner.errors import RunnerError

if TYPE_CHECKING:
    from runner.config import Config


def _setup_console_logging(verbose: bool) -> None:
    logger.remove()
    logger.add(sys.stderr, level="DEBUG" if verbose else "INFO", format="<level>{level: <7}</level> {message}")


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Debug output on the console.")
def cli(verbose: bool) -> None:
    """Evaluate tool-using LLM agents in parallel, one disposable PostgreSQL per worker."""
    _setup_console_logging(verbose)


def _overrides(**kw: object) -> dict[str, object]:
    return {k: v for k, v in kw.items() if v is not None}


def _select_runs(cfg: "Config", names: str | None) -> "Config":
    if not names:
        return cfg
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {r.name for r in cfg.runs}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        from runner.errors import ConfigError

        raise ConfigError(f"--runs: unknown run(s) {', '.join(unknown)}; the config has {', '.join(sorted(known))}")
    return cfg.model_copy(update={"runs": [r for r in cfg.runs if r.name in wanted]})


@cli.command()
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--workers", "-w", type=int, help="Worker processes, each with its own sandbox.")
@click.option("--runs", help="Only these runs (comma-separated names from the config).")
@click.option("--sandbox", type=click.Choice(["auto", "docker", "local", "external"]))
@click.option("--dsn", help="Database for --sandbox external.")
@click.option("--dataset", type=click.Path(dir_okay=False), help="Conversations JSONL.")
@click.option("--limit", type=int, help="Only the first K conversations (after sharding).")
@click.option("--shard", help="i/n: this shard of the conversations (stable by id).")
@click.option("--out", "output_dir", type=click.Path(file_okay=False), help="Output directory.")
@click.option("--providers", "providers_mode", type=click.Choice(["auto", "real", "sim"]),
              help="auto: real APIs when keys are set, else the simulator.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the response cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False))
@click.option("--rerun-errors", is_flag=True, help="Redo conversations whose recorded result is an error.")
@click.option("--force", is_flag=True, help="Resume into an output dir of a different config or dataset.")
@click.option("--timeout", "conversation_timeout_seconds", type=float, help="Per-conversation time limit (s).")
def run(config: str | None, workers: int | None, runs: str | None, sandbox: str | None, dsn: str | None,
        dataset: str | None, limit: int | None, shard: str | None, output_dir: str | None,
        providers_mode: str | None, no_cache: bool, cache_dir: str | None, rerun_errors: bool, force: bool,
        conversation_timeout_seconds: float | None) -> None:
    """Run the config's runs over its dataset, every worker with its own disposable PostgreSQL."""
    from runner.config import load_config
    from runner.plan import parse_shard
    from runner.supervisor import Supervisor

    try:
        shard_t = parse_shard(shard)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--shard") from None
    cfg = load_config(config, _overrides(
        workers=workers, sandbox=sandbox, dsn=dsn, dataset=dataset, limit=limit, shard=shard_t,
        output_dir=output_dir, providers_mode=providers_mode, cache=False if no_cache else None, cache_dir=cache_dir,
        rerun_errors=rerun_errors or None, force=force or None,
        conversation_timeout_seconds=conversation_timeout_seconds))
    cfg = _select_runs(cfg, runs)
    summary = Supervisor(cfg).run()
    from runner.report import print_summary

    print_summary(summary.out)
    if summary.interrupted:
        click.echo("interrupted: run the same command again to finish the rest", err=True)
        sys.exit(130)


@cli.group()
def image() -> None:
    """The sandbox image."""


@image.command("build")
@click.option("--force", is_flag=True, help="Rebuild even if the tag exists.")
def image_build(force: bool) -> None:
    """Build the sandbox image if its input hash is not built yet; print the tag."""
    from runner.sandbox.image import ensure_image

    click.echo(ensure_image(force=force))


@image.command("tag")
def image_tag_cmd() -> None:
    """Print the tag the current inputs hash to."""
    from runner.sandbox.image import image_tag

    click.echo(image_tag())


@cli.group()
def sim() -> None:
    """The offline model simulator (Anthropic and OpenAI wire formats)."""


@sim.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8765, show_default=True, type=int, help="0 = any free port")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Take simulator: from this config.")
@click.option("--settings-json", hidden=True, help="Settings as JSON (used when a run starts the simulator).")
def sim_serve(host: str, port: int, config_path: str | None, settings_json: str | None) -> None:
    """Serve POST /v1/messages, POST /v1/chat/completions, GET /stats until interrupted."""
    from runner.config import SimSettings, load_config
    from runner.models.sim.server import serve

    if settings_json:
        settings = SimSettings.model_validate_json(settings_json)
    else:
        base = load_config(config_path).simulator if config_path else SimSettings()
        settings = base.model_copy(update={"host": host, "port": port})
    serve(settings)


def main() -> None:
    try:
        cli(standalone_mode=True)
    except RunnerError as e:
        logger.error("{}", e)
        sys.exit(2)
