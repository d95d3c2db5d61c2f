"""One table of options (stacks/options.py): `serve --help` and `api --help` are generated from it and name each
option's environment variable; every environment variable hubwright reads is an option or a listed exception;
the settings that were environment-only are flags too; the service's, the engine's and the API's settings are built
from the parsed table by name, and the environment is read once, by the table."""
from __future__ import annotations

import ast
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from automation.adapters.engine import RunLimits
from automation.adapters.engine.settings import PulumiSettings
from automation.api.app import ApiSettings
from automation.api.serve import settings_from as api_settings_from
from automation.cli import build_parser
from automation.service.command import options_from, settings_from
from automation.service.options import ServiceOptions
from automation.service.clusters import ReconcileOptions
from stacks.options import API, NOT_OPTIONS, OPTIONS, SERVE, environment, of, option

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = ("automation", "stacks", "components", "policy")
ENV_NAME = re.compile(r"\b(?:HUBWRIGHT|PULUMI|AWS|KUBERNETES|POD)_[A-Z0-9_]*[A-Z0-9]\b|\bKUBECONFIG\b")
# Set for the CLI (or the agent's container) by hubwright, never read by it: the Pulumi CLI's own, a child's
# PYTHONPATH, and the agent's install manifest naming its Secret's keys.
SET_NOT_READ = {"PULUMI_SKIP_UPDATE_CHECK", "PULUMI_PYTHON_CMD", "HUBWRIGHT_TENANT", "HUBWRIGHT_CLUSTER",
                "HUBWRIGHT_HUB_NAMESPACE",
                # the environment the sandbox prints for the service (automation/sandbox/aws.py, supervisor.py)
                "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION",
                "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"}
# Were environment-only before the table; now each is a flag of `serve` too.
ENV_ONLY_BEFORE = {"HUBWRIGHT_POLICY": "--policy", "HUBWRIGHT_POLICY_CONFIG": "--policy-config",
                   "HUBWRIGHT_POLICY_PACK": "--policy-pack", "HUBWRIGHT_LOCK_HOSTS": "--lock-hosts",
                   "HUBWRIGHT_STALE_LOCK_SECONDS": "--stale-lock-seconds", "PULUMI_HOME": "--pulumi-home",
                   "HUBWRIGHT_AWS_ENDPOINT_URL": "--aws-endpoint-url"}


