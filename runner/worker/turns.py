"""Who may run on a worker's sandbox now: every slot at once, or one alone.

A record whose sandbox failed it (the server crashed, froze, or ran out of a resource every session
shares) may have been its own cause, or a neighbour's. Run again beside the same neighbours, the
same neighbour can fail it again, as many times as it has attempts. So a record run again after such
a failure runs alone: the other slots finish what they run, then wait until it is done. Whatever
fails it then is its own doing; its neighbours' results stay theirs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Turns:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sharing = 0  # slots running side by side now
        self._alone = False  # one slot runs alone now
        self._waiting = 0  # slots waiting to run alone: they go before new side-by-side runs

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._alone and not self._waiting)
            self._sharing += 1
        try:
            yield
        finally:
            with self._cond:
                self._sharing -= 1
                self._cond.notify_all()

    @contextmanager
    def alone(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            try:
                self._cond.wait_for(lambda: not self._alone and not self._sharing)
            finally:
                self._waiting -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._cond:
                self._alone = False
                self._cond.notify_all()
