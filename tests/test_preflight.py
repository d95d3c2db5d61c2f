"""The preflight guard against moto in server mode, alone and inside the reconcile pipeline."""
from __future__ import annotations

import ipaddress

import pytest
from kubernetes import client

from automation.adapters.aws.lookups import LookupFailed
from automation.adapters.aws.preflight import Preflight
from stacks.errors import NeedsAttention

from doubles.engine import RecordingEngine
from doubles.kube import MockKubeAPI
from doubles.factories import cluster, hub, resolve_one
from doubles.service_env import ServiceEnv, wait_until
from tests.test_aws_sessions import CLUSTER_ACCOUNT, _enforced, _nlb, sessions  # noqa: F401 - fixture


def test_passes_when_every_account_is_reachable_and_the_nlb_exists(moto, sessions):  # noqa: F811
    _nlb(moto, CLUSTER_ACCOUNT, "prod-1-x7k2p-int")
    assert Preflight(sessions)(None, resolve_one(cluster(infraID="prod-1-x7k2p"), hub())) is None


def test_a_missing_nlb_is_a_retryable_lookup_failure(moto, sessions):  # noqa: F811
    with pytest.raises(LookupFailed) as caught:
        Preflight(sessions)(None, resolve_one(cluster(infraID="not-yet-abcde"), hub()))
    assert caught.value.reason == "LoadBalancerNotFound" and "not-yet-abcde-int" in str(caught.value)


def test_an_assume_role_refusal_needs_attention_naming_the_cluster_the_field_and_the_role(moto):
    refused = resolve_one(cluster(accountID="333333333333"), hub())  # the controller may not assume this role
    with pytest.raises(NeedsAttention) as caught:
        Preflight(_enforced(moto))(None, refused)
    assert caught.value.reason == "AssumeRoleFailed"
    assert str(caught.value).startswith("HubCluster acme/prod-1: spec.accountID: AssumeRole of role ")
    assert "arn:aws:iam::333333333333:role/hubwright" in str(caught.value)


def test_in_the_pipeline_nothing_runs_until_the_installer_has_made_the_nlb(moto, sessions):  # noqa: F811
    engine = RecordingEngine()
    with MockKubeAPI() as api:
        env = ServiceEnv(client.ApiClient(api.configuration()))
        env.namespace("acme")
        env.hub()
        env.create("prod-1", infraID="prod-1-x7k2p")
        with env.running(engine, guards=[Preflight(sessions)], backoff_base=0.2, backoff_cap=0.5):
            wait_until(lambda: env.reason("prod-1") == "LoadBalancerNotFound", what="LoadBalancerNotFound")
            assert engine.calls == []
            assert "preflight, nothing ran" in env.condition("prod-1")["message"]
            _nlb(moto, CLUSTER_ACCOUNT, "prod-1-x7k2p-int")  # the installer gets there
            wait_until(lambda: env.ready("prod-1"), what="Ready")
    assert [c.operation for c in engine.calls] == ["up"]


# --- the mesh's CIDR pre-flight: what a member declares against what its account and the hub's say ---------

from automation.adapters.aws.mesh_cidrs import MeshCidrPreflight  # noqa: E402
from stacks.errors import InvalidSpec  # noqa: E402
from stacks.resolve import resolve_all  # noqa: E402
from doubles.factories import HUB_ACCOUNT, fleet  # noqa: E402
from tests.test_aws_sessions import _setup_session  # noqa: E402
from tests.test_mesh import hub as mesh_hub, member  # noqa: E402

ATTACKER_ACCOUNT = "333333333333"


def _vpc(moto, account: str, cidr: str, *secondary: str) -> tuple[object, str, str]:
    """A VPC with CIDR blocks `cidr` and `secondary`, and a route table: (its ec2 client, VPC ID, table ID)."""
    ec2 = _setup_session(moto, account).client("ec2", endpoint_url=moto.url)
    vpc = ec2.create_vpc(CidrBlock=cidr)["Vpc"]["VpcId"]
    for block in secondary:
        ec2.associate_vpc_cidr_block(VpcId=vpc, CidrBlock=block)
    table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    return ec2, vpc, table


