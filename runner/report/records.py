"""The report's records: one row per record with every run side by side, and filters.

A record opens (a plain <details>, no script needed) onto one column per run: its error, why it
failed (`anatomy`), its transcript, and its raw output fields behind a toggle. A small inline script
filters the rows: text search (id, request, anything in the record), failures only, failures of one
run, outcome different across runs, one value of each group (difficulty, tag, ...); and opens the
record a link names (report.html#crm-7-00004).
"""

from __future__ import annotations

import html
import json
from typing import Any

from runner.report.anatomy import render_anatomy
from runner.results.result import Result, metric_cell

e = html.escape
HIDDEN_OUTPUT = ("transcript", "tool_calls", "model_calls", "anatomy", "steps", "atlas")


def status(r: Result | None) -> str:
    return "missing" if r is None else "ok" if r.success else ("error" if not r.ok else "fail")


# What each status reads as: one meaning everywhere (the terminal's "solved", "failed", "errors")
SAID = {"ok": "solved", "fail": "failed", "error": "error", "missing": "not run"}


def _metrics(r: Result, shares: set[str]) -> str:
    return " &middot; ".join(f"{e(k.replace('_', ' '))} {metric_cell(v, k in shares)}" for k, v in r.metrics.items()
                             if v is not None)


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
        return (f'<tr><td data-label="step">{int(s.get("turn", 0)) + 1}.{int(s.get("step", 0)) + 1}</td>'
                f'<td data-label="student">{_part(s.get("proposed"))}</td>'
                f'<td class="{verdict}" data-label="teacher">{verdict}{guidance}</td>'
                f'<td data-label="ran">{_part(s.get("executed"))}</td></tr>')

    rows = "".join(row(s) for s in items if isinstance(s, dict))
    return ('<table class="steps"><tr><th>turn.step</th><th>student proposed</th><th>teacher</th><th>ran</th></tr>'
            f"{rows}</table>")


# Past this many results, a successful record shows its outcome and metrics only: a 4,800-result job
# would otherwise be a ~26 MB page. Failures always keep everything; results/*.jsonl has it all.
FULL_DETAIL_LIMIT = 2000


def _column(run: str, r: Result | None, brief: bool = False, shares: set[str] | None = None) -> str:
    if r is None:
        return f'<div class="col"><h4>{e(run)}</h4><p>not run</p></div>'
    if brief and r.success:
        return f'<div class="col ok"><h4>{e(run)}: solved</h4><p class="m">{_metrics(r, shares or set())}</p></div>'
    out = r.output or {}
    shown = {k: v for k, v in out.items() if k not in HIDDEN_OUTPUT}
    return (f'<div class="col {status(r)}"><h4>{e(run)}: {SAID[status(r)]}</h4>'
            f'<p class="m">{_metrics(r, shares or set())}</p>'
            + (f'<p class="err">error: {e(str(r.error))}</p>' if r.error else "")
            + (render_anatomy(out["anatomy"]) if isinstance(out.get("anatomy"), dict) else "")
            + (steps(out["steps"]) if isinstance(out.get("steps"), list) else "")
            + (transcript(out["transcript"]) if isinstance(out.get("transcript"), list) else "")
            # the harness's other fields, raw: behind a toggle, after what explains the outcome
            + (f'<details class="raw"><summary>output fields</summary>'
               f'<pre>{e(json.dumps(shown, indent=1, default=str)[:3000])}</pre></details>' if shown else "")
            + "</div>")


def _trials_status(rs: list[Result]) -> str:
    """Several trials of one record in one run: ok if all succeeded, error if none finished, else fail."""
    states = [status(r) for r in rs]
    return "ok" if all(s == "ok" for s in states) else "error" if all(s == "error" for s in states) else "fail"


def _trials_column(run: str, rs: list[Result], brief: bool, shares: set[str]) -> str:
    wins = sum(1 for r in rs if r.success)
    parts = "".join(_column(f"trial {r.epoch}", r, brief, shares) for r in rs)
    return (f'<div class="col {_trials_status(rs)}"><h4>{e(run)}: {wins}/{len(rs)} trials succeeded</h4>'
            f"{parts}</div>")


