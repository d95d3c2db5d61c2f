"""The routes a mesh stack writes have one home, stacks.mesh.routes: the mesh examples planned as `python -m
automation plan` plans them (the discovery stand-in, then transit, clusters, transit under Pulumi's mock runtime),
in peering and Transit Gateway phases and the steps of a migration between them. In every phase:

- each cluster stack's aws:ec2/route resources under its MeshPeering components are exactly pair_routes(share):
  the same names, tables, destinations and target kind, the same target, in the same order in the outputs;
- every_pair_route(share) holds pair_routes(share), and what it holds beyond is exactly the routes whose target is
  not made yet (planned before the transit stack has run: the gateways are not known);
- the route-hijack preflight (hijacking_routes) checks every route of every_pair_route, built yet or not;
- the routes-per-table quota (MeshLimits.mesh_routes, stacks.mesh.checks.mesh_routes) is the number of routes
  every_pair_route puts in each member table across the group's shares, plus its summary routes, and the number
  of aws:ec2/route resources the whole fleet's programs put there.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from automation.adapters.aws.discovery_standin import StandInDiscovery
from automation.adapters.engine.plan import StackPlan, converge, drain, plan_stack
from automation.adapters.files.inputs import load_fleet
from automation.cli.plan import discovered
from stacks.inputs import StackInputs
from stacks.mesh.blocks import block_suffix
from stacks.mesh.routes import FoundRoute, PlannedRoute, every_pair_route, hijacking_routes, pair_routes
from stacks.mesh.share import MeshShare
from stacks.resolve import Fleet, resolve_all
from stacks.transit import TransitInputs

ROOT = Path(__file__).resolve().parents[1]
ROUTE = "aws:ec2/route:Route"
PEERING_COMPONENT = "$hubwright:mesh:MeshPeering::"
LINK_COMPONENT = "$hubwright:mesh:TransitLink::"
TGW = "transitGateway"

# example -> (hub, clusters, the mesh group)
EXAMPLES = {"mesh": ("examples/mesh/hub.yaml", "examples/mesh/clusters", "payments"),
            "transit": ("examples/transit/hub.yaml", "examples/transit/clusters", "core")}
# phase -> (the topology the spec asks for, the state the hub recorded: status.mesh.groups[<group>])
PHASES: dict[str, tuple[str, dict[str, str] | None]] = {
    "as-is": ("", None),  # the example as it is: mesh on peering, transit on a gateway with summaryCIDRs
    "peering": ("peering", {"topology": "peering"}),
    "to-tgw-attach": (TGW, {"topology": "peering", "migratingTo": TGW, "step": "attach"}),
    "to-tgw-routes": (TGW, {"topology": "peering", "migratingTo": TGW, "step": "routes"}),
    "tgw": (TGW, {"topology": TGW}),
    "to-peering-routes": ("peering", {"topology": TGW, "migratingTo": "peering", "step": "routes"}),
}
CASES = [("mesh", phase, False) for phase in PHASES] + \
    [("transit", phase, summary) for phase in PHASES for summary in (True, False) if phase != "as-is" or summary]


def _fleet(tmp_path: Path, example: str, phase: str, summary: bool) -> Fleet:
    hub_path, clusters, group = EXAMPLES[example]
    doc = yaml.safe_load((ROOT / hub_path).read_text())
    topology, state = PHASES[phase]
    config = doc["spec"]["mesh"]["groups"][group]
    if not summary:
        config.pop("summaryCIDRs", None)
    if topology:
        config["topology"] = topology
    if state is not None:
        doc["status"] = {"mesh": {"groups": {group: state}}}
    path = tmp_path / "hub.yaml"
    path.write_text(yaml.safe_dump(doc))
    invalid: list = []
    fleet = load_fleet(str(path), str(ROOT / clusters), invalid)
    fleet = discovered(fleet, StandInDiscovery({c.key: c.spec.network for c in fleet.clusters}), invalid)
    assert invalid == []
    return fleet


def _planned(fleet: Fleet) -> list[tuple[StackInputs, StackPlan]]:
    """Every cluster stack as the offline plan plans it (converge: transit, clusters, transit), with its inputs."""
    out: list[tuple[StackInputs, StackPlan]] = []

    def plan_many(many: Any) -> Any:
        for inputs in many:
            plan = plan_stack(inputs)
            if not isinstance(inputs, TransitInputs):
                out.append((inputs, plan))
            yield plan

    drain(converge(fleet, plan_many), lambda _: None)
    return out


def _before_transit(fleet: Fleet) -> list[tuple[StackInputs, StackPlan]]:
    """Every cluster stack planned before the transit stack has run: no gateway is known yet."""
    resolved = resolve_all(fleet).inputs
    assert all(isinstance(inputs, StackInputs) for inputs in resolved.values()), resolved
    return [(inputs, plan_stack(inputs)) for inputs in resolved.values() if isinstance(inputs, StackInputs)]


def _expected(share: MeshShare, plan: StackPlan) -> list[dict[str, Any]]:
    """pair_routes(share) as the program's `routes` outputs say each, in order."""
    members = {share.member.key: share.member, **{pair.peer.key: pair.peer for pair in share.pairs}}
    peerings = {p["name"]: p["id"] for p in plan.outputs["mesh"]["peerings"]}
    out = []
    for route in pair_routes(share):
        target = {"transitGatewayId": route.gateway} if route.via == TGW else {"peeringId": peerings[route.pair]}
        out.append({"cluster": route.member, "routeTableId": route.table, "destination": route.cidr, **target,
                    "name": f"mesh-{route.pair}-{route.table}{block_suffix(members[route.to].cidrs, route.cidr)}"})
    return out


