"""Does the model pick the right tool, with the right arguments, for each request? One model call per test."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from conftest import CASES, TOOLS, first_tool_call

by_id = pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])


class TestToolSelection:
    @by_id
    def test_selects_the_expected_tool(self, client: anthropic.Anthropic, thinking: dict[str, Any],
                                       case: dict[str, Any]) -> None:
        call = first_tool_call(client, thinking, case)
        assert call is not None, "the model called no tool"
        assert call[0] == case["tool"]


class TestArgumentCorrectness:
    @by_id
    def test_passes_the_expected_arguments(self, client: anthropic.Anthropic, thinking: dict[str, Any],
                                           case: dict[str, Any]) -> None:
        call = first_tool_call(client, thinking, case)
        assert call is not None, "the model called no tool"
        assert call[1] == case["args"], f"{call[0]}({call[1]}) instead of {case['tool']}({case['args']})"


class TestToolSchemas:
    def test_every_tool_has_an_object_schema(self) -> None:
        assert all(t["input_schema"]["type"] == "object" and t["description"] for t in TOOLS)

    def test_every_expected_call_names_a_tool_and_its_required_arguments(self) -> None:
        schemas = {t["name"]: t["input_schema"] for t in TOOLS}
        for case in CASES:
            schema = schemas[case["tool"]]
            assert set(schema.get("required", [])) <= set(case["args"]), case["id"]
