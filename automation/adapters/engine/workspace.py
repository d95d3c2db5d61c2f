"""The engine's workspace: LocalWorkspace with one CLI call for the stack's outputs where the SDK makes two
(automation/adapters/engine/pulumi_engine.py uses it for every stack)."""
from __future__ import annotations

import json
from typing import Any

from pulumi import automation as auto

SECRET_SHOWN_AS = "[secret]"  # what `pulumi stack output --json` prints for a secret output


class Workspace(auto.LocalWorkspace):
    """LocalWorkspace whose stack outputs (read by Stack.up at its end) cost one CLI call, not two: the SDK always
    asks a second time with --show-secrets, which decrypts (a passphrase stack derives its key again: about 1.3 s
    of CPU per up). That second call is made only when an output is a secret."""

    def stack_outputs(self, stack_name: str) -> auto.OutputMap:
        masked = self.masked_outputs(stack_name)
        if any(value == SECRET_SHOWN_AS for value in masked.values()):
            return super().stack_outputs(stack_name)
        return {key: auto.OutputValue(value=value, secret=False) for key, value in masked.items()}

    def masked_outputs(self, stack_name: str) -> dict[str, Any]:
        """The stack's outputs in one CLI call, a secret one shown as SECRET_SHOWN_AS."""
        return json.loads(self.run(["stack", "output", "--json", "--stack", stack_name]).stdout or "{}")

    def run(self, args: list[str]) -> auto.CommandResult:
        """A CLI call in this workspace, with its PULUMI_HOME and environment."""
        env = {**({"PULUMI_HOME": self.pulumi_home} if self.pulumi_home else {}), **(self.env_vars or {})}
        return self.pulumi_command.run(args, self.work_dir, env)
