"""Config: validated before anything starts, errors name file:line and field, flags override."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from runner.config import Config, load_config, resolve_mode
from runner.errors import ConfigError

GOOD = """\
dataset: data.jsonl
workers: 2
runs:
  - name: a
    provider: anthropic
    model: claude-sonnet-5-5
  - name: b
    agent: atlas
    provider: openai
    model: gpt-5.4-mini
    teacher: {provider: anthropic, model: claude-sonnet-5-5}
rate_limits:
  anthropic: {preset: tier2}
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_default_config_loads() -> None:
    cfg = load_config()
    assert {r.name for r in cfg.runs} == {"claude-sonnet", "gpt-large", "gpt-mini", "atlas"}
    assert cfg.dataset.is_file()


def test_presets_and_relative_dataset(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, GOOD))
    assert cfg.dataset == tmp_path / "data.jsonl"
    assert cfg.rate_limits["anthropic"].resolved().rpm == 1000


@pytest.mark.parametrize("bad,line,field", [
    (GOOD.replace("workers: 2", "workers: -1"), 2, "workers"),
    (GOOD.replace("model: gpt-5.4-mini", "model: gpt-5.4-mini\n    temperature: hot"), 11, "runs.1.temperature"),
    (GOOD.replace("    teacher: {provider: anthropic, model: claude-sonnet-5-5}\n", ""), 7, "runs.1"),
    (GOOD.replace("provider: openai", "provider: acme"), 9, "runs.1.provider"),
    (GOOD + "colour: blue\n", 14, "colour"),
])
def test_errors_name_file_line_and_field(tmp_path: Path, bad: str, line: int, field: str) -> None:
    p = _write(tmp_path, bad)
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert f"{p}:{line}" in str(info.value) and field in str(info.value)


@pytest.mark.parametrize("bad,said", [
    (GOOD.replace("workers: 2", "wrokers: 2"), "c.yaml:2: wrokers: not a setting; did you mean workers?"),
    (GOOD.replace("model: claude-sonnet-5-5\n  - name: b", "modle: claude-sonnet-5-5\n  - name: b"),
     "runs.0.modle: not a setting; did you mean model?"),
    (GOOD.replace("{preset: tier2}", "{preset: tier2, rmp: 9}"),
     "rate_limits.anthropic.rmp: not a setting; did you mean rpm?"),
    (GOOD + "provider: sim\n", "provider: not a setting; did you mean providers?"),  # as written, not providers_mode
])
def test_an_unknown_key_gets_a_did_you_mean(tmp_path: Path, bad: str, said: str) -> None:
    """Before: "Extra inputs are not permitted", and no hint."""
    with pytest.raises(ConfigError, match=re.escape(said)):
        load_config(_write(tmp_path, bad))


def test_yaml_syntax_error_has_a_line(tmp_path: Path) -> None:
    p = _write(tmp_path, "runs: [\n  - name: a\n")
    with pytest.raises(ConfigError, match=r"c\.yaml:\d+: not valid YAML"):
        load_config(p)


def test_flags_override_and_are_validated(tmp_path: Path) -> None:
    p = _write(tmp_path, GOOD)
    assert load_config(p, {"workers": 7}).workers == 7
    with pytest.raises(ConfigError, match="command line: workers"):
        load_config(p, {"workers": 0})


def test_mode_follows_the_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(_write(tmp_path, GOOD))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert resolve_mode(cfg) == "sim"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-y")
    assert resolve_mode(cfg) == "real"


def test_missing_key_in_real_mode_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.models.client import make_provider
    from runner.models.settings import client_settings

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    cfg = load_config(_write(tmp_path, GOOD), {"providers_mode": "real"})
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY is not set"):
        make_provider(cfg.runs[0], client_settings(cfg), None)


def test_one_name_per_concept_in_yaml_and_flags(tmp_path: Path) -> None:
    """`providers` and `force_resume` as the flags say them (--providers, --force-resume); the old keys read."""
    new = load_config(_write(tmp_path, GOOD + "providers: sim\nforce_resume: true\nout: o\n"))
    old = load_config(_write(tmp_path, GOOD + "providers_mode: sim\nforce: true\noutput_dir: o\n"))
    assert (new.providers_mode, new.force, new.output_dir) == (old.providers_mode, old.force, old.output_dir) \
        == ("sim", True, Path("o"))
    assert new.fingerprint() == old.fingerprint()  # outputs of earlier runs still resume
    flagged = load_config(_write(tmp_path, GOOD + "providers: sim\n"), {"providers_mode": "real"})
    assert flagged.providers_mode == "real"  # the flag wins over the file
    with pytest.raises(ConfigError, match=r"c\.yaml:\d+: providers: Input should be"):
        load_config(_write(tmp_path, GOOD + "providers: simulated\n"))


