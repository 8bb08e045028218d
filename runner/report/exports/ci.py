"""What `runner report --junit FILE --summary FILE` writes beside report.json and report.html: the files a CI
job shows (its test report, its step summary)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.report.build import Analysis, analyse
from runner.report.exports.junit import write_junit
from runner.report.exports.summary import summary_markdown, write_summary


def write_ci_reports(
    out: Path,
    *,
    junit: str | None,
    summary: str | None,
    analysis: Analysis | None = None,
    baseline: dict[str, Any] | None = None,
) -> list[str]:
    """JUnit XML and the markdown summary of output `out` (`baseline`: `runner report A B`'s comparison of it
    with A); returns the files each went to."""
    if not junit and not summary:
        return []
    a = analysis or analyse(out)
    title = f"pgsandbox-runner: {out}"
    wrote = [str(write_junit(a, Path(junit), title))] if junit else []
    if summary:
        wrote += write_summary(summary_markdown(a, title, baseline), summary)
    return wrote