def _open(rid: str, worst: str, states: dict[str, str], differs: bool, groups: str) -> str:
    """A record's <details> tag: its id is its permalink; what the filters read rides on data attributes."""
    failed = "|".join(run for run, s in states.items() if s in ("fail", "error"))
    return (f'<details class="{worst}" id="{e(rid)}" data-id="{e(rid)}" data-fail="{int(bool(failed))}" '
            f'data-failed="{e(failed)}" data-differs="{int(differs)}" data-groups="{e(groups)}">')


def _summary_line(rid: str, badges: str, facts: str) -> str:
    return (f'<summary><b>{e(rid)}</b> <a class="link" href="#{e(rid)}" title="a link to this record">#</a> '
            f'{badges} <span class="g">{facts}</span></summary>')


def _record(rid: str, trials: dict[str, list[Result]], brief: bool = False, shares: set[str] | None = None) -> str:
    """One record: a badge per run, and each run's result (all its trials, where it ran several)."""
    shares = shares or set()
    if not any(len(rs) > 1 for rs in trials.values()):
        return _record_once(rid, {run: rs[0] if rs else None for run, rs in trials.items()}, brief, shares)
    states = {run: _trials_status(rs) if rs else "missing" for run, rs in trials.items()}
    first = next(rs[0] for rs in trials.values() if rs)
    groups = "|".join(f"{g}={v}" for g, vs in first.groups.items() for v in vs)
    fail = any(s in ("fail", "error") for s in states.values())
    won = {run: sum(1 for r in rs if r.success) / len(rs) for run, rs in trials.items() if rs}
    differs = len(set(won.values())) > 1
    badges = "".join(f'<span class="b {states[run]}" title="{e(run)}: {sum(1 for r in rs if r.success)} of '
                     f'{len(rs)} trials succeeded">{e(run)} {sum(1 for r in rs if r.success)}/{len(rs)}</span>'
                     for run, rs in trials.items())
    facts = " &middot; ".join(e(", ".join(v)) for v in first.groups.values())
    worst = "error" if "error" in states.values() else "fail" if fail else "ok"
    cols = "".join(_trials_column(run, rs, brief, shares) if rs else _column(run, None)
                   for run, rs in trials.items())
    return (_open(rid, worst, states, differs, groups) + _summary_line(rid, badges, facts)
            + f'<div class="side" style="--runs:{len(trials)}">{cols}</div></details>')


def _record_once(rid: str, per_run: dict[str, Result | None], brief: bool, shares: set[str]) -> str:
    states = {run: status(r) for run, r in per_run.items()}
    first = next(r for r in per_run.values() if r is not None)
    groups = "|".join(f"{g}={v}" for g, vs in first.groups.items() for v in vs)
    fail = any(s in ("fail", "error") for s in states.values())
    differs = len({s == "ok" for s in states.values() if s != "missing"}) > 1
    badges = "".join(f'<span class="b {s}" title="{e(run)}: {SAID[s]}">{e(run)}</span>' for run, s in states.items())
    facts = " &middot; ".join(e(", ".join(v)) for v in first.groups.values())
    worst = "error" if "error" in states.values() else "fail" if fail else "ok"
    return (_open(rid, worst, states, differs, groups) + _summary_line(rid, badges, facts)
            + f'<div class="side" style="--runs:{len(per_run)}">'
            + "".join(_column(run, r, brief, shares) for run, r in per_run.items()) + "</div></details>")


