"""Issue 45: what a failed mesh pair run tells the pair owner's tenant of its peer, through the real engine.

globex/c01 (account 333333333333) joins group core after acme/c00 (222222222222), so its stack owns the pair and
builds acme's side too: a route in acme's route table, through acme's role. acme's tenant has since deleted that
table, which globex/c01's inputs still name. The run goes through PulumiEngine and the built `pulumi` CLI with the
policy pack, the pair's resources as stand-ins that keep MeshPeering's names and send acme's route to EC2 (moto's) in
acme's account (tests/mesh_live_programs.py).

Shown (the first two tests): the engine's message names acme's route table (AWS's own error, and the resource's
name), and the policy pack's names acme's tables. Then the rule (stacks.disclosure, docs/security.md: a member may
know of its peer what its own stack's inputs hold of its own side, no more) on each surface globex's tenant reads:
the HubCluster's lastUpdate, conditions and Events (the reconciler), and the HubStackRun's status.message (a runner,
on the real kube-apiserver); the whole text stays in the run's log line, the hub administrator's.
Skips, saying why, without the CLI, its policy analyzer, moto or (the last test) the kube-apiserver.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.engine import EngineError, PolicyViolation
from automation.adapters.engine.pulumi_engine import PulumiEngine
from automation.adapters.logs import FIELDS
from doubles.factories import cluster_doc, fleet
from doubles.pulumi_programs import PACK, TOOLS_BIN, engine_settings
from doubles.runners import SERVICE_NAMESPACE, create_run, phase, run_status, running_runners
from doubles.service_env import wait_until
from stacks.inputs import StackInputs
from stacks.resolve import resolve_fleet
from tests import envtest
from tests.mesh_live_programs import pair_stand_ins
from tests.test_aws_sessions import _setup_session
from tests.test_mesh import hub, member
from tests.test_reconcile_direct import World

NEEDS = ("pulumi", "pulumi-resource-pulumi-python", "pulumi-analyzer-policy-python")
MISSING = [b for b in NEEDS if not (TOOLS_BIN / b).is_file() and shutil.which(b) is None]
pytestmark = [pytest.mark.live,
              pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} not found: run scripts/tools.sh")]

kube_apiserver = envtest.kube_apiserver  # the fixture, for the runner's test

OWNER, STACK = "globex/c01", "globex.c01"
PEER_ROLE = "arn:aws:iam::222222222222:role/hubwright"


@pytest.fixture
def pair(moto):
    """(globex/c01's inputs, acme/c00's IDs as they hold them, globex/c01's own): each member's VPC, route table and
    node security group made in moto, in its own account; acme's table deleted since."""
    made = {}
    for i, account in ((0, "222222222222"), (1, "333333333333")):
        ec2 = _setup_session(moto, account).client("ec2", endpoint_url=moto.url)
        vpc = ec2.create_vpc(CidrBlock=f"10.{i}.0.0/16")["Vpc"]["VpcId"]
        table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
        group = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc)["GroupId"]
        made[i] = {"account": account, "vpc": vpc, "table": table, "group": group}
        if i == 0:
            ec2.delete_route_table(RouteTableId=table)  # acme's tenant removed it
    clusters = tuple(member(i, vpcID=ids["vpc"], routeTableIDs=[ids["table"]], nodeSecurityGroupIDs=[ids["group"]])
                     for i, ids in made.items())
    inputs = resolve_fleet(fleet(hub(), clusters))[OWNER]
    assert isinstance(inputs, StackInputs) and [p.peer.key for p in inputs.mesh.pairs] == ["acme/c00"]
    return inputs, {**made[0], "role": PEER_ROLE}, made[1]


def engine(tmp_path: Path, moto, **kw) -> PulumiEngine:
    return PulumiEngine(engine_settings(tmp_path / "state", policy=PACK), program_factory=lambda inputs: pair_stand_ins(
        inputs, cloud=str(tmp_path / "cloud"), endpoint=moto.url, **kw))


def tenant_text(world: World, key: str = OWNER) -> str:
    """Everything globex's tenant reads of the run on its HubCluster: lastUpdate, conditions, Events."""
    status = world.status(key)
    return "\n".join([status.last_update.message if status.last_update else "",
                      *(c.message for c in status.conditions),
                      *(e.message for e in world.kube.events if e.key == key)])


def assert_nothing_of(peer: dict, text: str) -> None:
    for what, value in peer.items():
        assert value not in text, f"the peer's {what} {value} is in what the tenant reads:\n{text}"