def _mesh_inputs(victim: tuple, attacker: tuple, *, attacker_cidr: str, **hub_spec):
    """acme/c00 (the victim, first in group core) and globex/c01 (joins after it, so its stack owns the pair
    and writes attacker_cidr into the victim's route table): globex/c01's inputs."""
    _, victim_vpc, victim_table = victim
    _, attacker_vpc, attacker_table = attacker
    clusters = [member(0, vpcID=victim_vpc, routeTableIDs=[victim_table], cidr="10.1.0.0/16"),
                member(1, vpcID=attacker_vpc, routeTableIDs=[attacker_table], cidr=attacker_cidr)]
    resolved = resolve_all(fleet(mesh_hub(**hub_spec), clusters))
    inputs = resolved.inputs["globex/c01"]
    assert not isinstance(inputs, InvalidSpec), inputs  # the plan admits it: only the cloud can tell
    return inputs


def test_a_member_cidr_its_vpc_does_not_have_is_refused_before_anything_runs(moto, sessions):  # noqa: F811
    victim = _vpc(moto, CLUSTER_ACCOUNT, "10.1.0.0/16")
    attacker = _vpc(moto, ATTACKER_ACCOUNT, "10.50.0.0/16")
    desired = _mesh_inputs(victim, attacker, attacker_cidr="10.7.0.0/16")  # declared, but not its VPC's
    with pytest.raises(NeedsAttention) as caught:
        MeshCidrPreflight(sessions)(None, desired)
    assert caught.value.reason == "MeshCIDRNotInVPC"
    assert str(caught.value) == (
        f"HubCluster globex/c01: spec.network.cidr: CIDR 10.7.0.0/16 is not a CIDR block of VPC {attacker[1]} in account "
        f"{ATTACKER_ACCOUNT} (us-east-1), which has 10.50.0.0/16; a member declares one of its VPC's own CIDR "
        f"blocks, since its peers route exactly that range to it")


def test_a_secondary_cidr_block_of_the_vpc_may_be_declared(moto, sessions):  # noqa: F811
    victim = _vpc(moto, CLUSTER_ACCOUNT, "10.1.0.0/16")
    attacker = _vpc(moto, ATTACKER_ACCOUNT, "10.50.0.0/16", "10.51.0.0/16")
    assert MeshCidrPreflight(sessions)(None, _mesh_inputs(victim, attacker, attacker_cidr="10.51.0.0/16")) is None


def test_a_peer_whose_vpc_lacks_its_cidr_stalls_the_owner_of_the_pair(moto, sessions):  # noqa: F811
    victim = _vpc(moto, CLUSTER_ACCOUNT, "10.2.0.0/16")  # acme/c00 declares 10.1.0.0/16, its VPC is 10.2.0.0/16
    attacker = _vpc(moto, ATTACKER_ACCOUNT, "10.50.0.0/16")
    with pytest.raises(NeedsAttention) as caught:
        MeshCidrPreflight(sessions)(None, _mesh_inputs(victim, attacker, attacker_cidr="10.50.0.0/16"))
    assert caught.value.reason == "MeshCIDRNotInVPC"
    assert str(caught.value).startswith("HubCluster globex/c01: metadata.labels[hubwright.io/mesh]: its peer HubCluster "
                                        "acme/c00 in mesh group core declares what AWS does not say: CIDR 10.1.0.0/16 "
                                        f"is not a CIDR block of VPC {victim[1]} in account {CLUSTER_ACCOUNT}")


def test_a_cidr_block_the_hub_account_says_its_associated_vpc_has_is_the_hubs(moto, sessions):  # noqa: F811
    """The associated VPC is declared without a CIDR (looked up), and its secondary block is what the member
    declares: the form knows neither, the hub account knows both."""
    _, mgmt, _ = _vpc(moto, HUB_ACCOUNT, "10.20.0.0/16", "10.21.0.0/16")
    victim = _vpc(moto, CLUSTER_ACCOUNT, "10.1.0.0/16")
    attacker = _vpc(moto, ATTACKER_ACCOUNT, "10.21.0.0/16")
    desired = _mesh_inputs(victim, attacker, attacker_cidr="10.21.0.0/16",
                           associatedVPCs=[{"region": "us-east-1", "vpcID": mgmt}])
    with pytest.raises(InvalidSpec) as caught:
        MeshCidrPreflight(sessions)(None, desired)
    assert caught.value.reason == "MeshCIDROverlap"
    [error] = caught.value.errors
    assert (error.obj, error.field) == ("HubCluster globex/c01", "spec.network.cidr")
    assert error.reason.startswith(
        f"CIDR 10.21.0.0/16 of HubCluster globex/c01 overlaps CIDR 10.21.0.0/16 of HubConfig default "
        f"spec.associatedVPCs[0] (VPC {mgmt}), a CIDR block of the VPC in the hub account, which the hub owns")


