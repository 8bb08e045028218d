"""The sandbox's database from a user's own files: order, kinds (.sql, .sql.gz, .sh), errors, tags."""

from __future__ import annotations

import gzip
import os
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from runner.errors import ConfigError, ImageBuildError, SandboxBootError
from runner.sandbox.schema import DatabaseSpec, init_files

EXAMPLE_SCHEMA = Path(__file__).resolve().parents[2] / "examples" / "legacy-harness" / "schema"


def _schema(tmp_path: Path, bad_line: int | None = None) -> Path:
    d = tmp_path / "schema"
    d.mkdir()
    (d / "01-types.sql").write_text("CREATE EXTENSION IF NOT EXISTS pgcrypto;\n"
                                    "CREATE TYPE mood AS ENUM ('ok', 'sad');\n")
    body = ["CREATE TABLE t (", "  id serial PRIMARY KEY,", "  m mood NOT NULL DEFAULT 'ok',",
            "  tok text DEFAULT encode(gen_random_bytes(4), 'hex')", ");"]
    if bad_line:
        body.insert(bad_line - 1, "CREATE TABEL oops (x int);")  # a statement of its own: psql and we agree
    (d / "02-tables.sql").write_text("\n".join(body) + "\n")
    (d / "03-rows.sql.gz").write_bytes(gzip.compress(b"INSERT INTO t (m) VALUES ('sad'), ('ok');\n"))
    (d / "04-more.sh").write_text('psql -v ON_ERROR_STOP=1 -q -d "$POSTGRES_DB" '
                                  '-c "INSERT INTO t (m) VALUES (\'ok\')"\n')
    (d / "README.txt").write_text("not applied")
    return d


def test_files_apply_in_name_order_and_other_files_are_ignored(tmp_path: Path) -> None:
    d = _schema(tmp_path)
    assert [f.name for f in init_files([d])] == ["01-types.sql", "02-tables.sql", "03-rows.sql.gz", "04-more.sh"]
    with pytest.raises(ConfigError, match="must end in"):
        init_files([d / "README.txt"])
    with pytest.raises(ConfigError, match="no such schema file"):
        init_files([tmp_path / "nope"])


def test_a_changed_file_changes_the_tag(tmp_path: Path) -> None:
    from runner.sandbox.image import image_tag

    d = _schema(tmp_path)
    spec = DatabaseSpec(files=init_files([d]), name="app", user="app")
    before = image_tag(spec)
    assert image_tag(spec) == before
    (d / "02-tables.sql").write_text((d / "02-tables.sql").read_text() + "-- a comment\n")
    assert image_tag(spec) != before
    assert image_tag(DatabaseSpec(files=init_files([d]), name="app", user="app", postgres="17")) != image_tag(spec)


def _check_database(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT m::text, length(tok) FROM t ORDER BY id").fetchall() == [
            ("sad", 8), ("ok", 8), ("ok", 8)]
        assert conn.execute("SELECT tableowner FROM pg_tables WHERE tablename = 't'").fetchone() == ("app",)


def test_the_local_template_applies_every_kind(tmp_path: Path, local_bindir: str) -> None:
    from runner.sandbox.local import LocalSandbox

    spec = DatabaseSpec(files=init_files([_schema(tmp_path)]), name="app", user="app", extra=(("side", ()),))
    with LocalSandbox(spec) as sb:
        _check_database(sb.dsn("app"))
        with psycopg.connect(sb.dsn("side")) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("app",)


def test_a_syntax_error_in_the_local_template_names_file_and_line(tmp_path: Path, local_bindir: str) -> None:
    from runner.sandbox.local import LocalSandbox

    spec = DatabaseSpec(files=init_files([_schema(tmp_path, bad_line=6)]), name="app", user="app")
    with pytest.raises(SandboxBootError, match=r"02-tables.sql:6: syntax error"), LocalSandbox(spec):
        pass


@pytest.mark.docker
def test_the_image_applies_every_kind(tmp_path: Path, sandbox_image: str) -> None:
    from runner.sandbox.docker import DockerSandbox
    from runner.sandbox.image import ensure_image

    spec = DatabaseSpec(files=init_files([_schema(tmp_path)]), name="app", user="app")
    with DockerSandbox(ensure_image(spec), "app", run_id="pytest-schema", owner_pid=os.getpid()) as sb:
        _check_database(sb.dsn("app"))


@pytest.mark.docker
def test_a_syntax_error_fails_the_image_build_naming_file_and_line(tmp_path: Path, sandbox_image: str) -> None:
    from runner.sandbox.image import ensure_image

    def step_containers() -> set[str]:
        # A build step's container runs an untagged intermediate image; sandboxes and compose
        # services of tests running beside this one (pytest -n) run tagged images.
        out = subprocess.run(["docker", "ps", "-a", "--format", "{{.ID}} {{.Image}}"],
                             capture_output=True, text=True).stdout
        return {cid for cid, image in (ln.split(" ", 1) for ln in out.splitlines()) if ":" not in image}

    d = _schema(tmp_path, bad_line=6)
    before = step_containers()
    with pytest.raises(ImageBuildError, match=rf"{d / '02-tables.sql'}:6: ERROR:  syntax error at or near \"TABEL\""):
        ensure_image(DatabaseSpec(files=init_files([d]), name="app", user="app"))
    # the failed step's container is removed too (another test's build may hold a step container
    # for a moment, so wait for those to go rather than fail on them)
    deadline = time.monotonic() + 30
    while (left := step_containers() - before) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left


def test_a_shared_database_must_be_an_extra_one() -> None:
    DatabaseSpec(name="app", extra=(("log", ()),), shared=("log",))
    with pytest.raises(ConfigError, match="shared database 'app' is not one of the extra databases"):
        DatabaseSpec(name="app", extra=(("log", ()),), shared=("app",))



@pytest.mark.docker
def test_databases_in_memory_get_room_for_their_copies_or_stay_on_disk(tmp_path: Path, sandbox_image: str) -> None:
    """A data directory in memory counts against the container's limit: one over half of it stays on
    disk (said in the log), and one in memory can have its limit raised for the slots' copies."""
    from runner.sandbox.base import databases_bytes
    from runner.sandbox.docker import DockerSandbox
    from runner.sandbox.image import ensure_image

    d = tmp_path / "schema"
    d.mkdir()
    (d / "01-big.sql").write_text("CREATE TABLE big AS SELECT g, repeat('x', 200) AS pad "
                                  "FROM generate_series(1, 150000) AS g;\n")  # ~37 MiB
    image = ensure_image(DatabaseSpec(files=init_files([d]), name="app", user="app"))
    with DockerSandbox(image, "app", run_id="pytest-schema", owner_pid=os.getpid(), tmpfs=True) as sb:
        assert sb.endpoint is not None
        assert sb.data_in_memory() and 30 * 2**20 < databases_bytes(sb.endpoint, ["app"]) < 60 * 2**20
        w = sb._container
        assert w is not None
        assert sb.raise_memory(100 * 2**20)
        w.reload()
        assert w.attrs["HostConfig"]["Memory"] == (256 + 100) * 2**20
        with psycopg.connect(sb.dsn("app")) as conn:  # still serving, in memory
            assert conn.execute("SELECT count(*) FROM big").fetchone() == (150000,)
    with DockerSandbox(image, "app", run_id="pytest-schema", owner_pid=os.getpid(), tmpfs=True, memory="96m") as sb:
        assert sb.endpoint is not None
        assert not sb.data_in_memory()
        logs = sb._container.logs().decode()  # type: ignore[union-attr]
        assert "MiB kept on disk (memory limit 96 MiB; raise container_memory" in logs, logs