def _filters(rows: dict[str, list[Result]]) -> str:
    values: dict[str, set[str]] = {}
    for rs in rows.values():
        for r in rs:
            for g, vs in r.groups.items():
                values.setdefault(g, set()).update(vs)
    selects = "".join(f'<label>{e(g)} <select class="f" data-g="{e(g)}"><option value="">all</option>'
                      + "".join(f'<option>{e(v)}</option>' for v in sorted(vs)) + "</select></label>"
                      for g, vs in values.items())
    runs = "".join(f"<option>{e(run)}</option>" for run in rows)
    return ('<div id="filters"><label><input type="search" id="q" placeholder="search id or text" '
            'aria-label="search records"></label>'
            '<label><input type="checkbox" id="failonly"> failures only</label>'
            f'<label>failed in <select id="failedin"><option value="">any run</option>{runs}</select></label>'
            '<label><input type="checkbox" id="differs"> outcome differs across runs</label>'
            f'{selects}<span id="shown"></span></div>'
            '<p id="picked" hidden><span></span> <button id="unpick">show all records</button></p>')


SCRIPT = """<script>
let picked = null;  // record ids a comparison's won/lost count chose, or null for all
const val = id => document.getElementById(id);
function applyFilters() {
  const fo = val('failonly').checked, df = val('differs').checked, run = val('failedin').value;
  const q = val('q').value.trim().toLowerCase();
  const want = [...document.querySelectorAll('select.f')].filter(s => s.value).map(s => s.dataset.g + '=' + s.value);
  let n = 0, all = 0;
  document.querySelectorAll('#drilldown > details').forEach(d => {
    const groups = d.dataset.groups.split('|');
    const show = (!fo || d.dataset.fail === '1') && (!df || d.dataset.differs === '1')
      && (!run || d.dataset.failed.split('|').includes(run))
      && want.every(w => groups.includes(w)) && (!picked || picked.has(d.dataset.id))
      && (!q || d.dataset.id.toLowerCase().includes(q) || d.textContent.toLowerCase().includes(q));
    d.style.display = show ? '' : 'none'; all++; n += show;
  });
  val('shown').textContent = n + ' of ' + all + ' records';
}
document.querySelectorAll('#filters input, #filters select').forEach(x => {
  x.addEventListener('change', applyFilters); x.addEventListener('input', applyFilters); });
function pick(ids, label) {
  picked = ids && new Set(ids);
  const bar = val('picked');
  bar.hidden = !ids; bar.querySelector('span').textContent = label || '';
  applyFilters();
  if (ids) bar.scrollIntoView();
}
document.querySelectorAll('button.pick').forEach(b => b.addEventListener('click',
  () => pick(JSON.parse(b.dataset.ids), b.dataset.label)));
val('unpick').addEventListener('click', () => pick(null));
// report.html#ID: that record, open and in view, whatever the filters hid
function openLinked() {
  const d = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
  if (!d || d.tagName !== 'DETAILS') return;
  if (d.style.display === 'none') {
    document.querySelectorAll('#filters input[type=checkbox]').forEach(c => c.checked = false);
    document.querySelectorAll('#filters select').forEach(s => s.value = '');
    val('q').value = ''; pick(null);
  }
  d.open = true; d.scrollIntoView();
}
window.addEventListener('hashchange', openLinked);
applyFilters(); openLinked();
</script>"""


def records(rows: dict[str, list[Result]], shares: set[str]) -> str:
    """Every record once, in dataset order, with each run's result side by side; filters above."""
    by_id: dict[str, dict[str, list[Result]]] = {}
    order: dict[str, int] = {}
    for run, rs in rows.items():
        for r in rs:
            by_id.setdefault(r.record_id, {}).setdefault(run, []).append(r)
            order.setdefault(r.record_id, r.index)
    brief = sum(len(rs) for rs in rows.values()) > FULL_DETAIL_LIMIT
    body = "".join(_record(rid, {run: sorted(by_id[rid].get(run, []), key=lambda r: r.epoch) for run in rows}, brief,
                           shares)
                   for rid in sorted(by_id, key=lambda i: (order[i], i)))
    note = (f'<p class="m">Over {FULL_DETAIL_LIMIT} results: successful records show their metrics only '
            "(everything is in results/*.jsonl); failures show everything.</p>") if brief else ""
    return f'<h2>Records</h2>{note}{_filters(rows)}<div id="drilldown">{body}</div>{SCRIPT}'