USER_HARNESS = "dataset: {data}\nharness: {{kind: command, command: ['{cmd}', '{{input}}', '{{output}}']}}\n" \
               "runs:\n  - {{name: a}}\n"


def test_variables_fill_every_string_with_defaults_and_the_dotenv(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "d.jsonl").write_text('{"id": "x"}\n')
    (tmp_path / ".env").write_text("TOOL=from-dotenv\nWORKERS=2\n")
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(USER_HARNESS.format(data="${DATA_DIR}/d.jsonl", cmd="${TOOL}")
                        + "workers: ${WORKERS}\nslots: ${SLOTS:-3}\nout: $${kept}\n")
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    cfg = load_config(cfg_path)
    assert cfg.dataset == tmp_path / "d.jsonl"
    assert cfg.harness.command == ["from-dotenv", "{input}", "{output}"]  # .env beside the config
    assert (cfg.workers, cfg.slots) == (2, 3)  # a plain scalar is typed by what it says; a default
    assert str(cfg.output_dir) == "${kept}"  # $${ stays a literal ${
    monkeypatch.setenv("TOOL", "from-env")  # the environment wins over the .env (python-dotenv's rule)
    assert load_config(cfg_path).harness.command[0] == "from-env"


def test_an_unset_variable_names_file_and_line(tmp_path: Path) -> None:
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(USER_HARNESS.format(data="d.jsonl", cmd="${SURELY_UNSET_RUNNER_VAR}"))
    with pytest.raises(ConfigError, match=r"c\.yaml:2: \$\{SURELY_UNSET_RUNNER_VAR\} is not set"):
        load_config(cfg_path)


def test_harness_python_is_an_interpreter_or_a_venv(tmp_path: Path) -> None:
    import sys

    from runner.config import check_harness_python, harness_python

    (tmp_path / "d.jsonl").write_text('{"id": "x"}\n')
    venv = Path(sys.executable).parent.parent
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(USER_HARNESS.format(data="d.jsonl", cmd="{python}").replace(
        "kind: command,", f"kind: command, python: {venv},"))
    cfg = load_config(cfg_path)
    assert harness_python(cfg) == venv / "bin" / "python"
    check_harness_python(cfg)
    cfg_path.write_text(cfg_path.read_text().replace(str(venv), str(tmp_path / "no-venv")))
    with pytest.raises(ConfigError, match=r"harness\.python: .*no-venv is not an executable Python interpreter"):
        check_harness_python(load_config(cfg_path))


