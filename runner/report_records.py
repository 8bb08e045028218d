"""The report's records: one row per record with every run side by side, and filters.

A record opens (a plain <details>, no script needed) onto one column per run: its error, why it
failed (`anatomy`), its output and transcript. A small inline script filters the rows: failures
only, outcome different across runs, and one value of each group (difficulty, tag, ...).
"""

from __future__ import annotations

import html
import json
from typing import Any

from runner.report_anatomy import render_anatomy
from runner.result import Result

e = html.escape
HIDDEN_OUTPUT = ("transcript", "tool_calls", "model_calls", "anatomy", "steps", "atlas")


def status(r: Result | None) -> str:
    return "missing" if r is None else "ok" if r.success else ("error" if not r.ok else "fail")


def transcript(messages: list[dict[str, Any]]) -> str:
    out = []
    for m in messages:
        if m["role"] == "user":
            out.append(f'<div class="u"><b>user</b> {e(m["text"])}</div>')
        elif m["role"] == "assistant":
            if m.get("text"):
                out.append(f'<div class="a"><b>agent</b> {e(m["text"])}</div>')
            for c in m.get("tool_calls") or []:
                call = f'{e(c["name"])}({e(json.dumps(c["args"]))})'
                out.append(f'<div class="c">&rarr; <code>{call}</code></div>')
        else:
            for res in m.get("results") or []:
                cls = "err" if res.get("is_error") else "res"
                out.append(f'<div class="{cls}"><code>{e(res["content"][:1500])}</code></div>')
    return "".join(out)


def _part(p: Any) -> str:
    if not isinstance(p, dict):
        return ""
    calls = [f'{e(str(c.get("name")))}({e(json.dumps(c.get("args"), default=str))})' for c in p.get("calls") or []]
    return "<code>" + "; ".join(calls) + "</code>" if calls else f'says: {e(str(p.get("text") or ""))[:300]}'


def steps(items: list[Any]) -> str:
    """A teacher/student harness's steps (output `steps`): proposal, verdict, what ran."""
    def row(s: dict[str, Any]) -> str:
        verdict = e(str(s.get("verdict")))
        guidance = " - " + e(str(s["guidance"])) if s.get("guidance") else ""
        return (f'<tr><td>{int(s.get("turn", 0)) + 1}.{int(s.get("step", 0)) + 1}</td>'
                f'<td>{_part(s.get("proposed"))}</td><td class="{verdict}">{verdict}{guidance}</td>'
                f'<td>{_part(s.get("executed"))}</td></tr>')

    rows = "".join(row(s) for s in items if isinstance(s, dict))
    return ('<table class="steps"><tr><th>turn.step</th><th>student proposed</th><th>teacher</th><th>ran</th></tr>'
            f"{rows}</table>")


# Past this many results, a successful record shows its outcome and metrics only: a 4,800-result job
# would otherwise be a ~26 MB page. Failures always keep everything; results/*.jsonl has it all.
FULL_DETAIL_LIMIT = 2000


def _column(run: str, r: Result | None, brief: bool = False) -> str:
    if r is None:
        return f'<div class="col"><h4>{e(run)}</h4><p>not run</p></div>'
    if brief and r.success:
        metrics = " &middot; ".join(f"{e(k)} {v:.2f}" for k, v in r.metrics.items() if v is not None)
        return f'<div class="col ok"><h4>{e(run)}: ok</h4><p class="m">{metrics}</p></div>'
    out = r.output or {}
    shown = {k: v for k, v in out.items() if k not in HIDDEN_OUTPUT}
    metrics = " &middot; ".join(f"{e(k)} {v:.2f}" for k, v in r.metrics.items() if v is not None)
    return (f'<div class="col {status(r)}"><h4>{e(run)}: {status(r)}</h4><p class="m">{metrics}</p>'
            + (f'<p class="err">error: {e(str(r.error))}</p>' if r.error else "")
            + (render_anatomy(out["anatomy"]) if isinstance(out.get("anatomy"), dict) else "")
            + (steps(out["steps"]) if isinstance(out.get("steps"), list) else "")
            + (f'<pre>{e(json.dumps(shown, indent=1, default=str)[:3000])}</pre>' if shown else "")
            + (transcript(out["transcript"]) if isinstance(out.get("transcript"), list) else "") + "</div>")


def _trials_status(rs: list[Result]) -> str:
    """Several trials of one record in one run: ok if all succeeded, error if none finished, else fail."""
    states = [status(r) for r in rs]
    return "ok" if all(s == "ok" for s in states) else "error" if all(s == "error" for s in states) else "fail"


def _trials_column(run: str, rs: list[Result], brief: bool) -> str:
    wins = sum(1 for r in rs if r.success)
    parts = "".join(_column(f"trial {r.epoch}", r, brief) for r in rs)
    return (f'<div class="col {_trials_status(rs)}"><h4>{e(run)}: {wins}/{len(rs)} trials succeeded</h4>'
            f"{parts}</div>")