def test_a_pair_route_more_specific_than_a_route_in_the_peers_table_stalls_naming_both_routes(moto, sessions):  # noqa: F811
    """The hijack: acme routes its on-premises 10.40.0.0/16 through its VPN gateway; globex declares 10.40.9.0/24
    (its VPC's real CIDR, in nobody's declaration) and its stack would write 10.40.9.0/24 -> pcx into acme's
    table: the longer prefix wins, acme's traffic for 10.40.9.0/24 would go to globex."""
    victim = _vpc(moto, CLUSTER_ACCOUNT, "10.1.0.0/16")
    ec2, _, table = victim
    vgw = ec2.create_vpn_gateway(Type="ipsec.1")["VpnGateway"]["VpnGatewayId"]
    ec2.attach_vpn_gateway(VpnGatewayId=vgw, VpcId=victim[1])
    ec2.create_route(RouteTableId=table, DestinationCidrBlock="10.40.0.0/16", GatewayId=vgw)
    ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", GatewayId=vgw)  # beaten by design
    attacker = _vpc(moto, ATTACKER_ACCOUNT, "10.40.9.0/24")
    desired = _mesh_inputs(victim, attacker, attacker_cidr="10.40.9.0/24")
    with pytest.raises(NeedsAttention) as caught:
        MeshCidrPreflight(sessions)(None, desired)
    assert caught.value.reason == "MeshRouteHijack"
    message = str(caught.value)
    assert message.startswith(
        f"HubCluster globex/c01: spec.network.cidr: route table {table} of HubCluster acme/c00 has 10.40.0.0/16 -> {vgw}, "
        f"and mesh pair acme.c00+globex.c01 would add 10.40.9.0/24 (to HubCluster globex/c01), which is more "
        f"specific: 10.40.0.0/16 -> {vgw} would lose 10.40.9.0/24's traffic")
    assert "0.0.0.0/0" not in message
    # The hub administrator may give the members that range: then a member route inside it is expected.
    covered = _mesh_inputs(victim, attacker, attacker_cidr="10.40.9.0/24",
                           mesh={"groups": {"core": {"memberCIDRs": ["10.0.0.0/8"]}}})
    assert MeshCidrPreflight(sessions)(None, covered) is None


# Routes to managed prefix lists (issue 45, finding 2): each IPv4 entry is a route of the list's target. moto holds
# the lists of the table's own account and the AWS-managed ones its gateway endpoints route to; a list shared through
# RAM, one AWS will not read and AWS's errors are tested on recorded answers in tests/test_prefix_list_routes.py.

def _on_premises_list(ec2, vpc: str, table: str, *cidrs: str) -> tuple[str, str]:
    """`cidrs` as a customer-managed prefix list, routed to a VPN gateway of `vpc` in `table`: (list ID, gateway)."""
    vgw = ec2.create_vpn_gateway(Type="ipsec.1")["VpnGateway"]["VpnGatewayId"]
    ec2.attach_vpn_gateway(VpnGatewayId=vgw, VpcId=vpc)
    made = ec2.create_managed_prefix_list(PrefixListName="on-premises", AddressFamily="IPv4", MaxEntries=10,
                                          Entries=[{"Cidr": cidr, "Description": "data centre"} for cidr in cidrs])
    prefix_list = made["PrefixList"]["PrefixListId"]
    ec2.create_route(RouteTableId=table, DestinationPrefixListId=prefix_list, GatewayId=vgw)
    return prefix_list, vgw


