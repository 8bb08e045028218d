"""The seeds' design, reproduced for comparison: W processes, ONE shared database, and per
conversation BEGIN / TRUNCATE + seed / turns / ROLLBACK -- the same agent code and SDKs as the runner.

TRUNCATE takes ACCESS EXCLUSIVE locks held until the ROLLBACK, so conversations serialize.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import multiprocess as mp
import psycopg

from runner.config import Config
from runner.harness.crm import db
from runner.harness.crm.agents.baseline import run_baseline
from runner.harness.crm.dataset import load_conversations
from runner.models.client import make_client
from runner.models.settings import client_settings

TRUNCATE = "TRUNCATE activities, quote_lines, quotes, cases, opportunities, contacts, accounts RESTART IDENTITY"


def _worker(cfg: Config, sim_url: str, dsn: str, ids: Any, out: Any) -> None:
    convs = {c.id: c for c in load_conversations(cfg.dataset)}
    spec = cfg.runs[0]
    client = make_client(spec.model_ref(), client_settings(cfg), sim_url=sim_url, limiter=None, cache=None)
    conn = psycopg.connect(dsn, autocommit=True)
    while True:
        cid = ids.get()
        if cid is None:
            break
        t0 = time.time()
        try:
            with conn.transaction():  # BEGIN
                conn.execute(TRUNCATE)  # the seeds' reset: ACCESS EXCLUSIVE until the ROLLBACK
                db.reset(conn, convs[cid].seed)  # seed inside the same transaction
                run_baseline(convs[cid], conn, client, spec)
                raise psycopg.Rollback()  # ROLLBACK: nothing persists
        except psycopg.Rollback:
            pass
        out.put((os.getpid(), t0, time.time()))
    conn.close()


def run_seeds_design(cfg: Config, sim_url: str, dsn: str, conversation_ids: list[str], workers: int
                     ) -> list[tuple[int, float, float]]:
    ctx = mp.get_context("spawn")
    ids, out = ctx.Queue(), ctx.Queue()
    for cid in conversation_ids:
        ids.put(cid)
    for _ in range(workers):
        ids.put(None)
    procs = [ctx.Process(target=_worker, args=(cfg, sim_url, dsn, ids, out)) for _ in range(workers)]
    for p in procs:
        p.start()
    rows = [out.get(timeout=1800) for _ in conversation_ids]
    for p in procs:
        p.join(60)
    return rows


def shared_database(image: str) -> Any:
    from runner.sandbox.docker import DockerSandbox

    return DockerSandbox(image, "sandbox", run_id="bench-seeds", owner_pid=os.getpid(), name_hint="shared",
                         memory="1g", cpus=2.0)


def ids_of(path: Path, n: int) -> list[str]:
    return [c.id for c in load_conversations(path)][:n]
