"""Deletion policy (stacks/retention.py, stacks/keep.py): what deleting a HubCluster does to its stack, and what a
retained stack goes on holding, through both resolvers the service runs (resolve_all and the incremental
FleetResolver must agree). The attacks are a hostile tenant's: retaining clusters to escape its caps, taking a
retained stack's VPC, and adopting a stack retained in a namespace of the same name it never was."""
from __future__ import annotations

import itertools
from typing import Any

import pytest
from pydantic import ValidationError

from automation.adapters.engine.plan import plan_stack
from automation.adapters.files.inputs import load_fleet
from doubles.factories import cluster_doc, fleet, hub_doc, infra_of
from stacks.claims import INFRA_ID_CLAIMED
from stacks.errors import InvalidSpec
from stacks.incremental import FleetResolver
from stacks.inputs import StackInputs
from stacks.keep import kept_of, retained_inputs
from stacks.model.hub import Deletion
from stacks.model.loading import parse
from stacks.names import MAX_CLUSTERS_ANNOTATION, OWNER_ACCOUNT_ANNOTATION
from stacks.resolve import Fleet, resolve_all, resolve_fleet
from stacks.retention import (POLICY_UNKNOWN, RETAIN_NOT_ALLOWED, STACK_RETAINED, RetainedStack, Retention,
                              policy_of, record_of)
from stacks.tenancy import QUOTA_EXCEEDED

ACCOUNT = "222222222222"
UID = "uid-acme-1"
ALLOW = {"deletion": {"allowRetain": True}}


def doc(name: str, *, created: str, **spec: Any) -> dict:
    out = cluster_doc(name, "acme", **spec)
    out["metadata"]["creationTimestamp"] = created
    return out


def record(name: str, *, namespace: str = "acme", uid: str = UID, account: str = ACCOUNT, release: str | None = None
           ) -> RetainedStack:
    raw = record_of(f"{namespace}/{name}", uid, account, "us-east-1", {"infraID": f"{account}/{infra_of(name)}"}, [],
                    "2026-11-30T10:00:00Z")
    if release:
        raw["spec"]["release"] = release
    return RetainedStack.model_validate({**raw, "metadata": {**raw["metadata"], "uid": f"u-{name}"}})


def retention(*records: RetainedStack, uids: dict[str, str | None] | None = None) -> Retention:
    return Retention({r.key: r for r in records}, uids if uids is not None else {"acme": UID})


def both(clusters: list[dict], *, hub: dict | None = None, retained: Retention,
         annotations: dict[str, str] | None = None) -> dict[str, StackInputs | InvalidSpec]:
    """resolve_all's answer, checked equal to the incremental resolver's in every arrival order."""
    ns = {"acme": {OWNER_ACCOUNT_ANNOTATION: ACCOUNT, **(annotations or {})}}
    the_fleet = fleet(parse(hub or hub_doc(**ALLOW)), [parse(c) for c in clusters], namespaces=ns, retention=retained)
    answer = resolve_all(the_fleet)
    for order in itertools.islice(itertools.permutations(the_fleet.clusters), 6):
        resolver = FleetResolver.of(Fleet(**{**the_fleet.__dict__, "clusters": ()}))
        for one in order:
            resolver.put(one)
            resolver.resolve()
        assert resolver.resolve()[0].inputs == answer.inputs
    return answer.inputs


def refusal(value: StackInputs | InvalidSpec) -> InvalidSpec:
    assert isinstance(value, InvalidSpec), value
    return value


# --- the policy ---------------------------------------------------------------------------------------------

def test_delete_is_the_default_and_retain_needs_the_hub_administrators_switch():
    cluster = parse(cluster_doc("prod-1"))
    assert policy_of(cluster.ref, None, parse(hub_doc())) == "Delete"
    assert policy_of(cluster.ref, "Retain", parse(hub_doc(**ALLOW))) == "Retain"
    assert policy_of(cluster.ref, None, parse(hub_doc(deletion={"allowRetain": True, "defaultPolicy": "Retain"}))) \
        == "Retain"
    with pytest.raises(InvalidSpec) as refused:
        policy_of(cluster.ref, "Retain", parse(hub_doc()))
    assert refused.value.reason == RETAIN_NOT_ALLOWED
    assert "HubCluster acme/prod-1: spec.deletionPolicy: Retain is not allowed on this hub (HubConfig " \
           "spec.deletion.allowRetain is false)" in str(refused.value)
    with pytest.raises(ValidationError, match="defaultPolicy Retain needs allowRetain: true"):
        Deletion.model_validate({"defaultPolicy": "Retain"})


