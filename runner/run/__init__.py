"""One command's assembly of the parts: `runner run` (`job`: preflight, manifest, plan, image, servers,
supervise, finalize) and `runner debug` for the built-in CRM (`debug`) and a user's harness
(`debug_harness`)."""
