"""The team's own sequential CLI: every conversation in turn, on one database (DB_* in the environment).

    python -m heavyharness.cli --input records.jsonl --output results.jsonl
"""

from __future__ import annotations

import argparse
import json

from heavyharness import evaluate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    args = ap.parse_args()
    with open(args.input) as src, open(args.output, "w") as out:
        for line in src:
            out.write(json.dumps(evaluate(json.loads(line))) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
