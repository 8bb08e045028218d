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


def main() -> None:
    try:
        cli(standalone_mode=True)
    except RunnerError as e:
        logger.error("{}", e)
        sys.exit(2)
