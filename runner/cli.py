"""The `runner` command. Each subcommand turns flags into calls; no logic lives here."""

from __future__ import annotations

import sys

import click
from loguru import logger

from runner.errors import RunnerError


def _setup_console_logging(verbose: bool) -> None:
    logger.remove()
    logger.add(sys.stderr, level="DEBUG" if verbose else "INFO", format="<level>{level: <7}</level> {message}")


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Debug output on the console.")
def cli(verbose: bool) -> None:
    """Evaluate tool-using LLM agents in parallel, one disposable PostgreSQL per worker."""
    _setup_console_logging(verbose)


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