def help_of(command: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUBWRIGHT_")}
    return subprocess.run([sys.executable, "-m", "automation", command, "--help"], cwd=ROOT, check=True, env=env,
                          capture_output=True, text=True).stdout


def entry(helptext: str, flag: str) -> str:
    """The help of one flag, on one line (argparse wraps it)."""
    found = re.search(rf"^  --{flag}\b.*?(?=^  -|^\S|\Z)", helptext, re.S | re.M)
    assert found, f"--{flag} is not in --help"
    return " ".join(found.group(0).split())


@pytest.mark.live
@pytest.mark.parametrize("command", [SERVE, API])
def test_help_lists_every_option_with_its_environment_variable(command):
    helptext = help_of(command)
    shown = [o for o in of(command) if not o.hidden]
    assert len(shown) >= (40 if command == SERVE else 20)
    for o in shown:
        text = entry(helptext, o.flag)
        assert len(text.split(None, 2)) == 3, f"--{o.flag} is not explained"
        if o.env:
            assert f"(env {o.env})" in text, f"--{o.flag}: {o.env} is not named"
    for o in of(command):
        if o.hidden:  # accepted (older command lines), never shown
            assert f"--{o.flag} " not in helptext
            build_parser().parse_args([command, f"--{o.flag}", "x"])


@pytest.mark.live
def test_the_settings_that_were_environment_only_are_flags_too(tmp_path):
    helptext = help_of(SERVE)
    for env, flag in ENV_ONLY_BEFORE.items():
        assert option(flag[2:]).env == env and f"(env {env})" in entry(helptext, flag[2:])
    pack = tmp_path / "pack"
    args = build_parser().parse_args([
        "serve", "--policy", "advisory", "--policy-config", str(tmp_path / "policy.json"), "--policy-pack", str(pack),
        "--lock-hosts", "hubwright-[a-z0-9]+", "--stale-lock-seconds", "7200", "--pulumi-home", str(tmp_path),
        "--state-dir", str(tmp_path / "state"), "--backend", "s3://bucket/prefix", "--run-timeout", "900"])
    options = options_from(args)
    settings = settings_from(args, RunLimits(timeout=options.run_timeout, grace=options.cancel_grace))
    assert (settings.policy, settings.policy_config, settings.policy_pack) == \
        ("advisory", str(tmp_path / "policy.json"), str(pack))
    assert (settings.own_hosts, settings.stale_lock_after_s, settings.pulumi_home) == \
        ("hubwright-[a-z0-9]+", 7200.0, tmp_path)
    assert (settings.state_dir, settings.backend) == (tmp_path / "state", "s3://bucket/prefix")
    assert args.aws_endpoint_url is None
    # Without the flag, the stale-lock age follows --run-timeout, as before
    plain = build_parser().parse_args(["serve", "--run-timeout", "900"])
    limits = RunLimits(timeout=900, grace=60)
    assert settings_from(plain, limits).stale_lock_after_s == limits.stale_lock_after


def test_an_environment_variable_sets_the_default_and_a_flag_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("HUBWRIGHT_POLICY", "off")
    monkeypatch.setenv("HUBWRIGHT_STALE_LOCK_SECONDS", "4000")
    monkeypatch.setenv("HUBWRIGHT_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("HUBWRIGHT_HUB_NAME", "prod")
    limits = RunLimits()
    from_env = settings_from(build_parser().parse_args(["serve"]), limits)
    assert (from_env.policy, from_env.stale_lock_after_s, from_env.state_dir) == ("off", 4000.0, tmp_path)
    assert PulumiSettings.from_env(limits=limits) == from_env  # a caller without a command line: the same table
    assert options_from(build_parser().parse_args(["serve"])).hub_name == "prod"
    assert api_settings_from(build_parser().parse_args(["api"])).hub_name == "prod"  # one variable, both commands
    flagged = settings_from(build_parser().parse_args(["serve", "--policy", "mandatory"]), limits)
    assert flagged.policy == "mandatory"


def test_a_bad_environment_value_is_refused_naming_the_flag_and_the_variable(monkeypatch, capsys):
    parser = build_parser()
    for env, value, said in (("HUBWRIGHT_STALE_LOCK_SECONDS", "soon", "argument --stale-lock-seconds: invalid float"),
                             ("HUBWRIGHT_LOG_LEVEL", "LOUD", "argument --log-level: 'LOUD' is not one of")):
        monkeypatch.setenv(env, value)
        parser = build_parser()  # building the CLI does not fail: running the command does
        with pytest.raises(SystemExit) as exited:
            parser.parse_args(["serve"])
        assert exited.value.code == 2 and said in capsys.readouterr().err
        monkeypatch.delenv(env)
    assert parser.parse_args(["inputs", "--hub", "h", "--clusters", "c", "--cluster", "a/b"]).cluster == "a/b"
    with pytest.raises(ValueError, match="HUBWRIGHT_STALE_LOCK_SECONDS='soon' .--stale-lock-seconds.: not a float"):
        environment(SERVE, {"HUBWRIGHT_STALE_LOCK_SECONDS": "soon"})


def test_the_service_options_and_the_api_settings_are_the_tables():
    """Each field is an option of its command, by name, with the table's default: no second list of defaults."""
    serve = {o.dest: o for o in of(SERVE)}
    for field in dataclasses.fields(ServiceOptions):
        assert field.name in serve, f"ServiceOptions.{field.name} is no `serve` option"
        assert getattr(ServiceOptions(), field.name) == serve[field.name].default_for(SERVE)
    api = {o.dest: o for o in of(API)}
    for field in dataclasses.fields(ApiSettings):
        if field.name == "public_url":  # derived from --bind when --public-url is not given
            continue
        assert field.name in api, f"ApiSettings.{field.name} is no `api` option"
        assert getattr(ApiSettings(), field.name) == api[field.name].default_for(API)
    # and the engine's settings take the rest of serve's, by name
    engine = {"state_dir", "backend", "pulumi_org", "secrets_provider", "pulumi_home", "lock_hosts",
              "stale_lock_seconds", "policy", "policy_config", "policy_pack", "runner_hosts"}
    rest = set(serve) - {f.name for f in dataclasses.fields(ServiceOptions)}
    history = {"history_store", "history_log_kib"}  # the store (automation.adapters.history.options), the log's size
    assert rest == engine | history | {"aws_endpoint_url", "log_level", "log_format"}
    assert len({o.flag for o in OPTIONS}) == len(OPTIONS)  # one entry per flag


def test_reconcile_options_are_taken_by_name():
    options = ServiceOptions(drift_interval=10.0, drift_jitter=0.5, lock_retry=3.0, stalled_recheck=42.0,
                             drift_policy="report")
    assert options.part(ReconcileOptions) == ReconcileOptions(
        drift_interval=10.0, drift_jitter=0.5, lock_retry=3.0, stalled_recheck=42.0, drift_policy="report")


# --------------------------------------------------------------------------- what production code reads

def production_files() -> list[Path]:
    return sorted(p for top in PRODUCTION for p in (ROOT / top).rglob("*.py"))


def _is_environ(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return text in ("os.environ", "environ") or text.endswith(".environ")


def direct_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every read of the process environment by a literal name, and every alias of a reader."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "get" and _is_environ(func.value)) \
                    or ast.unparse(func) in ("os.getenv", "getenv"):
                found.append((node.lineno, str(node.args[0].value)))
        elif isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.slice, ast.Constant):
            found.append((node.lineno, str(node.slice.value)))
        elif isinstance(node, ast.Assign) and ast.unparse(node.value) in ("os.environ.get", "os.getenv"):
            found.append((node.lineno, f"an alias of {ast.unparse(node.value)}"))
    return found


def test_every_environment_variable_read_is_an_option_or_listed():
    options = {o.env for o in OPTIONS if o.env}
    assert not options & set(NOT_OPTIONS)
    secrets = {"PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE", "PULUMI_ACCESS_TOKEN", "AWS_ACCESS_KEY_ID",
               "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}
    assert not options & secrets and not any("passphrase" in o.flag or "token" == o.flag for o in OPTIONS)
    named: dict[str, set[str]] = {}
    for path in production_files():
        source = path.read_text(encoding="utf-8")
        if "environ" not in source and "getenv" not in source:
            continue
        tree = ast.parse(source)
        where = str(path.relative_to(ROOT))
        # The table's variables are read by the table alone: no second read of one value.
        for line, what in direct_reads(tree):
            assert what in NOT_OPTIONS, f"{where}:{line} reads {what} itself (an option's variable, or unlisted)"
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in ENV_NAME.findall(node.value):
                    named.setdefault(name, set()).add(where)
    unknown = {name: sorted(files) for name, files in named.items()
               if name not in options and name not in NOT_OPTIONS and name not in SET_NOT_READ}
    assert not unknown, f"environment variables neither options nor listed in stacks.options.NOT_OPTIONS: {unknown}"
    assert {"HUBWRIGHT_LOG_FORMAT", "HUBWRIGHT_LOG_LEVEL", "PULUMI_CONFIG_PASSPHRASE"} <= set(named)  # it looks


def test_the_scan_finds_a_second_read():
    """The check above, shown to catch what it is for."""
    tree = ast.parse("import os\nenv = os.environ.get\nx = os.environ.get('HUBWRIGHT_POLICY')\n"
                     "y = os.environ['HUBWRIGHT_STATE_DIR']\nz = os.getenv('KUBERNETES_SERVICE_HOST')\n")
    assert [what for _, what in direct_reads(tree)] == ["an alias of os.environ.get", "HUBWRIGHT_POLICY",
                                                         "HUBWRIGHT_STATE_DIR", "KUBERNETES_SERVICE_HOST"]


def test_a_relative_state_dir_is_the_folder_the_command_was_run_from(tmp_path, monkeypatch):
    """The engine's worker processes run in the checkout's import root: a relative --state-dir or --pulumi-home is
    made absolute against the caller's folder when the options are read, not where a worker happens to run."""
    monkeypatch.chdir(tmp_path)
    settings = PulumiSettings.from_options({"state_dir": "state", "pulumi_home": "home"})
    assert settings.state_dir == tmp_path / "state" and settings.pulumi_home == tmp_path / "home"
    assert settings.backend == f"file://{tmp_path / 'state'}"
    assert PulumiSettings.from_json(settings.to_json()).state_dir == tmp_path / "state"
