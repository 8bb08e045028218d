"""Last in the forkserver's preload (engine/forkserver.py): the collector resumes, with what the
preload loaded frozen, so that no collection in the forkserver or in a worker forked from it walks
those objects (nor, by touching them, copies the pages a worker shares with the others)."""

from __future__ import annotations

import gc

gc.freeze()
gc.enable()
