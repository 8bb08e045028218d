"""The built-in agents' one budget across nodes: a BudgetActor on the head, RemoteBudgets in actors
on three other nodes. What they are admitted together is what the limit allows, not N times it; a
dead caller's reservations are given back by lane, as a dead local worker's are."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from runner.budget.ratelimit import Reservation
from runner.config import Limits

pytestmark = [pytest.mark.slow]
CALLERS, RPM = 12, 30.0


class _Caller:
    def __init__(self, budget_actor: Any, lane: int) -> None:
        from runner.engine.ray_executor import RemoteBudget

        self.budget = RemoteBudget(budget_actor)
        self.budget.lane = lane

    def take_for(self, seconds: float) -> tuple[str, int, float, float]:
        """Reservations taken (and kept: in flight) until the time is up; on which node; when it
        began and ended (wall clock: callers on a loaded machine start seconds apart)."""
        import ray

        began = time.time()
        taken, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            if isinstance(self.budget.try_acquire(0, 10.0, 10.0), Reservation):
                taken += 1
            else:
                time.sleep(0.01)
        return ray.get_runtime_context().get_node_id(), taken, began, time.time()


@pytest.fixture(scope="module")
def driver(ray_cluster: Any) -> Iterator[Any]:
    import ray

    ray.init(address=ray_cluster.address, log_to_driver=False, configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def test_callers_on_three_nodes_share_one_budget_and_a_dead_ones_share_comes_back(driver: Any) -> None:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from runner.engine.ray_executor import BudgetActor, RemoteBudget

    ray = driver
    head = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    actor = ray.remote(num_cpus=0)(BudgetActor).options(scheduling_strategy=head).remote(
        {"k": Limits(rpm=RPM)}, {}, CALLERS)
    callers = [ray.remote(num_cpus=0.5)(_Caller).remote(actor, lane) for lane in range(CALLERS)]
    seconds = 3.0
    results = ray.get([c.take_for.remote(seconds) for c in callers])
    nodes = {r[0] for r in results}
    total = sum(r[1] for r in results)
    span = max(r[3] for r in results) - min(r[2] for r in results)  # >= seconds: callers start apart
    assert len(nodes) == 3  # every worker node, none on the head (it has no CPUs)
    # The bucket starts with a minute's worth (30) and refills at 0.5/s: 12 callers together get that
    # much, plus what refilled while any of them took, where 12 limiters of their own would have let
    # 12 x 30 through.
    assert RPM <= total <= RPM + span * RPM / 60 + 2, (span, results)
    budget = RemoteBudget(actor)
    assert budget.snapshot(0)["in_flight"] == total
    lane, held = next((i, r[1]) for i, r in enumerate(results) if r[1] > 0)
    ray.kill(callers[lane])
    assert budget.reclaim(lane) == held
    assert budget.snapshot(0)["in_flight"] == total - held
