"""One ticket conversation, the team's way: BEGIN / TRUNCATE / seed / turns / score / ROLLBACK.

Like most harnesses it never raises: whatever goes wrong inside a conversation (a dead database
included) is caught, logged, and reported as a failed conversation with score "0.0". Scores are
strings ("0.75"), as the team's spreadsheet import wants them.
"""

from __future__ import annotations

import logging
import traceback

import openai

from helpdesk import agent, db, judge, tools

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("helpdesk")


def evaluate(example, agent_name="replay"):
    tid = example["ticket_id"]
    log.info("ticket %s: %d turn(s), agent %s (openai %s)", tid, len(example["turns"]), agent_name,
             openai.__version__)
    try:
        conn = db.connect()
        try:
            with conn.cursor() as cur:
                db.reset_and_seed(cur, example["seed"])
                transcript = []
                for n, turn in enumerate(example["turns"]):
                    transcript.append(f"customer: {turn['user']}")
                    for action in agent.plan(tid, n, turn, agent_name):
                        tools.call(cur, action)
                        transcript.append(f"agent: {action['tool']} {action['args']}")
                final = db.state(cur)
            conn.rollback()
        finally:
            conn.close()
        expected = example["expected"]
        checks = [final.get(ref, {}).get(k) == v for ref, want in expected.items() for k, v in want.items()]
        score = sum(checks) / len(checks)
        out = {"ticket_id": tid, "score": f"{score:.2f}", "passed": "true" if score == 1.0 else "false",
               "turns": str(len(example["turns"])), "agent": agent_name, "openai_version": openai.__version__}
        if judge.enabled():
            out["judge"] = judge.judge(tid, transcript)
        log.info("ticket %s scored %s", tid, out["score"])
        return out
    except Exception as e:  # the team's rule: one bad conversation never stops the run
        log.error("ticket %s failed: %s\n%s", tid, e, traceback.format_exc())
        return {"ticket_id": tid, "score": "0.0", "passed": "false", "error": f"{type(e).__name__}: {e}",
                "agent": agent_name, "openai_version": openai.__version__}
