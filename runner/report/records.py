"""The report's records: one row per record with every run side by side, and filters.

A record opens (a <details>) onto one column per run: its error, why it failed (`anatomy`), its
transcript, the attempts a rerun replaced, and its raw output fields behind a toggle. Its body is drawn
when it opens (runner/report/lazy.py: the page loads the record list, not every transcript). A small inline
script filters the rows: text search (id, request, anything in the record), failures only, flaky ones,
failures of one run, outcome different across runs, one value of each group (difficulty, tag, ...); and
opens the record a link names (report.html#crm-7-00004).
"""

from __future__ import annotations

import html
import json
from typing import Any

from runner.report.anatomy import render_anatomy
from runner.report.lazy import LOADER, pack
from runner.results.result import Earlier, Result, flaky, metric_cell

e = html.escape
HIDDEN_OUTPUT = ("transcript", "tool_calls", "model_calls", "anatomy", "steps", "atlas")


def status(r: Result | Earlier | None) -> str:
    return "missing" if r is None else "ok" if r.success else ("error" if not r.ok else "fail")


# What each status reads as: one meaning everywhere (the terminal's "solved", "failed", "errors")
SAID = {"ok": "solved", "fail": "failed", "error": "error", "missing": "not run"}


def _metrics(r: Result | Earlier, shares: set[str]) -> str:
    return " &middot; ".join(
        f"{e(k.replace('_', ' '))} {metric_cell(v, k in shares)}"
        for k, v in r.metrics.items()
        if v is not None
    )


def transcript(messages: list[dict[str, Any]]) -> str:
    out = []
    for m in messages:
        if m["role"] == "user":
            out.append(f'<div class="u"><b>user</b> {e(m["text"])}</div>')
        elif m["role"] == "assistant":
            if m.get("text"):
                out.append(f'<div class="a"><b>agent</b> {e(m["text"])}</div>')
            for c in m.get("tool_calls") or []:
                call = f"{e(c['name'])}({e(json.dumps(c['args']))})"
                out.append(f'<div class="c">&rarr; <code>{call}</code></div>')
        else:
            for res in m.get("results") or []:
                cls = "err" if res.get("is_error") else "res"
                out.append(f'<div class="{cls}"><code>{e(res["content"][:1500])}</code></div>')
    return "".join(out)


def _part(p: Any) -> str:
    if not isinstance(p, dict):
        return ""
    calls = [
        f"{e(str(c.get('name')))}({e(json.dumps(c.get('args'), default=str))})" for c in p.get("calls") or []
    ]
    return "<code>" + "; ".join(calls) + "</code>" if calls else f"says: {e(str(p.get('text') or ''))[:300]}"


def steps(items: list[Any]) -> str:
    """A teacher/student harness's steps (output `steps`): proposal, verdict, what ran."""

    def row(s: dict[str, Any]) -> str:
        verdict = e(str(s.get("verdict")))
        guidance = " - " + e(str(s["guidance"])) if s.get("guidance") else ""
        return (
            f'<tr><td data-label="step">{int(s.get("turn", 0)) + 1}.{int(s.get("step", 0)) + 1}</td>'
            f'<td data-label="student">{_part(s.get("proposed"))}</td>'
            f'<td class="{verdict}" data-label="teacher">{verdict}{guidance}</td>'
            f'<td data-label="ran">{_part(s.get("executed"))}</td></tr>'
        )

    rows = "".join(row(s) for s in items if isinstance(s, dict))
    return (
        '<table class="steps"><tr><th>turn.step</th><th>student '
        "proposed</th><th>teacher</th><th>ran</th></tr>"
        f"{rows}</table>"
    )


def _column(run: str, r: Result | None, shares: set[str] | None = None) -> str:
    if r is None:
        return f'<div class="col"><h4>{e(run)}</h4><p>not run</p></div>'
    said = SAID[status(r)] + (" (flaky: it failed before, asked again it succeeded)" if flaky(r) else "")
    return (
        f'<div class="col {status(r)}"><h4>{e(run)}: {said}</h4>'
        + _detail(r, shares or set())
        + "".join(
            f'<details class="raw earlier"><summary>attempt {x.attempt} (replaced by a rerun): '
            f"{SAID[status(x)]}</summary>{_detail(x, shares or set())}</details>"
            for x in r.earlier
        )
        + "</div>"
    )


