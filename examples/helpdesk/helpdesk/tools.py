"""The agent's tools: parameterized SQL on the conversation's cursor."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def _ticket(cur, ref):
    cur.execute("SELECT id FROM tickets WHERE ref = %s", (ref,))
    row = cur.fetchone()
    if row is None:
        raise LookupError(f"no ticket {ref}")
    return row[0]


def set_status(cur, ref, status):
    tid = _ticket(cur, ref)
    cur.execute("UPDATE tickets SET status = %s WHERE id = %s", (status, tid))
    cur.execute("INSERT INTO ticket_events (ticket_id, kind, body) VALUES (%s, 'status', %s)", (tid, status))


def set_priority(cur, ref, priority):
    cur.execute("UPDATE tickets SET priority = %s WHERE id = %s", (priority, _ticket(cur, ref)))


def assign(cur, ref, agent):
    tid = _ticket(cur, ref)
    cur.execute("UPDATE tickets SET assignee = %s WHERE id = %s", (agent, tid))
    cur.execute("INSERT INTO ticket_events (ticket_id, kind, body) VALUES (%s, 'assign', %s)", (tid, agent))


def comment(cur, ref, body):
    tid = _ticket(cur, ref)
    cur.execute("INSERT INTO ticket_events (ticket_id, kind, body) VALUES (%s, 'comment', %s)", (tid, body))


TOOLS = {"set_status": set_status, "set_priority": set_priority, "assign": assign, "comment": comment}


def call(cur, action):
    log.info("tool %s %s", action["tool"], action["args"])
    TOOLS[action["tool"]](cur, **action["args"])
