"""An output's results in the formats other tools read: JUnit XML and a markdown summary for CI systems
(junit.py, summary.py), Inspect AI eval logs (inspect_log.py), OpenTelemetry traces (otel.py, spans.py).

Each reads what `runner report` reads (an output directory, runner/report/build.py) and writes a file or
sends spans; none changes the output. The two that need a library take it as an optional extra (`inspect`,
`otel`) and say so in one line where it is missing.
"""
