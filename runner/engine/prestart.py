"""Each worker's first sandbox, launched by the supervisor as soon as the image is known.

A worker's process is forked once the harness's modules are imported (the forkserver's preload: ~0.9 s
for the Anthropic SDK alone), and its sandbox's server then takes ~0.35 s more to boot. Launched here,
the container boots meanwhile, and the worker takes it over (the sandbox's `launched`) and owns it from
then on: it replaces it, and removes it. A launch that fails only costs the head start: the worker
starts its own. A container nobody took (the run stopped before its worker was spawned) is removed on
leaving; a supervisor killed meanwhile leaves it labelled with its pid, for the next run's sweep.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from loguru import logger

from runner.resources import Resource
from runner.sandbox.base import Launched
from runner.worker.keeper import new_sandbox
from runner.worker.main import WorkerSpec

PARALLEL = 8  # launches at once: the engine serializes much of a container's creation anyway


class Prestart(Resource):
    def __init__(self, specs: list[WorkerSpec]) -> None:
        """`specs`: the first workers' specs (their first sandbox is launched for each)."""
        self.specs = specs
        self._pool: ThreadPoolExecutor | None = None
        self._launches: dict[int, Future[Launched]] = {}

    def start(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(PARALLEL, len(self.specs))),
                                        thread_name_prefix="prestart")
        from runner.sandbox.docker import DockerSandbox

        for spec in self.specs:
            sandbox = new_sandbox(spec, 1)
            assert isinstance(sandbox, DockerSandbox), "only docker sandboxes are launched ahead"
            self._launches[spec.worker] = self._pool.submit(sandbox.launch)

    def take(self, worker: int) -> Launched | None:
        """Worker `worker`'s launched sandbox (waiting for its launch), or None: none was launched for it,
        it was taken already, or its launch failed (the worker starts its own)."""
        launch = self._launches.pop(worker, None)
        if launch is None:
            return None
        try:
            return launch.result()
        except Exception as e:
            logger.debug("worker {}'s sandbox could not be launched ahead ({}); it starts its own", worker, e)
            return None

    def stop(self) -> None:
        from runner.sandbox.docker import remove_launched

        for worker in list(self._launches):
            if (launched := self.take(worker)) is not None:
                remove_launched(launched)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
