"""CLI conventions a user of pytest, promptfoo or Inspect expects: --version, -h, -v on either side of
the subcommand, help on every option, and errors before any work when the input cannot succeed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from runner import __version__
from runner.cli import cli
from tests.runs import SAMPLE, run_config


def _runner(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)


def test_version_and_short_help() -> None:
    done = _runner("--version")
    assert done.returncode == 0 and __version__ in done.stdout
    for args in (["-h"], ["run", "-h"], ["dataset", "validate", "-h"]):
        done = _runner(*args)
        assert done.returncode == 0 and "Usage:" in done.stdout, args


def test_verbose_after_the_subcommand_too() -> None:
    before = _runner("-v", "dataset", "validate", str(SAMPLE))
    after = _runner("dataset", "validate", str(SAMPLE), "-v")
    assert before.returncode == after.returncode == 0, after.stderr
    assert before.stdout == after.stdout


def _commands(group: click.Group, path: str = "runner") -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    for name, cmd in group.commands.items():
        out += _commands(cmd, f"{path} {name}") if isinstance(cmd, click.Group) else [(f"{path} {name}", cmd)]
    return out


def test_every_option_says_what_it_does() -> None:
    missing = [f"{where} {p.opts[0]}" for where, cmd in _commands(cli) for p in cmd.params
               if isinstance(p, click.Option) and not p.hidden and not p.help]
    assert not missing, missing


def test_report_on_a_directory_without_results_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    done = _runner("report", str(tmp_path))
    assert done.returncode == 2 and "holds no results" in done.stderr
    assert not (tmp_path / "report.html").exists()


def test_a_missing_key_stops_before_anything_starts_and_is_said_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    out = tmp_path / "out"
    done = _runner("run", str(run_config(tmp_path)), "--providers", "real", "--out", str(out), env=env)
    assert done.returncode == 2
    said = [line for line in done.stderr.splitlines() if "ANTHROPIC_API_KEY is not set" in line]
    assert len(said) == 1 and "OPENAI_API_KEY is not set" in said[0], done.stderr
    assert not out.exists()  # no output dir, no worker, no sandbox


def test_the_models_table_says_what_each_model_takes_costs_and_when_it_retires() -> None:
    from click.testing import CliRunner

    from runner.cli import cli

    before = CliRunner().invoke(cli, ["models"], env={"COLUMNS": "400", "RUNNER_TODAY": "2026-11-22"}).output
    row = next(line for line in before.splitlines() if line.startswith("│ claude-sonnet-5-5 "))
    assert "adaptive/between_tools, thinks by default, disabled refused" in row and "10" in row  # $10 per 1M out
    assert "retires 2026-11-30 -> claude-sonnet-5-5" in before  # the seeds' model, with its successor
    out = CliRunner().invoke(cli, ["models"], env={"COLUMNS": "400", "RUNNER_TODAY": "2026-11-30"}).output
    assert "retired 2026-11-30 -> claude-sonnet-5-5" in out and "retires 2027-01-14 -> gpt-5.4" in out
    assert "read 2026-11-26 from https://platform.claude.com" in " ".join(out.split())  # a price has a date


def test_cache_clear_asks_and_refuses_where_nothing_can_answer(tmp_path: Path) -> None:
    """`runner cache stats | runner cache clear`, pasted from an old README, wiped the cache without asking."""
    from click.testing import CliRunner

    from runner.cache import ResponseCache

    with ResponseCache(tmp_path) as c:
        c.put("k", "anthropic", "m", {"text": "x"})
    refused = CliRunner().invoke(cli, ["cache", "clear", "--cache-dir", str(tmp_path)], input="")
    assert refused.exit_code == 2 and "pass --yes" in refused.output
    with ResponseCache(tmp_path) as c:
        assert c.get("k") is not None  # nothing deleted
    done = CliRunner().invoke(cli, ["cache", "clear", "--cache-dir", str(tmp_path), "--yes"])
    assert done.exit_code == 0 and "removed 1 entries" in done.output


def test_validating_with_skip_invalid_names_every_skipped_line_and_fails(tmp_path: Path) -> None:
    """Before: 3 of 6 lines bad, "3 valid conversations", rc 0, the rejects named nowhere."""
    from click.testing import CliRunner

    from runner.harness.crm.dataset import load_conversations

    good = (Path(__file__).resolve().parents[1] / "data" / "crm-sample.jsonl").read_text().splitlines()[:2]
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join([good[0], "{broken", good[1], '{"id": "x"}']) + "\n")
    done = CliRunner().invoke(cli, ["dataset", "validate", str(path), "--skip-invalid"])
    assert done.exit_code == 1 and "2 valid conversations" in done.output
    assert f"skipped: {path}:2:" in done.output and f"skipped: {path}:4:" in done.output
    assert "2 bad line(s) skipped" in done.output and len(load_conversations(path, skip_invalid=True)) == 2


def _interrupted(*args: str, sig: int, ignoring: bool) -> tuple[int, str]:
    """`runner ARGS`, a server until interrupted: `sig` once it listens; its exit code and what it said.
    `ignoring`: started with SIGINT ignored, as a script's background job (`runner gateway &`) is."""
    import signal

    def start() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignoring else signal.SIG_DFL)

    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    p = subprocess.Popen([sys.executable, "-m", "runner", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=env, preexec_fn=start)
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.startswith("listening on http://127.0.0.1:"), line
    p.send_signal(sig)
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGUSR1)  # its threads' stacks (faulthandler), then gone
        time.sleep(1)
        p.kill()
        pytest.fail(f"{args}: still running a minute after {signal.Signals(sig).name}:\n{p.communicate()[0][-4000:]}")
    return p.returncode, out


