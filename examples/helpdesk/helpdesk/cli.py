"""The team's CLI: every ticket in turn, on the one database DB_* points at.

    python -m helpdesk.cli --input tickets.jsonl --output results.jsonl --agent replay
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from helpdesk.evaluate import evaluate


def main(argv=None):
    p = argparse.ArgumentParser(prog="helpdesk")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--agent", default="replay")
    a = p.parse_args(argv)
    t0, n = time.monotonic(), 0
    with open(a.input, encoding="utf-8") as src, open(a.output, "w", encoding="utf-8") as out:
        for line in src:
            if line.strip():
                out.write(json.dumps(evaluate(json.loads(line), a.agent)) + "\n")
                out.flush()
                n += 1
    print(f"{n} tickets in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
