"""Which first-party model a cloud's model id names, by each cloud's id format, so a cloud run is held to
that model's capabilities (runner/models/capabilities.py): what it takes, its limits, how it thinks.

- Bedrock: `anthropic.claude-sonnet-4-5-20250929-v1:0` (dated generations, with a `-vN:M` or `-vN` version
  suffix) or `anthropic.claude-sonnet-4-6` (from the 4.6 generation on); a cross-region inference profile
  puts its geography first (`us.`, `eu.`, `jp.`, `apac.`, `global.`); an ARN ends in one of these after its
  last `/` (Anthropic's "Model IDs and versions" and "Claude on Amazon Bedrock" pages).
- Vertex AI: `claude-sonnet-4-5@20250929` (dated generations: `@` for the API's `-`) or `claude-sonnet-4-6`,
  the API's own id (Anthropic's "Claude on Vertex AI" page).
- Azure OpenAI: calls name a deployment; the run names the model it serves (its `model`), so the id is
  already OpenAI's.
"""

from __future__ import annotations

import re

GEOGRAPHIES = ("global", "us", "eu", "jp", "apac")
_VERSION = re.compile(r"-v\d+(?::\d+)?$")


def first_party(provider: str, model: str) -> str | None:
    """The Anthropic or OpenAI id of the model a cloud's id names (None: not one of that cloud's forms)."""
    if provider == "bedrock":
        name = model.rsplit("/", 1)[-1]
        geo, _, rest = name.partition(".")
        if geo in GEOGRAPHIES:
            name = rest
        vendor, dot, base = name.partition(".")
        return _VERSION.sub("", base) if dot and vendor == "anthropic" and base.startswith("claude") else None
    if provider == "vertex":
        return model.replace("@", "-") if model.startswith("claude") else None
    return model
