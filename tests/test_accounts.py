"""Accounts and regions: precedence, refusals, the role-map ConfigMap and its change path, moves, audit."""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
from kubernetes.client import V1ConfigMap, V1ObjectMeta

from automation.adapters.aws.audit import audit_stack
from automation.adapters.files.inputs import load_fleet
from automation.adapters.engine.plan import plan_stack
from stacks.rolemap import DEFAULT_NAME, from_configmap, parse_role_map
from stacks import accounts
from stacks.errors import InvalidSpec
from stacks.guards import check_move
from stacks.inputs import stack_targets
from stacks.resolve import resolve_fleet
from doubles.plans import RecordedLookups
from doubles.factories import HUB_ACCOUNT, HUB_ROLE, NAMESPACES, cluster, fleet, hub, resolve_one
from stacks.names import (DEFAULT_REGION_ANNOTATION, OWNER_ACCOUNT_ANNOTATION, PINNED_REGION_ANNOTATION,
                          REGION_ANNOTATION)

ROLE_2 = "arn:aws:iam::222222222222:role/hubwright"
ROLE_4 = "arn:aws:iam::444444444444:role/hubwright"
NS = "hubwright-system"


# --- region precedence ---------------------------------------------------------------

ANNOTATED = "metadata.annotations[hubwright.io/region]"
NS_DEFAULT = "namespace annotation hubwright.io/default-region"
NS_PIN = "namespace annotation hubwright.io/pinned-region"


@pytest.mark.parametrize(
    "precedence, annotation, ns_default, spec_region, expected, source",
    [
        # Explicit (the default): a default applies only where nothing explicit is set.
        ("Explicit", "eu-west-1", "us-west-2", "us-east-2", "eu-west-1", ANNOTATED),
        ("Explicit", None, "us-west-2", "us-east-2", "us-east-2", "spec.region"),
        ("Explicit", None, "us-west-2", None, "us-west-2", NS_DEFAULT),
        ("Explicit", None, None, None, "us-east-1", "HubConfig spec.region"),
        # Legacy: the order of earlier releases, for the upgrade.
        ("Legacy", "eu-west-1", "us-west-2", "us-east-2", "eu-west-1", ANNOTATED),
        ("Legacy", None, "us-west-2", "us-east-2", "us-west-2", NS_DEFAULT),
        ("Legacy", None, None, "us-east-2", "us-east-2", "spec.region"),
        ("Legacy", None, None, None, "us-east-1", "HubConfig spec.region"),
    ],
)
def test_region_precedence(precedence, annotation, ns_default, spec_region, expected, source):
    h = hub(regionPrecedence=precedence) if precedence != "Explicit" else hub()
    c = cluster(annotations={REGION_ANNOTATION: annotation} if annotation else {}, region=spec_region)
    ns = {OWNER_ACCOUNT_ANNOTATION: "222222222222",
          **({DEFAULT_REGION_ANNOTATION: ns_default} if ns_default else {})}
    assert accounts.cluster_region(c, h, ns) == (expected, source)
    assert resolve_one(c, h, ns_annotations=ns, endpoint_vpc=h.spec.endpoint_vpc_inventory[0]).cluster.region \
        == expected


def test_the_reported_bug_a_namespace_default_no_longer_moves_an_explicit_spec_region():
    """The trial: a namespace defaulting to us-east-1 held a PrivateLink cluster with spec.region eu-west-1, and
    the plan built its endpoint service in us-east-1 without a word."""
    ns = {OWNER_ACCOUNT_ANNOTATION: "222222222222", DEFAULT_REGION_ANNOTATION: "us-east-1"}
    c = cluster(region="eu-west-1")
    assert resolve_one(c, hub(), ns_annotations=ns, endpoint_vpc=hub().spec.endpoint_vpc_inventory[0]) \
        .cluster.region == "eu-west-1"
    assert accounts.region_overridden(c, hub(), ns) is None  # nothing is overridden under Explicit


