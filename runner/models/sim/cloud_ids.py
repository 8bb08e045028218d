"""Which published model a cloud's model id names, by the id formats clouds.yaml records (the simulator's
own reading: it never shares the runner's mapping, runner/models/cloud_models.py).

Bedrock (bedrock.model_ids, anthropic-model-ids, anthropic-bedrock-legacy): `anthropic.claude-{name}-{major}-
{minor}-{YYYYMMDD}-v1:0` before the 4.6 generation, `anthropic.claude-{name}-{major}-{minor}` from it on
(`anthropic.claude-opus-4-6-v1` the last with a `-v1`); an inference profile is `{geo}.{base id}` with geo
one of global, us, eu, jp, apac (inferred); an ARN is percent-encoded into one path segment and ends in the
id. Newer models cannot be invoked on demand by their bare id: an inference profile is required
(bedrock.model_ids.on_demand_requires_profile, strands-troubleshoot, inferred: "4.5 generation onward").

Vertex AI (vertex.model_ids, anthropic-model-ids; conflict "Vertex model ID suffix" resolved
generationally): `claude-{name}-{major}-{minor}@{YYYYMMDD}` before the 4.6 generation, the Claude API's
dateless id from it on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runner.models.sim import cloudbook, rulebook

_VERSION_SUFFIX = re.compile(r"-v\d+(?::\d+)?$")
_GENERATION = re.compile(r"^claude-[a-z]+-(\d+)(?:-(\d))?(?:-\d{8})?$|^claude-(\d+)-(\d)-[a-z]+-\d{8}$")


@dataclass(frozen=True)
class Named:
    """A cloud model id read: the published first-party model it serves (None: none), and the refusal of an
    id that names one the wrong way (its wording, from clouds.yaml)."""

    model: str | None
    refusal: str | None = None


def generation(model: str) -> tuple[int, int]:
    """(major, minor) of a first-party Claude id: claude-sonnet-4-5-20250929 is (4, 5), claude-sonnet-4
    (4, 0), claude-3-7-sonnet-20250219 (3, 7); (0, 0) for an id of another form."""
    m = _GENERATION.match(model)
    if m is None:
        return 0, 0
    major, minor = (m[1], m[2]) if m[1] else (m[3], m[4])
    return int(major), int(minor or 0)


def bedrock(model_id: str) -> Named:
    base = model_id.rsplit("/", 1)[-1]  # an ARN's resource: foundation-model/..., inference-profile/...
    geos = {g for row in cloudbook.at("bedrock.model_ids.legacy_table") for g in row["prefixes"]} | set(
        cloudbook.at("bedrock.model_ids.inference_profile_id.geos")
    )
    head, _, rest = base.partition(".")
    profiled = head in geos
    if profiled:
        base = rest
    vendor, dot, name = base.partition(".")
    if not dot or vendor != "anthropic":
        return Named(None)
    first_party = _VERSION_SUFFIX.sub("", name)
    published = rulebook.book("anthropic").resolve(first_party)
    if published is None:
        return Named(None)
    if not profiled and not model_id.startswith("arn:") and generation(first_party) >= (4, 5):
        rule = cloudbook.at("bedrock.model_ids.on_demand_requires_profile")
        return Named(published, str(rule["message"]).replace("{modelId}", model_id))
    return Named(published)


def vertex(model_id: str) -> Named:
    base, at, date = model_id.partition("@")
    first_party = f"{base}-{date}" if at else base
    if not at and (0, 0) < generation(base) < (4, 6):
        return Named(None)  # a pre-4.6 model is named with its @date on Vertex AI
    return Named(rulebook.book("anthropic").resolve(first_party))
