"""The garbage collector's settings for the long-lived processes (workers, the simulator).

Once booted, what they have loaded (the SDKs, their resolved types, the harness: ~220,000-230,000
objects) lives as long as they do: frozen, the collector no longer walks it on every full collection
(~120-140 ms each, during which every call in flight stood still).

After that, what they allocate is per request: request bodies, transcripts, the SDKs' response
objects, held for a call's round trip by each of dozens of slots (or requests) in flight. With the
default first-generation threshold (700 allocations) those survive collection after collection and
are walked again in the older generations before they are freed by reference counting anyway; a
threshold of 20,000 lets most of them go first. Cycles still get collected, only in larger batches.
"""

from __future__ import annotations

import gc

# Measured at 64 in flight, 200 ms per call, three runs each way: the simulator's CPU per
# conversation 7.4-7.5 -> 6.7-6.8 ms; the workers' within the noise.
GEN0_THRESHOLD = 20_000


def settle() -> None:
    """Freeze what is loaded and space out the collections of what comes after."""
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, 20, 50)


def before_exit() -> None:
    """Freeze everything, once a process has nothing left to do: its interpreter's teardown then frees
    its modules by reference counting without walking them in collection after collection (`runner run`
    spent 0.17 s on that after its last result; a process with an SDK loaded, 0.47 s; frozen, 0.03 s).
    What a collection would have finalized at exit is ours to close before: the runner closes its files."""
    gc.freeze()
