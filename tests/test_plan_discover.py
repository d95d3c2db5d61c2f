"""`plan --discover` with stacks.network.merge: what discovery reads in moto (server mode) is what the plan builds
from, through the real command line."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from doubles.factories import cluster_doc, hub_doc, namespace_doc
from stacks.names import MESH_ENABLED_ANNOTATION, MESH_LABEL
from tests.test_aws_sessions import CLUSTER_ACCOUNT, _setup_session
from tests.test_discovery import OTHER_ACCOUNT, Vpc
from tests.test_discovery_plan import _plan

PRIVATE = {"kubernetes.io/role/internal-elb": "1"}


def _folder(tmp_path: Path, members: list[dict]) -> tuple[Path, Path]:
    hub = hub_doc(mesh={"groups": {"core": {"namespaces": ["acme", "globex"]}}})
    (tmp_path / "hub.yaml").write_text(yaml.safe_dump(hub))
    folder = tmp_path / "clusters"
    folder.mkdir(exist_ok=True)
    (folder / "all.yaml").write_text(yaml.safe_dump_all([namespace_doc("acme"), namespace_doc("globex"), *members]))
    return tmp_path / "hub.yaml", folder


def _member(name: str, namespace: str, account: str, infra: str, minute: int, **network) -> dict:
    doc = cluster_doc(name, namespace, labels={MESH_LABEL: "core"}, annotations={MESH_ENABLED_ANNOTATION: "true"},
                      accountID=account, infraID=infra, network=network, privateLink={"enabled": False})
    doc["metadata"]["creationTimestamp"] = f"2025-01-01T00:{minute:02d}:00Z"
    return doc


def _routes(stdout: str) -> set[tuple[str, str, str]]:
    """(stack, route table, destination) of every route the plan writes."""
    return {(stack["stack"], r["inputs"]["routeTableId"], r["inputs"]["destinationCidrBlock"])
            for stack in json.loads(stdout)["stacks"] for r in stack["resources"] if r["type"] == "aws:ec2/route:Route"}


def test_a_route_table_added_in_the_account_is_routed_at_the_next_discovery(moto, tmp_path):
    ours = Vpc(moto, infra="c00-abcde")
    ours.table_for(ours.subnet("10.7.1.0/24", "us-east-1a", **PRIVATE))
    theirs = Vpc(moto, OTHER_ACCOUNT, cidr="10.9.0.0/16", infra="c01-abcde")
    theirs.table_for(theirs.subnet("10.9.1.0/24", "us-east-1a", **PRIVATE))
    for vpc in (ours, theirs):  # the node groups, by CAPA's tag (HubConfig spec.discovery's default)
        vpc.group("nodes", **{"sigs.k8s.io/cluster-api-provider-aws/role": "node"})
    hub_path, folder = _folder(tmp_path, [_member("c00", "acme", CLUSTER_ACCOUNT, "c00-abcde", 0),
                                          _member("c01", "globex", OTHER_ACCOUNT, "c01-abcde", 1)])
    before = _plan(moto, hub_path, folder, "--discover")
    assert before.returncode == 0, before.stderr
    assert ("globex.c01", ours.main, "10.9.0.0/16") in _routes(before.stdout)  # every table: the main one too

    added = ours.table_for(ours.subnet("10.7.2.0/24", "us-east-1b", **PRIVATE))
    after = _plan(moto, hub_path, folder, "--discover")
    assert after.returncode == 0, after.stderr
    assert _routes(after.stdout) - _routes(before.stdout) == {("globex.c01", added, "10.9.0.0/16")}


def test_a_declared_cidr_the_vpc_does_not_have_is_refused_naming_the_vpc_and_its_blocks(moto, tmp_path):
    ours = Vpc(moto, infra="c00-abcde", secondary=["10.8.0.0/16"])
    hub_path, folder = _folder(tmp_path, [_member("c00", "acme", CLUSTER_ACCOUNT, "c00-abcde", 0,
                                                  cidr="10.99.0.0/16")])
    refused = _plan(moto, hub_path, folder, "--discover")
    assert refused.returncode == 2, refused.stderr
    assert refused.stdout == ""
    assert (f"HubCluster acme/c00: spec.network.cidr: CIDR 10.99.0.0/16 is not a CIDR block of VPC {ours.id} in "
            f"account {CLUSTER_ACCOUNT} (us-east-1), which has 10.7.0.0/16, 10.8.0.0/16") in refused.stderr
