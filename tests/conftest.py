"""Shared fixtures. Docker and chaos tests are required where RUNNER_REQUIRE_DOCKER or CI is set:
there a missing engine or missing PostgreSQL binaries fail the run instead of skipping."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.harness.crm.harness import DATABASE as CRM
from runner.sandbox.base import Sandbox

# The day every test judges retirements on, in this process and in every runner it starts (an environment
# variable, so subprocesses inherit it): no verdict moves with the calendar. The retirement tests choose
# their own days (tests/models/test_capabilities.py, tests/test_cli.py). 2026-12-01: after Claude Sonnet
# 4.5 retired (2026-11-30), before GPT-4.1 shuts down (2027-01-14).
SUITE_DAY = "2026-12-01"
os.environ["RUNNER_TODAY"] = SUITE_DAY

# The benches' working directory (bench/common.py WORK) per test process, not the fixed /tmp/pgsandbox-bench
# that another run on the machine (a bench, another checkout's suite) may fill or remove meanwhile.
os.environ["BENCH_DIR"] = tempfile.mkdtemp(prefix="pgsandbox-bench-test-")

REQUIRED = bool(os.environ.get("RUNNER_REQUIRE_DOCKER") or os.environ.get("CI"))
TEST_RUN_ID = f"pytest-{os.getpid()}"


@pytest.fixture(scope="session")
def sandbox_image() -> str:
    from runner.sandbox.docker import engine_answers
    from runner.sandbox.image import ensure_image

    if not engine_answers():
        msg = "no Docker engine answers (run `make engine`)"
        if REQUIRED:
            pytest.fail(msg + "; docker tests are required in CI", pytrace=False)
        pytest.skip(msg)
    return ensure_image(CRM)


@pytest.fixture(scope="session", autouse=True)
def _remove_test_containers() -> Iterator[None]:
    yield
    shutil.rmtree(os.environ["BENCH_DIR"], ignore_errors=True)
    from runner.sandbox.docker import engine_answers, remove_stale

    if engine_answers():
        remove_stale(run_id=TEST_RUN_ID)
        remove_stale()


@pytest.fixture
def docker_sandbox(sandbox_image: str) -> Iterator[Sandbox]:
    from runner.sandbox.docker import DockerSandbox

    with DockerSandbox(sandbox_image, CRM.user, run_id=TEST_RUN_ID, owner_pid=os.getpid()) as sb:
        yield sb


@pytest.fixture(scope="session")
def local_bindir() -> str:
    from runner.sandbox.local import find_bindir

    bindir = find_bindir()
    if bindir is None:
        if REQUIRED:
            pytest.fail("no PostgreSQL server binaries; local-sandbox tests are required in CI", pytrace=False)
        pytest.skip("no PostgreSQL server binaries")
    return str(bindir)


@pytest.fixture
def local_sandbox(local_bindir: str) -> Iterator[Sandbox]:
    from runner.sandbox.local import LocalSandbox

    with LocalSandbox(CRM) as sb:
        yield sb


@pytest.fixture(scope="session")
def shared_docker_sandbox(sandbox_image: str) -> Iterator[Sandbox]:
    """One container for all tests that reset the database themselves (faster than one each)."""
    from runner.sandbox.docker import DockerSandbox

    with DockerSandbox(sandbox_image, CRM.user, run_id=TEST_RUN_ID, owner_pid=os.getpid(), name_hint="shared") as sb:
        yield sb


@pytest.fixture(scope="session")
def shared_local_sandbox(local_bindir: str) -> Iterator[Sandbox]:
    from runner.sandbox.local import LocalSandbox

    with LocalSandbox(CRM, name_hint="shared") as sb:
        yield sb


@pytest.fixture(params=["docker", "local"])
def any_sandbox(request: pytest.FixtureRequest) -> Sandbox:
    """Each test using it runs against both backends (shared sandboxes: tests reset what they use)."""
    if request.param == "docker":
        request.applymarker(pytest.mark.docker)
        return request.getfixturevalue("shared_docker_sandbox")  # type: ignore[no-any-return]
    return request.getfixturevalue("shared_local_sandbox")  # type: ignore[no-any-return]


REQUIRED_MARKS = ("docker", "chaos", "ray")


# The files that take longest, longest first (seconds of one `make test` on this 2-core machine, 2026-11-29).
# `make test` hands files to its 3 processes in collection order (--dist loadfile --no-loadscope-reorder):
# these go first, so that the run does not end waiting on a long file started last (xdist's default order,
# by number of tests, started the hostile suite's 3 tests of 220 s last).
SLOW_FIRST = (
    "sandbox/test_hostile_command.py",  # 221
    "engine/test_supervisor.py",  # 184
    "sandbox/test_hostile_python.py",  # 155
    "examples/test_helpdesk.py",  # 153
    "test_real_api_job.py",  # 127
    "gateway/test_batch_mode.py",  # 115
    "test_readme.py",  # 100
    "test_pytest_plugin.py",  # 87
    "examples/test_legacy_harness.py",  # 86
    "worker/test_slots.py",  # 76
    "harness/test_user_harnesses.py",  # 75
    "ray/test_ray_executor.py",  # 74
    "chaos/test_output_dir.py",  # 72
    "forecast/test_plan_runs.py",  # 59
    "report/test_report_browser.py",  # 58
    "chaos/test_supervisor_killed.py",  # 57
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """tests/chaos/ and tests/ray/ are marked as such (and required in CI) by where they live; the slowest
    files first (SLOW_FIRST), the rest in their order."""
    for item in items:
        for mark in ("chaos", "ray"):
            if mark in item.path.parts:
                item.add_marker(getattr(pytest.mark, mark))
    here = Path(__file__).resolve().parent
    rank = {here / name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path, len(rank)))  # stable: within a file, and the rest, as collected


def _required_skips(stats: dict[str, list[object]]) -> int:
    return sum(any(m in getattr(r, "keywords", {}) for m in REQUIRED_MARKS) for r in stats.get("skipped", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    if not REQUIRED:
        return
    if skipped := _required_skips(terminalreporter.stats):
        terminalreporter.write_line(f"FAIL: {skipped} docker, chaos or ray tests were skipped but are required here",
                                    red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not REQUIRED:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {})
    if _required_skips(stats):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session", autouse=True)
def _manifests_match_their_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every manifest.json the session's tests wrote (under its temporary directories) validates against the
    published schema, docs/manifest.schema.json: a field written that the schema does not describe fails."""
    yield
    import json
    from pathlib import Path

    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[1] / "docs" / "manifest.schema.json").read_text())
    checker = jsonschema.Draft202012Validator(schema)
    wrong = []
    for path in tmp_path_factory.getbasetemp().rglob("manifest.json"):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a test's deliberately torn or vanished file
        if errors := [e.message for e in checker.iter_errors(doc)][:3]:
            wrong.append(f"{path}: {errors}")
    assert not wrong, "manifests that do not match docs/manifest.schema.json:\n" + "\n".join(wrong[:10])
