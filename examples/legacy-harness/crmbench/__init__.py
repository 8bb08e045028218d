"""crmbench: a team's own CRM agent benchmark, written before any parallel runner existed.

Its design assumes one shared database: every conversation does BEGIN / TRUNCATE ... RESTART
IDENTITY CASCADE / seed / turns / ROLLBACK. Nothing in here knows about pgsandbox-runner.
"""
