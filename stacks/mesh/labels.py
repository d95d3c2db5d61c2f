"""Labels of the mesh (stacks.mesh) in messages and resource names: a group's phase, a quota's field name, a
rule's name fragment. Pure."""
from __future__ import annotations

from stacks.model.hub import MeshRule
from stacks.transit import Phase


def phase_label(phase: Phase) -> str:
    if phase.peerings and phase.attachments:
        return f"migrating, routes via {phase.routes_via}"
    return "peering" if phase.peerings else "Transit Gateway"


def label_unless_peering(phase: Phase) -> str:
    return "" if phase.peerings and not phase.attachments else f" ({phase_label(phase)})"


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.upper() if part == "vpc" else part.title() for part in rest)


def rule_label(rule: MeshRule) -> str:
    """A stable name fragment for a rule: 'all', 'tcp-443-443', 'icmp--1--1'."""
    return "all" if rule.protocol == "-1" else f"{rule.protocol}-{rule.from_port}-{rule.to_port}"