def test_under_legacy_an_overridden_spec_region_is_named_with_both_values():
    ns = {OWNER_ACCOUNT_ANNOTATION: "222222222222", DEFAULT_REGION_ANNOTATION: "us-east-1"}
    legacy = hub(regionPrecedence="Legacy")
    why = accounts.region_overridden(cluster(region="eu-west-1"), legacy, ns)
    assert why is not None and "spec.region is eu-west-1" in why and "in us-east-1" in why and "Legacy" in why
    # The same region, no spec.region, or the cluster's own annotation winning: nothing overridden.
    assert accounts.region_overridden(cluster(region="us-east-1"), legacy, ns) is None
    assert accounts.region_overridden(cluster(region=None), legacy, ns) is None
    assert accounts.region_overridden(
        cluster(region="eu-west-1", annotations={REGION_ANNOTATION: "eu-west-1"}), legacy, ns) is None
    listed = accounts.overridden_regions(legacy, [cluster("a", region="eu-west-1"), cluster("b", region="us-east-1")],
                                         {"acme": ns})
    assert [ref for ref, _ in listed] == ["HubCluster acme/a"]


@pytest.mark.parametrize("precedence", ["Explicit", "Legacy"])
def test_a_pinned_namespace_region_beats_everything_and_a_cluster_asking_for_another_is_refused(precedence):
    h = hub(regionPrecedence=precedence)
    ns = {OWNER_ACCOUNT_ANNOTATION: "222222222222", PINNED_REGION_ANNOTATION: "eu-central-1",
          DEFAULT_REGION_ANNOTATION: "us-west-2"}
    assert accounts.cluster_region(cluster(region=None), h, ns) == ("eu-central-1", NS_PIN)
    assert accounts.cluster_region(cluster(region="eu-central-1"), h, ns) == ("eu-central-1", NS_PIN)
    for asked, field in ((dict(region="us-east-2"), "spec.region"),
                         (dict(region=None, annotations={REGION_ANNOTATION: "us-east-2"}), ANNOTATED)):
        with pytest.raises(InvalidSpec) as caught:
            accounts.cluster_region(cluster(**asked), h, ns)
        assert caught.value.reason == "RegionPinned" and caught.value.errors[0].field == field
        assert "region us-east-2 is not eu-central-1" in str(caught.value) and "namespace acme" in str(caught.value)


@pytest.mark.parametrize("where", ["cluster", "namespace"])
def test_unknown_region_in_an_annotation_is_refused_naming_the_annotation(where):
    c = cluster(annotations={REGION_ANNOTATION: "mars-north-1"} if where == "cluster" else {}, region=None)
    ns = {DEFAULT_REGION_ANNOTATION: "mars-north-1"} if where == "namespace" else {}
    with pytest.raises(InvalidSpec) as caught:
        accounts.cluster_region(c, hub(), ns)
    field = caught.value.errors[0].field
    assert ("hubwright.io/region" in field) if where == "cluster" else ("default-region" in field)
    assert "'mars-north-1' is not an AWS region name" in str(caught.value)


# --- owner account ----------------------------------------------------------------------

def test_namespace_owner_account_must_match_the_cluster_account():
    owned = {OWNER_ACCOUNT_ANNOTATION: "222222222222"}
    assert resolve_one(cluster(), hub(), ns_annotations=owned).cluster.account_id == "222222222222"

    with pytest.raises(InvalidSpec) as caught:
        resolve_one(cluster(accountID="333333333333"), hub(), ns_annotations=owned)
    assert caught.value.reason == "AccountMismatch"
    err = caught.value.errors[0]
    assert (err.obj, err.field) == ("HubCluster acme/prod-1", "spec.accountID")
    assert "333333333333 is not the namespace's owner account 222222222222" in err.reason


def test_malformed_owner_annotation_is_refused_on_the_namespace():
    with pytest.raises(InvalidSpec) as caught:
        resolve_one(cluster(), hub(), ns_annotations={OWNER_ACCOUNT_ANNOTATION: "prod"})
    assert caught.value.reason == "InvalidOwnerAccount"
    assert caught.value.errors[0].obj == "Namespace acme"


# --- roles ------------------------------------------------------------------------------

def test_configmap_entry_wins_over_the_hubconfig_map():
    other = "arn:aws:iam::222222222222:role/platform/hubwright-v2"
    inputs = resolve_one(cluster(), hub(), role_map={"222222222222": other})
    assert inputs.cluster.role_arn == other
    assert accounts.merged_role_map(hub(), None)["222222222222"] == ROLE_2


@pytest.mark.parametrize(
    "role, needle",
    [
        ("arn:aws:iam::222222222222:user/alice", "is not an IAM role ARN"),
        ("hubwright", "is not an IAM role ARN"),
        ("arn:aws:iam::999999999999:role/hubwright", "is in another account"),
    ],
)
def test_bad_role_for_the_cluster_account_is_invalid_role_arn(role, needle):
    with pytest.raises(InvalidSpec) as caught:
        resolve_one(cluster(), hub(), role_map={"222222222222": role})
    assert caught.value.reason == "InvalidRoleARN"
    assert needle in str(caught.value) and "HubCluster acme/prod-1: spec.accountID" in str(caught.value)


