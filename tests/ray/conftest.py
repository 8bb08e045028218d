"""A local multi-node Ray cluster (Ray's own test utility): a head without CPUs, so every worker
actor lands on one of the worker nodes, as on a real cluster. Its processes listen on 127.0.0.1
only: Ray's switch for single-machine clusters is set before Ray is imported."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback addresses (ray._private.services)
ray = pytest.importorskip("ray")  # the `ray` marker makes a skip fail where CI is set

NODES, CPUS_PER_NODE = 3, 2


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        # the nodes join as fast as the machine lets them: a loaded CI machine may take longer than the 30 s
        # ray's helpers wait for each (add_node's and wait_for_nodes' defaults), so wait here, as long as it takes
        nodes = [cluster.add_node(wait=False, num_cpus=CPUS_PER_NODE) for _ in range(NODES)]
        for node in nodes:
            cluster._wait_for_node(node, timeout=300)
        cluster.wait_for_nodes(timeout=300)
        yield cluster
    finally:
        cluster.shutdown()