@pytest.mark.parametrize("ignoring", [False, True], ids=["foreground", "background"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_the_simulator_and_the_gateway_exit_130_on_ctrl_c_and_sigterm(sig: int, ignoring: bool) -> None:
    """Before: 1, with "Aborted!" (the gateway) or aiohttp's GracefulExit (the simulator, which also waited for its
    SDK warm-up thread first: ~5 s when interrupted at start). Then: the gateway died of SIGTERM without a word,
    and started with SIGINT ignored (`runner gateway &` in a script) it ignored SIGINT for good (asyncio sets its
    handler only over Python's default)."""
    for args in (["sim", "serve", "--port", "0"], ["gateway", "--port", "0", "--upstream-sim", "http://127.0.0.1:9"]):
        code, out = _interrupted(*args, sig=sig, ignoring=ignoring)
        assert code == 130 and "interrupted" in out and "Aborted" not in out and "Traceback" not in out, (args, out)


def test_a_selection_that_matches_nothing_exits_5_before_touching_the_output(tmp_path: Path) -> None:
    """pytest's "no tests collected". Before: "(240 already done)", the whole table, exit 0."""
    out = tmp_path / "out"
    for args in (["-k", "no-such-word"], ["-k", "crm-7-00005", "--limit", "2"]):  # the second: outside --limit
        done = _runner("run", str(run_config(tmp_path)), "--out", str(out), *args)
        assert done.returncode == 5, done.stderr
        assert "no record" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()


def test_the_command_to_run_failures_again_hides_the_dsn_password(monkeypatch: pytest.MonkeyPatch) -> None:
    """It printed `--dsn "... password=..."` whole, into CI logs."""
    from runner.cli import _same_command

    dsn = "host=127.0.0.1 port=55432 user=sandbox password=s3cret dbname=crm"
    monkeypatch.setattr(sys, "argv", ["runner", "run", "--sandbox", "external", "--dsn", dsn, "--lf"])
    said = _same_command("--lf", "--rerun-errors")
    assert "s3cret" not in said and "password=***" in said and said.endswith(" --lf")
    monkeypatch.setattr(sys, "argv", ["runner", "run", "--dsn=postgresql://sandbox:s3cret@127.0.0.1/crm"])
    said = _same_command("--rerun-errors")
    assert "s3cret" not in said and "sandbox:***@127.0.0.1" in said


def _two_runs(tmp_path: Path, records: list[dict[str, object]]) -> Path:
    from tests.runs import TOY_PYTHON, toy_config

    cfg = toy_config(tmp_path, TOY_PYTHON, records)
    cfg.write_text(cfg.read_text() + "  - {name: b, params: {greeting: hi}}\n")
    return cfg


@pytest.mark.local
def test_the_closing_lines_and_their_command_cover_the_runs_and_records_of_this_command(
        tmp_path: Path, local_bindir: str) -> None:
    """After --runs a, b's failures were listed, and the --lf it suggested (with --runs a) ran nothing."""
    from tests.runs import finish, start_run

    cfg = _two_runs(tmp_path, [{"id": "r1", "fail_in": ["b"]}, {"id": "r2"}])
    out = tmp_path / "out"
    code, log = finish(start_run(cfg, out, "--sandbox", "local"))
    assert code == 0 and "b: 1 failed: r1" in log, log[-3000:]
    code, log = finish(start_run(cfg, out, "--sandbox", "local", "--runs", "a"))
    assert code == 0 and "b: 1 failed" not in log and "to run those again" not in log, log[-3000:]
    code, log = finish(start_run(cfg, out, "--sandbox", "local", "--runs", "b"))
    hint = next(line for line in log.splitlines() if line.startswith("to run those again"))
    assert code == 0 and "--runs b" in hint and hint.endswith(" --lf"), log[-3000:]
    code, log = finish(start_run(cfg, out, "--sandbox", "local", "--runs", "b", "--lf"))  # what it says
    assert code == 0 and "--lf: 1 result(s) that did not succeed last time" in log, log[-3000:]


@pytest.mark.local
def test_a_run_whose_every_result_errored_exits_1_outside_ci_too(tmp_path: Path, local_bindir: str) -> None:
    """Nothing was measured: it exited 0 unless CI was set."""
    from tests.runs import TOY_PYTHON, finish, start_run, toy_config

    cfg = toy_config(tmp_path, TOY_PYTHON, [{"id": "x1", "do": "raise"}, {"id": "x2", "do": "raise"}])
    code, log = finish(start_run(cfg, tmp_path / "out", "--sandbox", "local", "--no-fail-on-error"))
    assert code == 1 and "a: every one of its 2 result(s) ended in an error" in log, log[-3000:]
    assert "none finished" in log


def test_the_models_table_is_readable_at_80_columns() -> None:
    """Under ~200 columns every id was cut ("claude-h…") and each cell folded to a few letters."""
    from click.testing import CliRunner

    from runner.models.capabilities import BUILTIN

    out = CliRunner().invoke(cli, ["models"], env={"COLUMNS": "80", "RUNNER_TODAY": "2026-11-22"}).output
    lines = out.splitlines()
    assert "…" not in out and all(len(line) <= 80 for line in lines)
    assert all(name in lines for name in BUILTIN)  # each id whole, on a line of its own
    assert "  thinking: adaptive, thinks by default" in out and "2026-11-30 -> claude-sonnet-5-5" in out


def test_merge_says_what_it_merged_in_words_not_a_python_dict(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from runner.results.result import Result

    for i, rid in enumerate(("r1", "r2")):
        shard = tmp_path / f"s{i}"
        (shard / "results").mkdir(parents=True)
        (shard / "manifest.json").write_text(json.dumps({"runs": [{"name": "a"}], "config_fingerprint": "f",
                                                         "dataset_sha256": "d", "shard": [i + 1, 2]}))
        row = Result(run="a", record_id=rid, index=i, status="ok", success=True, started_at="t", finished_at="t")
        (shard / "results" / "a.jsonl").write_text(row.model_dump_json() + "\n")
    done = CliRunner().invoke(cli, ["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out",
                                    str(tmp_path / "all")])
    assert done.exit_code == 0, done.output
    first = done.output.splitlines()[0]
    assert first.endswith("results per run: a 2") and "{" not in first


def test_the_seeds_models_once_retired_stop_a_run_before_anything_starts(tmp_path: Path) -> None:
    """Since 2026-11-30 `--original-models` names a retired model: one line names it, its retirement day and
    its successor, and the way to try anyway; nothing starts. Before that day the same command started."""
    default = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"
    out = tmp_path / "out"
    args = ("run", str(default), "--original-models", "--limit", "1", "--out", str(out))
    done = _runner(*args, env={**os.environ, "RUNNER_TODAY": "2026-12-01"})
    assert done.returncode == 2, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if "was retired on" in line]
    assert len(said) == 1 and "--allow-retired" in said[0], done.stderr[-2000:]
    assert "claude-sonnet-4-5-20250929 was retired on 2026-11-30; use claude-sonnet-5-5 instead" in said[0]
    assert "gpt-4.1" not in said[0]  # not yet: it shuts down on 2027-01-14
    assert not out.exists()