def test_a_user_harness_gets_model_variables_only_when_a_call_can_happen(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.config import gateway_use

    (tmp_path / "d.jsonl").write_text('{"id": "x"}\n')
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(USER_HARNESS.format(data="d.jsonl", cmd="tool"))
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    assert gateway_use(load_config(cfg_path)) is None  # no key, no simulator asked for: nothing of ours
    assert gateway_use(load_config(cfg_path, {"providers_mode": "sim"})) == "providers: sim"
    assert gateway_use(load_config(cfg_path, {"gateway": True})) == "gateway: true"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert "OPENAI_API_KEY set" in (gateway_use(load_config(cfg_path)) or "")
    assert gateway_use(load_config(cfg_path, {"gateway": False})) is None


@pytest.mark.parametrize(("key", "url", "words"), [
    ("openai", "https://api.openai.com", "ends in /v1"),
    ("anthropic", "https://api.anthropic.com/v1", "adds itself"),
])
def test_a_base_url_in_the_wrong_meaning_is_named_at_start(tmp_path: Path, key: str, url: str, words: str) -> None:
    """One meaning everywhere: what the provider's SDK takes as base_url (the gateway derives its paths from it)."""
    p = _write(tmp_path, GOOD + f"{key}: {{base_url: '{url}'}}\n")
    with pytest.raises(ConfigError, match=f"{key}.base_url: {url} .*{words}"):
        load_config(p)
    load_config(_write(tmp_path, GOOD + f"{key}: {{base_url: '{url.removesuffix('/v1')}"
                                         f"{'/v1' if key == 'openai' else ''}'}}\n"))


def test_the_gateway_sends_each_path_under_the_sdk_base_url() -> None:
    from runner.gateway.request import upstream_url

    assert upstream_url("https://api.openai.com/v1", "openai", "/v1/chat/completions") == \
        "https://api.openai.com/v1/chat/completions"  # not /v1/v1/...
    assert upstream_url("https://proxy.local/openai/v1/", "openai", "/v1/responses") == \
        "https://proxy.local/openai/v1/responses"
    assert upstream_url("https://api.anthropic.com", "anthropic", "/v1/messages") == \
        "https://api.anthropic.com/v1/messages"


def test_a_gateway_config_needs_only_the_gateway_keys(tmp_path: Path) -> None:
    """docs/gateway.md's laptop example: rate limits and nothing else."""
    p = _write(tmp_path, "rate_limits: {anthropic: {preset: tier2}, openai: {rpm: 500}}\n")
    cfg = load_config(p, gateway_only=True)
    assert cfg.rate_limits["openai"].rpm == 500
    with pytest.raises(ConfigError, match="dataset"):  # a run still needs its dataset
        load_config(p)


def test_fail_under_names_runs_of_the_config(tmp_path: Path) -> None:
    assert load_config(_write(tmp_path, GOOD + "fail_under: {a: 0.8}\n")).fail_under == {"a": 0.8}
    with pytest.raises(ConfigError, match="fail_under: 'z' is not a run of this config"):
        load_config(_write(tmp_path, GOOD + "fail_under: {z: 0.8}\n"))
    with pytest.raises(ConfigError, match="not a share from 0 to 1"):
        load_config(_write(tmp_path, GOOD + "fail_under: {a: 80}\n"))


def test_the_superuser_needs_allow_superuser(tmp_path: Path) -> None:
    base = "dataset: d.jsonl\nharness: {kind: python, entrypoint: 'm:f'}\nruns: [{name: a}]\n"
    with pytest.raises(ConfigError, match=r"c\.yaml:5: database: .*user: postgres is the superuser.*allow_superuser"):
        load_config(_write(tmp_path, base + "database:\n  user: postgres\n"))
    cfg = load_config(_write(tmp_path, base + "database: {user: postgres, allow_superuser: true}\n"))
    assert cfg.database is not None and cfg.database.user == "postgres"
    assert load_config(_write(tmp_path, base + "database: {name: app}\n")).database.user == "sandbox"  # type: ignore[union-attr]


def test_compare_to_names_a_run_of_the_config(tmp_path: Path) -> None:
    assert load_config(_write(tmp_path, GOOD + "compare_to: a\n")).compare_to == "a"
    with pytest.raises(ConfigError, match="compare_to: 'z' is not a run of this config"):
        load_config(_write(tmp_path, GOOD + "compare_to: z\n"))
    assert load_config(None).compare_to == "atlas"  # the default job: every baseline against Atlas


def test_a_conversation_gets_a_day_in_batch_mode_unless_the_config_says_otherwise() -> None:
    plain = load_config(None)
    assert plain.conversation_timeout_seconds is None and plain.conversation_limit() == 300
    batched = load_config(None, {"batch": {"enabled": True}})
    assert batched.conversation_limit() == 86_400
    set_one = load_config(None, {"batch": {"enabled": True}, "conversation_timeout_seconds": 900})
    assert set_one.conversation_limit() == 900
    one = plain.model_copy(update={"runs": [plain.runs[0].model_copy(update={"batch": True}), *plain.runs[1:]]})
    assert one.batch_runs() == {plain.runs[0].name} and one.conversation_limit() == 86_400


def test_a_speed_setting_is_not_part_of_what_a_resume_compares(tmp_path: Path) -> None:
    """harness.warm changes how fast a slot starts, not what a record does: a resume with it changed (or of an
    output made before it existed) is the same job; a setting that changes results still is not."""
    base = {"dataset": "x.jsonl", "runs": [{"name": "r"}]}
    plain = Config.model_validate({**base, "harness": {"kind": "python", "entrypoint": "m:f", "python": "/py"}})
    cold = Config.model_validate({**base, "harness": {"kind": "python", "entrypoint": "m:f", "python": "/py",
                                                      "warm": False}})
    other = Config.model_validate({**base, "harness": {"kind": "python", "entrypoint": "m:g", "python": "/py"}})
    assert cold.fingerprint() == plain.fingerprint() and cold.fingerprint_parts() == plain.fingerprint_parts()
    assert other.fingerprint() != plain.fingerprint()
    before = plain.model_dump(mode="json", include={"harness"})["harness"]
    before.pop("warm")  # the harness part as outputs made before the setting existed recorded it
    assert plain.fingerprint_parts()["harness"] == hashlib.sha256(json.dumps(before, sort_keys=True).encode()
                                                                  ).hexdigest()[:16]