def test_a_pair_route_inside_an_entry_of_a_prefix_list_in_the_peers_table_stalls_naming_the_list(moto, sessions):  # noqa: F811
    """The hijack above, through a prefix list: acme sends its on-premises ranges to its VPN gateway as the entries
    of a managed prefix list, the usual way; globex declares 10.40.9.0/24, inside the entry 10.40.0.0/16. AWS ranks
    the longer prefix first, so the pair route would take 10.40.9.0/24 from the prefix-list route."""
    victim = _vpc(moto, CLUSTER_ACCOUNT, "10.1.0.0/16")
    ec2, vpc, table = victim
    prefix_list, vgw = _on_premises_list(ec2, vpc, table, "172.20.0.0/16", "10.40.0.0/16")
    attacker = _vpc(moto, ATTACKER_ACCOUNT, "10.40.9.0/24")
    with pytest.raises(NeedsAttention) as caught:
        MeshCidrPreflight(sessions)(None, _mesh_inputs(victim, attacker, attacker_cidr="10.40.9.0/24"))
    assert caught.value.reason == "MeshRouteHijack"
    assert str(caught.value).startswith(
        f"HubCluster globex/c01: spec.network.cidr: route table {table} of HubCluster acme/c00 has 10.40.0.0/16 (an "
        f"entry of prefix list {prefix_list}) -> {vgw}, and mesh pair acme.c00+globex.c01 would add 10.40.9.0/24 (to "
        f"HubCluster globex/c01), which is more specific: 10.40.0.0/16 -> {vgw} would lose 10.40.9.0/24's traffic")
    assert "172.20.0.0/16" not in str(caught.value)
    # The hub administrator may give the members that range, as for a CIDR route.
    covered = _mesh_inputs(victim, attacker, attacker_cidr="10.40.9.0/24",
                           mesh={"groups": {"core": {"memberCIDRs": ["10.0.0.0/8"]}}})
    assert MeshCidrPreflight(sessions)(None, covered) is None


def test_a_pair_route_the_same_as_an_entry_of_a_prefix_list_stalls_too(moto, sessions):  # noqa: F811
    """Of two routes of one length AWS ranks the CIDR route above the prefix-list route. (Two CIDR routes of one
    destination cannot exist: AWS refuses the second, so there only a longer prefix takes traffic.) globex declares
    exactly the entry: as a member CIDR it is the mesh's own, but the entry is acme's, and it would lose."""
    victim = _vpc(moto, CLUSTER_ACCOUNT, "10.1.0.0/16")
    ec2, vpc, table = victim
    prefix_list, vgw = _on_premises_list(ec2, vpc, table, "10.40.9.0/24")
    attacker = _vpc(moto, ATTACKER_ACCOUNT, "10.40.9.0/24")
    with pytest.raises(NeedsAttention) as caught:
        MeshCidrPreflight(sessions)(None, _mesh_inputs(victim, attacker, attacker_cidr="10.40.9.0/24"))
    assert caught.value.reason == "MeshRouteHijack"
    assert (f"route table {table} of HubCluster acme/c00 has 10.40.9.0/24 (an entry of prefix list {prefix_list}) -> "
            f"{vgw}, and mesh pair acme.c00+globex.c01 would add 10.40.9.0/24 (to HubCluster globex/c01), which is as "
            f"specific, and AWS ranks a CIDR route above a prefix-list route of the same length: 10.40.9.0/24 -> {vgw} "
            f"would lose 10.40.9.0/24's traffic") in str(caught.value)


def test_gateway_endpoint_routes_pass_a_private_member_and_stall_one_inside_the_services_ranges(moto, sessions):  # noqa: F811
    """Most VPCs reach S3 and DynamoDB through gateway endpoints: a route to the AWS-managed list of the service's
    ranges, with the vpce- endpoint as its target. Those lists are read and checked like any other: AWS's ranges are
    public addresses, so a member in private space (RFC 1918, RFC 6598) passes; a member whose VPC uses a public
    block inside them would take the peer's S3 traffic for that block, and is refused."""
    victim = _vpc(moto, CLUSTER_ACCOUNT, "10.1.0.0/16")
    ec2, vpc, table = victim
    endpoints = {service: ec2.create_vpc_endpoint(VpcId=vpc, ServiceName=f"com.amazonaws.us-east-1.{service}",
                                                  VpcEndpointType="Gateway", RouteTableIds=[table]
                                                  )["VpcEndpoint"]["VpcEndpointId"] for service in ("s3", "dynamodb")}
    routed = {r.get("DestinationPrefixListId"): r.get("GatewayId")
              for r in ec2.describe_route_tables(RouteTableIds=[table])["RouteTables"][0]["Routes"]}
    [s3] = ec2.describe_managed_prefix_lists(Filters=[{"Name": "prefix-list-name",
                                                       "Values": ["com.amazonaws.us-east-1.s3"]}])["PrefixLists"]
    assert s3["OwnerId"] == "AWS" and routed[s3["PrefixListId"]] == endpoints["s3"]  # what AWS answers too
    honest = _vpc(moto, ATTACKER_ACCOUNT, "10.50.0.0/16")
    assert MeshCidrPreflight(sessions)(None, _mesh_inputs(victim, honest, attacker_cidr="10.50.0.0/16")) is None
    entry = ec2.get_managed_prefix_list_entries(PrefixListId=s3["PrefixListId"])["Entries"][0]["Cidr"]
    inside = str(next(ipaddress.ip_network(entry).subnets(new_prefix=24)))
    attacker = _vpc(moto, ATTACKER_ACCOUNT, inside)
    with pytest.raises(NeedsAttention) as caught:
        MeshCidrPreflight(sessions)(None, _mesh_inputs(victim, attacker, attacker_cidr=inside))
    assert caught.value.reason == "MeshRouteHijack"
    assert (f"route table {table} of HubCluster acme/c00 has {entry} (an entry of prefix list {s3['PrefixListId']}) "
            f"-> {endpoints['s3']}, and mesh pair acme.c00+globex.c01 would add {inside}") in str(caught.value)


