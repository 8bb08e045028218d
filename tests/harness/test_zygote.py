"""The warm interpreter's own logic (runner/proc/zygote.py), in this process: which imports it
preloads, and how it finds a library that kept a slot's variable."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.proc.zygote import TooMuchToSearch, imported_names, kept_marker, libraries

MARK = "pgsr-unset-test"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_what_a_harness_imports_at_its_top_level_and_is_not_its_own_is_preloaded(tmp_path: Path) -> None:
    _write(tmp_path, {
        "team/__init__.py": "",
        "team/main.py": ("import json\nfrom . import helper\nfrom .sub import deep\nimport team.other\n"
                         "if True:\n    import csv\ntry:\n    import not_installed_anywhere\nexcept ImportError:\n"
                         "    pass\nfrom openai import OpenAI\n\ndef later():\n    import xml.dom\n\n"
                         "class K:\n    import wave\n"),
        "team/helper.py": "from decimal import Decimal\nimport json\n",
        "team/other.py": "import fractions\n",
        "team/sub/__init__.py": "",
        "team/sub/deep.py": "from .. import helper\nimport statistics\n",
        "loose.py": "import heapq\n",  # an own module beside the package (the pythonpath root)
    })
    got = libraries("team.main:run", [str(tmp_path)])
    assert sorted(got) == ["csv", "decimal", "fractions", "json", "not_installed_anywhere", "openai", "statistics"]
    # not its own modules, nor what a function or a class body imports, nor a file nothing imports (heapq)


def test_relative_imports_are_made_absolute_from_where_they_are() -> None:
    assert imported_names("from . import a\nfrom .b import c\n", "pkg.mod", False) == ["pkg", "pkg.a", "pkg.b",
                                                                                      "pkg.b.c"]
    assert imported_names("from .. import x\n", "pkg.sub.mod", False) == ["pkg", "pkg.x"]
    assert imported_names("from . import y\n", "pkg", True) == ["pkg", "pkg.y"]
    assert imported_names("from __future__ import annotations\nimport os.path as p\n", "m", False) == ["os.path"]


class _Proxy:
    """Like openai's module-level client: asking it anything loads what it stands for."""

    def __getattribute__(self, name: str) -> object:
        raise AssertionError(f"the proxy was asked for {name}")


@pytest.fixture
def modules() -> Iterator[dict[str, types.ModuleType]]:
    made: dict[str, types.ModuleType] = {}
    yield made
    for name in made:
        sys.modules.pop(name, None)


def _module(made: dict[str, types.ModuleType], name: str, **attrs: object) -> str:
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = made[name] = m
    return name


def test_a_library_that_kept_a_slots_variable_at_import_is_found(modules: dict[str, types.ModuleType]) -> None:
    settings = types.SimpleNamespace(dsn=f"host={MARK} dbname=x", retries=3)
    clean = _module(modules, "t_clean", HOST="localhost", proxy=_Proxy(), table={"a": [1, "b"]}, fn=print)
    assert kept_marker([clean], MARK) is None  # the proxy was not asked anything
    assert kept_marker([clean, _module(modules, "t_plain", HOST=f"/tmp/{MARK}")], MARK) == "t_plain"
    assert kept_marker([_module(modules, "t_object", settings=settings)], MARK) == "t_object"
    assert kept_marker([_module(modules, "t_nested", config={"db": {"url": f"postgresql://{MARK}"}})],
                       MARK) == "t_nested"


def test_shared_values_are_searched_once_and_a_search_too_large_vouches_for_nothing(
        modules: dict[str, types.ModuleType]) -> None:
    shared = [{"k": f"v{i}"} for i in range(1000)]  # one table that many objects point to
    many = _module(modules, "t_many", **{f"o{i}": types.SimpleNamespace(table=shared) for i in range(1000)})
    assert kept_marker([many], MARK, budget=5000) is None  # the table once, not once per object
    big = _module(modules, "t_big", rows=[[f"cell {i} {j}" for j in range(1000)] for i in range(1000)])
    with pytest.raises(TooMuchToSearch):
        kept_marker([big], MARK, budget=5000)
