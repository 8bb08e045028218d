"""An output's results in the formats other tools read: JUnit XML and a markdown summary for CI systems
(junit.py, summary.py; ci.py writes both for `runner report`), Inspect AI eval logs (inspect_log.py),
OpenTelemetry traces (spans.py builds them, otel.py sends them), and the record's conversation both of the
last read from what its harness wrote (conversation.py).

Each reads what `runner report` reads (an output directory, runner/report/build.py) and writes a file or
sends spans; none changes the output. The two that need a library take it as an optional extra (`inspect`,
`otel`) and say so in one line where it is missing.
"""