def test_in_the_pipeline_a_hijacking_joiner_stalls_and_nothing_runs(moto, sessions):  # noqa: F811
    victim = _vpc(moto, CLUSTER_ACCOUNT, "10.1.0.0/16")
    ec2, _, table = victim
    vgw = ec2.create_vpn_gateway(Type="ipsec.1")["VpnGateway"]["VpnGatewayId"]
    ec2.attach_vpn_gateway(VpnGatewayId=vgw, VpcId=victim[1])
    ec2.create_route(RouteTableId=table, DestinationCidrBlock="10.40.0.0/16", GatewayId=vgw)
    _, attacker_vpc, attacker_table = _vpc(moto, ATTACKER_ACCOUNT, "10.40.9.0/24")
    engine = RecordingEngine()
    mesh = {"labels": {"hubwright.io/mesh": "core"}, "annotations": {"hubwright.io/mesh-enabled": "true"}}
    with MockKubeAPI() as api:
        env = ServiceEnv(client.ApiClient(api.configuration()))
        env.namespace("acme")
        env.namespace("globex", owner=ATTACKER_ACCOUNT)
        env.hub(mesh={"groups": {"core": {"namespaces": ["acme", "globex"]}}})
        env.create("victim", "acme", privateLink={"enabled": False}, **mesh,
                   network={"vpcID": victim[1], "cidr": "10.1.0.0/16", "routeTableIDs": [table],
                            "nodeSecurityGroupIDs": ["sg-0v"]})
        with env.running(engine, guards=[MeshCidrPreflight(sessions)], backoff_base=0.2, backoff_cap=0.5):
            wait_until(lambda: env.ready("victim", "acme"), what="the victim Ready")
            env.create("evil", "globex", accountID=ATTACKER_ACCOUNT, privateLink={"enabled": False}, **mesh,
                       network={"vpcID": attacker_vpc, "cidr": "10.40.9.0/24", "routeTableIDs": [attacker_table],
                                "nodeSecurityGroupIDs": ["sg-0e"]})
            wait_until(lambda: env.reason("evil", "globex") == "MeshRouteHijack", what="MeshRouteHijack")
            assert f"route table {table} of HubCluster acme/victim has 10.40.0.0/16 -> {vgw}" in \
                env.condition("evil", namespace="globex")["message"]
    assert [(c.operation, c.stack) for c in engine.calls] == [("up", "acme.victim")]  # the joiner never ran


def test_the_preflight_assumes_the_roles_of_exactly_the_declared_providers(moto, sessions, caplog):  # noqa: F811
    """No more (a region where only an associated VPC's CIDR is read has no provider, so no pivot) and no fewer."""
    import json
    import logging

    from automation.adapters.engine.plan import plan_stack

    _nlb(moto, CLUSTER_ACCOUNT, "prod-1-x7k2p-int")
    h = hub(associatedVPCs=[{"region": "us-east-1", "vpcID": "vpc-0mgmt", "cidr": "10.0.0.0/16"},
                            {"region": "eu-west-1", "vpcID": "vpc-0mgmteu"}])  # CIDR looked up, in eu-west-1
    inputs = resolve_one(cluster(infraID="prod-1-x7k2p"), h)
    with caplog.at_level(logging.INFO, logger="hubwright.audit"):
        Preflight(sessions)(None, inputs)
    pivots = {(line["account_id"], line["region"]) for line in
              (json.loads(r.getMessage()) for r in caplog.records if r.name == "hubwright.audit")
              if line.get("operation") == "preflight"}
    declared = {(p.account, p.region) for p in plan_stack(inputs).of_type("pulumi:providers:aws")}
    assert pivots == declared == {(CLUSTER_ACCOUNT, "us-east-1"), ("111111111111", "us-east-1")}
