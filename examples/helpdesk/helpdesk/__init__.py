"""A support team's ticket-handling evaluation, as they wrote it for one shared database."""

__version__ = "0.3.1"