def _detail(r: Result | Earlier, shares: set[str]) -> str:
    """One attempt's metrics, error, why it failed, steps, transcript and raw fields."""
    out = r.output or {}
    shown = {k: v for k, v in out.items() if k not in HIDDEN_OUTPUT}
    return (
        f'<p class="m">{_metrics(r, shares)}</p>'
        + (f'<p class="err">error: {e(str(r.error))}</p>' if r.error else "")
        + (render_anatomy(out["anatomy"]) if isinstance(out.get("anatomy"), dict) else "")
        + (steps(out["steps"]) if isinstance(out.get("steps"), list) else "")
        + (transcript(out["transcript"]) if isinstance(out.get("transcript"), list) else "")
        # the harness's other fields, raw: behind a toggle, after what explains the outcome
        + (
            f'<details class="raw"><summary>output fields</summary>'
            f"<pre>{e(json.dumps(shown, indent=1, default=str)[:3000])}</pre></details>"
            if shown
            else ""
        )
    )


def _trials_status(rs: list[Result]) -> str:
    """Several trials of one record in one run: ok if all succeeded, error if none finished, else fail."""
    states = [status(r) for r in rs]
    return (
        "ok" if all(s == "ok" for s in states) else "error" if all(s == "error" for s in states) else "fail"
    )


def _trials_column(run: str, rs: list[Result], shares: set[str]) -> str:
    wins = sum(1 for r in rs if r.success)
    parts = "".join(_column(f"trial {r.epoch}", r, shares) for r in rs)
    return (
        f'<div class="col {_trials_status(rs)}"><h4>{e(run)}: {wins}/{len(rs)} trials succeeded</h4>'
        f"{parts}</div>"
    )


# what the page's script filters a record by: [id, fail, failed, differs, flaky, groups, row html]
Row = list[Any]


def _row(
    rid: str, states: dict[str, str], differs: bool, groups: str, n: int, flaky_in: str, summary: str
) -> Row:
    """A record's row: its closed <details> (the id is its permalink; `data-n` where its body is among the
    packed ones) and, beside it, what the filters read."""
    failed = "|".join(run for run, s in states.items() if s in ("fail", "error"))
    worst = "error" if "error" in states.values() else "fail" if failed else "ok"
    tag = (
        f'<details class="{worst}" id="{e(rid)}" data-id="{e(rid)}" data-n="{n}" '
        f'data-fail="{int(bool(failed))}" '
        f'data-failed="{e(failed)}" data-differs="{int(differs)}" data-flaky="{e(flaky_in)}" '
        f'data-groups="{e(groups)}">'
    )
    return [rid, int(bool(failed)), failed, int(differs), flaky_in, groups, tag + summary + "</details>"]


def _summary_line(rid: str, badges: str, facts: str) -> str:
    return (
        f'<summary><b>{e(rid)}</b> <a class="link" href="#{e(rid)}" title="a link to this record">#</a> '
        f'{badges} <span class="g">{facts}</span></summary>'
    )


def _flaky_in(trials: dict[str, list[Result]]) -> str:
    return "|".join(run for run, rs in trials.items() if any(flaky(r) for r in rs))


def _record(rid: str, trials: dict[str, list[Result]], n: int, shares: set[str]) -> tuple[Row, str]:
    """One record: its row (a badge per run) and its body (each run's result, all its trials where it ran
    several), drawn when it opens."""
    if not any(len(rs) > 1 for rs in trials.values()):
        return _record_once(rid, {run: rs[0] if rs else None for run, rs in trials.items()}, n, shares)
    states = {run: _trials_status(rs) if rs else "missing" for run, rs in trials.items()}
    first = next(rs[0] for rs in trials.values() if rs)
    groups = "|".join(f"{g}={v}" for g, vs in first.groups.items() for v in vs)
    won = {run: sum(1 for r in rs if r.success) / len(rs) for run, rs in trials.items() if rs}
    badges = "".join(
        f'<span class="b {states[run]}" title="{e(run)}: {sum(1 for r in rs if r.success)} of '
        f'{len(rs)} trials succeeded">{e(run)} {sum(1 for r in rs if r.success)}/{len(rs)}</span>'
        for run, rs in trials.items()
    )
    facts = " &middot; ".join(e(", ".join(v)) for v in first.groups.values())
    cols = "".join(
        _trials_column(run, rs, shares) if rs else _column(run, None) for run, rs in trials.items()
    )
    return (
        _row(
            rid,
            states,
            len(set(won.values())) > 1,
            groups,
            n,
            _flaky_in(trials),
            _summary_line(rid, badges, facts),
        ),
        f'<div class="side" style="--runs:{len(trials)}">{cols}</div>',
    )


