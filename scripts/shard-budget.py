#!/usr/bin/env python3
"""`scripts/shard-budget.py CONFIG N`: a copy of CONFIG whose rate limits are 1/N of its own, for one of N CI
matrix shards that cannot reach a shared gateway: N shards at once then stay within the providers' limits
together. Presets (tier4...) are resolved to their numbers first. Written beside CONFIG (its relative paths
stay valid) as CONFIG's name with `.shard-of-N` before its suffix; prints that path."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from runner.config import load_config


def split(config: Path, n: int) -> Path:
    if n < 1:
        raise SystemExit(f"N must be 1 or more, not {n}")
    limits = load_config(config).rate_limits
    doc = yaml.safe_load(config.read_text()) or {}
    doc["rate_limits"] = {key: {dim: value / n for dim in ("rpm", "itpm", "otpm")
                                if (value := getattr(spec.resolved(), dim)) is not None}
                          for key, spec in limits.items()}
    out = config.with_name(f"{config.stem}.shard-of-{n}{config.suffix}")
    out.write_text(f"# {config.name} with each rate limit divided by {n} (scripts/shard-budget.py)\n"
                   + yaml.safe_dump(doc, sort_keys=False))
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    print(split(Path(sys.argv[1]), int(sys.argv[2])))
