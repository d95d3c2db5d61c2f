"""Enforcement: each rule's level and config (Setting) from a pack config in Pulumi's format, under an overall level."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from policy.rules.catalog import BY_NAME, RULES
from policy.rules.view import LEVELS, Level

@dataclass(frozen=True)
class Setting:
    level: Level
    config: Mapping[str, Any]


def settings(pack_config: Mapping[str, Any] | None = None, level: str = "mandatory") -> dict[str, Setting]:
    """Each rule's level and config from a pack config in Pulumi's format (`--policy-pack-config`:
    {"all": "advisory", "<rule>": "disabled" | {"enforcementLevel": ..., "<key>": value}}), under an overall
    `level`: "off" turns every rule off, "advisory" makes none mandatory, "mandatory" keeps each rule's own."""
    pack_config = dict(pack_config or {})
    unknown = sorted(set(pack_config) - set(BY_NAME) - {"all"})
    if unknown:
        raise ValueError(f"policy config: no rule named {', '.join(unknown)} (rules: {', '.join(BY_NAME)})")
    everyone = _level(pack_config.get("all", "mandatory"), "all")
    out = {}
    for rule in RULES:
        raw = pack_config.get(rule.name, {})
        entry = raw if isinstance(raw, Mapping) else {"enforcementLevel": raw}
        own = _level(entry.get("enforcementLevel", everyone), rule.name)
        config = {**rule.defaults(), **{k: v for k, v in entry.items() if k != "enforcementLevel"}}
        if level == "off":
            own = "disabled"
        elif level == "advisory" and own == "mandatory":
            own = "advisory"
        elif level != "mandatory":
            raise ValueError(f"policy level {level!r}: one of off, advisory, mandatory")
        out[rule.name] = Setting(own, config)
    return out


def _level(raw: Any, where: str) -> Level:
    if isinstance(raw, Mapping):
        raw = raw.get("enforcementLevel", "mandatory")
    if raw not in LEVELS:
        raise ValueError(f"policy config {where}: enforcement level {raw!r} is not one of {', '.join(LEVELS)}")
    return raw