def _record_once(rid: str, per_run: dict[str, Result | None], n: int, shares: set[str]) -> tuple[Row, str]:
    states = {run: status(r) for run, r in per_run.items()}
    first = next(r for r in per_run.values() if r is not None)
    groups = "|".join(f"{g}={v}" for g, vs in first.groups.items() for v in vs)
    differs = len({s == "ok" for s in states.values() if s != "missing"}) > 1
    flaky_in = _flaky_in({run: [r] if r is not None else [] for run, r in per_run.items()})
    badges = "".join(
        f'<span class="b {s}{" flaky" if run in flaky_in.split("|") else ""}" title="{e(run)}: '
        f'{SAID[s]}{", flaky" if run in flaky_in.split("|") else ""}">{e(run)}</span>'
        for run, s in states.items()
    )
    facts = " &middot; ".join(e(", ".join(v)) for v in first.groups.values())
    return (
        _row(rid, states, differs, groups, n, flaky_in, _summary_line(rid, badges, facts)),
        f'<div class="side" style="--runs:{len(per_run)}">'
        + "".join(_column(run, r, shares) for run, r in per_run.items())
        + "</div>",
    )


def _filters(rows: dict[str, list[Result]]) -> str:
    values: dict[str, set[str]] = {}
    for rs in rows.values():
        for r in rs:
            for g, vs in r.groups.items():
                values.setdefault(g, set()).update(vs)
    selects = "".join(
        f'<label>{e(g)} <select class="f" data-g="{e(g)}"><option value="">all</option>'
        + "".join(f"<option>{e(v)}</option>" for v in sorted(vs))
        + "</select></label>"
        for g, vs in values.items()
    )
    runs = "".join(f"<option>{e(run)}</option>" for run in rows)
    flaky_box = (
        '<label><input type="checkbox" id="flakyonly"> flaky (failed, then passed)</label>'
        if any(flaky(r) for rs in rows.values() for r in rs)
        else ""
    )
    return (
        '<div id="filters"><label><input type="search" id="q" placeholder="search id or text" '
        'aria-label="search records"></label>'
        '<label><input type="checkbox" id="failonly"> failures only</label>'
        f'<label>failed in <select id="failedin"><option value="">any run</option>{runs}</select></label>'
        '<label><input type="checkbox" id="differs"> outcome differs across runs</label>'
        f'{flaky_box}{selects}<span id="shown"></span></div>'
        '<p id="picked" hidden><span></span> <button id="unpick">show all records</button></p>'
    )


