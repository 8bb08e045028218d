"""opsagent: a command-line agent for the ops desk, in the shape of Claude Code's print mode
(`opsagent -p PROMPT --output-format json`): it works in the current directory (reads AGENT.md, writes
report.md and its session under .opsagent/), calls Claude through the official SDK (ANTHROPIC_BASE_URL,
ANTHROPIC_API_KEY) and its tools on the database in DATABASE_URL. A stand-in for Claude Code, Gemini CLI or
Codex CLI with a CRM tool server: what the runner does around it is the same for those."""
