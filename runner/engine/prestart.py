"""Each worker's first sandbox, launched by the supervisor as soon as the image is known.

A worker's process is forked once the harness's modules are imported (the forkserver's preload: ~0.9 s
for the Anthropic SDK alone), and its sandbox's server then takes ~0.35 s more to boot. Launched here,
the container boots meanwhile, and the worker takes it over (the sandbox's `launched`) and owns it from
then on: it replaces it, and removes it. A launch that fails only costs the head start: the worker
starts its own. A container nobody took (the run stopped before its worker was spawned) is removed on
leaving; a supervisor killed meanwhile leaves it labelled with its pid, for the next run's sweep.

At most one container per core boots at a time. Booting is CPU (the engine's namespaces, the data
directory's copy, the server's start: ~0.3 CPU-s), so 8 booting at once on 2 cores are all ready
after ~2.5 s, while two at a time have the first pair ready after ~0.5 s and the last at the same
~2.5 s: the first workers run records meanwhile, at little CPU. A container holds its turn until its
server's socket appears (or BOOT_TURN_SECONDS), not until a login: the rest of its boot is short.
Measured on 2 cores, 8 workers of examples/helpdesk (mean seconds from launch to a worker's first
record, three runs each): two turns 1.63-1.71; four 1.79-1.91 (the engine's create-and-start calls
slow down together: ~0.15 s alone, 0.25-0.4 s at once); turns released at launch, not at the
socket, 1.94-2.01.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

from loguru import logger

from runner.resources import Resource
from runner.sandbox.base import Launched, socket_file
from runner.worker.main import WorkerSpec
from runner.worker.sandbox_boot import new_sandbox

if TYPE_CHECKING:
    from runner.sandbox.docker import DockerSandbox

BOOT_TURN_SECONDS = 3.0  # the longest a booting container holds its turn (an engine slower than ever seen)


class Prestart(Resource):
    def __init__(self, specs: list[WorkerSpec]) -> None:
        """`specs`: the first workers' specs (their first sandbox is launched for each)."""
        self.specs = specs
        self._threads: list[threading.Thread] = []
        self._launches: dict[int, Future[Launched]] = {}
        self._turns = threading.BoundedSemaphore(max(1, len(os.sched_getaffinity(0))))
        self._stopping = threading.Event()

    def start(self) -> None:
        from runner.sandbox.docker import DockerSandbox

        for spec in self.specs:
            sandbox = new_sandbox(spec, 1)
            assert isinstance(sandbox, DockerSandbox), "only docker sandboxes are launched ahead"
            launch: Future[Launched] = Future()
            self._launches[spec.worker] = launch
            t = threading.Thread(
                target=self._launch, args=(sandbox, launch), daemon=True, name=f"prestart-{spec.worker}"
            )
            t.start()
            self._threads.append(t)

    def _launch(self, sandbox: DockerSandbox, launch: Future[Launched]) -> None:
        """Launch in its turn; the worker may take it at once, and the turn passes once it has booted."""
        with self._turns:
            if self._stopping.is_set():
                launch.set_exception(RuntimeError("the run stopped before its turn"))
                return
            t0 = time.monotonic()
            try:
                launched = sandbox.launch()
            except BaseException as e:
                launch.set_exception(e)
                return
            launch.set_result(launched)
            t1 = time.monotonic()
            if launched.socket_home is not None:
                ready = socket_file(os.path.join(launched.socket_home, "run"))
                deadline = t1 + BOOT_TURN_SECONDS
                while not (os.path.exists(ready) or self._stopping.is_set() or time.monotonic() > deadline):
                    time.sleep(0.01)
            logger.debug(
                "{} launched in {:.2f}s, its server up {:.2f}s later",
                launched.id,
                t1 - t0,
                time.monotonic() - t1,
            )

    def launched(self, worker: int) -> bool:
        """Whether take(worker) answers at once (its launch ended, or it has none)."""
        launch = self._launches.get(worker)
        return launch is None or launch.done()

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

        self._stopping.set()
        for worker in list(self._launches):
            if (launched := self.take(worker)) is not None:
                remove_launched(launched)
        for t in self._threads:
            t.join()
        self._threads = []
