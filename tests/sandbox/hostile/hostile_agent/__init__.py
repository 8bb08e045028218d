"""The hostile suite's harness: an "agent" that runs each record's SQL (tests/sandbox/hostile/suite.py)."""
