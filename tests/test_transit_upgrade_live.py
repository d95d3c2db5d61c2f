"""Upgrading a transit stack from propagation to static routes, through the real engine (PulumiEngine, the built
`pulumi` CLI, the policy pack): the names and props are TransitNetwork's own (from its mock-runtime plan), the
resources dynamic stand-ins whose "cloud" records every route entry (tests/transit_live_programs.py).

What docs/mesh.md (#upgrading-transit-stacks-static-routes-instead-of-propagation) says, checked here: one update
creates every static route before it deletes any propagation, so each declared CIDR is routed after every single
operation; the undeclared CIDR a propagation advertised is gone at the end; the pack passes the new routes and
refuses one to 0.0.0.0/0. Skips, saying why, without the CLI."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from automation.adapters.engine import PolicyViolation
from automation.adapters.engine.pulumi_engine import PulumiEngine
from doubles.pulumi_programs import PACK, TOOLS_BIN, engine_settings
from tests.test_transit_components import ASSOC, STATIC, TABLE, TRANSIT, plans_of, tgw_hub
from tests.test_transit import tgw_member
from doubles.providers import routed
from tests.transit_live_programs import gateway_tables, ops

NEEDS = ("pulumi", "pulumi-resource-pulumi-python", "pulumi-analyzer-policy-python")
MISSING = [b for b in NEEDS if not (TOOLS_BIN / b).is_file() and shutil.which(b) is None]
pytestmark = [pytest.mark.live,
              pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} not found: run scripts/tools.sh")]

SECONDARY = "10.200.{}.0/24"  # a CIDR each member's VPC has but never declared (inside nobody's range of its own)


@pytest.fixture(scope="module")
def transit():
    """The transit stack's inputs and, from its plan, what the stand-ins need: tables and each member's names."""
    clusters = [tgw_member(i) for i in range(4)]  # two regions, two accounts besides the network's
    resolved, plans = plans_of(tgw_hub(), clusters)
    inputs, plan = resolved.mesh.transit[TRANSIT], plans[TRANSIT]
    attachments = {m.attachment_id for r in inputs.regions for g in r.groups for m in g.attachments}
    table_name = {t.id: t.name for t in plan.of_type(TABLE)}
    tables = [{"name": t.name, "group": t.inputs["tags"]["hubwright.io/mesh-group"]} for t in plan.of_type(TABLE)]
    members = []
    for i, route in enumerate(r for r in plan.of_type(STATIC) if r.inputs["transitGatewayAttachmentId"] in attachments):
        [association] = [a for a in plan.of_type(ASSOC)
                         if a.inputs["transitGatewayAttachmentId"] == route.inputs["transitGatewayAttachmentId"]]
        cidr = route.inputs["destinationCidrBlock"]
        members.append({"association": association.name, "propagation": f"{association.name}-propagate",  # as before
                        "route": route.name, "table": table_name[route.inputs["transitGatewayRouteTableId"]],
                        "attachment": route.inputs["transitGatewayAttachmentId"], "cidr": cidr,
                        "vpcCidrs": [cidr, SECONDARY.format(i)]})
    assert len(members) == len(clusters)
    return inputs, tables, members


def engine(tmp_path: Path, cloud: Path, transit, version: str, extra_routes=()) -> PulumiEngine:
    _, tables, members = transit
    return PulumiEngine(engine_settings(tmp_path / "state", policy=PACK), program_factory=lambda inputs: gateway_tables(
        inputs, cloud=str(cloud), tables=tables, members=members, version=version, extra_routes=list(extra_routes)))


def test_the_upgrade_adds_every_static_route_before_it_drops_any_propagation(pulumi_cli, tmp_path, transit):
    inputs, tables, members = transit
    cloud = tmp_path / "cloud"
    before = engine(tmp_path, cloud, transit, "propagation").up(inputs, message="transit stack before issue 31")
    assert before.ok
    by_table = {t["name"]: sorted(m["cidr"] for m in members if m["table"] == t["name"]) for t in tables}
    vpcs = {t: sorted(c for m in members if m["table"] == t for c in m["vpcCidrs"]) for t in by_table}
    assert routed(cloud) == vpcs  # the propagations advertised the undeclared CIDRs too: the hole
    done = len(ops(cloud))

    after = engine(tmp_path, cloud, transit, "static").up(inputs, message="transit stack after issue 31")
    assert after.ok and after.changes == {"create": len(members), "delete": len(members),
                                          "same": 1 + len(tables) + len(members)}  # 1: the stack
    upgrade = ops(cloud)[done:]
    assert sorted((o["op"], o["kind"]) for o in upgrade) == sorted(
        [("create", "Route")] * len(members) + [("delete", "RouteTablePropagation")] * len(members))
    last_create = max(i for i, o in enumerate(upgrade) if o["op"] == "create")
    first_delete = min(i for i, o in enumerate(upgrade) if o["op"] == "delete")
    assert last_create < first_delete, [(o["op"], o["name"]) for o in upgrade]
    for o in upgrade:  # after every single operation, every declared CIDR is still routed
        for table, declared in by_table.items():
            assert set(declared) <= set(o["routed"][table]), (o["op"], o["name"])
    assert routed(cloud) == by_table  # and the undeclared ones are gone


def test_the_pack_in_the_engine_refuses_a_gateway_route_outside_the_declared_cidrs(pulumi_cli, tmp_path, transit):
    inputs, _, members = transit
    cloud = tmp_path / "cloud"
    member = members[0]
    world = {"name": f"{member['route']}-world", "table": member["table"], "cidr": "0.0.0.0/0",
             "attachment": member["attachment"]}
    with pytest.raises(PolicyViolation) as refused:
        engine(tmp_path, cloud, transit, "static", [world]).up(inputs, message="a route to everything")
    text = str(refused.value)
    assert "tgw-routes-in-their-group" in text and "the route to 0.0.0.0/0 targets" in text
    # a stack rule sees what the update made (docs/security.md: the plan is the gate before anything exists); the
    # refused update leaves it, and the next update of the program as it is removes it
    assert "0.0.0.0/0" in routed(cloud)[member["table"]]
    assert engine(tmp_path, cloud, transit, "static").up(inputs, message="as the program builds it").ok
    assert all("0.0.0.0/0" not in cidrs for cidrs in routed(cloud).values())
