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
        for _ in range(NODES):
            cluster.add_node(num_cpus=CPUS_PER_NODE)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()