def test_role_partition_must_match_the_region_partition():
    gov = "arn:aws-us-gov:iam::222222222222:role/hubwright"
    with pytest.raises(InvalidSpec) as caught:
        resolve_one(cluster(), hub(), role_map={"222222222222": gov})
    assert caught.value.reason == "InvalidRoleARN"
    assert "partition aws but role" in str(caught.value)


def test_cluster_in_the_hub_account_uses_the_hub_role_unless_mapped():
    c = cluster(accountID=HUB_ACCOUNT)
    assert resolve_one(c, hub()).cluster.role_arn == HUB_ROLE
    mapped = f"arn:aws:iam::{HUB_ACCOUNT}:role/hubwright-clusters"
    assert resolve_one(c, hub(), role_map={HUB_ACCOUNT: mapped}).cluster.role_arn == mapped


def test_targets_carry_session_name_external_id_and_duration_from_the_hub():
    h = hub(credentials={"roleARN": HUB_ROLE, "externalID": "tenant-42", "sessionDurationSeconds": 1800})
    inputs = resolve_one(cluster(), h)
    for target, purpose in ((inputs.cluster, "cluster"), (inputs.hub, "hub")):
        assert target.session_name == f"hubwright-{purpose}-acme.prod-1"
        assert (target.external_id, target.session_duration_seconds) == ("tenant-42", 1800)
    assert accounts.hub_target(h).session_name == "hubwright-hub-service"


def test_long_session_names_stay_within_sts_limits_and_distinct():
    a = cluster(name="a" * 50 + "-one", namespace="tenant")
    b = cluster(name="a" * 50 + "-two", namespace="tenant")
    na, nb = accounts.session_name("cluster", a), accounts.session_name("cluster", b)
    assert len(na) == len(nb) == 64 and na != nb
    assert na.startswith("hubwright-cluster-tenant.aaa")


# --- the role-map ConfigMap ----------------------------------------------------------------

def test_configmap_entries_are_validated_naming_the_configmap_and_key():
    parsed = parse_role_map({
        "222222222222": f"  {ROLE_2}\n",
        "444444444444": "arn:aws:iam::444444444444:root",
        "555555555555": ROLE_4,
        "accounts": "whatever",
    }, namespace=NS)
    assert parsed.entries["222222222222"] == ROLE_2  # whitespace from YAML block scalars is trimmed
    by_key = {e.field: e for e in parsed.errors}
    assert set(by_key) == {"data[444444444444]", "data[555555555555]", "data[accounts]"}
    assert all(e.obj == f"ConfigMap {NS}/{DEFAULT_NAME}" for e in parsed.errors)
    assert "is not an IAM role ARN" in by_key["data[444444444444]"].reason
    assert "is in account 444444444444, not in 555555555555" in by_key["data[555555555555]"].reason
    assert "is not a 12-digit AWS account ID" in by_key["data[accounts]"].reason
    assert "accounts" not in parsed.entries  # a bad key can match no cluster


def test_configmap_from_dict_and_from_kubernetes_object_agree():
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": DEFAULT_NAME, "namespace": NS},
           "data": {"222222222222": ROLE_2}}
    obj = V1ConfigMap(metadata=V1ObjectMeta(name=DEFAULT_NAME, namespace=NS), data={"222222222222": ROLE_2})
    assert from_configmap(doc) == from_configmap(obj) == parse_role_map({"222222222222": ROLE_2}, namespace=NS)
    assert from_configmap({"metadata": {"name": DEFAULT_NAME}}, namespace=NS).entries == {}


def test_a_bad_configmap_value_fails_only_that_accounts_clusters():
    f = fleet(hub(), (cluster("a"), cluster("b", "globex", accountID="333333333333")),
              role_map=parse_role_map({"222222222222": "not-an-arn"}, namespace=NS).entries)
    resolved = resolve_fleet(f)
    assert isinstance(resolved["acme/a"], InvalidSpec) and resolved["acme/a"].reason == "InvalidRoleARN"
    assert resolved["globex/b"].cluster.role_arn == "arn:aws:iam::333333333333:role/hubwright"


