"""The clouds' documented facts the simulator serves by: `published/clouds.yaml`, written by an independent
checker from AWS's, Google's and Microsoft's own pages and the official SDKs' sources (each fact with its
`source` key), never from this project's code. The simulator's cloud routes (bedrock.py, vertex.py,
azure.py) read their values here, by the fixture's own paths, so a fact corrected there moves them.

Where the fixture records a conflict or an unknown the routes choose what the official SDK sends, and say
so where they choose.
"""

from __future__ import annotations

import functools
from typing import Any

from runner import yamlfile
from runner.models.sim.rulebook import HERE


@functools.cache
def facts() -> dict[str, Any]:
    data: dict[str, Any] = yamlfile.read(HERE / "clouds.yaml")
    return data


@functools.cache
def vertex_batch() -> dict[str, Any]:
    """What the simulator's Vertex AI batch prediction serves by (`published/vertex_batch.yaml`'s `values`,
    each with the fact it comes from)."""
    data: dict[str, Any] = yamlfile.read(HERE / "vertex_batch.yaml")
    values: dict[str, Any] = data["values"]
    return values


def at(path: str) -> Any:
    """The fact at a dotted path of clouds.yaml (`bedrock.request_body.anthropic_version.value`)."""
    value: Any = facts()
    for part in path.split("."):
        value = value[part]
    return value


def installed_sdk_version() -> str:
    """The `anthropic_version` the installed anthropic SDK puts in Bedrock and Vertex bodies (its
    ANTHROPIC_API_VERSION: the fixture's conflict "SDK anthropic_version default (installed vs public)" says
    to read it; neither cloud's page names it)."""
    from anthropic._constants import ANTHROPIC_API_VERSION

    return str(ANTHROPIC_API_VERSION)


def anthropic_versions(cloud: str) -> frozenset[str]:
    """The `anthropic_version` values a cloud's body may carry: the one its pages document
    (bedrock.request_body.anthropic_version: bedrock-2023-05-31, aws-messages-api; vertex.request_body.
    anthropic_version: vertex-2023-10-16, anthropic-vertex), and what the installed SDK sends instead
    (conflicts: the two disagree; the SDK's is accepted, as what the official client sends)."""
    return frozenset({str(at(f"{cloud}.request_body.anthropic_version.value")), installed_sdk_version()})


def azure_api_versions() -> frozenset[str]:
    """The dated api-versions the Azure OpenAI reference lists as GA (azure.endpoints.dated_legacy.ga_history,
    ms-reference); preview versions are not listed there, so the simulator does not serve them."""
    return frozenset(str(v) for v in at("azure.endpoints.dated_legacy.ga_history"))
