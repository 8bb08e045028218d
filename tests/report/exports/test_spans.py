"""A result's trace as spans.py builds it, where the result did not record when its calls started (outputs
written before it did, a harness of its own): laid end to end, and said so."""

from __future__ import annotations

from runner.report.exports.spans import record_trace
from runner.results.manifest import RunEntry
from tests.report.exports.outputs import result


def test_calls_without_their_start_are_laid_end_to_end_from_the_record_s_start_and_marked_sequenced() -> None:
    r = result("r", "rec-1", 0, "success")
    assert r.output is not None
    for call in r.output["model_calls"]:
        del call["started_at"]
    del r.output["timings"]
    root = record_trace(r)
    assert root.attributes["pgsandbox.timing"] == "sequenced"
    first, second, tool = root.children
    # without the run's spec, the model the output names
    assert [s.name for s in root.children] == ["chat claude-sonnet-5-5"] * 2 + ["execute_tool search_accounts"]
    assert first.start_ns == root.start_ns and second.start_ns == first.end_ns == root.start_ns + 400_000_000
    assert tool.start_ns == tool.end_ns == second.end_ns  # after its turn's calls; how long it took is not known


def test_with_the_run_s_spec_a_call_names_the_model_asked_for_and_the_one_that_answered() -> None:
    r = result("r", "rec-1", 0, "success")
    root = record_trace(r, RunEntry(name="r", provider="openai", model="gpt-5.4"))
    chat = root.children[0]
    assert chat.name == "chat gpt-5.4" and chat.attributes["gen_ai.provider.name"] == "openai"
    assert (chat.attributes["gen_ai.request.model"], chat.attributes["gen_ai.response.model"]) == \
           ("gpt-5.4", "sim-strong")  # the simulator played it
    assert root.attributes["pgsandbox.timing"] == "measured"
