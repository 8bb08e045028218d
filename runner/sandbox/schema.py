"""The database a sandbox holds, from the user's own definition: init files, names, server version.

Follows the `docker-entrypoint-initdb.d` convention users already have: `.sql`, `.sql.gz` and
`.sh` files (or directories of them), applied in name order into one database, owned by the role
the harness logs in as. Extra databases (e.g. `atlas`) are created empty or from their own files.
Both sandbox kinds that build a database (docker image, local template) apply the same spec, and
its digest names the result: a changed file means a new image or template.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from runner.errors import ConfigError

INIT_SUFFIXES = (".sql", ".sql.gz", ".sh")
POSTGRES_MAJORS = ("15", "16", "17")
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def init_files(paths: list[Path] | tuple[Path, ...]) -> tuple[Path, ...]:
    """Files in the order they are applied: each path in turn; a directory's files by name."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(
                (f for f in p.iterdir() if f.is_file() and f.name.endswith(INIT_SUFFIXES)),
                key=lambda f: f.name,
            )
            if not found:
                raise ConfigError(
                    f"no {', '.join(INIT_SUFFIXES)} files in the schema directory", where=str(p)
                )
            out += found
        elif p.is_file():
            if not p.name.endswith(INIT_SUFFIXES):
                raise ConfigError(f"a schema file must end in {', '.join(INIT_SUFFIXES)}", where=str(p))
            out.append(p)
        else:
            raise ConfigError("no such schema file or directory", where=str(p))
    return tuple(out)


@dataclass(frozen=True)
class DatabaseSpec:
    """What the harness expects to find: `name` owned by `user`, built from `files`; plus extras.
    `shared` names extras that a worker's slots share instead of each having its own copy."""

    files: tuple[Path, ...] = ()
    # a role of its own, never the superuser unless asked (docs/security.md): a model-driven SQL session as
    # postgres could run shell commands (COPY ... TO PROGRAM) and read the server's files
    name: str = "sandbox"
    user: str = "sandbox"
    extra: tuple[tuple[str, tuple[Path, ...]], ...] = field(default_factory=tuple)
    postgres: str = "15"
    shared: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for n in (self.name, self.user, *(e for e, _ in self.extra)):
            if not _NAME.match(n):
                raise ConfigError(f"database and role names are lower-case identifiers (got {n!r})")
        for n in self.shared:
            if n not in (e for e, _ in self.extra):
                raise ConfigError(
                    f"shared database {n!r} is not one of the extra databases"
                    f" ({', '.join(e for e, _ in self.extra) or 'none'})"
                )
        if self.postgres not in POSTGRES_MAJORS:
            raise ConfigError(f"postgres: {self.postgres} is not one of {', '.join(POSTGRES_MAJORS)}")

    @property
    def databases(self) -> tuple[str, ...]:
        return (self.name, *(e for e, _ in self.extra))

    def all_files(self) -> list[tuple[str, Path]]:
        """(database, file) in the order they are applied."""
        return [(self.name, f) for f in self.files] + [(db, f) for db, fs in self.extra for f in fs]

    def digest(self) -> str:
        """Changes when any input changes: names, version, every file's name and bytes."""
        h = hashlib.sha256(f"{self.name}\0{self.user}\0{self.postgres}\0".encode())
        for db, f in self.all_files():
            h.update(f"{db}\0{f.name}\0".encode() + f.read_bytes() + b"\0")
        h.update("\0".join(self.databases).encode())
        return h.hexdigest()

    def staged_names(self) -> list[tuple[str, str, Path]]:
        """(database, staged file name, original): numbered so name order is application order."""
        return [(db, f"{n:03d}-{f.name}", f) for n, (db, f) in enumerate(self.all_files(), 1)]

    def origin_of(self, staged: str) -> Path | None:
        """The user's file behind a staged name (error messages name the file they wrote)."""
        return next((f for _, s, f in self.staged_names() if s == staged), None)


def map_error(spec: DatabaseSpec, text: str) -> str:
    """Rewrite `psql:/opt/sandbox/initdb/<db>/007-x.sql:12: ERROR` lines to the user's path:line."""

    def swap(m: re.Match[str]) -> str:
        origin = spec.origin_of(m.group(1)) or spec.origin_of(m.group(1) + ".gz")
        return f"{origin}:{m.group(2)}:" if origin else m.group(0)

    return re.sub(r"(?:psql:)?/opt/sandbox/initdb/[^/\s]+/([^:\s]+):(\d+):", swap, text)
