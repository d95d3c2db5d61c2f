"""Per-namespace caps (stacks.tenancy.quota_refusals) through `python -m automation plan` and resolve_all: one
tenant cannot fill the endpoint VPCs of a region, nor run more clusters than the hub administrator allows; a
cluster over its cap is refused (QuotaExceeded, naming the namespace, the cap and where it comes from) and takes
no slot, and what already exists keeps its own (docs/security.md).

The same through the service and the real API server: tests/test_namespace_quotas_envtest.py.
"""
from __future__ import annotations

from stacks.errors import InvalidSpec
from stacks.incremental import FleetResolver
from stacks.inputs import StackInputs
from stacks.model.loading import parse
from stacks.names import MAX_CLUSTERS_ANNOTATION, MAX_ENDPOINTS_ANNOTATION
from stacks.resolve import Fleet, resolve_all
from doubles.factories import cluster_doc, hub_doc, namespace_doc, owned
from tests.test_tenancy import EVIL, plan, refused, write

SMALL_VPC = {"endpointsPerVPC": 3}  # us-east-1 has one inventory VPC (vpc-0hub1): three endpoints fill it


def at(doc: dict, day: int) -> dict:
    """The document created on day `day` (older clusters come first)."""
    doc["metadata"]["creationTimestamp"] = f"2025-01-{day:02d}T00:00:00Z"
    return doc


def evil(name: str, day: int, **spec) -> dict:
    spec.setdefault("accountID", EVIL)
    return at(cluster_doc(name, "evil", **spec), day)


def acme(name: str, day: int, **spec) -> dict:
    return at(cluster_doc(name, "acme", **spec), day)


def flood() -> list[dict]:
    """Evil's three cheap PrivateLink clusters, then acme's one, a day later."""
    return [evil("e-1", 1), evil("e-2", 2), evil("e-3", 3), acme("prod-1", 9)]


# --------------------------------------------------------------------------- the attack

def test_one_namespace_filling_the_regions_endpoint_vpcs_is_refused_beyond_its_cap(capsys, tmp_path):
    # Without a cap, evil's three clusters take every endpoint of us-east-1 and acme's is refused.
    refused(capsys, tmp_path, flood(), hub=hub_doc(privateLink=SMALL_VPC),
            expect=["HubCluster acme/prod-1: spec.privateLink", "every inventory VPC in us-east-1 already holds 3"])

    capped = hub_doc(privateLink=SMALL_VPC, tenancy={"maxEndpointsPerNamespace": 2})
    err = refused(capsys, tmp_path, flood(), hub=capped, expect=[
        "HubCluster evil/e-3: spec.privateLink.enabled: namespace evil already uses 2 of its 2 PrivateLink endpoint "
        "slots (HubConfig default spec.tenancy.maxEndpointsPerNamespace)"])
    assert "acme/" not in err and "e-1" not in err and "e-2" not in err and "NoEndpointVPC" not in err

    # The refused cluster took no slot: without it, every other cluster plans, acme's in the hub's VPC.
    code, doc, err = plan(capsys, *write(tmp_path, flood()[:2] + flood()[3:], capped))
    assert code == 0, err
    acme_stack = next(s for s in doc["stacks"] if s["stack"] == "acme.prod-1")
    endpoint = next(r for r in acme_stack["resources"] if r["type"] == "aws:ec2/vpcEndpoint:VpcEndpoint")
    assert endpoint["inputs"]["vpcId"] == "vpc-0hub1"


def test_the_cluster_cap_counts_every_cluster_with_a_stack_and_a_refused_one_takes_no_slot(capsys, tmp_path):
    hub = hub_doc(tenancy={"maxClustersPerNamespace": 2})
    off = {"privateLink": {"enabled": False}}
    docs = [acme("a-0", 1, accountID=EVIL, **off),  # the oldest, refused at admission: it holds nothing
            acme("a-1", 2, **off), acme("a-2", 3, **off), acme("a-3", 4, **off)]
    err = refused(capsys, tmp_path, docs, hub=hub, expect=[
        "HubCluster acme/a-0: spec.accountID", "HubCluster acme/a-3: metadata.namespace: namespace acme already uses 2 of "
        "its 2 cluster slots (HubConfig default spec.tenancy.maxClustersPerNamespace)"])
    assert "acme/a-1" not in err and "acme/a-2" not in err
    code, _, err = plan(capsys, *write(tmp_path, docs[1:3], hub))
    assert code == 0, err


