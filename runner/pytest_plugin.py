"""pytest plugin, shipped with the package (entry point pytest11): one model gateway for a whole session.

A suite of model evaluations (tool selection, arguments...) run with pytest-xdist has N worker processes,
each with its own SDK clients: per-process rate limiters do not coordinate, a response cache is each
suite's own code, and batch APIs need a rewrite. `pytest --runner-gateway gw.yaml -n 4` starts one
`runner gateway` (docs/gateway.md) for the session, once, in the xdist controller (or the only process),
and points every worker's official SDKs and LiteLLM at it (ANTHROPIC_BASE_URL, OPENAI_BASE_URL and
*_API_BASE, the worker in the path): one rate-limit budget for all workers, retries, the response cache,
batch mode. At the end of the session the terminal says what the suite's model calls were and cost.

Without the option the plugin does nothing: it is loaded in every pytest session of an environment the
runner is installed in.
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

RUN = "pytest"  # the name a session's calls are counted under (GET /stats)
MAIN = "main"  # the worker name of a session without xdist workers
_PLUGIN = "runner-gateway-session"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("runner-gateway", "pgsandbox-runner's model gateway (docs/pytest.md)")
    group.addoption(
        "--runner-gateway",
        metavar="CONFIG",
        default=None,
        help="start one model gateway for the session from CONFIG (a YAML with rate_limits, retry, "
        "cache_dir, batch...) and point every worker's SDKs at it",
    )
    group.addoption(
        "--runner-gateway-url",
        metavar="URL",
        default=None,
        help="use a gateway that already runs (a team's `runner gateway`) instead of starting one",
    )
    group.addoption(
        "--runner-gateway-sim",
        metavar="URL",
        default=None,
        help="the gateway calls this simulator (`runner sim serve`) instead of the real APIs",
    )
    group.addoption(
        "--runner-gateway-batch",
        action="store_true",
        default=False,
        help="send the calls through the providers' batch APIs (half the price, slower answers)",
    )
    group.addoption(
        "--runner-gateway-no-cache",
        action="store_true",
        default=False,
        help="neither read nor write the response cache",
    )
    group.addoption(
        "--runner-gateway-run",
        metavar="NAME",
        default=RUN,
        help=f"the name the session's calls are counted under (default {RUN})",
    )
    parser.addini(
        "runner_gateway", "CONFIG for --runner-gateway, relative to the ini file", type="paths", default=[]
    )


def config_path(config: pytest.Config) -> str | None:
    """--runner-gateway, else the ini file's runner_gateway."""
    given = config.getoption("runner_gateway")
    from_ini = config.getini("runner_gateway")
    return str(given) if given else str(from_ini[0]) if from_ini else None


def point_sdks(url: str, run: str, worker: str, *, token: str | None) -> dict[str, str]:
    """This process's SDKs at the gateway, the worker in the path, the gateway's token as their keys; returns
    what it set."""
    import os

    from runner.harness.base import gateway_env

    env = gateway_env(url.rstrip("/"), run, worker, token=token)
    os.environ.update(env)
    return env


