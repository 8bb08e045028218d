"""The external sandbox: a database somebody else runs (compose, a debugging session).

Nothing is started or removed; the DSN names the main database, other databases of the spec
are on the same server. Only one worker may use it: records reset the whole database.
"""

from __future__ import annotations

import psycopg

from runner.errors import SandboxBootError
from runner.sandbox.base import Endpoint, Sandbox


class ExternalSandbox(Sandbox):
    kind = "external"

    def __init__(self, dsn: str) -> None:
        super().__init__()
        self._dsn = dsn
        info = psycopg.conninfo.conninfo_to_dict(dsn)
        self.endpoint: Endpoint = Endpoint(
            str(info.get("host") or "127.0.0.1"),
            int(info.get("port") or 5432),
            str(info.get("user") or "sandbox"),
            str(info.get("password") or ""),
        )
        self.id = f"external-{self.endpoint.host}-{self.endpoint.port}"
        self.dbname = str(info.get("dbname") or "postgres")

    def start(self) -> None:
        try:
            with psycopg.connect(self._dsn, connect_timeout=5) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as e:
            raise SandboxBootError(
                f"cannot reach the external database {self.endpoint.redacted()}: {e}"
            ) from e

    def dsn(self, dbname: str = "postgres") -> str:
        return psycopg.conninfo.make_conninfo(self._dsn, dbname=dbname)

    def stop(self) -> None:
        pass
