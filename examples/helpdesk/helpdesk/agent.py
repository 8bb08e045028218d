"""The mock agent the team smoke-tests with: it replays each turn's ground-truth actions after a think
time (HELPDESK_LATENCY_MS, default 100). `careless` gets a deterministic share of turns wrong."""

from __future__ import annotations

import hashlib
import logging
import os
import time

log = logging.getLogger(__name__)


def plan(ticket_id, turn_no, turn, agent):
    time.sleep(float(os.getenv("HELPDESK_LATENCY_MS", "100")) / 1000)
    actions = [dict(a) for a in turn["actions"]]
    bucket = int(hashlib.sha256(f"{ticket_id}/{turn_no}".encode()).hexdigest(), 16) % 4
    if agent == "careless" and bucket == 0:
        actions = actions[:-1]  # forgets the last step
    elif agent == "careless" and bucket == 1:
        actions = [{**a, "args": {**a["args"], "status": "closed"}} if a["tool"] == "set_status" else a
                   for a in actions]  # closes instead of what was asked
    log.info("agent %s planned %d action(s) for turn %d", agent, len(actions), turn_no)
    return actions