def affected_clusters(f, old, new):
    """What the service's mapper runs on a role-map change: the clusters whose resolved outcome differs."""
    def outcome(value):
        return ("error", value.reason, str(value)) if isinstance(value, InvalidSpec) else ("inputs", value.digest())

    before = resolve_fleet(dataclasses.replace(f, role_map=dict(old)))
    after = resolve_fleet(dataclasses.replace(f, role_map=dict(new)))
    return [key for key in after if outcome(before[key]) != outcome(after[key])]


def test_configmap_change_re_reconciles_exactly_the_clusters_of_changed_accounts():
    clusters = (
        cluster("a"),                                     # 222, mapped by the HubConfig
        cluster("b", "globex", accountID="333333333333"),  # 333, mapped by the HubConfig
        cluster("c", "owned", accountID="444444444444"),  # 444, not mapped yet
        cluster("d", namespace="owned", accountID="444444444444"),
    )
    namespaces = {**NAMESPACES, "owned": {OWNER_ACCOUNT_ANNOTATION: "444444444444"}}
    f = fleet(hub(), clusters, namespaces=namespaces)
    before = resolve_fleet(f)
    assert {k for k, v in before.items() if isinstance(v, InvalidSpec)} == {"owned/c", "owned/d"}
    assert before["owned/c"].reason == "AccountNotMapped"

    old_cm, new_cm = {}, {"444444444444": ROLE_4}
    affected = affected_clusters(f, old_cm, new_cm)
    assert affected == ["owned/c", "owned/d"]

    after = resolve_fleet(fleet(hub(), clusters, namespaces=namespaces, role_map=new_cm))
    assert {k: v.cluster.role_arn for k, v in after.items() if k in affected} == \
        {"owned/c": ROLE_4, "owned/d": ROLE_4}
    # Everything not affected resolves exactly as before: the service may skip it.
    assert all(after[k].digest() == before[k].digest() for k in after if k not in affected)

    # Changing an existing role: only that account's clusters; removing it again: the same ones.
    rotated = {**new_cm, "333333333333": "arn:aws:iam::333333333333:role/rotated"}
    assert affected_clusters(f, new_cm, rotated) == ["globex/b"]
    assert affected_clusters(f, rotated, {}) == ["globex/b", "owned/c", "owned/d"]


def test_configmap_entry_repeating_the_hub_role_changes_nothing():
    f = fleet(hub(), (cluster("a"),))
    assert affected_clusters(f, {}, {"222222222222": ROLE_2}) == []
    overriding = "arn:aws:iam::222222222222:role/other"
    assert affected_clusters(f, {"222222222222": overriding}, {}) == ["acme/a"]


def test_configmap_change_reaches_mesh_owners_through_their_peers_account():
    """A mesh pair's owner builds the accepter with the peer's role: a change there is the owner's change too."""
    from tests.test_mesh import group, hub as mesh_hub

    members = tuple(group(3))  # accounts alternate 222 / 333; later joiners own the pairs
    f = fleet(mesh_hub(), members)
    resolved = resolve_fleet(f)
    uses_333 = {key for key, inputs in resolved.items()
                if "333333333333" in {t.account_id for t in stack_targets(inputs).all()}}
    own_333 = {c.key for c in members if c.spec.account_id == "333333333333"}
    assert uses_333 - own_333, "the example must have an owner whose peer is in 333333333333"

    rotated = {"333333333333": "arn:aws:iam::333333333333:role/rotated"}
    assert set(affected_clusters(f, {}, rotated)) == uses_333


# --- moves --------------------------------------------------------------------------------

def _inputs(**kw):
    return resolve_one(cluster(**kw), hub())


def test_check_move_allows_new_stacks_and_same_placement():
    check_move(None, _inputs())
    check_move(_inputs(), _inputs())
    rotated = resolve_one(cluster(), hub(), role_map={"222222222222": "arn:aws:iam::222222222222:role/rotated"})
    check_move(_inputs(), rotated)  # a new role in the same account moves nothing


def test_check_move_refuses_account_change():
    with pytest.raises(InvalidSpec) as caught:
        check_move(_inputs(), _inputs(accountID="333333333333"))
    assert caught.value.reason == "AccountChanged"
    assert "account changed from 222222222222 to 333333333333" in str(caught.value)
    assert "stack acme.prod-1 still holds resources" in str(caught.value)


def test_check_move_refuses_region_change():
    with pytest.raises(InvalidSpec) as caught:
        check_move(_inputs(), _inputs(region="eu-west-1"))
    assert caught.value.reason == "RegionChanged"
    assert "region changed from us-east-1 to eu-west-1" in str(caught.value)


