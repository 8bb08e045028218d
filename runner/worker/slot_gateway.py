"""A slot's dealings with the run's gateway about its own calls (the gateway counts them to the slot as
`caller`): which trial they belong to, what they cost since its last record, and cutting them off when its
record is cut."""

from __future__ import annotations

from loguru import logger

from runner.gateway.process import abort_calls, set_trial, take_usage
from runner.results.result import Usage


class SlotGateway:
    def __init__(self, url: str | None, token: str | None, caller: str) -> None:
        self.url, self.token, self.caller = url, token, caller

    def tell_trial(self, epoch: int) -> None:
        """Which trial this slot's SDK calls through the gateway now belong to: their own cache keys."""
        if self.url is None:
            return
        try:
            set_trial(self.url, self.token, self.caller, epoch)
        except OSError as e:  # then its calls key as the first trial's: a cached answer may repeat
            logger.warning("could not tell the gateway this record's trial ({}): {}", epoch, e)

    def take_usage(self, parts: int) -> list[Usage]:
        """What this slot's SDK calls through the gateway cost since its last record."""
        if self.url is None:
            return []
        try:
            return take_usage(self.url, self.token, self.caller, parts)
        except OSError as e:  # the counts are a nicety: the record's result must not wait on them
            logger.warning("could not read this record's model calls from the gateway: {}", e)
            return []

    def abort_calls(self) -> None:
        """Its calls in flight cut off (its record was cut at its limit): a thread blocked reading a model's
        answer returns and takes its cut, instead of waiting for the answer while its worker retires."""
        if self.url is None:
            return
        try:
            abort_calls(self.url, self.token, self.caller)
        except OSError as e:
            logger.debug("the gateway did not abort the calls of {}: {}", self.caller, e)