def _record(rid: str, trials: dict[str, list[Result]], brief: bool = False) -> str:
    """One record: a badge per run, and each run's result (all its trials, where it ran several)."""
    if not any(len(rs) > 1 for rs in trials.values()):
        return _record_once(rid, {run: rs[0] if rs else None for run, rs in trials.items()}, brief)
    states = {run: _trials_status(rs) if rs else "missing" for run, rs in trials.items()}
    first = next(rs[0] for rs in trials.values() if rs)
    groups = "|".join(f"{g}={v}" for g, vs in first.groups.items() for v in vs)
    fail = any(s in ("fail", "error") for s in states.values())
    shares = {run: sum(1 for r in rs if r.success) / len(rs) for run, rs in trials.items() if rs}
    differs = len(set(shares.values())) > 1
    badges = "".join(f'<span class="b {states[run]}" title="{e(run)}: {sum(1 for r in rs if r.success)} of '
                     f'{len(rs)} trials succeeded">{e(run)} {sum(1 for r in rs if r.success)}/{len(rs)}</span>'
                     for run, rs in trials.items())
    facts = " &middot; ".join(e(", ".join(v)) for v in first.groups.values())
    worst = "error" if "error" in states.values() else "fail" if fail else "ok"
    cols = "".join(_trials_column(run, rs, brief) if rs else _column(run, None) for run, rs in trials.items())
    return (f'<details class="{worst}" data-id="{e(rid)}" data-fail="{int(fail)}" data-differs="{int(differs)}" '
            f'data-groups="{e(groups)}"><summary><b>{e(rid)}</b> {badges} <span class="g">{facts}</span></summary>'
            f'<div class="side" style="grid-template-columns:repeat({len(trials)},minmax(0,1fr))">{cols}</div>'
            "</details>")


def _record_once(rid: str, per_run: dict[str, Result | None], brief: bool = False) -> str:
    states = {run: status(r) for run, r in per_run.items()}
    first = next(r for r in per_run.values() if r is not None)
    groups = "|".join(f"{g}={v}" for g, vs in first.groups.items() for v in vs)
    fail = any(s in ("fail", "error") for s in states.values())
    differs = len({s == "ok" for s in states.values() if s != "missing"}) > 1
    badges = "".join(f'<span class="b {s}" title="{e(run)}: {s}">{e(run)}</span>' for run, s in states.items())
    facts = " &middot; ".join(e(", ".join(v)) for v in first.groups.values())
    worst = "error" if "error" in states.values() else "fail" if fail else "ok"
    return (f'<details class="{worst}" data-id="{e(rid)}" data-fail="{int(fail)}" data-differs="{int(differs)}" '
            f'data-groups="{e(groups)}"><summary><b>{e(rid)}</b> {badges} <span class="g">{facts}</span></summary>'
            f'<div class="side" style="grid-template-columns:repeat({len(per_run)},minmax(0,1fr))">'
            + "".join(_column(run, r, brief) for run, r in per_run.items()) + "</div></details>")


def _filters(rows: dict[str, list[Result]]) -> str:
    values: dict[str, set[str]] = {}
    for rs in rows.values():
        for r in rs:
            for g, vs in r.groups.items():
                values.setdefault(g, set()).update(vs)
    selects = "".join(f'<label>{e(g)} <select class="f" data-g="{e(g)}"><option value="">all</option>'
                      + "".join(f'<option>{e(v)}</option>' for v in sorted(vs)) + "</select></label>"
                      for g, vs in values.items())
    return ('<div id="filters"><label><input type="checkbox" id="failonly"> failures only</label>'
            '<label><input type="checkbox" id="differs"> outcome differs across runs</label>'
            f'{selects}<span id="shown"></span></div>'
            '<p id="picked" hidden><span></span> <button id="unpick">show all records</button></p>')


SCRIPT = """<script>
let picked = null;  // record ids a comparison's won/lost count chose, or null for all
function applyFilters() {
  const fo = document.getElementById('failonly').checked, df = document.getElementById('differs').checked;
  const want = [...document.querySelectorAll('select.f')].filter(s => s.value).map(s => s.dataset.g + '=' + s.value);
  let n = 0, all = 0;
  document.querySelectorAll('#drilldown > details').forEach(d => {
    const groups = d.dataset.groups.split('|');
    const show = (!fo || d.dataset.fail === '1') && (!df || d.dataset.differs === '1')
      && want.every(w => groups.includes(w)) && (!picked || picked.has(d.dataset.id));
    d.style.display = show ? '' : 'none'; all++; n += show;
  });
  document.getElementById('shown').textContent = n + ' of ' + all + ' records';
}
document.querySelectorAll('#filters input, #filters select').forEach(x => x.addEventListener('change', applyFilters));
function pick(ids, label) {
  picked = ids && new Set(ids);
  const bar = document.getElementById('picked');
  bar.hidden = !ids; bar.querySelector('span').textContent = label || '';
  applyFilters();
  if (ids) bar.scrollIntoView();
}
document.querySelectorAll('button.pick').forEach(b => b.addEventListener('click',
  () => pick(JSON.parse(b.dataset.ids), b.dataset.label)));
document.getElementById('unpick').addEventListener('click', () => pick(null));
applyFilters();
</script>"""


def records(rows: dict[str, list[Result]]) -> str:
    """Every record once, in dataset order, with each run's result side by side; filters above."""
    by_id: dict[str, dict[str, list[Result]]] = {}
    order: dict[str, int] = {}
    for run, rs in rows.items():
        for r in rs:
            by_id.setdefault(r.record_id, {}).setdefault(run, []).append(r)
            order.setdefault(r.record_id, r.index)
    brief = sum(len(rs) for rs in rows.values()) > FULL_DETAIL_LIMIT
    body = "".join(_record(rid, {run: sorted(by_id[rid].get(run, []), key=lambda r: r.epoch) for run in rows}, brief)
                   for rid in sorted(by_id, key=lambda i: (order[i], i)))
    note = (f'<p class="m">Over {FULL_DETAIL_LIMIT} results: successful records show their metrics only '
            "(everything is in results/*.jsonl); failures show everything.</p>") if brief else ""
    return f'<h2>Records</h2>{note}{_filters(rows)}<div id="drilldown">{body}</div>{SCRIPT}'
