"""Results on disk: one JSONL file per run, the manifest, and the resume index.

Only the supervisor writes here. Each line is flushed as it arrives; a torn last line (a crash
mid-write) is cut off on resume. finalize() rewrites each file in dataset order, one line per
conversation (the newest attempt wins).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path
from typing import IO, Any

from loguru import logger

from runner import __version__
from runner.errors import ResumeMismatch


def results_path(out: Path, run: str) -> Path:
    return out / "results" / f"{run}.jsonl"


def read_results(path: Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """All complete lines; with repair, a torn tail is cut off the file."""
    if not path.exists():
        return []
    data = path.read_bytes()
    good_end = data.rfind(b"\n") + 1
    rows = []
    for line in data[:good_end].splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                logger.warning("{}: skipping a corrupt line", path)
    if good_end < len(data):
        logger.warning("{}: ignoring a torn last line ({} bytes)", path, len(data) - good_end)
        if repair:
            with path.open("r+b") as f:
                f.truncate(good_end)
    return rows


def git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


class ResultSink:
    def __init__(self, out: Path, runs: list[str]) -> None:
        self.out = out
        self.runs = runs
        (out / "results").mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[str]] = {}

    def existing(self, *, rerun_errors: bool) -> set[tuple[str, str]]:
        """(run, conversation) pairs to skip: recorded successfully, or recorded at all unless rerun_errors."""
        done: set[tuple[str, str]] = set()
        for run in self.runs:
            latest: dict[str, dict[str, Any]] = {}
            for r in read_results(results_path(self.out, run), repair=True):
                latest[r["conversation_id"]] = r
            for cid, r in latest.items():
                if r.get("status") == "ok" or not rerun_errors:
                    done.add((run, cid))
        return done

    def write(self, result: dict[str, Any]) -> None:
        run = result["run"]
        f = self._files.get(run)
        if f is None:
            f = self._files[run] = results_path(self.out, run).open("a", encoding="utf-8")
        f.write(json.dumps(result, sort_keys=True, default=str) + "\n")
        f.flush()

    def finalize(self, order: dict[str, int]) -> dict[str, int]:
        """Rewrite each run's file in dataset order, newest attempt per conversation; return counts."""
        self.close()
        counts = {}
        for run in self.runs:
            path = results_path(self.out, run)
            latest: dict[str, dict[str, Any]] = {}
            for r in read_results(path, repair=True):
                latest[r["conversation_id"]] = r
            rows = sorted(latest.values(), key=lambda r: (order.get(r["conversation_id"], 1 << 30),
                                                          r["conversation_id"]))
            tmp = path.with_suffix(".jsonl.tmp")
            with tmp.open("w", encoding="utf-8") as f:
                for r in rows:
                    f.write(json.dumps(r, sort_keys=True, default=str) + "\n")
            os.replace(tmp, path)
            counts[run] = len(rows)
        return counts

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()


def check_manifest(out: Path, manifest: dict[str, Any], *, force: bool) -> dict[str, Any]:
    """Refuse to resume into an output dir written by an incompatible run (unless forced)."""
    path = out / "manifest.json"
    if path.exists():
        old = json.loads(path.read_text())
        for key in ("config_fingerprint", "dataset_sha256", "shard"):
            if old.get(key) != manifest.get(key) and not force:
                raise ResumeMismatch(
                    f"{out} holds results of another run ({key} was {old.get(key)!r}, now {manifest.get(key)!r}); "
                    "use another --out, or --force to resume anyway")
        manifest = {**old, **{k: v for k, v in manifest.items() if k != "started_at"}, "resumed": True}
    write_manifest(out, manifest)
    return manifest


def write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    os.replace(tmp, out / "manifest.json")


def base_manifest(**fields: Any) -> dict[str, Any]:
    return {"package_version": __version__, "git_revision": git_revision(),
            "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), **fields}
