"""pgsandbox-runner: evaluate tool-using LLM agents in parallel, one disposable PostgreSQL per worker."""

__version__ = "0.1.0"
