"""The hostile suite's harness: an "agent" that runs each record's SQL (tests/sandbox/test_hostile_sql.py)."""
