"""What the tests ask of an offline plan (automation.adapters.engine.plan.StackPlan) beyond what production reads."""
from __future__ import annotations

from automation.adapters.engine.plan import Registered, StackPlan
from automation.adapters.engine.standins import StandIns


class RecordedLookups(StandIns):
    """The offline plan's stand-ins, recording each lookup: (token, (account, region) of its provider, the region
    the lookup names or None)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[str | None, str | None], str | None]] = []

    def call(self, args):
        self.calls.append((args.token, self.location(args.provider), args.args.get("region")))
        return super().call(args)


def destroy_order(plan: StackPlan) -> list[Registered]:
    """The order the engine deletes the plan's resources in: dependents, children and users of a provider before
    what they depend on (reverse topological order; URN breaks ties)."""
    by_urn = {r.urn: r for r in plan.resources}
    after: dict[str, set[str]] = {r.urn: set() for r in plan.resources}  # urn -> what it needs first
    for r in plan.resources:
        after[r.urn] |= {u for u in (*r.dependencies, r.parent, r.provider) if u in after}
    created: list[Registered] = []
    done: set[str] = set()
    while len(done) < len(plan.resources):
        ready = sorted(r.urn for r in plan.resources if r.urn not in done and after[r.urn] <= done)
        if not ready:
            raise ValueError(f"dependency cycle among {sorted(set(after) - done)}")
        done.update(ready)
        created.extend(by_urn[u] for u in ready)
    return created[::-1]