class SessionGateway:
    """The controller's gateway: started in pytest_configure, stopped at the session's last cleanup; tells
    each xdist worker where it is and prints the session's calls at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.run = str(config.getoption("runner_gateway_run"))
        self.sim_url: str | None = config.getoption("runner_gateway_sim")
        self.external: str | None = config.getoption("runner_gateway_url")
        self.workers: list[str] = []
        self.url = ""
        self.token: str | None = None  # what the gateway admits: ours, or (--runner-gateway-url) the team's
        self.log_path: Path | None = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> SessionGateway:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        import os

        from runner.gateway.settings import TOKEN_ENV

        if self.external:
            self.url = self.external.rstrip("/")
            # the team's gateway's token, given to this session
            self.token = os.environ.get(TOKEN_ENV) or None
        else:
            from runner.gateway import gateway_settings
            from runner.gateway.process import GatewayServer, new_token

            home = self._home()
            self.log_path = home / "gateway.log"
            self.token = new_token()
            settings = gateway_settings(self._gateway_config(home), sim_url=self.sim_url)
            gw = GatewayServer(settings, self.token, log_path=str(self.log_path))
            self.url = self._stack.enter_context(gw).url
        point_sdks(self.url, self.run, MAIN, token=self.token)

    def stop(self) -> None:
        self._stack.close()

    def _home(self) -> Path:
        """Where the gateway's log and batch journal go: pytest's cache directory (-o cache_dir), kept
        between sessions as a run's output is."""
        cache = getattr(self.config, "cache", None)  # None with -p no:cacheprovider
        home = (
            Path(cache.mkdir("runner-gateway"))
            if cache is not None
            else Path(self.config.rootpath) / ".pytest_cache" / "d" / "runner-gateway"
        )
        home.mkdir(parents=True, exist_ok=True)
        return home

    def _gateway_config(self, home: Path) -> Any:
        """The config file's gateway keys (relative paths from the file's directory, as a run reads them);
        the batch journal under .pytest_cache."""
        from runner.config import load_config, resolve_path
        from runner.errors import ConfigError

        path = config_path(self.config)
        if path is None or not Path(path).is_file():
            raise pytest.UsageError(
                f"--runner-gateway {path}: no such file (a YAML of the gateway's keys: "
                "rate_limits, retry, cache_dir, batch; docs/pytest.md)"
            )
        try:
            cfg = load_config(path, gateway_only=True)
        except ConfigError as e:
            raise pytest.UsageError(f"--runner-gateway: {e}") from None
        update: dict[str, Any] = {"output_dir": home}
        if cfg.cache_dir is not None:
            update["cache_dir"] = resolve_path(cfg, cfg.cache_dir)
        if self.config.getoption("runner_gateway_no_cache"):
            update["cache"] = False
        if self.config.getoption("runner_gateway_batch"):
            update["batch"] = cfg.batch.model_copy(update={"enabled": True})
        return cfg.model_copy(update=update)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """pytest-xdist, before it starts a worker: where the gateway is
        (the worker points its SDKs there)."""
        node.workerinput["runner_gateway"] = {"url": self.url, "run": self.run, "token": self.token}
        self.workers.append(str(node.gateway.id))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        try:
            counts = _get(f"{self.url}/stats", self.token).get(self.run, {})
            batches = (
                _get(f"{self.url}/batches", self.token)
                if self.config.getoption("runner_gateway_batch")
                else {}
            )
            # a worker's counts are kept by its name alone: only a gateway of this session's own has ours
            per_worker = (
                {w: _take(self.url, w, self.token) for w in self.workers or [MAIN]}
                if not self.external
                else {}
            )
        except OSError as e:
            terminalreporter.write_line(f"model gateway at {self.url}: no counts ({e})", yellow=True)
            return
        terminalreporter.section("model calls through pgsandbox-runner's gateway")
        for line in usage_lines(counts, per_worker, batches):
            terminalreporter.write_line(line)
        if self.log_path is not None:
            terminalreporter.write_line(f"gateway log: {self.log_path}")


def usage_lines(
    counts: dict[str, Any], per_worker: dict[str, dict[str, Any]], batches: dict[str, Any]
) -> list[str]:
    """What a session's model calls were and cost, from the gateway's counts (GET /stats, one run's)."""
    calls = int(counts.get("llm_calls", 0))
    hits, errors = int(counts.get("cache_hits", 0)), int(counts.get("errors", 0))
    answered = calls - hits - errors
    cost = (
        "unknown (a model without a known price)"
        if counts.get("unpriced_calls")
        else f"${float(counts.get('cost_usd', 0.0)):.4f}"
    )
    latency = f", {float(counts.get('latency_seconds', 0.0)) / answered:.2f} s each" if answered > 0 else ""
    lines = [
        f"{calls} model call(s): {answered} answered by the model{latency}, {hits} from the response cache, "
        f"{errors} error(s) passed to the caller; {int(counts.get('retries', 0))} retried "
        f"({int(counts.get('rate_limited', 0))} after a 429)",
        f"tokens: {int(counts.get('input_tokens', 0))} in (+{int(counts.get('cache_read_tokens', 0))} read "
        "from "
        f"the prompt cache), {int(counts.get('output_tokens', 0))} out; cost {cost}",
    ]
    if per_worker:
        lines.append(
            "by worker: " + ", ".join(f"{w} {int(c.get('llm_calls', 0))}" for w, c in per_worker.items())
        )
    if batches:
        lines.append(
            f"batch mode: {int(batches.get('batches_submitted', 0))} batch(es), "
            f"{int(batches.get('requests_answered', 0))} call(s) answered through them"
        )
    return lines


def _get(url: str, token: str | None) -> dict[str, Any]:
    req = urllib.request.Request(url, headers={"x-runner-token": token} if token else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return dict(json.loads(r.read()))


def _take(url: str, worker: str, token: str | None) -> dict[str, Any]:
    req = urllib.request.Request(
        f"{url}/workers/{worker}/take",
        method="POST",
        data=b"",
        headers={"x-runner-token": token} if token else {},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return dict(json.loads(r.read()))


def pytest_configure(config: pytest.Config) -> None:
    given = getattr(config, "workerinput", {}).get("runner_gateway")
    if given:  # an xdist worker: the controller's gateway, this worker's name in the path
        point_sdks(
            given["url"],
            given["run"],
            str(config.workerinput["workerid"]),  # type: ignore[attr-defined]
            token=given["token"],
        )
        return
    if hasattr(config, "workerinput"):
        return
    if config_path(config) is None and not config.getoption("runner_gateway_url"):
        return
    resources = contextlib.ExitStack()
    config.add_cleanup(resources.close)  # the session's last cleanup: after every worker has finished
    config.pluginmanager.register(resources.enter_context(SessionGateway(config)), _PLUGIN)
