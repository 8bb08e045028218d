"""The source's shape, read from its AST: no class over 200 lines and no function over 50 in `runner/`;
no import cycle among its modules, whether the import sits at the top of a module or inside a function
(a function-level import is no way out of a cycle, only a way to hide one)."""

from __future__ import annotations

import ast
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


CLASS_LINES, FUNCTION_LINES = 200, 50


def test_no_class_over_200_lines_and_no_function_over_50() -> None:
    too_long = []
    for path in sorted(RUNNER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            limit = CLASS_LINES if isinstance(node, ast.ClassDef) else \
                FUNCTION_LINES if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None
            if limit is not None and (n := (node.end_lineno or node.lineno) - node.lineno + 1) > limit:
                too_long.append(f"{path.relative_to(RUNNER.parent)}:{node.lineno} {node.name}: {n} lines")
    assert too_long == []


def test_no_import_cycle_even_through_function_level_imports() -> None:
    known = _modules()
    graph = {name: _imports(name, path, known) for name, path in known.items()}
    assert _cycles(graph) == []


# The data's path, bottom to top (docs/architecture.md draws it): a module imports from its own layer or
# those below it, never from one above. The sandbox, model, harness and gateway packages are one layer: the
# simulator plays the CRM's language, and a harness holds a model client.
LAYERS = [
    ["runner", "runner.errors", "runner.resources", "runner.serving", "runner.interrupts", "runner.heap",
     "runner.logfiles", "runner.config", "runner.records", "runner.select", "runner.plan", "runner.cache"],
    ["runner.results", "runner.wire"],
    ["runner.budget"],
    ["runner.sandbox", "runner.models", "runner.harness", "runner.gateway"],
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
