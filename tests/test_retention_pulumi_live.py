"""deletionPolicy Retain against the real pulumi CLI: what a retained stack keeps, and its re-adoption.

The pulumi-aws plugin is not here, so the stack program is the real one mirrored (doubles/mirror_program.py): each
resource the real components register for the inputs (the offline plan) is a resource of the same type and name
under the same parents, whose create writes a file in a "cloud" directory under a fresh ID. One stack of a real
example fleet, three `up`s through PulumiEngine, as the service runs them:

1. the cluster's full inputs: everything is created;
2. `retained_inputs(full)`: the HubCluster was deleted with deletionPolicy Retain. Only deletes: what lives outside
   the cluster's own account goes; what stays (a PrivateLink cluster's endpoint service, a mesh member's dedicated
   security group) is not touched: same ID, same file, created once, never modified;
3. the full inputs again: a HubCluster of the same name adopts the stack. Only creates, exactly what step 2 deleted.

Then the stack's history as a person sees it, from another workspace: the three updates and their changes.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from automation.adapters.engine.pulumi_engine import PulumiEngine
from automation.adapters.files.inputs import load_fleet
from doubles.mirror_program import Planned, in_cloud, mirror_program, operations, planned
from doubles.pulumi_programs import ROOT, engine_settings, human_stack
from stacks.inputs import StackInputs
from stacks.resolve import resolve_fleet
from stacks.keep import retained_inputs

pytestmark = pytest.mark.live


@dataclass(frozen=True)
class Case:
    hub: str
    clusters: str
    cluster: str
    kept: frozenset[str]  # the types of what the retained stack keeps (custom resources and their components)
    dedicated: bool = False  # the mesh group's securityGroup: dedicated (a group of its own per member)


PRIVATELINK = Case("examples/hub.yaml", "examples/clusters", "acme/prod-1", frozenset({
    "aws:ec2/vpcEndpointService:VpcEndpointService",
    "hubwright:privatelink:EndpointService", "hubwright:privatelink:PrivateLink"}))
MESH = Case("examples/mesh/hub.yaml", "examples/mesh/clusters", "globex/ledger-euw1", frozenset({"hubwright:mesh:Mesh"}))
MESH_DEDICATED = Case("examples/mesh/hub.yaml", "examples/mesh/clusters", "globex/ledger-euw1",
                      frozenset({"aws:ec2/securityGroup:SecurityGroup", "hubwright:mesh:Mesh"}), dedicated=True)


def full_inputs(case: Case, tmp: Path) -> StackInputs:
    hub = ROOT / case.hub
    if case.dedicated:
        text = hub.read_text()
        assert text.count("securityGroup: nodes") == 1
        hub = tmp / "hub.yaml"
        hub.write_text(text.replace("securityGroup: nodes", "securityGroup: dedicated"))
    inputs = resolve_fleet(load_fleet(str(hub), str(ROOT / case.clusters)))[case.cluster]
    assert isinstance(inputs, StackInputs), inputs
    return inputs


def mirrored(inputs: StackInputs) -> dict[str, Planned]:
    """What the real program registers for `inputs`, as the mirror registers it (no providers), by planned URN."""
    return {r.urn: r for r in planned(inputs) if r.mirrored}


def state(engine: PulumiEngine, stack: str, tmp: Path) -> dict[str, tuple[Any, ...]]:
    """Pulumi's own record of each resource (the Stack and the providers aside), read from another workspace:
    mirrored URN -> (ID, created, modified)."""
    deployment = human_stack(engine, stack, tmp).export_stack().deployment
    assert deployment is not None
    return {r["urn"]: (r.get("id"), r.get("created"), r.get("modified")) for r in deployment["resources"]
            if r["type"] != "pulumi:pulumi:Stack" and not r["type"].startswith("pulumi:providers:")}


def ops_of(cloud: Path, urn: str) -> list[str]:
    return [op["op"] for op in operations(cloud) if op["urn"] == urn]


def touched(cloud: Path, kept: dict[str, Planned]) -> list[str]:
    """What was done to a kept resource after its create (an update; a replacement: a create and a delete): a run
    that touches one is the bug this test is for, and the failure names it."""
    return [f"{op} {urn}" for urn in kept for op in ops_of(cloud, urn)[1:]]


@pytest.mark.parametrize("case", [PRIVATELINK, MESH, MESH_DEDICATED],
                         ids=["privatelink-acme.prod-1", "mesh-globex.ledger-euw1", "mesh-dedicated-globex.ledger-euw1"])
def test_retain_deletes_only_what_lives_elsewhere_and_readoption_only_creates_it_again(pulumi_cli, tmp_path, case):
    full = full_inputs(case, tmp_path)
    retained = retained_inputs(full)
    whole, kept = mirrored(full), mirrored(retained)
    assert set(kept) <= set(whole), "a retained stack builds nothing the cluster's stack did not have"
    removed = {urn: r for urn, r in whole.items() if urn not in kept}
    assert {r.type for r in kept.values()} == case.kept
    own = (full.cluster.account_id, full.cluster.region)
    assert {(r.account, r.region) for r in kept.values() if r.custom} <= {own}, "kept: the cluster's account only"

    cloud = tmp_path / "cloud"
    engine = PulumiEngine(engine_settings(tmp_path / "state", home=tmp_path / "home"),
                          program_factory=mirror_program(cloud))
    stack = full.stack

    # 1. The cluster: everything created (and the Stack resource itself).
    created = engine.up(full, message=f"cluster {full.key} created")
    assert created.changes == {"create": len(whole) + 1}
    assert set(in_cloud(cloud)) == {urn for urn, r in whole.items() if r.custom}
    first_cloud, first_state = in_cloud(cloud), state(engine, stack, tmp_path)

    # 2. Deleted with deletionPolicy Retain: only deletes, exactly what does not live in the cluster's account.
    kept_run = engine.up(retained, message=f"cluster {full.key} deleted: deletionPolicy Retain")
    assert kept_run.changes == {"delete": len(removed), "same": len(kept) + 1}, touched(cloud, kept)
    assert in_cloud(cloud) == {urn: first_cloud[urn] for urn, r in kept.items() if r.custom}  # same ID, same file
    after_retain = state(engine, stack, tmp_path)
    assert after_retain == {urn: first_state[urn] for urn in after_retain}  # never replaced nor modified
    assert len(after_retain) == len(kept)
    gone = {(r.account, r.region) for r in removed.values() if r.custom}
    if full.mesh is not None:  # every pair, on both sides: peerings, accepters, routes and rules
        assert {r.parent.rsplit("::", 1)[-1] for r in removed.values() if r.custom and r.parent} == \
            {f"mesh-{pair.name}" for pair in full.mesh.pairs}
        assert gone == {own, *((p.peer.target.account_id, p.peer.target.region) for p in full.mesh.pairs)}
    if full.private_link is not None:  # the hub side: interface endpoint, its group and rules, zone, associations
        assert {account for account, _ in gone} == {full.hub.account_id}

    # 3. A HubCluster of the same name adopts the stack: only creates, exactly what Retain removed.
    adopted = engine.up(full, message=f"cluster {full.key} re-created: adopts the retained stack")
    assert adopted.changes == {"create": len(removed), "same": len(kept) + 1}, touched(cloud, kept)
    again = in_cloud(cloud)
    assert set(again) == set(first_cloud)
    assert all(again[urn] == first_cloud[urn] for urn, r in kept.items() if r.custom)  # kept: same ID, same file
    after_adopt = state(engine, stack, tmp_path)
    assert set(after_adopt) == set(first_state)
    assert {urn: after_adopt[urn] for urn in after_retain} == after_retain
    for urn, r in whole.items():
        if r.custom:
            assert ops_of(cloud, urn) == (["create"] if urn in kept else ["create", "delete", "create"]), urn

    # As a person sees it: `pulumi stack history` from a workspace of their own, newest first.
    history = human_stack(engine, stack, tmp_path).history()
    assert [(h.kind, h.result, h.resource_changes) for h in history] == [
        ("update", "succeeded", {"create": len(removed), "same": len(kept) + 1}),
        ("update", "succeeded", {"delete": len(removed), "same": len(kept) + 1}),
        ("update", "succeeded", {"create": len(whole) + 1}),
    ]
    assert [h.message for h in history] == [f"hubwright: cluster {full.key} re-created: adopts the retained stack",
                                            f"hubwright: cluster {full.key} deleted: deletionPolicy Retain",
                                            f"hubwright: cluster {full.key} created"]