def test_check_move_refuses_hub_account_change():
    moved_hub = hub(accountID="999999999999", credentials={"roleARN": "arn:aws:iam::999999999999:role/hub"})
    with pytest.raises(InvalidSpec) as caught:
        check_move(_inputs(), resolve_one(cluster(), moved_hub))
    assert caught.value.reason == "AccountChanged" and "hub account changed" in str(caught.value)


# --- targets and audit ------------------------------------------------------------------------

def _example_inputs():
    out = []
    for hub_path in sorted(Path("examples").glob("**/hub.yaml")):
        resolved = resolve_fleet(load_fleet(str(hub_path), str(hub_path.parent / "clusters")))
        assert not [v for v in resolved.values() if isinstance(v, InvalidSpec)], hub_path
        out.extend(resolved.values())
    return out + [resolve_one(cluster(privateLink={"enabled": False}), hub())]


def test_stack_targets_are_exactly_the_providers_the_program_builds():
    for inputs in _example_inputs():
        plan = plan_stack(inputs)
        providers = {(r.account, r.region) for r in plan.of_type("pulumi:providers:aws")}
        assert {(t.account_id, t.region) for t in stack_targets(inputs).all()} == providers, inputs.key
        roles = {r.account: _assumed_role(r.inputs) for r in plan.of_type("pulumi:providers:aws")}
        assert {t.account_id: t.role_arn for t in stack_targets(inputs).all()} == roles


def test_every_provider_a_stack_declares_builds_or_reads_something():
    """A provider costs a plugin process and an AssumeRole per run: each one a stack declares is the provider of
    one of its resources or lookups (the hub in a region where only a VPC's CIDR is read, or a mesh member that
    owns no pair, gets none)."""
    for inputs in _example_inputs():
        lookups = RecordedLookups()
        plan = plan_stack(inputs, lookups)
        used = {(r.account, r.region) for r in plan.resources if r.custom and r.type != "pulumi:providers:aws"}
        used |= {where for _, where, _ in lookups.calls}
        declared = {(r.account, r.region) for r in plan.of_type("pulumi:providers:aws")}
        assert declared <= used, (inputs.key, declared - used)
        assert declared == {(t.account_id, t.region) for t in stack_targets(inputs).all()}, inputs.key


def test_no_provider_where_the_stack_builds_nothing():
    """acme/prod-1 associates its zone with a hub VPC in eu-west-1 whose CIDR is looked up: the lookup names the
    region, so no eu-west-1 provider; the mesh's first joiner (acme/pay-use1) owns no pair: no provider at all,
    and so nothing for the preflight to assume or the audit to log."""
    examples = _example_inputs()
    prod = next(i for i in examples if i.key == "acme/prod-1" and i.private_link is not None)
    assert any(v.region == "eu-west-1" and v.cidr is None for v in prod.private_link.associated_vpcs)
    assert {(t.account_id, t.region) for t in stack_targets(prod).all()} == \
        {("222222222222", "us-east-1"), (HUB_ACCOUNT, "us-east-1")}
    first = next(i for i in examples if i.key == "acme/pay-use1")
    assert first.mesh is not None and not first.mesh.pairs and first.private_link is None
    assert stack_targets(first).all() == []
    assert plan_stack(first).of_type("pulumi:providers:aws") == []
    assert audit_stack(first, "up") == []


def _assumed_role(provider_inputs: dict) -> str | None:
    roles = provider_inputs.get("assumeRoles") or "[]"
    roles = json.loads(roles) if isinstance(roles, str) else roles  # the engine hands providers JSON strings
    return roles[0]["roleArn"] if roles else None


def test_audit_stack_logs_one_json_line_per_pivot(caplog):
    inputs = next(i for i in _example_inputs() if i.key == "globex/eu-1")
    with caplog.at_level(logging.INFO, logger="hubwright.audit"):
        records = audit_stack(inputs, "up")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "hubwright.audit"]
    assert lines == records and len(lines) == len(stack_targets(inputs).all())
    assert {(l["account_id"], l["region"]) for l in lines} == {("333333333333", "eu-west-1"),
                                                               ("111111111111", "eu-west-1")}
    for line in lines:
        assert (line["cluster"], line["namespace"], line["operation"], line["stack"]) == \
            ("eu-1", "globex", "up", "globex.eu-1")
        assert line["role_arn"] in ("arn:aws:iam::333333333333:role/hubwright",
                                    "arn:aws:iam::111111111111:role/hubwright-hub")
