"""First in the forkserver's preload (engine/forkserver.py), and imported nowhere else: the garbage
collector pauses while the modules after it load. Their imports make ~300,000 objects, and the
collections they set off walked them again and again: the built-in CRM's preload (the Anthropic
SDK) took 0.95 s of CPU with the collector on, 0.78 s with it paused. preload_end resumes it."""

from __future__ import annotations

import gc

gc.disable()
