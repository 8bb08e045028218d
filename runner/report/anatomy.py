"""A failed record's anatomy in the HTML drill-down: what was expected against what was done.

Any harness may put an `anatomy` dict in its output (the built-in CRM does, for every failure):
`turns`: [{turn, user, right, expected: [{tool, args, made, wrong_args: [{arg, expected, got}]}],
unexpected: [{tool, args, ok, writes}]}] and `state`: {table: {missing, extra, changed: [{id,
columns: {col: {expected, got}}}]}}. Missing parts are skipped.
"""

from __future__ import annotations

import json
from html import escape as e
from typing import Any


def _v(x: Any) -> str:
    return e(json.dumps(x, default=str) if not isinstance(x, str) else x)


def _diff(name: str, expected: Any, got: Any) -> str:
    return f"<b>{e(name)}</b> expected {_v(expected)}, got {_v(got)}"


def _call(tool: str, args: Any) -> str:
    return f"<code>{e(tool)}({_v(args)})</code>"


def _turn(t: dict[str, Any]) -> str:
    lines = []
    for x in t.get("expected") or []:
        if not x.get("made"):
            lines.append(f'<li class="miss">not made: {_call(x["tool"], x.get("args"))}</li>')
        elif x.get("wrong_args"):
            wrong = ", ".join(_diff(w["arg"], w["expected"], w["got"]) for w in x["wrong_args"])
            lines.append(f'<li class="wrong">{e(x["tool"])}: {wrong}</li>')
        else:
            lines.append(f'<li class="okc">{e(x["tool"])} as expected</li>')
    for u in t.get("unexpected") or []:
        kind, writes = ("wrong", " (writes)") if u.get("writes") else ("extra", "")
        lines.append(
            f'<li class="{kind}">not expected{writes}: {_call(u["tool"], u.get("args"))}'
            f"{'' if u.get('ok') else ' (failed)'}</li>"
        )
    mark = "&#10003;" if t.get("right") else "&#10007;"
    return (
        f'<div class="turn"><b>{mark} turn {e(str(t.get("turn")))}</b> <i>{e(str(t.get("user", "")))}</i>'
        f"<ul>{''.join(lines)}</ul></div>"
    )


def _table(name: str, d: dict[str, Any]) -> str:
    rows = [
        f"<tr><td>changed</td><td>{e(str(c.get('id')))}</td><td>"
        + ", ".join(_diff(k, v["expected"], v["got"]) for k, v in (c.get("columns") or {}).items())
        + "</td></tr>"
        for c in d.get("changed") or []
    ]
    rows += [
        f"<tr><td>{kind}</td><td>{e(str(r.get('id')))}</td><td>{_v(r)}</td></tr>"
        for kind in ("missing", "extra")
        for r in d.get(kind) or []
    ]
    return f'<tr><th colspan="3">{e(name)}</th></tr>{"".join(rows)}'


def render_anatomy(a: dict[str, Any]) -> str:
    turns = "".join(_turn(t) for t in a.get("turns") or [] if isinstance(t, dict))
    state = a.get("state")
    diff = ""
    if isinstance(state, dict) and state:
        diff = (
            '<table class="diff"><tr><th>row</th><th>id</th><th>difference</th></tr>'
            + "".join(_table(k, v) for k, v in state.items() if isinstance(v, dict))
            + "</table>"
        )
    return f'<div class="anatomy"><h4>why it failed</h4>{turns}{diff}</div>' if turns or diff else ""
