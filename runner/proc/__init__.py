"""Processes of a user's interpreter (harness.python) and what they share, apart from the harnesses:

    warm.py         the run's warm interpreter (the zygote's process), and a slot's shim forked from it
    zygote.py       run by path in the user's interpreter: imports the harness's libraries once, forks shims
    shim.py         run by path in the user's interpreter: calls the harness's function, one slot or a
                    worker's slots as threads (host mode)
    interpreter.py  one slot's shim process, as the worker sees it
    hosted.py       a worker's one shim for all its slots (host mode), as the worker sees it
    slot_env.py     a slot-aware os.environ for slots that are threads of one process (loaded by a shim)

Stdlib only in zygote.py, shim.py and slot_env.py: they run in the user's interpreter, which has none of
ours.
"""
