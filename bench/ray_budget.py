"""One budget across nodes: 3 Ray nodes x 4 worker actors against a simulator limited to 600 RPM.

The workers are actors spread over a local multi-node Ray cluster (Ray's own test utility; a head
without CPUs, so none runs beside the budget), each calling the simulator through the runner's
ModelClient with the budget `--executor ray` hands its workers: a RemoteBudget over the one
BudgetActor on the head. The load is the local rate-limit benchmark's (bench/ratelimit.py): all
call during a warm-up that spends the buckets' first minute, then half of them run out of work and
the simulator counts what it served, and answered 429, over the window.
"""

from __future__ import annotations

import os
import time
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only, before Ray is imported

from bench.common import table
from bench.ratelimit import RPM, call_until, load_client
from runner.config import Latency, Limits, SimSettings
from runner.models.sim.process import SimServer


class Caller:
    """A worker's model calls, nothing else: sends until its stop time."""

    def __init__(self, url: str, budget_actor: Any) -> None:
        from loguru import logger

        from runner.engine.ray_executor import RemoteBudget

        logger.remove()
        self.client = load_client(url, RemoteBudget(budget_actor))

    def node(self) -> str:
        import ray

        node: str = ray.get_runtime_context().get_node_id()
        return node

    def call_until(self, stop_at: float) -> int:
        return call_until(self.client, stop_at)


def ray_budget(nodes: int = 3, per_node: int = 4, warmup: float = 15, window: float = 40,
               rpm: float = RPM) -> dict[str, Any]:
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from runner.engine.ray_executor import BudgetActor

    settings = SimSettings(latency=Latency(p50_ms=100), limits={"sim-strong": Limits(rpm=rpm)})
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(nodes):
            cluster.add_node(num_cpus=per_node)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        with SimServer(settings) as sim:
            head = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
            budget = ray.remote(num_cpus=0)(BudgetActor).options(scheduling_strategy=head).remote(
                {"k": Limits(rpm=rpm)}, {}, 0)
            caller = ray.remote(num_cpus=1)(Caller)
            callers: list[Any] = [caller.remote(sim.url, budget) for _ in range(nodes * per_node)]
            placed = ray.get([c.node.remote() for c in callers])
            t0 = time.time() + 1
            refs = [c.call_until.remote(t0 + warmup + (window + 1 if i % 2 else 0)) for i, c in enumerate(callers)]
            time.sleep(max(0.0, t0 + warmup - time.time()))
            a = sim.stats()
            time.sleep(window)
            b = sim.stats()
            ray.get(refs)
    finally:
        ray.shutdown()
        cluster.shutdown()
    ok = int(b.get("ok", 0)) - int(a.get("ok", 0))  # type: ignore[call-overload]
    limited = int(b.get("429", 0)) - int(a.get("429", 0))  # type: ignore[call-overload]
    share = ok / window * 60 / rpm
    share_429 = limited / max(ok + limited, 1)
    return {"nodes": nodes, "per_node": per_node, "spread": len(set(placed)), "rpm": rpm, "warmup": warmup,
            "window": window, "served_rpm": ok / window * 60, "share_of_limit": share, "requests": ok + limited,
            "429s": limited, "share_429": share_429, "met": share >= 0.95 and share_429 <= 0.01}


def render(r: dict[str, Any]) -> str:
    t = table(["nodes x actors", "nodes used", "served RPM", f"share of the {r['rpm']:.0f} RPM limit", "requests",
               "429s", "share of 429s"],
              [[f"{r['nodes']} x {r['per_node']}", r["spread"], r["served_rpm"], f"{r['share_of_limit']:.1%}",
                r["requests"], r["429s"], f"{r['share_429']:.2%}"]])
    verdict = "met" if r["met"] else "**missed**"
    return (f"### Rate limits across nodes: {r['nodes']} Ray nodes x {r['per_node']} actors, simulator limited to "
            f"{r['rpm']:.0f} RPM\n\n"
            f"A local multi-node Ray cluster; every actor draws from the one budget actor on the head (what "
            f"`--executor ray` gives its workers). {r['warmup']:.0f} s warm-up, then half of the actors stop and the "
            f"simulator counts the next {r['window']:.0f} s.\n\n{t}\n\n"
            f"Target: >= 95 % of the limit used, <= 1 % of calls answered 429: {verdict}.\n")
