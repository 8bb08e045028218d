"""Connections from DB_* (read at every call: the team's CI and laptops set them), psycopg2, no pool."""

from __future__ import annotations

import logging
import os

import psycopg2

log = logging.getLogger(__name__)


def connect():
    """A new TCP connection per conversation, as the team has always done."""
    params = dict(host=os.getenv("DB_HOST", "localhost"), port=int(os.getenv("DB_PORT", "5432")),
                  user=os.getenv("DB_USER", "postgres"), password=os.getenv("DB_PASSWORD", ""),
                  dbname=os.getenv("DB_NAME", "helpdesk"), connect_timeout=10)
    log.info("connecting to %s:%s/%s as %s", params["host"], params["port"], params["dbname"], params["user"])
    return psycopg2.connect(**params)


def reset_and_seed(cur, seed):
    """The shared-database reset: empty the tables, identities back to 1, then this conversation's rows."""
    cur.execute("TRUNCATE ticket_events, tickets, customers RESTART IDENTITY CASCADE")
    for c in seed["customers"]:
        cur.execute("INSERT INTO customers (id, name, plan) VALUES (%s, %s, %s)", (c["id"], c["name"], c["plan"]))
    cur.execute("SELECT setval('customers_id_seq', (SELECT max(id) FROM customers))")
    for t in seed["tickets"]:
        cur.execute("INSERT INTO tickets (ref, customer_id, subject, status, priority) VALUES (%s, %s, %s, %s, %s)",
                    (t["ref"], t["customer_id"], t["subject"], t["status"], t["priority"]))


def state(cur):
    cur.execute("SELECT t.ref, t.status::text, t.priority::text, t.assignee, count(e.id) FROM tickets t "
                "LEFT JOIN ticket_events e ON e.ticket_id = t.id GROUP BY t.id ORDER BY t.ref")
    return {ref: {"status": s, "priority": p, "assignee": a, "events": n} for ref, s, p, a, n in cur.fetchall()}