# --------------------------------------------------------------------------- shown: what the engine says

def test_the_engines_message_of_a_failed_pair_run_names_the_peers_route_table(pulumi_cli, tmp_path, moto, pair):
    inputs, peer, _ = pair
    with pytest.raises(EngineError) as failed:
        engine(tmp_path, moto).up(inputs, message="the peer's side fails")
    text = str(failed.value)
    print(f"\nthe engine's message ({len(text)} characters):\n{text}")
    assert failed.value.reason == "UpdateFailed" and text.startswith(f"up {STACK}: ")
    assert f"The routeTable ID '{peer['table']}' does not exist" in text  # AWS's error, from acme's account
    assert f"Route Table ({peer['table']})" in text


def test_the_policy_packs_message_names_the_peers_route_tables(pulumi_cli, tmp_path, moto, pair):
    inputs, peer, _ = pair
    with pytest.raises(PolicyViolation) as refused:
        engine(tmp_path, moto, peer_routes=False).up(inputs, message="the peer's routes left out")
    text = str(refused.value)
    print(f"\nthe policy pack's message ({len(text)} characters):\n{text}")
    assert "peerings-routed-both-sides" in text and f"acme/c00's route tables {peer['table']}" in text


# --------------------------------------------------------------------------- the rule, on each surface

@pytest.mark.parametrize("peer_routes, said", [
    (True, "InvalidRouteTableID.NotFound"),  # the peer's side failed: AWS's error
    (False, "acme/c00's route tables rtb-[redacted] have no route"),  # the policy pack refused: Stalled
])
def test_a_failed_pair_run_tells_the_owners_tenant_nothing_of_its_peer_on_its_hubcluster(
        pulumi_cli, tmp_path, moto, pair, caplog, peer_routes, said):
    inputs, peer, own = pair
    world = World(engine=engine(tmp_path, moto, peer_routes=peer_routes))
    try:
        world.kube.create(cluster_doc("c01", "globex", accountID=own["account"], privateLink={"enabled": False},
                                      network={"vpcID": own["vpc"], "cidr": "10.1.0.0/16",
                                               "routeTableIDs": [own["table"]], "nodeSecurityGroupIDs": [own["group"]]}))
        world.desired.wanted[OWNER] = inputs
        with caplog.at_level(logging.WARNING, logger="hubwright.run"):
            world.reconcile(OWNER)
        assert world.status(OWNER).last_update.result == "Failed"
        text = tenant_text(world)
        print(f"\nwhat globex's tenant reads on its HubCluster:\n{text}")
        assert_nothing_of(peer, text)
        assert said in text and "rtb-[redacted]" in text  # what failed is still said
        ran = next(r for r in caplog.records if r.name == "hubwright.run")  # the run's line (then a refusal's)
        assert peer["table"] in getattr(ran, FIELDS)["error"]  # the hub administrator's log keeps it all
    finally:
        world.close()


@pytest.fixture
def namespaces(kube_apiserver):
    with kube_apiserver.api_client() as api_client:
        for name in (SERVICE_NAMESPACE, "globex"):
            try:
                client.CoreV1Api(api_client).create_namespace({"metadata": {"name": name}})
            except ApiException as exc:
                if exc.status != 409:
                    raise
        yield api_client


def test_a_failed_pair_runs_status_tells_its_tenant_nothing_of_the_peer(pulumi_cli, tmp_path, moto, pair,
                                                                        namespaces, caplog):
    inputs, peer, _ = pair
    key = create_run(namespaces, "up", inputs, message="the peer's side fails")
    assert key.startswith("globex/")  # beside its cluster: globex's tenant reads it
    with caplog.at_level(logging.WARNING, logger="hubwright.run"), \
            running_runners(namespaces, engine(tmp_path, moto), n=1, claim_ttl=30):
        wait_until(lambda: phase(namespaces, key) == "Failed", 120, what=f"{key} Failed")
    status = run_status(namespaces, key)
    assert_nothing_of(peer, status["message"])
    assert status["reason"] == "UpdateFailed" and "InvalidRouteTableID.NotFound" in status["message"]
    assert "Route Table (rtb-[redacted])" in status["message"]
    [line] = [r for r in caplog.records if r.name == "hubwright.run"]
    assert peer["table"] in getattr(line, FIELDS)["error"]  # the runner's log line keeps it all
