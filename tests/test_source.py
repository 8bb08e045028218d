"""The source's shape, read from its AST: sizes as guidance (a class past 200 lines or a function past 50 is
named in a warning; past 300 and 80 the test fails: split where a file holds two concepts, never to fit a
number); no import cycle among its modules, whether the import sits at the top of a module or inside a
function (a function-level import is no way out of a cycle, only a way to hide one)."""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from pathlib import Path

RUNNER = Path(__file__).resolve().parents[1] / "runner"


def _modules() -> dict[str, Path]:
    out = {}
    for p in RUNNER.rglob("*.py"):
        parts = p.relative_to(RUNNER.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The runner modules `name` imports anywhere in its file (module, class or function level)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `from runner.x import f`: the module is runner.x
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


CLASS_LINES, FUNCTION_LINES = 200, 50  # past these: a warning that names it
CLASS_LIMIT, FUNCTION_LIMIT = 300, 80  # past these: the test fails


def _sizes() -> list[tuple[str, int, int, int]]:
    """(where, lines, guidance, limit) of every class and function in runner/."""
    out = []
    for path in sorted(RUNNER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                guide, limit = CLASS_LINES, CLASS_LIMIT
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                guide, limit = FUNCTION_LINES, FUNCTION_LIMIT
            else:
                continue
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            out.append((f"{path.relative_to(RUNNER.parent)}:{node.lineno} {node.name}", n, guide, limit))
    return out


def test_classes_and_functions_stay_within_their_limits_and_those_past_the_guidance_are_named() -> None:
    sizes = _sizes()
    for where, n, guide, limit in sizes:
        if guide < n <= limit:
            warnings.warn(f"{where}: {n} lines (guidance {guide}): split it if it holds two things", stacklevel=1)
    assert [f"{where}: {n} lines (limit {limit})" for where, n, _, limit in sizes if n > limit] == []


def test_the_package_is_as_its_formatter_writes_it() -> None:
    """`ruff format` (pyproject.toml pins its minor release, whose style it keeps): one statement a line,
    code wrapped at 110 columns, so that no line is packed to fit a size."""
    ruff = Path(sys.executable).parent / "ruff"
    p = subprocess.run([str(ruff), "format", "--check", "--diff", str(RUNNER)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, f"run `ruff format runner`:\n{p.stdout[-3000:]}{p.stderr[-1000:]}"


def test_no_line_of_the_package_passes_110_columns() -> None:
    """What the formatter cannot wrap (a string, a comment, a docstring) is wrapped by hand."""
    long = [f"{p.relative_to(RUNNER.parent)}:{n}" for p in sorted(RUNNER.rglob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if len(line) > 110]
    assert long == []


def test_no_import_cycle_even_through_function_level_imports() -> None:
    known = _modules()
    graph = {name: _imports(name, path, known) for name, path in known.items()}
    assert _cycles(graph) == []


# The data's path, bottom to top (docs/architecture.md draws it): a module imports from its own layer or
# those below it, never from one above. The sandbox, model, harness and gateway packages are one layer: the
# simulator plays the CRM's language, and a harness holds a model client.
LAYERS = [
    ["runner", "runner.errors", "runner.durable", "runner.resources", "runner.serving", "runner.interrupts",
     "runner.heap", "runner.logfiles", "runner.yamlfile", "runner.config", "runner.clouds", "runner.records",
     "runner.select", "runner.plan", "runner.cache"],
    ["runner.results", "runner.wire"],
    ["runner.budget"],
    ["runner.sandbox", "runner.models", "runner.proc", "runner.harness", "runner.gateway"],
    ["runner.forecast"],
    ["runner.worker"],
    ["runner.engine"],
    ["runner.analysis"],
    ["runner.report"],
    ["runner.run"],
    ["runner.cli", "runner.__main__", "runner.pytest_plugin"],  # the entry points
]


def _layer(module: str) -> int:
    for i, layer in enumerate(LAYERS):
        if module in layer or any(module.startswith(f"{p}.") for p in layer if p != "runner"):
            return i
    raise AssertionError(f"{module} is in no layer of LAYERS")


def test_every_import_goes_down_the_layers() -> None:
    known = _modules()
    upward = [f"{name} -> {target}" for name, path in sorted(known.items())
              for target in sorted(_imports(name, path, known)) if _layer(target) > _layer(name)]
    assert upward == []


def test_the_cycle_finder_finds_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_class_name_is_defined_twice() -> None:
    """One name, one meaning: a class name belongs to one module, but for the stdlib-only modules that run in
    a user's interpreter (proc/shim.py, proc/zygote.py), whose Context, Database and Harness mirror ours."""
    mirrors = {RUNNER / "proc" / "shim.py", RUNNER / "proc" / "zygote.py"}
    seen: dict[str, list[str]] = {}
    for path in sorted(RUNNER.rglob("*.py")):
        if path in mirrors:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                seen.setdefault(node.name, []).append(str(path))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}


def test_one_place_reads_the_calendar_and_no_test_judges_a_retirement_by_it() -> None:
    """Five tests failed on 2026-12-01 for asserting what was true before 2026-11-30. The runner reads the day
    in one function (runner/models/capabilities.py `today`, which RUNNER_TODAY overrides); the suite pins it
    (tests/conftest.py); and no test reads the calendar but the one that checks that function."""
    calendar = ("date.today(", "datetime.today(")  # the day; datetime.now(UTC) stamps instants, never judged
    in_runner = sorted(str(p.relative_to(RUNNER.parent)) for p in RUNNER.rglob("*.py")
                       if any(c in p.read_text() for c in calendar))
    assert in_runner == ["runner/models/capabilities.py"]
    tests = RUNNER.parent / "tests"
    in_tests = sorted(str(p.relative_to(tests)) for p in tests.rglob("*.py")
                      if p.name != "test_source.py" and any(c in p.read_text() for c in calendar))
    assert in_tests == ["models/test_capabilities.py"]
    assert 'os.environ["RUNNER_TODAY"] = SUITE_DAY' in (tests / "conftest.py").read_text()
