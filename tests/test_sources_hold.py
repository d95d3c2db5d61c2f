"""stacks.sources.hold: what our finalizer on a released source waits for, and when it stops waiting (issue #45,
finding 3: a tenant's failing cluster held another tenant's deleted Cluster API object, and its namespace, because
the hold looked for the mesh label's value in every namespace). The controller applying it, with the clusters'
controller destroying the source's HubCluster first, is in tests/test_sources_direct.py ("the hold on a deleted
source")."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from doubles.factories import cluster_doc, fleet, hub
from stacks.inputs import StackInputs
from stacks.model.loading import parse
from stacks.names import MESH_ENABLED_ANNOTATION, MESH_LABEL
from stacks.resolve import resolve_all
from stacks.sources.hold import held_since, hold, members, source_group

T0 = datetime(2025, 6, 1, tzinfo=timezone.utc)
PAYMENTS = {MESH_LABEL: "payments"}


def member(name: str, namespace: str, n: int, *, enabled: bool = True, cidr: str | None = None,
           created: str | None = None):
    doc = cluster_doc(
        name, namespace, labels=dict(PAYMENTS), accountID={"acme": "222222222222", "globex": "333333333333"}[namespace],
        annotations={MESH_ENABLED_ANNOTATION: "true"} if enabled else {}, privateLink={"enabled": False},
        network={"vpcID": f"vpc-0{n}", "cidr": cidr or f"10.{n}.0.0/16", "routeTableIDs": [f"rtb-0{n}"],
                 "nodeSecurityGroupIDs": [f"sg-0{n}"]})
    doc["metadata"]["creationTimestamp"] = created or f"2025-01-01T00:{n:02d}:00Z"
    return parse(doc)


def shares_of(h, clusters) -> tuple[dict[str, str | None], dict[str, tuple[str, ...]]]:
    """(cluster key -> its share's group, as the service reads its desired inputs; the plan's groups' members)."""
    resolved = resolve_all(fleet(h, clusters))
    shares = {k: (v.mesh.group if v.mesh else None) for k, v in resolved.inputs.items()
              if isinstance(v, StackInputs)}
    assert resolved.mesh is not None
    return shares, {key: view.members for key, view in resolved.mesh.groups.items()}


def decide(h, shares, *, converged=lambda key: False, own=(), since=T0, now=T0, namespace="acme", labels=None):
    return hold(own=own, namespace=namespace, labels=PAYMENTS if labels is None else labels, shares=shares,
                converged=converged, hub=h, since=since, now=now)


def test_another_namespaces_cluster_with_the_same_label_never_holds_the_source():
    """globex/never-done (group globex/payments, never converging) does not hold acme's source (acme/payments)."""
    h = hub(mesh={"groups": {"payments": {"topology": "peering"}}})
    fleet_ = [member("web-2", "acme", 21), member("never-done", "globex", 30), member("ledger", "globex", 31)]
    shares, groups = shares_of(h, fleet_)
    assert source_group("acme", PAYMENTS, h) == "acme/payments"
    assert members("acme/payments", shares, h) == sorted(groups["acme/payments"]) == ["acme/web-2"]
    decided = decide(h, shares, converged=lambda key: key != "globex/never-done")
    assert decided.waiting == () and decided.release
    # acme's own member that has not converged is waited for
    assert decide(h, shares).waiting == ("acme/web-2",)


def test_a_group_the_hub_spans_across_namespaces_is_waited_for_in_every_namespace_it_spans():
    h = hub(mesh={"groups": {"payments": {"namespaces": ["acme", "globex"]}}})
    shares, groups = shares_of(h, [member("web-2", "acme", 21), member("ledger", "globex", 31)])
    assert source_group("acme", PAYMENTS, h) == "payments"
    assert members("payments", shares, h) == sorted(groups["payments"]) == ["acme/web-2", "globex/ledger"]
    assert decide(h, shares).waiting == ("acme/web-2", "globex/ledger")
    # a source of a namespace the group does not span is in no group: nothing of the group holds it
    assert source_group("initech", PAYMENTS, h) is None
    assert decide(h, shares, namespace="initech").waiting == ()


def test_only_admitted_members_are_waited_for():
    """A cluster wearing the label without mesh-enabled, or rejected by its group (an overlapping CIDR), runs no
    part of the group: it never holds the source."""
    h = hub(mesh={"groups": {"payments": {"topology": "peering"}}})
    clusters = [member("web-2", "acme", 21), member("label-only", "acme", 22, enabled=False),
                member("late", "acme", 23, cidr="10.21.0.0/16")]
    shares, groups = shares_of(h, clusters)
    assert groups["acme/payments"] == ("acme/web-2",)
    assert "acme/label-only" in shares and "acme/late" not in groups["acme/payments"]
    assert decide(h, shares).waiting == ("acme/web-2",)


def test_a_source_without_a_mesh_label_waits_for_its_own_part_only():
    h = hub()
    shares = {"acme/web-2": "payments"}
    assert decide(h, shares, labels={}).waiting == ()
    assert decide(h, shares, labels={}, own=("HubCluster acme/web-1",)).waiting == ("HubCluster acme/web-1",)


@pytest.mark.parametrize("after, elapsed, expired", [
    (None, timedelta(minutes=59, seconds=59), False),  # the default: 1h
    (None, timedelta(hours=1), True),
    ("3s", timedelta(seconds=2), False),
    ("3s", timedelta(seconds=3), True),
    ("0s", timedelta(0), True),
])
def test_the_bound_releases_what_never_converges_and_names_it(after, elapsed, expired):
    h = hub(mesh={"groups": {"payments": {"topology": "peering"}}},
            **({"sources": {"releaseAfter": after}} if after else {}))
    shares = {"acme/web-2": "payments", "acme/web-3": "payments"}
    decided = decide(h, shares, own=("HubCluster acme/web-1",), now=T0 + elapsed)
    assert decided.waiting == ("HubCluster acme/web-1", "acme/web-2", "acme/web-3")
    assert decided.expired is expired and decided.release is expired
    if expired:
        message = decided.message()
        assert "HubCluster acme/web-1, acme/web-2, acme/web-3" in message
        assert "HubConfig spec.sources.releaseAfter" in message and (after or "1h") in message
    # nothing waiting: released, and never called expired (no Warning)
    done = decide(h, shares, converged=lambda key: True, now=T0 + elapsed)
    assert done.release and not done.expired


def test_the_hold_begins_at_the_deletion_timestamp_else_when_first_held():
    assert held_since("2025-06-01T00:00:00Z", T0 + timedelta(days=1)) == T0
    assert held_since(None, T0) == T0
    assert held_since("not a time", T0) == T0


def test_the_setting_is_a_duration():
    with pytest.raises(ValueError):
        hub(sources={"releaseAfter": "one hour"})
    assert hub().spec.sources.release_after == "1h"