SCRIPT = (
    """<script>
"""
    + LOADER
    + """
// The record list is data (#record-index): the rows matching the filters are drawn PAGE at a time, more as
// the list scrolls into view; a record's body when it opens. 2,500 records drawn at once took seconds.
const PAGE = 100;
const val = id => document.getElementById(id);
const index = JSON.parse(val('record-index').textContent);  // [id, fail, failed, differs, flaky, groups, row]
let picked = null;  // record ids a comparison's won/lost count chose, or null for all
let matching = [], start = 0, end = 0;  // positions in index that pass the filters; those drawn: [start, end)
const rowsHtml = (a, b) => matching.slice(a, b).map(i => index[i][6]).join('');
function marks() {
  const left = matching.length - end;
  val('more').hidden = left <= 0; val('earlier').hidden = start <= 0;
  val('more').querySelector('button').textContent =
    'show ' + Math.min(PAGE, left) + ' more (' + left + ' left)';
}
function showMore() {
  const b = Math.min(matching.length, end + PAGE);
  val('drilldown').insertAdjacentHTML('beforeend', rowsHtml(end, b)); end = b; marks();
}
function showEarlier() {
  const a = Math.max(0, start - PAGE);
  val('drilldown').insertAdjacentHTML('afterbegin', rowsHtml(a, start)); start = a; marks();
}
function showFrom(a) { start = end = a; val('drilldown').innerHTML = ''; showMore(); }
val('more').querySelector('button').addEventListener('click', showMore);
val('earlier').querySelector('button').addEventListener('click', showEarlier);
const near = new IntersectionObserver(es => {
  if (!es.some(x => x.isIntersecting) || end >= matching.length) return;
  showMore(); near.unobserve(val('more')); near.observe(val('more'));  // observed again: still in view, more
}, {rootMargin: '800px'});
near.observe(val('more'));
// a record's body, drawn the first time it opens
async function draw(d) {
  if (d.dataset.drawn) return;
  d.dataset.drawn = '1';
  d.insertAdjacentHTML('beforeend', await body(+d.dataset.n));
}
val('drilldown').addEventListener('toggle', ev => { if (ev.target.open) draw(ev.target); }, true);
async function applyFilters() {
  const fo = val('failonly').checked, df = val('differs').checked, run = val('failedin').value;
  const fl = val('flakyonly') && val('flakyonly').checked;
  const q = val('q').value.trim().toLowerCase();
  const text = q ? await texts(index) : null;
  if (q !== val('q').value.trim().toLowerCase()) return;  // typed on meanwhile: that call filters
  const want = [...document.querySelectorAll('select.f')].filter(s => s.value)
    .map(s => s.dataset.g + '=' + s.value);
  matching = [];
  index.forEach(([id, fail, failed, differs, flaky, groups], i) => {
    const g = groups.split('|');
    if ((!fo || fail) && (!df || differs) && (!fl || flaky) && (!run || failed.split('|').includes(run))
        && want.every(w => g.includes(w)) && (!picked || picked.has(id))
        && (!q || id.toLowerCase().includes(q) || text[i].includes(q))) matching.push(i);
  });
  val('shown').textContent = matching.length + ' of ' + index.length + ' records';
  showFrom(0);
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
// report.html#ID: that record, drawn, open and in view, whatever the filters hid
async function openLinked() {
  const id = location.hash && decodeURIComponent(location.hash.slice(1));
  const at = index.findIndex(r => r[0] === id);
  if (at < 0) return;
  if (!matching.includes(at)) {
    document.querySelectorAll('#filters input[type=checkbox]').forEach(c => c.checked = false);
    document.querySelectorAll('#filters select').forEach(s => s.value = '');
    val('q').value = ''; picked = null; val('picked').hidden = true;
    await applyFilters();
  }
  const k = matching.indexOf(at);
  if (k < start || k >= end) showFrom(Math.max(0, k - 3));
  const d = document.getElementById(id);
  await draw(d);
  d.open = true; d.scrollIntoView();
}
window.addEventListener('hashchange', openLinked);
applyFilters(); openLinked();
</script>"""
)


def records(rows: dict[str, list[Result]], shares: set[str]) -> str:
    """Every record once, in dataset order, with each run's result side by side; filters above. The list is
    data the page draws as it is scrolled, the bodies are packed apart and drawn as records open
    (runner/report/lazy.py)."""
    by_id: dict[str, dict[str, list[Result]]] = {}
    order: dict[str, int] = {}
    for run, rs in rows.items():
        for r in rs:
            by_id.setdefault(r.record_id, {}).setdefault(run, []).append(r)
            order.setdefault(r.record_id, r.index)
    index, bodies = [], []
    for n, rid in enumerate(sorted(by_id, key=lambda i: (order[i], i))):
        row, body = _record(
            rid, {run: sorted(by_id[rid].get(run, []), key=lambda r: r.epoch) for run in rows}, n, shares
        )
        index.append(row)
        bodies.append(body)
    data = json.dumps(index).replace("<", "\\u003c")  # raw text inside <script>: no tag may end it early
    return (
        f'<h2>Records</h2>{_filters(rows)}<p id="earlier" class="more" hidden><button>show earlier records'
        '</button></p><div id="drilldown"></div><p id="more" class="more" hidden><button>show '
        "more</button></p>"
        f'<script type="application/json" id="record-index">{data}</script>{pack(bodies)}{SCRIPT}'
    )
