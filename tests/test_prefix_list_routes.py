"""Routes to managed prefix lists in the route-hijack pre-flight and the route quota (issue 45, finding 2), on
recorded AWS answers: what moto cannot hold.

moto keeps a prefix list in its owner's account only: a route to a list another account shares through RAM comes
back from its DescribeRouteTables with no destination at all, and its GetManagedPrefixListEntries answers an empty
list (no error) for a list it does not know. So these answers are AWS's, shaped as the EC2 API reference documents
them (botocore's Stubber checks each against the service model), fed to the lookups the pre-flight calls; the moto
tests beside the CIDR-route one (tests/test_preflight.py) cover the lists of the table's own account and the
AWS-managed lists of gateway endpoints.
"""
from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from automation.adapters.aws import lookups
from automation.adapters.aws.lookups import LookupFailed, LookupRefused
from stacks.inputs import AwsTarget
from stacks.mesh.routes import FoundRoute, UnreadableList, route_hijacks
from tests.test_mesh import hub, member, plan_mesh

SHARED = "pl-0e5a1b2c3d4e5f607"  # the network account's on-premises ranges, shared with the members through RAM
IPV6 = "pl-0f6a7b8c9d0e1f234"  # an IPv6 list: a pair route is IPv4, its entries never compete
S3 = "pl-63a5400a"  # com.amazonaws.us-east-1.s3, AWS-managed: a gateway endpoint routes to it
NETWORK_ACCOUNT = "444455556666"


class RecordedAws:
    """The one AwsSessions method the lookups call, answering from recorded AWS answers."""

    def __init__(self) -> None:
        self.ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="recorded",
                                aws_secret_access_key="recorded")
        self.stub = Stubber(self.ec2)
        self.accounts: list[str] = []

    def client(self, target: AwsTarget, service: str, *, operation: str, cluster: str | None = None,
               namespace: str | None = None) -> Any:
        assert service == "ec2"
        self.accounts.append(target.account_id)
        return self.ec2


@pytest.fixture
def aws():
    recorded = RecordedAws()
    with recorded.stub:
        yield recorded
        recorded.stub.assert_no_pending_responses()


def _share(cidr: str = "10.40.9.0/24"):
    """acme/c02 joins after globex/c01 and owns the pair: its stack writes `cidr` into c01's rtb-001a and rtb-001b."""
    return plan_mesh(hub(), [member(1), member(2, cidr=cidr)]).shares["acme/c02"]


def test_an_entry_loses_to_a_pair_route_as_specific_as_it_and_is_never_the_meshs_own():
    """The rule alone (stacks.mesh.routes), beside tests/test_mesh.py's for CIDR routes."""
    share = _share()  # acme/c02 declares 10.40.9.0/24; its pair route goes into globex/c01's rtb-001b

    def listed(cidr: str) -> dict:
        return {"rtb-001b": (FoundRoute(cidr=cidr, target="tgw-0corp", prefix_list=SHARED),)}

    for losing in ("10.40.0.0/16", "10.40.9.0/24", "10.0.0.0/8"):  # wider, or the same length: a CIDR route wins
        assert route_hijacks(share, listed(losing)), losing
    assert route_hijacks(share, {"rtb-001b": (FoundRoute(cidr="10.40.9.0/24", target="tgw-0corp"),)}) == []  # CIDR
    for harmless in ("0.0.0.0/0", "10.40.9.0/28", "192.168.0.0/16"):  # the default route, narrower, elsewhere
        assert route_hijacks(share, listed(harmless)) == [], harmless
    ranged = share.model_copy(update={"limits": share.limits.model_copy(update={"member_cidrs": ("10.40.0.0/16",)})})
    assert route_hijacks(ranged, listed("10.40.0.0/16")) == []  # memberCIDRs: the administrator's range
    unread = {"rtb-001b": (UnreadableList(prefix_list=SHARED, target="tgw-0corp", why="recorded"),)}
    assert len(route_hijacks(ranged, unread)) == 1  # what it holds is not known: memberCIDRs cannot clear it


def _table(*routes: dict) -> dict:
    """DescribeRouteTables' answer for globex/c01's rtb-001b (API_DescribeRouteTables, API_Route)."""
    return {"RouteTables": [{
        "RouteTableId": "rtb-001b", "VpcId": "vpc-0c01", "OwnerId": "333333333333", "Associations": [],
        "PropagatingVgws": [], "Tags": [],
        "Routes": [{"DestinationCidrBlock": "10.1.0.0/16", "GatewayId": "local", "Origin": "CreateRouteTable",
                    "State": "active"}, *routes]}]}


TO_SHARED = {"DestinationPrefixListId": SHARED, "TransitGatewayId": "tgw-0corp", "Origin": "CreateRoute",
             "State": "active"}
TO_IPV6 = {"DestinationPrefixListId": IPV6, "EgressOnlyInternetGatewayId": "eigw-0v6", "Origin": "CreateRoute",
           "State": "active"}
TO_S3 = {"DestinationPrefixListId": S3, "GatewayId": "vpce-0s3", "Origin": "CreateRoute", "State": "active"}


def _entries(aws: RecordedAws, prefix_list: str, *cidrs: str) -> None:
    """GetManagedPrefixListEntries' answer (API_GetManagedPrefixListEntries, API_PrefixListEntry)."""
    aws.stub.add_response("get_managed_prefix_list_entries",
                          {"Entries": [{"Cidr": cidr, "Description": "recorded"} for cidr in cidrs]},
                          {"PrefixListId": prefix_list})


def _c01_routes(aws: RecordedAws) -> dict:
    share = _share()
    target = share.pairs[0].peer.target  # globex/c01's account and region: where its tables and lists are read
    return lookups.routes_in(aws, target, ["rtb-001b"])


