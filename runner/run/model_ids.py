"""Every model a run names is one the runner knows, or the run does not start on the simulator.

A model id the runner does not know (a typo: "gpt-5.4-mimi") only warned that its price was unknown, and on
the simulator the run went ahead with the simulator playing a model that does not exist. Known: the
runner's models table (runner/models/capabilities.py), the ids the installed SDKs name (their retirement
notes), any the config declares under `models:`, and on the simulator those it serves. This runs before the
providers are asked (runner/models/preflight.py's catalogue), so that a typo is named with the id it meant.
On the real APIs an id the table does not know may be a model newer than the table: there the provider says
whether it exists (its models endpoint), and this is a warning with the same "did you mean".
"""

from __future__ import annotations

import difflib

from runner.config import CLOUDS, Config, ModelRef
from runner.errors import ConfigError
from runner.models.capabilities import BUILTIN, sdk_retirements, table


def check_model_ids(cfg: Config, mode: str) -> list[str]:
    """ConfigError naming every unknown model id (each with the nearest known one) when the runs go to the
    simulator; elsewhere, the same as warnings."""
    known = sorted(set(BUILTIN) | set(sdk_retirements()) | set(cfg.models))
    unknown = []
    for run in cfg.model_runs():
        for where, ref in ((f"runs.{run.name}", run.model_ref()), (f"runs.{run.name}.teacher", run.teacher)):
            if ref is None:
                continue
            if ref.provider in CLOUDS and (ref.model in cfg.models or _cloud_known(ref, mode)):
                continue
            if ref.model not in known and not (mode == "sim" and _served(ref.model)):
                near = difflib.get_close_matches(ref.model, known, n=1, cutoff=0.6)
                hint = f" (did you mean {near[0]}?)" if near else ""
                unknown.append(f"{where}: unknown model {ref.model!r}{hint}")
    if unknown and mode == "sim":
        raise ConfigError(
            "; ".join(unknown) + ". A model the runner's table does not know (runner models) can be "
            "declared under models: in the config"
        )
    return [
        f"{line}: not in the runner's models table; the provider will say whether it exists"
        for line in unknown
    ]


def _served(model: str) -> bool:
    """The simulator plays it: a model of the providers' published pages it serves, or one of its own."""
    from runner.models.sim import rulebook
    from runner.models.sim.policy import PROFILES

    return model in PROFILES or rulebook.known(model) is not None


def _cloud_known(ref: ModelRef, mode: str) -> bool:
    """A cloud's id of a model the table knows (as the first-party model it names), or on the simulator one it
    serves on that cloud's routes."""
    if table(ref.model, ref.provider).known:
        return True
    if mode != "sim":
        return False
    from runner.models.sim import cloud_ids, rulebook

    if ref.provider == "bedrock":
        return cloud_ids.bedrock(ref.model).model is not None
    if ref.provider == "vertex":
        return cloud_ids.vertex(ref.model).model is not None
    return rulebook.known(ref.model) is not None