def test_without_a_valid_hub_only_an_explicit_delete_is_carried_out():
    assert policy_of("HubCluster acme/x", "Delete", None) == "Delete"
    for own in (None, "Retain"):
        with pytest.raises(InvalidSpec) as refused:
            policy_of("HubCluster acme/x", own, None)
        assert refused.value.reason == POLICY_UNKNOWN and "keeping its stack" in str(refused.value)


def test_retain_where_the_hub_does_not_allow_it_is_refused_at_admission_naming_the_field():
    inputs = both([doc("prod-1", created="2026-01-01T00:00:00Z", deletionPolicy="Retain")], hub=hub_doc(),
                  retained=Retention.empty())
    assert refusal(inputs["acme/prod-1"]).reason == RETAIN_NOT_ALLOWED


# --- the attack: a tenant retains clusters to escape its caps -------------------------------------------------

def test_a_tenant_that_retains_its_clusters_does_not_get_their_slots_back():
    """acme may have 2 clusters. It retains two (their stacks stay in its account), then asks for a third and a
    fourth: both are refused, naming the cap, however old; the retained stacks keep their slots until released."""
    caps = {MAX_CLUSTERS_ANNOTATION: "2"}
    retained = retention(record("old-1"), record("old-2"))
    inputs = both([doc("new-1", created="2020-01-01T00:00:00Z"), doc("new-2", created="2026-06-01T00:00:00Z")],
                  retained=retained, annotations=caps)
    for key in ("acme/new-1", "acme/new-2"):
        refused = refusal(inputs[key])
        assert refused.reason == QUOTA_EXCEEDED and "already uses 2 of its 2 cluster slots" in str(refused)
    # Released one: one slot is free again, and the older newcomer takes it.
    inputs = both([doc("new-1", created="2020-01-01T00:00:00Z"), doc("new-2", created="2026-06-01T00:00:00Z")],
                  retained=retention(record("old-1")), annotations=caps)
    assert isinstance(inputs["acme/new-1"], StackInputs) and refusal(inputs["acme/new-2"]).reason == QUOTA_EXCEEDED


def test_a_retained_stack_holds_one_slot_whether_a_cluster_of_its_name_is_refused_or_not():
    """A cluster of the retained stack's name in a re-created namespace is refused (StackRetained): the stack keeps
    its one slot, not two, and the namespace's other cluster still fits under a cap of 2."""
    caps = {MAX_CLUSTERS_ANNOTATION: "2"}
    retained = retention(record("old-1"), uids={"acme": "uid-acme-2"})
    inputs = both([doc("old-1", created="2026-11-30T12:00:00Z"), doc("other", created="2026-06-01T00:00:00Z")],
                  retained=retained, annotations=caps)
    assert refusal(inputs["acme/old-1"]).reason == STACK_RETAINED
    assert isinstance(inputs["acme/other"], StackInputs)


def test_the_cluster_that_adopts_a_retained_stack_keeps_its_slot_before_an_older_newcomer():
    caps = {MAX_CLUSTERS_ANNOTATION: "1"}
    inputs = both([doc("old-1", created="2026-11-30T12:00:00Z"), doc("elder", created="2020-01-01T00:00:00Z")],
                  retained=retention(record("old-1")), annotations=caps)
    assert isinstance(inputs["acme/old-1"], StackInputs)
    assert refusal(inputs["acme/elder"]).reason == QUOTA_EXCEEDED


# --- claims -----------------------------------------------------------------------------------------------------

KEPT = infra_of("prod-1")


def test_a_retained_stack_keeps_its_install_from_any_newcomer_and_its_adopter_takes_it_back():
    retained = retention(record("prod-1"))
    inputs = both([doc("thief", created="2020-01-01T00:00:00Z", infraID=KEPT)], retained=retained)
    refused = refusal(inputs["acme/thief"])
    assert refused.reason == INFRA_ID_CLAIMED
    assert (f"install (account/infraID) {ACCOUNT}/{KEPT} is already held by the retained stack of HubCluster "
            "acme/prod-1 (deleted with deletionPolicy Retain), which keeps it until the hub administrator releases "
            "it") in str(refused)
    inputs = both([doc("thief", created="2020-01-01T00:00:00Z", infraID=KEPT),
                   doc("prod-1", created="2026-11-30T12:00:00Z")], retained=retained)
    assert isinstance(inputs["acme/prod-1"], StackInputs) and refusal(inputs["acme/thief"]).reason == INFRA_ID_CLAIMED


def test_another_namespaces_retained_stack_is_not_named():
    retained = Retention({r.key: r for r in [record("prod-1", namespace="globex")]}, {"globex": "uid-globex"})
    refused = refusal(both([doc("thief", created="2020-01-01T00:00:00Z", infraID=KEPT)], retained=retained)
                      ["acme/thief"])
    assert "a retained stack in another namespace" in str(refused) and "globex" not in str(refused)


