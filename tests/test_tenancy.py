"""Tenant isolation through `python -m automation plan`: each attack of a tenant who may only create Clusters
is refused (exit 2 naming the object, the field and the reason), and the other tenants' plans are untouched.

The trust model is docs/security.md; the same attacks through the service and the real API server are in
tests/test_tenancy_envtest.py.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from automation.cli import main
from doubles.factories import HUB_ACCOUNT, cluster_doc, hub_doc, namespace_doc
from stacks.names import MESH_ENABLED_ANNOTATION, MESH_LABEL

EVIL = "333333333333"  # the attacker's own account (namespace evil owns it)
MESH = {"labels": {MESH_LABEL: "payments"}, "annotations": {MESH_ENABLED_ANNOTATION: "true"}}


def acme(name: str, **spec) -> dict:
    return cluster_doc(name, "acme", **MESH, **{"privateLink": {"enabled": False}, **spec})


def evil(name: str = "intruder", namespace: str = "evil", **spec) -> dict:
    spec.setdefault("accountID", EVIL)
    spec.setdefault("network", {"vpcID": "vpc-0e1", "cidr": "10.50.0.0/16", "routeTableIDs": ["rtb-0e1"],
                                "nodeSecurityGroupIDs": ["sg-0e1"]})
    return cluster_doc(name, namespace, **spec)


def victims() -> list[dict]:
    """Tenant acme: two clusters meshed in group payments (account 222222222222)."""
    return [acme("pay-1", network={"vpcID": "vpc-0a1", "cidr": "10.1.0.0/16", "routeTableIDs": ["rtb-0a1"],
                                   "nodeSecurityGroupIDs": ["sg-0a1"]}),
            acme("pay-2", network={"vpcID": "vpc-0a2", "cidr": "10.2.0.0/16", "routeTableIDs": ["rtb-0a2"],
                                   "nodeSecurityGroupIDs": ["sg-0a2"]})]


def write(tmp: Path, docs: list[dict], hub: dict | None = None,
          namespaces: tuple[dict, ...] = (namespace_doc("acme"), namespace_doc("evil", EVIL))) -> tuple[str, str]:
    folder = tmp / "clusters"
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    (folder / "namespaces.yaml").write_text(yaml.safe_dump_all(list(namespaces)))
    for i, doc in enumerate(docs):
        (folder / f"{i:02d}.yaml").write_text(yaml.safe_dump(doc))
    (tmp / "hub.yaml").write_text(yaml.safe_dump(hub or hub_doc()))
    return str(tmp / "hub.yaml"), str(folder)


def plan(capsys, hub: str, clusters: str) -> tuple[int, dict | None, str]:
    code = main(["plan", "--hub", hub, "--clusters", clusters, "--format", "json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def refused(capsys, tmp_path, docs, *, hub=None, namespaces=None, expect: list[str]) -> str:
    kw = {"namespaces": namespaces} if namespaces is not None else {}
    code, doc, err = plan(capsys, *write(tmp_path, docs, hub, **kw))
    assert code == 2 and doc is None, err
    assert "Traceback" not in err
    for text in expect:
        assert text in err, err
    return err


def acme_resources(doc: dict) -> list[dict]:
    return [r for s in doc["stacks"] if s["stack"].startswith("acme.") for r in s["resources"]]


# --------------------------------------------------------------------------- 1. peering into another tenant

def test_a_mesh_label_of_another_namespace_makes_a_separate_group_and_acme_is_untouched(capsys, tmp_path):
    code, alone, err = plan(capsys, *write(tmp_path, victims()))
    assert code == 0, err
    code, attacked, err = plan(capsys, *write(tmp_path, [*victims(), evil(**MESH)]))
    assert code == 0, err
    assert acme_resources(attacked) == acme_resources(alone)  # not one input of acme's stacks moved
    intruder = next(s for s in attacked["stacks"] if s["stack"] == "evil.intruder")
    assert "222222222222" not in {r["account"] for r in intruder["resources"]}  # nothing in acme's account
    assert "10.50.0.0/16" not in json.dumps(acme_resources(attacked))


def test_the_cidr_of_half_the_internet_is_refused(capsys, tmp_path):
    wide = evil(**MESH, network={"vpcID": "vpc-0e1", "cidr": "128.0.0.0/1", "routeTableIDs": ["rtb-0e1"],
                                 "nodeSecurityGroupIDs": ["sg-0e1"]})
    refused(capsys, tmp_path, [*victims(), wide],
            expect=["HubCluster evil/intruder", "spec.network.cidr", "'128.0.0.0/1' is not a VPC CIDR block (a VPC is /16 to /28)"])


def test_a_group_spans_namespaces_only_as_the_hub_lists_them(capsys, tmp_path):
    spanning = hub_doc(mesh={"groups": {"payments": {"namespaces": ["acme", "globex"]}}})
    namespaces = (namespace_doc("acme"), namespace_doc("evil", EVIL), namespace_doc("globex", "444444444444"))
    err = refused(capsys, tmp_path, [*victims(), evil(**MESH)], hub=spanning, namespaces=namespaces,
                  expect=["HubCluster evil/intruder: metadata.labels[hubwright.io/mesh]: mesh group payments spans only "
                          "the namespaces the hub administrator listed", "evil is not one of them"])
    assert "acme/pay" not in err  # nobody else is refused

    friend = cluster_doc("ledger", "globex", accountID="444444444444", **MESH, privateLink={"enabled": False},
                         network={"vpcID": "vpc-0g1", "cidr": "10.60.0.0/16", "routeTableIDs": ["rtb-0g1"],
                                  "nodeSecurityGroupIDs": ["sg-0g1"]})
    hub = hub_doc(roleAccountMap={"222222222222": "arn:aws:iam::222222222222:role/hubwright",
                                  "444444444444": "arn:aws:iam::444444444444:role/hubwright"},
                  mesh={"groups": {"payments": {"namespaces": ["acme", "globex"]}}})
    code, doc, err = plan(capsys, *write(tmp_path, [*victims(), friend], hub, namespaces))
    assert code == 0, err
    peerings = [r for s in doc["stacks"] for r in s["resources"]
                if r["type"] == "aws:ec2/vpcPeeringConnection:VpcPeeringConnection"]
    assert len(peerings) == 3  # the declared group: three members, three pairs


# --------------------------------------------------------------------------- 2. squatting an account

@pytest.mark.parametrize("account", ["222222222222", HUB_ACCOUNT, "444444444444"])
def test_a_namespace_without_an_owner_is_refused(capsys, tmp_path, account):
    refused(capsys, tmp_path, [*victims(), evil(namespace="drifter", accountID=account)],
            expect=["HubCluster drifter/intruder", "namespace drifter owns no account",
                    "hubwright.io/owner-account-id"])


def test_a_tenant_cannot_name_another_tenants_account(capsys, tmp_path):
    refused(capsys, tmp_path, [*victims(), evil(accountID="222222222222")],
            expect=["HubCluster evil/intruder: spec.accountID: account 222222222222 is not the namespace's owner "
                    "account 333333333333"])


@pytest.mark.parametrize("account, why", [
    ("222222222222", "account 222222222222 is owned by another namespace"),
    (HUB_ACCOUNT, f"account {HUB_ACCOUNT} is the hub account"),
])
def test_first_claim_never_gives_an_owned_account_or_the_hub(capsys, tmp_path, account, why):
    hub = hub_doc(tenancy={"unownedNamespaces": "FirstClaim"},
                  roleAccountMap={"444444444444": "arn:aws:iam::444444444444:role/hubwright"})
    vpc = {"vpcID": "vpc-0hub1", "cidr": "10.100.0.0/16", "routeTableIDs": ["rtb-0h"], "nodeSecurityGroupIDs": ["sg-0h"]}
    refused(capsys, tmp_path, [*victims(), evil(namespace="drifter", accountID=account, network=vpc, **MESH)],
            hub=hub, expect=["HubCluster drifter/intruder: spec.accountID: " + why])


def test_first_claim_gives_an_unowned_account_to_the_oldest_claimant_only(capsys, tmp_path):
    hub = hub_doc(tenancy={"unownedNamespaces": "FirstClaim"},
                  roleAccountMap={"444444444444": "arn:aws:iam::444444444444:role/hubwright"})
    first = evil("early", namespace="first", accountID="444444444444")
    first["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    later = evil("late", namespace="second", accountID="444444444444", apiURL="https://api.late.example.com")
    later["metadata"]["creationTimestamp"] = "2026-02-01T00:00:00Z"
    err = refused(capsys, tmp_path, [later, first], hub=hub, expect=[
        "HubCluster second/late: spec.accountID: account 444444444444 was claimed first by another namespace"])
    assert "first/early" not in err


# --------------------------------------------------------------------------- 3. hijacking names

@pytest.mark.parametrize("url, why", [
    ("https://amazonaws.com:443", "is under amazonaws.com, a domain AWS owns"),
    ("https://sts.us-east-1.amazonaws.com", "is under amazonaws.com, a domain AWS owns"),
    ("https://ip-10-0-0-1.ec2.internal", "is under ec2.internal"),
    ("https://10.0.0.1:6443", "is an IP address"),
    ("https://[fd00::1]:6443", "is not an https URL of the form https://host[:port]"),
    ("https://admin@api.evil.example.com", "no user, path, query or fragment"),
    ("https://api.evil.example.com/?next=1", "no user, path, query or fragment"),
    ("https://api.evil.example.com/#x", "no user, path, query or fragment"),
    ("https://аpi.evil.example.com", "is not ASCII"),
    ("https://" + "a" * 64 + ".example.com", "labels are 1-63 letters"),
    ("https://" + ".".join(["abcdefghij"] * 24) + ".com", "a DNS name has at most 253"),
    ("https://localhost:6443", "is a single label"),
])
def test_api_hosts_that_would_shadow_or_smuggle_are_refused(capsys, tmp_path, url, why):
    refused(capsys, tmp_path, [evil(apiURL=url, privateLink={"enabled": True})],
            expect=["HubCluster evil/intruder", "spec.apiURL", why])


def test_an_api_host_is_unique_across_the_fleet_the_younger_claimant_is_refused(capsys, tmp_path):
    owner = cluster_doc("prod-1", "acme", apiURL="https://api.prod.example.com:6443")
    owner["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    squatter = evil(apiURL="https://API.prod.example.com", privateLink={"enabled": True})
    squatter["metadata"]["creationTimestamp"] = "2026-03-01T00:00:00Z"
    err = refused(capsys, tmp_path, [squatter, owner], expect=[
        "HubCluster evil/intruder: spec.apiURL: host api.prod.example.com is already held by a cluster in another "
        "namespace, which keeps it"])
    assert "acme/prod-1" not in err


def test_reserved_and_allowed_domains_come_from_the_hub_administrator(capsys, tmp_path):
    hub = hub_doc(tenancy={"reservedDomains": ["corp.internal"]})
    refused(capsys, tmp_path, [evil(apiURL="https://git.corp.internal")], hub=hub,
            expect=["host git.corp.internal is under corp.internal, reserved by the hub administrator"])
    limited = (namespace_doc("acme"), namespace_doc("evil", EVIL, **{"hubwright.io/allowed-domains": "evil.example.com"}))
    refused(capsys, tmp_path, [evil(apiURL="https://api.prod3.acme.example.com")], namespaces=limited,
            expect=["host api.prod3.acme.example.com is not under the domains namespace evil may use (evil.example.com"])
    code, _, err = plan(capsys, *write(tmp_path, [evil(apiURL="https://api.x.evil.example.com")], None, limited))
    assert code == 0, err


def test_the_tenant_tag_comes_from_the_namespace_not_the_spec(capsys, tmp_path):
    refused(capsys, tmp_path, [evil(tenant="acme")],
            expect=["HubCluster evil/intruder", "spec.tenant", "spec.tenant: unknown field"])
    named = (namespace_doc("acme"), namespace_doc("evil", EVIL, **{"hubwright.io/tenant": "Evil Corp"}))
    code, doc, err = plan(capsys, *write(tmp_path, [evil(privateLink={"enabled": True})], None, named))
    assert code == 0, err
    providers = [r for s in doc["stacks"] for r in s["resources"] if r["type"] == "pulumi:providers:aws"]
    assert providers and {json.loads(p["inputs"]["defaultTags"])["tags"]["hubwright.io/tenant"]
                          for p in providers} == {"Evil Corp"}


def test_a_clusters_own_tags_never_overwrite_the_tags_hubwrights_permissions_and_tenancy_read(capsys, tmp_path):
    """The IAM templates act on a resource of someone else's only if it carries hubwright's tags, and the stack's
    tenant tag is the namespace's: a cluster's spec.tags may add tags, never set one of those (or AWS's own)."""
    for key in ("hubwright.io/tenant", "hubwright.io/managed-by", "aws:cloudformation:stack-name", "Name"):
        refused(capsys, tmp_path, [evil(tags={key: "x"})],
                expect=["HubCluster evil/intruder", "spec.tags", "a key AWS or hubwright sets itself"])
    code, doc, err = plan(capsys, *write(tmp_path, [evil(privateLink={"enabled": True},
                                                         tags={"cost-center": "cc-42", "team": "edge"})]))
    assert code == 0, err
    providers = {r["name"]: json.loads(r["inputs"]["defaultTags"])["tags"] for s in doc["stacks"]
                 for r in s["resources"] if r["type"] == "pulumi:providers:aws"}
    own = providers[f"aws-{EVIL}-us-east-1"]
    assert own["cost-center"] == "cc-42" and own["team"] == "edge" and own["hubwright.io/tenant"] == "evil"
    hub = [tags for name, tags in providers.items() if name != f"aws-{EVIL}-us-east-1"]
    assert hub and all("cost-center" not in tags for tags in hub)  # the hub's resources carry hubwright's only


# --------------------------------------------------------------------------- 4. limits

def test_an_associated_vpc_open_to_the_world_is_refused(capsys, tmp_path):
    hub = hub_doc(associatedVPCs=[{"region": "us-east-1", "vpcID": "vpc-0mgmt", "cidr": "0.0.0.0/0"}])
    refused(capsys, tmp_path, victims(), hub=hub,
            expect=["HubConfig default", "spec.associatedVPCs[0].cidr", "is not a VPC CIDR block"])


def test_source_cidrs_that_admit_everyone_are_refused(capsys, tmp_path):
    opt_in = {"enabled": True, "backend": "kas.evil.svc:6443", "allowedSourceCIDRs": ["0.0.0.0/0"]}
    refused(capsys, tmp_path, [evil(sharedIngress=opt_in)],
            expect=["spec.sharedIngress.allowedSourceCIDRs[0]", "'0.0.0.0/0' admits every address"])


def test_a_name_too_long_for_a_stack_is_refused_at_once_naming_the_limit(capsys, tmp_path):
    started = time.monotonic()
    doc = evil("x" * 120, apiURL="https://api.long.example.com")
    refused(capsys, tmp_path, [doc], expect=[
        f"HubCluster evil/{'x' * 120}: metadata.name: the stack name evil.xxx",
        "would be 125 characters; Pulumi stack names have at most 100"])
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("spec, field", [
    ({"sharedIngress": {"replicas": 2**31}}, "spec.sharedIngress.replicas"),
    ({"sharedIngress": {"replicas": True}}, "spec.sharedIngress.replicas"),
    ({"privateLink": {"endpointsPerVPC": 2**31}}, "spec.privateLink.endpointsPerVPC"),
    ({"privateLink": {"endpointsPerVPC": True}}, "spec.privateLink.endpointsPerVPC"),
    ({"privateLink": {"endpointsPerVPC": "50"}}, "spec.privateLink.endpointsPerVPC"),
])
def test_integers_past_int32_or_of_another_type_are_refused(capsys, tmp_path, spec, field):
    refused(capsys, tmp_path, victims(), hub=hub_doc(**spec), expect=["HubConfig default", field])


@pytest.mark.parametrize("annotation, value, why", [
    ("hubwright.io/tenant", "evil <corp>", "cannot be an AWS tag value"),
    ("hubwright.io/tenant", "x" * 257, "cannot be an AWS tag value"),
    ("hubwright.io/allowed-domains", "evil.example.com, bad_domain", "domain 'bad_domain' has the label"),
])
def test_a_bad_namespace_annotation_refuses_that_namespace_only_naming_it(capsys, tmp_path, annotation, value, why):
    namespaces = (namespace_doc("acme"), namespace_doc("evil", EVIL, **{annotation: value}))
    err = refused(capsys, tmp_path, [*victims(), evil(apiURL="https://api.x.evil.example.com")],
                  namespaces=namespaces, expect=[f"Namespace evil: metadata.annotations[{annotation}]", why])
    assert "acme/" not in err
