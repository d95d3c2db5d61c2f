"""Validation at the edge: every bad field is named, with the object and the reason."""
import pytest

from stacks.errors import InvalidSpec
from stacks.model import parse
from tests.factories import cluster_doc, hub_doc


def errors_of(doc) -> list[str]:
    with pytest.raises(InvalidSpec) as caught:
        parse(doc)
    return [str(e) for e in caught.value.errors]


@pytest.mark.parametrize(
    "change, field, reason",
    [
        ({"accountID": "12345"}, "spec.accountID", "12-digit AWS account ID"),
        ({"region": "us-east-9"}, "spec.region", "not a known AWS region"),
        ({"apiURL": "http://api.example.com"}, "spec.apiURL", "https URL"),
        ({"apiURL": "https://api.example.com:99999"}, "spec.apiURL", "invalid port"),
        ({"infraID": "Bad_ID"}, "spec.infraID", "infra ID"),
        ({"infraID": "a" * 29}, "spec.infraID", "at most 28"),
        ({"network": {"vpcID": "vpc-1", "cidr": "10.1.0.1/16"}}, "spec.network.cidr", "not a CIDR block"),
        ({"network": {"vpcID": "vpc-1", "cidr": "10.1.0.0/16", "routeTableIDs": ["rt-1"]}},
         "spec.network.routeTableIDs[0]", "route table ID"),
        ({"surprise": 1}, "spec.surprise", "Extra inputs are not permitted"),
    ],
)
def test_cluster_field_errors_name_object_field_and_reason(change, field, reason):
    [message] = errors_of(cluster_doc(**change))
    assert message.startswith(f"HubCluster acme/prod-1: {field}: ")
    assert reason in message


@pytest.mark.parametrize(
    "change, field, reason",
    [
        ({"credentials": {"roleARN": "arn:aws:iam::111:role/x"}}, "spec.credentials.roleARN", "IAM role ARN"),
        ({"allowedPrincipal": "*"}, "spec.allowedPrincipal", "IAM principal ARN"),
        ({"roleAccountMap": {"2222": "arn:aws:iam::222222222222:role/x"}}, "spec.roleAccountMap.2222", "12-digit"),
        ({"endpointVPCInventory": [{"region": "us-east-1", "vpcID": "vpc-1", "cidr": "10.0.0.0/16", "subnets": []}]},
         "spec.endpointVPCInventory[0].subnets", "at least 1"),
    ],
)
def test_hub_field_errors(change, field, reason):
    messages = errors_of(hub_doc(**change))
    assert any(m.startswith(f"HubConfig default: {field}") and reason in m for m in messages), messages


def test_all_errors_of_one_object_are_reported_together():
    messages = errors_of(cluster_doc(accountID="x", region="mars-1"))
    assert {m.split(": ")[1] for m in messages} == {"spec.accountID", "spec.region"}


def test_valid_documents_round_trip_with_camel_case_names():
    c = parse(cluster_doc())
    assert c.spec.network.route_table_ids == ["rtb-01", "rtb-02"]
    assert c.model_dump(by_alias=True, exclude_none=True)["spec"]["infraID"] == "prod-1-x7k2p"
    assert c.key == "acme/prod-1"
