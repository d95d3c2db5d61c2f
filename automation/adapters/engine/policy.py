"""The policy pack's rules (policy.rules) over what the mock runtime recorded, and the pack's settings.

    plan_violations(inputs, plan)   every rule over one planned stack, as the engine would run them on its resources
    fleet_violations(inputs)        the rules that span stacks, over every stack's inputs
    PolicySettings                  the level (off | advisory | mandatory) and the pack config, for the plan and the
                                    service (HUBWRIGHT_POLICY, HUBWRIGHT_POLICY_CONFIG)
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping
from automation.adapters.engine.plan_model import Registered, StackPlan
from policy.rules.check import check_fleet, check_stack
from policy.rules.enforcement import Setting, settings
from policy.rules.view import Context, Provider, Resource, Violation
from stacks.inputs import StackInputs
from stacks.transit import TransitInputs

PACK_DIR = Path(__file__).resolve().parents[3] / "policy"  # PulumiPolicy.yaml: what `--policy-pack` is given
POLICY_LEVELS = ("off", "advisory", "mandatory")


@dataclass(frozen=True)
class PolicySettings:
    """How the pack runs: `level` over every rule (off: not at all; advisory: nothing blocks; mandatory: each rule at
    its own level, mandatory unless `config` says otherwise); `config` in Pulumi's pack-config format."""

    level: str = "mandatory"
    config: Mapping[str, Any] = field(default_factory=dict)
    config_file: str | None = None  # where `config` was read from, passed to the engine as it is

    def __post_init__(self) -> None:
        if self.level not in POLICY_LEVELS:
            raise ValueError(f"policy level {self.level!r}: one of {', '.join(POLICY_LEVELS)}")
        settings(self.config, self.level)  # an unknown rule or level fails here, at start-up

    @property
    def enabled(self) -> bool:
        return self.level != "off"

    def rules(self) -> dict[str, Setting]:
        return settings(self.config, self.level)

    def engine_config(self) -> dict[str, Any]:
        """The pack config the engine is given (`--policy-pack-config`): the file's, with `advisory` applied."""
        chosen = self.rules()
        return {name: {"enforcementLevel": s.level, **s.config} for name, s in chosen.items()}

    @classmethod
    def load(cls, level: str = "mandatory", config_file: str | None = None) -> "PolicySettings":
        config: Mapping[str, Any] = {}
        if config_file:
            try:
                config = json.loads(Path(config_file).read_text())
            except (OSError, ValueError) as err:
                raise ValueError(f"policy config {config_file}: {err}") from None
            if not isinstance(config, Mapping):
                raise ValueError(f"policy config {config_file}: a JSON object of rule -> level or settings")
        return cls(level, config, config_file)


def resources_of(plan: StackPlan) -> list[Resource]:
    """The recorded resources as the pack sees them: props with the ID, and each resource's provider."""
    providers = {r.urn: Provider(r.urn, r.name, r.inputs) for r in plan.resources if r.type.startswith("pulumi:providers:")}
    return [_resource(r, providers) for r in plan.resources if r.custom]


def _resource(r: Registered, providers: Mapping[str, Provider]) -> Resource:
    return Resource(r.urn, r.type, r.name, {**r.inputs, "id": r.id},
                    providers.get(r.provider) if r.provider is not None else None)


def plan_violations(inputs: StackInputs | TransitInputs, plan: StackPlan,
                    chosen: Mapping[str, Setting]) -> list[Violation]:
    return check_stack(Context.of(inputs), resources_of(plan), chosen)


def fleet_violations(inputs: Iterable[Any], chosen: Mapping[str, Setting]) -> list[Violation]:
    """Over every cluster stack's inputs (other values, such as a cluster's InvalidSpec, are left out)."""
    return check_fleet((Context.of(i) for i in inputs if isinstance(i, StackInputs)), chosen)
