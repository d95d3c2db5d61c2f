"""The engine's workspace (automation.adapters.engine.workspace.Workspace): Stack.up reads the stack's outputs at
its end, and the SDK asks twice, the second time with --show-secrets (a passphrase stack derives its key again). The
workspace asks once, and a second time only when an output is a secret. A stand-in CLI records the calls."""
from __future__ import annotations

import json

from pulumi import automation as auto

from automation.adapters.engine.workspace import Workspace


class Cli:
    """pulumi_command: prints `masked` for `stack output --json`, `plain` with --show-secrets."""

    version = None

    def __init__(self, masked, plain):
        self.calls, self.masked, self.plain = [], masked, plain

    def run(self, args, cwd, env, on_output=None, on_error=None):
        self.calls.append(args)
        out = self.plain if "--show-secrets" in args else self.masked
        return auto.CommandResult(stdout=json.dumps(out), stderr="", code=0)


def ws(cli, tmp_path):
    return Workspace(work_dir=str(tmp_path), pulumi_command=cli, env_vars={"X": "1"})


def test_outputs_without_a_secret_cost_one_cli_call_not_two(tmp_path):
    cli = Cli({"inputs": "{}", "n": 3}, None)
    outs = ws(cli, tmp_path).stack_outputs("acme.prod-1")
    assert cli.calls == [["stack", "output", "--json", "--stack", "acme.prod-1"]]
    assert {k: (v.value, v.secret) for k, v in outs.items()} == {"inputs": ("{}", False), "n": (3, False)}


def test_a_secret_output_is_still_read_in_plaintext_and_marked_secret(tmp_path):
    cli = Cli({"token": "[secret]", "n": 3}, {"token": "s3cr3t", "n": 3})
    outs = ws(cli, tmp_path).stack_outputs("acme.prod-1")
    assert {k: (v.value, v.secret) for k, v in outs.items()} == {"token": ("s3cr3t", True), "n": (3, False)}
    assert ["--show-secrets"] == [a for c in cli.calls for a in c if a == "--show-secrets"]