def test_a_cluster_refused_by_its_cap_claims_no_api_host(capsys, tmp_path):
    # Evil's older cluster names acme's API host; refused by its cap, it takes nothing acme's could lose.
    squatter = evil("squat", 1, apiURL="https://api.prod-1.example.com:6443")
    namespaces = (namespace_doc("acme"), namespace_doc("evil", EVIL, **{MAX_CLUSTERS_ANNOTATION: "0"}))
    err = refused(capsys, tmp_path, [squatter, acme("prod-1", 9)], namespaces=namespaces, expect=[
        "HubCluster evil/squat: metadata.namespace: namespace evil already uses 0 of its 0 cluster slots "
        f"(annotation {MAX_CLUSTERS_ANNOTATION} of Namespace evil)"])
    assert "acme/prod-1" not in err and "APIHostTaken" not in err


def test_a_namespace_annotation_overrides_the_hubs_cap_both_ways(capsys, tmp_path):
    hub = hub_doc(tenancy={"maxEndpointsPerNamespace": 1}, privateLink={"endpointsPerVPC": 10})
    namespaces = (namespace_doc("acme", **{MAX_ENDPOINTS_ANNOTATION: "3"}), namespace_doc("evil", EVIL))
    mine = [acme("a-1", 1), acme("a-2", 2), acme("a-3", 3)]
    code, doc, err = plan(capsys, *write(tmp_path, mine, hub, namespaces))
    assert code == 0, err
    assert len(doc["stacks"]) == 3
    refused(capsys, tmp_path, [*mine, evil("e-1", 4), evil("e-2", 5)], hub=hub, namespaces=namespaces, expect=[
        "HubCluster evil/e-2: spec.privateLink.enabled: namespace evil already uses 1 of its 1 PrivateLink endpoint "
        "slots (HubConfig default spec.tenancy.maxEndpointsPerNamespace)"])
    lowered = (namespace_doc("acme", **{MAX_ENDPOINTS_ANNOTATION: "2"}), namespace_doc("evil", EVIL))
    refused(capsys, tmp_path, mine, hub=hub_doc(), namespaces=lowered, expect=[
        f"HubCluster acme/a-3: spec.privateLink.enabled: namespace acme already uses 2 of its 2 PrivateLink endpoint "
        f"slots (annotation {MAX_ENDPOINTS_ANNOTATION} of Namespace acme)"])


def test_a_cap_that_is_not_a_number_refuses_the_namespace_naming_the_annotation(capsys, tmp_path):
    namespaces = (namespace_doc("acme", **{MAX_ENDPOINTS_ANNOTATION: "ten"}), namespace_doc("evil", EVIL))
    refused(capsys, tmp_path, [acme("a-1", 1)], namespaces=namespaces, expect=[
        f"Namespace acme: metadata.annotations[{MAX_ENDPOINTS_ANNOTATION}]: 'ten' is not a whole number"])


def test_a_negative_hub_cap_is_refused_naming_the_field(capsys, tmp_path):
    refused(capsys, tmp_path, [acme("a-1", 1)], hub=hub_doc(tenancy={"maxClustersPerNamespace": -1}),
            expect=["spec.tenancy.maxClustersPerNamespace"])


# --------------------------------------------------------------------------- grandfathered slots

def fleet_of(docs: list[dict], hub: dict, **kw) -> Fleet:
    return Fleet(hub=parse(hub), clusters=tuple(parse(d) for d in docs),
                 namespaces={"acme": owned("222222222222"), "evil": owned(EVIL)}, **kw)