def _tables_answer(aws: RecordedAws, *routes: dict) -> None:
    aws.stub.add_response("describe_route_tables", _table(*routes),
                          {"Filters": [{"Name": "route-table-id", "Values": ["rtb-001b"]}]})


def test_a_list_shared_through_ram_is_read_in_the_tables_account_and_each_entry_checked(aws):
    """The consumer of a shared list reads its entries (AWS: "consumers can view the entries in a shared prefix
    list"), in its own account, with the list's ID; an entry a pair route lies inside stalls the pair, whoever owns
    the list. The S3 endpoint's list is read and passes: the member's CIDR is private, S3's ranges are not."""
    _tables_answer(aws, TO_SHARED, TO_IPV6, TO_S3)
    _entries(aws, SHARED, "172.20.0.0/16", "10.40.0.0/16")
    _entries(aws, IPV6, "2001:db8::/32")
    _entries(aws, S3, "3.5.0.0/19", "16.182.0.0/16", "52.216.0.0/15", "54.231.0.0/16")
    found = _c01_routes(aws)
    assert set(aws.accounts) == {"333333333333"}
    [hijack] = route_hijacks(_share(), found)
    assert hijack == (
        f"route table rtb-001b of HubCluster globex/c01 has 10.40.0.0/16 (an entry of prefix list {SHARED}) -> "
        "tgw-0corp, and mesh pair acme.c02+globex.c01 would add 10.40.9.0/24 (to HubCluster acme/c02), which is more "
        "specific: 10.40.0.0/16 -> tgw-0corp would lose 10.40.9.0/24's traffic")
    assert route_hijacks(_share("10.2.0.0/16"), found) == []  # elsewhere: the same tables pass
    assert route_hijacks(_share("52.216.9.0/24"), found)  # inside S3's ranges: it would take S3's traffic


def test_a_list_aws_will_not_read_refuses_every_pair_route_of_its_table_naming_the_list_and_why(aws):
    """Never skipped: what its entries are is not known, so any pair route into that table might beat one."""
    _tables_answer(aws, TO_SHARED)
    aws.stub.add_client_error("get_managed_prefix_list_entries", service_error_code="InvalidPrefixListID.NotFound",
                              service_message=f"The prefix list ID '{SHARED}' does not exist", http_status_code=400,
                              expected_params={"PrefixListId": SHARED})
    found = _c01_routes(aws)
    [refused] = route_hijacks(_share("10.2.0.0/16"), found)  # harmless if the list could be read: it cannot
    assert refused.startswith(
        f"route table rtb-001b of HubCluster globex/c01 routes prefix list {SHARED} -> tgw-0corp, whose entries could "
        f"not be read (reading the entries of prefix list {SHARED} in account 333333333333 (us-east-1) failed: "
        f"InvalidPrefixListID.NotFound: The prefix list ID '{SHARED}' does not exist), and mesh pair "
        "acme.c02+globex.c01 would add 10.2.0.0/16 (to HubCluster acme/c02)")


def test_a_denied_read_is_access_denied_and_a_throttled_one_is_retried_never_a_pass(aws):
    _tables_answer(aws, TO_SHARED)
    aws.stub.add_client_error("get_managed_prefix_list_entries", service_error_code="UnauthorizedOperation",
                              service_message="You are not authorized to perform this operation.",
                              http_status_code=403)
    with pytest.raises(LookupRefused) as denied:
        _c01_routes(aws)
    assert denied.value.reason == "AccessDenied" and SHARED in str(denied.value)
    _tables_answer(aws, TO_SHARED)
    aws.stub.add_client_error("get_managed_prefix_list_entries", service_error_code="RequestLimitExceeded",
                              service_message="Request limit exceeded.", http_status_code=503)
    with pytest.raises(LookupFailed) as throttled:
        _c01_routes(aws)
    assert not isinstance(throttled.value, LookupRefused) and throttled.value.reason == "LookupFailed"


def test_the_quota_weighs_a_shared_list_at_its_max_entries_and_an_aws_managed_one_at_one(aws):
    """DescribeManagedPrefixLists in the consumer's account describes a list shared with it (its OwnerId is the
    sharer's) with its MaxEntries; an AWS-managed list has none (API_ManagedPrefixList: OwnerId "AWS")."""
    target = _share().pairs[0].peer.target
    aws.stub.add_response("describe_managed_prefix_lists", {"PrefixLists": [
        {"PrefixListId": SHARED, "AddressFamily": "IPv4", "State": "modify-complete", "PrefixListName": "on-premises",
         "PrefixListArn": f"arn:aws:ec2:us-east-1:{NETWORK_ACCOUNT}:prefix-list/{SHARED}", "MaxEntries": 30,
         "Version": 7, "Tags": [], "OwnerId": NETWORK_ACCOUNT},
        {"PrefixListId": S3, "AddressFamily": "IPv4", "State": "create-complete",
         "PrefixListName": "com.amazonaws.us-east-1.s3", "PrefixListArn": f"arn:aws:ec2:us-east-1:aws:prefix-list/{S3}",
         "Tags": [], "OwnerId": "AWS"}]}, {"PrefixListIds": [SHARED, S3]})
    assert lookups.prefix_list_sizes(aws, target, [S3, SHARED]) == {SHARED: 30, S3: 1}
    aws.stub.add_response("describe_managed_prefix_lists", {"PrefixLists": []}, {"PrefixListIds": [SHARED]})
    with pytest.raises(LookupRefused) as caught:
        lookups.prefix_list_sizes(aws, target, [SHARED])
    assert caught.value.reason == "LookupRefused"
    assert str(caught.value) == (
        f"prefix list {SHARED} in account 333333333333 (us-east-1): AWS does not describe it, so the routes to it "
        "cannot be counted against routesPerTable")
