"""The team's CLI: every conversation in turn, on the one database DB_* points at.

    python3 -m crmbench.run_baseline --conversations conversations.jsonl --output results.jsonl \
        --backend postgres --provider standin --model oracle
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from crmbench.harness import run_conversation


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="run_baseline")
    p.add_argument("--conversations", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--backend", choices=["postgres"], default="postgres")
    p.add_argument("--provider", default="standin")
    p.add_argument("--model", default="oracle")
    p.add_argument("--temperature", type=float, default=0.0)
    a = p.parse_args(argv)
    t0 = time.monotonic()
    n = 0
    with open(a.conversations, encoding="utf-8") as src, open(a.output, "w", encoding="utf-8") as out:
        for line in src:
            if line.strip():
                result = run_conversation(json.loads(line), provider=a.provider, model=a.model,
                                          temperature=a.temperature)
                out.write(json.dumps(result) + "\n")
                out.flush()
                n += 1
    print(f"{n} conversations in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
