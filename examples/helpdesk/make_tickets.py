"""Writes tickets.jsonl: N ticket conversations with their seeds and expected end states (deterministic)."""

from __future__ import annotations

import json
import random
import sys

NAMES = ["Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Wonka", "Stark"]
SUBJECTS = ["cannot log in", "invoice wrong", "export fails", "slow dashboard", "refund request", "API 500s"]
AGENTS = ["ana", "bo", "chen", "dita"]


def ticket(n: int, rng: random.Random) -> dict:
    customers = [{"id": i + 1, "name": rng.choice(NAMES), "plan": rng.choice(["basic", "pro"])} for i in range(3)]
    tickets = [{"ref": f"T-{n}-{k}", "customer_id": rng.randint(1, 3), "subject": rng.choice(SUBJECTS),
                "status": "new", "priority": "normal"} for k in range(1, rng.randint(2, 4) + 1)]
    state = {t["ref"]: {"status": "new", "priority": "normal", "assignee": None, "events": 0} for t in tickets}
    turns = []
    for _ in range(rng.randint(2, 4)):
        ref = rng.choice(tickets)["ref"]
        actions = []
        if rng.random() < 0.6:
            agent = rng.choice(AGENTS)
            actions.append({"tool": "assign", "args": {"ref": ref, "agent": agent}})
            state[ref]["assignee"] = agent
            state[ref]["events"] += 1
        status = rng.choice(["open", "pending", "solved"])
        actions.append({"tool": "set_status", "args": {"ref": ref, "status": status}})
        state[ref]["status"] = status
        state[ref]["events"] += 1
        if rng.random() < 0.5:
            prio = rng.choice(["low", "high", "urgent"])
            actions.append({"tool": "set_priority", "args": {"ref": ref, "priority": prio}})
            state[ref]["priority"] = prio
        if rng.random() < 0.5:
            actions.append({"tool": "comment", "args": {"ref": ref, "body": "Thanks, looking into it."}})
            state[ref]["events"] += 1
        turns.append({"user": f"About {ref}: please handle it.", "actions": actions})
    return {"ticket_id": f"hd-{n:04d}", "seed": {"customers": customers, "tickets": tickets}, "turns": turns,
            "expected": state, "tags": [rng.choice(["billing", "access", "bugs"])]}


def main() -> None:
    n, path = int(sys.argv[1]), sys.argv[2]
    rng = random.Random(11)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps(ticket(i, rng)) + "\n")


if __name__ == "__main__":
    main()