def answers(fleet: Fleet) -> dict[str, str]:
    """Each cluster's fate, as resolve_all and the incremental resolver both give it."""
    resolved = resolve_all(fleet)
    incremental, _ = FleetResolver.of(fleet).resolve()
    assert incremental.inputs == resolved.inputs
    def fate(value) -> str:
        if isinstance(value, InvalidSpec):
            return value.reason
        return value.private_link.endpoint_vpc.vpc_id if value.private_link else "ok"
    return {key.split("/")[1]: fate(value) for key, value in resolved.inputs.items()}


def test_a_cap_lowered_below_what_exists_keeps_every_slot_held_and_refuses_the_youngest_waiting():
    docs = [acme(f"a-{day}", day) for day in range(1, 6)]
    # a-3 and a-4 have a stack (status.stack); a-5, the youngest, an endpoint recorded in its status too.
    held = dict(stacks=frozenset({"acme/a-3", "acme/a-4", "acme/a-5"}), placements={"acme/a-5": "vpc-0hub1"})
    hub = hub_doc(tenancy={"maxClustersPerNamespace": 4, "maxEndpointsPerNamespace": 10})
    assert answers(fleet_of(docs, hub, **held)) == {
        "a-1": "vpc-0hub1", "a-2": "QuotaExceeded", "a-3": "vpc-0hub1", "a-4": "vpc-0hub1", "a-5": "vpc-0hub1"}
    # Lowered below what is held: what holds a slot keeps it, every cluster waiting for one is refused.
    hub = hub_doc(tenancy={"maxClustersPerNamespace": 2, "maxEndpointsPerNamespace": 1})
    assert answers(fleet_of(docs, hub, **held)) == {
        "a-1": "QuotaExceeded", "a-2": "QuotaExceeded", "a-3": "QuotaExceeded", "a-4": "QuotaExceeded",
        "a-5": "vpc-0hub1"}
    # a-3 and a-4 hold their cluster slot but ask for a new endpoint, over the endpoint cap: refused for that
    # alone (their stacks are left as they are: refusing never destroys).
    err = str(resolve_all(fleet_of(docs, hub, **held)).inputs["acme/a-3"])
    assert "spec.privateLink.enabled" in err and "metadata.namespace" not in err


def test_a_refused_cluster_that_holds_a_slot_still_counts_so_toggling_it_frees_nothing():
    hub = hub_doc(tenancy={"maxEndpointsPerNamespace": 1})
    docs = [acme("a-1", 1, accountID=EVIL), acme("a-2", 2)]  # a-1 holds an endpoint, then is refused
    assert answers(fleet_of(docs, hub, placements={"acme/a-1": "vpc-0hub1"}, stacks=frozenset({"acme/a-1"}))) == {
        "a-1": "AccountMismatch", "a-2": "QuotaExceeded"}


def test_the_incremental_resolver_follows_a_cap_and_a_stack_appearing():
    docs = [acme(f"a-{day}", day) for day in range(1, 4)]
    hub = parse(hub_doc())
    resolver = FleetResolver(hub, namespaces={"acme": owned("222222222222")})
    for doc in docs:
        resolver.put(parse(doc))
    resolved, _ = resolver.resolve()
    assert all(isinstance(v, StackInputs) for v in resolved.inputs.values())
    resolver.set_namespace("acme", owned("222222222222", **{MAX_CLUSTERS_ANNOTATION: "1"}))
    resolved, changed = resolver.resolve()
    assert changed == {"acme/a-2", "acme/a-3"}
    assert [k for k, v in resolved.inputs.items() if isinstance(v, StackInputs)] == ["acme/a-1"]
    # a-3's stack turns out to exist (its status says so): it keeps its slot, a-1 is now over the cap.
    resolver.put(parse(docs[2]), stack=True)
    resolved, changed = resolver.resolve()
    assert changed == {"acme/a-1", "acme/a-3"}
    assert [k for k, v in resolved.inputs.items() if isinstance(v, StackInputs)] == ["acme/a-3"]