# --- adoption -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("retained, why", [
    (retention(record("prod-1"), uids={"acme": "uid-acme-2"}), "was retained from an earlier namespace acme"),
    (retention(record("prod-1", account="333333333333")), "lives in account 333333333333"),
    (retention(record("prod-1", release="Destroy")), "is being released (Destroy)"),
])
def test_only_the_same_namespace_and_account_adopt_a_retained_stack(retained, why):
    """Namespace names are reused: a namespace deleted and re-created under the same name (another tenant's,
    perhaps) does not inherit the stacks retained from it."""
    refused = refusal(both([doc("prod-1", created="2026-11-30T12:00:00Z")], retained=retained)["acme/prod-1"])
    assert refused.reason == STACK_RETAINED and why in str(refused) and "kubectl patch hubretainedstacks" in str(refused)


def test_a_record_round_trips_and_keeps_only_the_claims_that_live_in_the_clusters_account():
    raw = record_of("acme/prod-1", UID, ACCOUNT, "us-east-1",
                    {"vpcID": "vpc-1", "loadBalancer": "arn:aws:elasticloadbalancing:lb", "infraID": f"{ACCOUNT}/x",
                     "apiHost": "api.example.com", "account": ACCOUNT}, ["kept"], "2026-11-30T10:00:00Z")
    assert raw["metadata"]["name"] == "acme.prod-1"
    back = RetainedStack.model_validate(raw)
    assert back.key == "acme/prod-1"
    assert back.spec.claims.by_kind() == {"vpcID": "vpc-1", "loadBalancer": "arn:aws:elasticloadbalancing:lb",
                                          "infraID": f"{ACCOUNT}/x"}


# --- what is kept ----------------------------------------------------------------------------------------------

def test_a_retained_stack_keeps_only_its_endpoint_service_unchanged_and_a_normal_stacks_digest_does_not_move():
    the_fleet = load_fleet("examples/hub.yaml", "examples/clusters")
    full = resolve_fleet(the_fleet)["acme/prod-1"]
    assert isinstance(full, StackInputs) and "retained" not in full.to_config()
    kept = retained_inputs(full)
    assert kept.retained and '"retained":true' in kept.to_config()
    before = {r.urn: r for r in plan_stack(full).resources}
    after = {r.urn: r for r in plan_stack(kept).resources}
    assert set(after) <= set(before)
    assert all(after[urn].inputs == before[urn].inputs for urn in after)
    custom = sorted(r.type for r in after.values() if not r.type.startswith(("pulumi:", "hubwright:")))
    assert custom == ["aws:ec2/vpcEndpointService:VpcEndpointService"]
    assert kept_of(kept) == ["aws:ec2/vpcEndpointService:VpcEndpointService acme.prod-1-svc (on load balancer "
                             f"{full.private_link.nlb_name})"] if full.private_link else False


@pytest.mark.parametrize("before, after", [
    (Retention.empty(), retention(record("old-1"), record("prod-1"))),  # retained
    (retention(record("old-1"), record("prod-1")), retention(record("prod-1"))),  # one released
    (retention(record("prod-1")), retention(record("prod-1"), uids={"acme": "uid-acme-2"})),  # namespace re-created
    (retention(record("prod-1")), retention(record("prod-1", release="Forget"))),  # being released
])
def test_a_retention_change_on_a_settled_resolver_gives_resolve_alls_answer(before, after):
    """The service's resolver is told of a retain, a release or a namespace's new UID one change at a time, and
    looks again only at what the records touch: the answer is resolve_all's over the new records."""
    ns = {"acme": {OWNER_ACCOUNT_ANNOTATION: ACCOUNT, MAX_CLUSTERS_ANNOTATION: "3"}}
    clusters = [parse(c) for c in (doc("prod-1", created="2026-11-30T12:00:00Z"),
                                   doc("thief", created="2020-01-01T00:00:00Z", infraID=KEPT),
                                   doc("new-1", created="2021-01-01T00:00:00Z"),
                                   doc("new-2", created="2022-01-01T00:00:00Z"))]
    start = fleet(parse(hub_doc(**ALLOW)), clusters, namespaces=ns, retention=before)
    resolver = FleetResolver.of(start)
    resolver.resolve()
    resolver.set_retention(after)
    moved, changed = resolver.resolve()
    expected = resolve_all(Fleet(**{**start.__dict__, "retention": after}))
    assert moved.inputs == expected.inputs and moved.claims == expected.claims
    assert changed == {k for k in expected.inputs if expected.inputs[k] != resolve_all(start).inputs[k]}
