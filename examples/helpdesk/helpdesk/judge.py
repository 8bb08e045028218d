"""An LLM judge of the agent's reply tone: on whenever an API key is in the environment (the team's CI)."""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def enabled():
    return bool(os.getenv("OPENAI_API_KEY"))


def judge(ticket_id, transcript):
    from openai import OpenAI  # only when judging: the team's laptops often have no SDK configured

    client = OpenAI()
    reply = client.chat.completions.create(
        model=os.getenv("HELPDESK_JUDGE_MODEL", "gpt-5.4-mini"), max_completion_tokens=16,
        messages=[{"role": "system", "content": "Rate the support transcript from 0 to 1. Answer with the number."},
                  {"role": "user", "content": "\n".join(transcript)}])
    text = (reply.choices[0].message.content or "").strip()
    log.info("judge on %s said %r", ticket_id, text)
    return text
