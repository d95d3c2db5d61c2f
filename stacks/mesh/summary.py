"""Each mesh group as the plan's summary shows it (automation/cli/plan.py): where it is, where it is heading
and the steps still ahead. Pure."""
from __future__ import annotations

from stacks.mesh.plan import MeshPlan
from stacks.model.hub import HubConfig, MeshGroup
from stacks.transit import MTU, migration_steps


def summary(plan: MeshPlan, hub: HubConfig) -> dict[str, dict]:
    """Each group as the plan's summary shows it: where it is, where it is heading and the steps still ahead."""
    out: dict[str, dict] = {}
    for key, view in sorted(plan.groups.items()):
        state = view.state
        config = hub.spec.mesh.groups.get(key.rsplit("/", 1)[-1], MeshGroup())
        entry: dict = {"members": len(view.members), "rejected": len(view.rejected), "state": state.describe(),
                       "wanted": view.wanted}
        if state.migrating_to is not None or view.wanted != state.topology:
            steps = migration_steps(state.topology, state.migrating_to or view.wanted)
            at = steps.index(state) if state in steps else 0
            entry["migration"] = [s.describe() for s in steps[at:]]
            entry["mtu"] = (f"{MTU[state.topology]} -> {MTU[state.migrating_to or view.wanted]} bytes within a "
                            f"region (the Transit Gateway carries 8500)")
        if config.topology == "auto":
            entry["auto"] = (f"transitGateway from {config.auto_threshold} members, peering below "
                             f"{config.peering_below}")
        if view.transit_stack is not None:
            entry["transitStack"] = view.transit_stack
            # Without summaries each member's tables route every block of its peers: the fewest blocks, the most.
            blocks = [len(plan.shares[m].member.cidrs) for m in view.members]
            entry["routesPerTable"] = len(config.summary_cidrs) if config.summary_cidrs else \
                sum(blocks) - min(blocks, default=0)
        if view.note:
            entry["note"] = view.note
        out[key] = entry
    return out
