"""Refusals the service checks before every `up`, against the inputs of the last successful one. Pure."""
from __future__ import annotations

from stacks.errors import InvalidSpec
from stacks.inputs import StackInputs
from stacks.names import (DEFAULT_REGION_ANNOTATION, OWNER_ACCOUNT_ANNOTATION, PINNED_REGION_ANNOTATION,
                          REGION_ANNOTATION)


def check_move(applied: StackInputs | None, desired: StackInputs) -> None:
    """Refuse to move a cluster that has a stack to another account or region.

    The old resources live where the old stack's providers point; a stack whose
    providers now point elsewhere would orphan them. `applied` is the inputs of
    the last successful `up` (None: no stack, anything goes). Destroying the old
    stack first (delete the Cluster, or revert, destroy, re-apply) lifts the refusal.
    """
    if applied is None:
        return
    ref = f"HubCluster {desired.key}"
    undo = (f"stack {applied.stack} still holds resources there; revert the change, or delete the Cluster "
            "(its stack is destroyed) and create it again with the new placement")
    if applied.cluster.account_id != desired.cluster.account_id:
        raise InvalidSpec.one(
            ref, f"spec.accountID (or namespace annotation {OWNER_ACCOUNT_ANNOTATION})",
            f"account changed from {applied.cluster.account_id} to {desired.cluster.account_id}; {undo}",
            condition="AccountChanged",
        )
    if applied.hub.account_id != desired.hub.account_id:
        raise InvalidSpec.one(
            ref, "HubConfig spec.accountID",
            f"hub account changed from {applied.hub.account_id} to {desired.hub.account_id}; {undo}",
            condition="AccountChanged",
        )
    if applied.cluster.region != desired.cluster.region:
        raise InvalidSpec.one(
            ref, f"region (namespace {PINNED_REGION_ANNOTATION}, {REGION_ANNOTATION}, spec.region, namespace "
                 f"{DEFAULT_REGION_ANNOTATION}, HubConfig spec.region)",
            f"region changed from {applied.cluster.region} to {desired.cluster.region}; {undo} (if it moved when "
            "the hub began to prefer spec.region to the namespace default, HubConfig spec.regionPrecedence: Legacy "
            "keeps it where it is until spec.region is fixed: docs/security.md)",
            condition="RegionChanged",
        )
