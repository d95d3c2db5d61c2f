"""Validation at the edge: every bad field is named, with the object and the reason."""
import json
import re

import pytest

from stacks.errors import InvalidSpec
from stacks.model.loading import parse
from doubles.factories import cluster_doc, hub_doc


def errors_of(doc) -> list[str]:
    with pytest.raises(InvalidSpec) as caught:
        parse(doc)
    return [str(e) for e in caught.value.errors]


@pytest.mark.parametrize(
    "change, field, reason",
    [
        ({"accountID": "12345"}, "spec.accountID", "12-digit AWS account ID"),
        ({"region": "us-east1"}, "spec.region", "not an AWS region name"),
        ({"region": "useast-1"}, "spec.region", "like us-east-1"),
        ({"apiURL": "http://api.example.com"}, "spec.apiURL", "https URL"),
        ({"apiURL": "https://api.example.com:99999"}, "spec.apiURL", "invalid port"),
        ({"infraID": "Bad_ID"}, "spec.infraID", "infra ID"),
        ({"infraID": "a" * 29}, "spec.infraID", "at most 28"),
        ({"network": {"vpcID": "vpc-1", "cidr": "10.1.0.1/16"}}, "spec.network.cidr", "not a CIDR block"),
        ({"network": {"vpcID": "vpc-1", "cidr": "10.1.0.0/16", "routeTableIDs": ["rt-1"]}},
         "spec.network.routeTableIDs[0]", "route table ID"),
        ({"surprise": 1}, "spec.surprise", "unknown field (known here: accountID, region, "),
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
        ({"roleAccountMap": {"2222": "arn:aws:iam::222222222222:role/x"}}, "spec.roleAccountMap[2222]", "not a valid key: "),
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


# Real region names, from every partition (docs.aws.amazon.com "Regions and Zones", the SDKs' endpoints.json):
# the newest of each kind included, none of them in any list the code holds.
REAL_REGIONS = ("us-east-1", "us-west-2", "af-south-1", "ap-east-2", "ap-southeast-5", "ap-southeast-7", "ca-west-1",
                "eu-central-2", "eu-south-2", "il-central-1", "me-central-1", "mx-central-1", "sa-east-1",
                "us-gov-west-1", "us-gov-east-1", "cn-north-1", "cn-northwest-1", "us-iso-east-1", "us-isob-east-1",
                "eu-isoe-west-1", "us-isof-south-1", "eusc-de-east-1")


def _region_schema() -> dict:
    from stacks.crds import crd_manifests
    crd = next(c for c in crd_manifests() if c["spec"]["names"]["kind"] == "HubCluster")
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["region"]


def _region_rule(schema: dict) -> str:
    """The regex of the schema's CEL rule `self.matches("...")` (a rule, so kubectl prints the model's words)."""
    [rule] = schema["x-kubernetes-validations"]
    return json.loads(re.fullmatch(r'self\.matches\((".*")\)', rule["rule"]).group(1))


@pytest.mark.parametrize("region", REAL_REGIONS)
def test_every_real_region_name_is_accepted_by_the_model_and_the_crd(region):
    assert parse(cluster_doc(region=region)).spec.region == region
    schema = _region_schema()
    assert re.search(_region_rule(schema), region) and "enum" not in schema


@pytest.mark.parametrize("typo", ["us-east1", "useast-1", "us-est-1", "US-EAST-1", "us-east-1 ", "us-east-01",
                                  "mars-north-1", "us-east-1a", "us--east-1", ""])
def test_a_region_typo_is_refused_by_the_model_and_the_crd_with_a_clear_message(typo):
    assert any(f"HubCluster acme/prod-1: spec.region: {typo!r} is not an AWS region name" in m
               and "like us-east-1" in m for m in errors_of(cluster_doc(region=typo)))
    assert not re.search(_region_rule(_region_schema()), typo)


@pytest.mark.parametrize("region, partition", [("us-east-1", "aws"), ("us-gov-west-1", "aws-us-gov"),
                                               ("cn-northwest-1", "aws-cn"), ("us-iso-east-1", "aws-iso"),
                                               ("us-isob-east-1", "aws-iso-b"), ("eusc-de-east-1", "aws-eusc")])
def test_the_partition_follows_the_region_name(region, partition):
    from stacks.model.fields import partition_of

    assert partition_of(region) == partition
    from stacks.names import ROLE_ARN
    assert ROLE_ARN.fullmatch(f"arn:{partition}:iam::222222222222:role/hubwright")  # its roles are accepted too


def test_api_version_is_the_group_and_version():
    """stacks.names spells API_VERSION out (a Literal for the type checker): it is still GROUP/VERSION, and the
    models take it and nothing else."""
    from stacks.names import API_VERSION, GROUP, VERSION

    assert API_VERSION == f"{GROUP}/{VERSION}"
    doc = cluster_doc("c1", "acme")
    assert parse(doc).api_version == API_VERSION
    with pytest.raises(InvalidSpec, match="apiVersion"):
        parse({**doc, "apiVersion": f"{GROUP}/v1"})


def test_the_aws_part_is_read_only_from_a_provisioned_cluster():
    """ClusterSpec.aws: what only a provisioned cluster has (a stack, a placement, a mesh share) is read through
    it, all four fields given; a registered-only cluster has none, and reaching for it there is refused."""
    provisioned = parse(cluster_doc("c1", "acme")).spec
    assert provisioned.aws.account_id == "222222222222" and provisioned.aws.network.cidr == "10.1.0.0/16"
    doc = cluster_doc("c2", "acme")
    for field in ("accountID", "infraID", "apiURL", "network", "privateLink"):
        del doc["spec"][field]
    registered = parse(doc).spec
    assert not registered.provisioned
    with pytest.raises(ValueError, match="registered-only"):
        registered.aws