def _check_stack(inputs: StackInputs, plan: StackPlan) -> None:
    routes = plan.of_type(ROUTE)
    share = inputs.mesh
    if share is None:
        assert routes == [], inputs.key
        return
    built = [r for r in routes if r.parent is not None and PEERING_COMPONENT in r.parent]
    others = [r for r in routes if r not in built]
    assert all(r.parent is not None and LINK_COMPONENT in r.parent for r in others), inputs.key  # summary routes
    expected = _expected(share, plan)

    # The resources: one per route of pair_routes, its name, table, destination and target.
    def target(r: Any) -> dict[str, Any]:
        key = "transitGatewayId" if "transitGatewayId" in r.inputs else "peeringId"
        return {key: r.inputs["transitGatewayId" if key == "transitGatewayId" else "vpcPeeringConnectionId"]}

    got = sorted(({"name": r.name, "routeTableId": r.inputs["routeTableId"],
                   "destination": r.inputs["destinationCidrBlock"], **target(r)} for r in built),
                 key=lambda d: d["name"])
    want = sorted(({k: v for k, v in e.items() if k != "cluster"} for e in expected), key=lambda d: d["name"])
    assert got == want, inputs.key
    # The outputs: in pair_routes' order, then the member's summary routes.
    outputs = plan.outputs["mesh"]["routes"]
    assert outputs[:len(expected)] == [{k: v for k, v in e.items() if k != "name"} for e in expected], inputs.key
    assert len(outputs) == len(expected) + len(others), inputs.key


def _unbuilt(share: MeshShare, route: PlannedRoute) -> bool:
    """Whether the route waits for its target: a gateway not made yet, or a peering the phase does not have."""
    return route.gateway is None if route.via == TGW else not share.peerings


def _check_superset(share: MeshShare) -> None:
    every, built = every_pair_route(share), pair_routes(share)
    assert [r for r in every if r in built] == list(built)  # pair_routes keeps every_pair_route's order
    assert [r for r in every if r not in built] == [r for r in every if _unbuilt(share, r)]
    # The hijack preflight checks them all: a wide route that is not the mesh's loses to each of them.
    wide = {r.table: [FoundRoute(cidr="0.0.0.0/1", target="vgw-0wide"),
                      FoundRoute(cidr="128.0.0.0/1", target="vgw-0wide")] for r in every}
    assert [route for route, _ in hijacking_routes(share, wide)] == list(every)


def _check_quota(planned: list[tuple[StackInputs, StackPlan]]) -> None:
    """Per member table: the quota's count, every_pair_route's routes into it across the group's shares plus its
    summary routes, and the fleet's aws:ec2/route resources in it are one number."""
    listed: Counter = Counter()
    built: Counter = Counter()
    for inputs, plan in planned:
        share = inputs.mesh
        if share is None:
            continue
        listed.update(r.table for r in every_pair_route(share))
        if share.attachment is not None:
            listed.update(t for t in share.member.route_table_ids for _ in share.attachment.summary_cidrs)
        built.update(r.inputs["routeTableId"] for r in plan.of_type(ROUTE))
    members = [inputs.mesh for inputs, _ in planned if inputs.mesh is not None]
    assert members
    for share in members:
        assert share.limits is not None
        for table in share.member.route_table_ids:
            assert listed[table] == built[table] == share.limits.mesh_routes, (share.member.key, table)


@pytest.mark.parametrize("example,phase,summary", CASES,
                         ids=[f"{e}-{p}{'-summary' if s else ''}" for e, p, s in CASES])
def test_the_program_builds_exactly_pair_routes_and_the_quota_counts_every_pair_route(tmp_path, example, phase,
                                                                                         summary):
    fleet = _fleet(tmp_path, example, phase, summary)
    planned = _planned(fleet)
    kinds = set()
    for inputs, plan in planned:
        _check_stack(inputs, plan)
        if inputs.mesh is not None:
            _check_superset(inputs.mesh)
            assert every_pair_route(inputs.mesh) == pair_routes(inputs.mesh)  # every target is made
            kinds |= {r.via for r in pair_routes(inputs.mesh)}
    _check_quota(planned)
    share = next(inputs.mesh for inputs, _ in planned if inputs.mesh is not None)
    carried = share.routes_via == TGW and summary
    assert kinds == (set() if carried else {share.routes_via}), kinds  # the phase's kind, and routes to compare

    # Before the transit stack has run, a phase routing via a gateway builds no pair route yet; the preflight
    # still checks them all.
    for inputs, plan in _before_transit(fleet):
        _check_stack(inputs, plan)
        if inputs.mesh is not None:
            _check_superset(inputs.mesh)
            if inputs.mesh.routes_via == TGW:
                assert pair_routes(inputs.mesh) == ()
