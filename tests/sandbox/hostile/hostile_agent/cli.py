"""The same agent as a CLI (the `command` kind): every record of the input in turn.

    python -m hostile_agent.cli --input chunk.jsonl --output results.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys

from hostile_agent.agent import evaluate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hostile_agent")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    a = p.parse_args(argv)
    with open(a.input, encoding="utf-8") as src, open(a.output, "w", encoding="utf-8") as out:
        for line in src:
            if line.strip():
                out.write(json.dumps(evaluate(json.loads(line))) + "\n")
                out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
