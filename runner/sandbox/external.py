"""The external sandbox: a database somebody else runs (compose, a debugging session).

Nothing is started or removed; the DSN must reach a database with the CRM schema (images/ or
`runner db init`). Only one worker may use it: conversations reset the whole database.
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
        self.endpoint: Endpoint = Endpoint(str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432),
                                           str(info.get("user") or "sandbox"), str(info.get("password") or ""))
        self.id = f"external-{self.endpoint.host}-{self.endpoint.port}"
        self._dbname = str(info.get("dbname") or "crm")

    def start(self) -> None:
        try:
            with psycopg.connect(self._dsn, connect_timeout=5) as conn:
                ok = conn.execute("SELECT to_regproc('sandbox_reset') IS NOT NULL").fetchone()
        except psycopg.Error as e:
            raise SandboxBootError(f"cannot reach the external database {self.endpoint.redacted()}: {e}") from e
        if not ok or not ok[0]:
            raise SandboxBootError(f"{self.endpoint.redacted()} has no CRM schema (sandbox_reset missing)")

    def dsn(self, dbname: str = "crm") -> str:
        return psycopg.conninfo.make_conninfo(self._dsn, dbname=self._dbname if dbname == "crm" else dbname)

    def stop(self) -> None:
        pass
