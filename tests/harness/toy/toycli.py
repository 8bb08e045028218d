"""A command harness that misbehaves on purpose: `python -m toycli IN OUT`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def main() -> int:
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    with open(dst, "w", encoding="utf-8") as out:
        for r in records:
            if r.get("do") == "crash":
                print(f"crashing on {r['id']}", file=sys.stderr)
                return 3
            if r.get("do") == "garbage":
                out.write("this is not json\n")
                continue
            if r.get("spawn"):  # a child of its own, as a CLI agent's tools are: it must end with the CLI
                subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(300)  # toy-spawn-{r['id']}"])
            time.sleep(r.get("nap", 0))
            out.write(json.dumps({"id": r["id"], "ok": True, "db": os.environ.get("DB_NAME")}) + "\n")
    print(f"{len(records)} records done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
