"""Which AWS account and region a cluster lives in, and which role reaches it.

Pure functions of the Cluster, its Namespace's annotations, the HubConfig and
the role map (HubConfig's, overlaid by the role-map ConfigMap).

Region precedence, first match wins:
  1. Cluster annotation   clusternet.io/region
  2. Namespace annotation clusternet.io/default-region
  3. Cluster spec.region
  4. HubConfig spec.region

Account: which account a namespace's clusters may use is a tenancy rule
(stacks.tenancy.Owners.account: the namespace's owner annotation, refused
without one unless the HubConfig allows first claims); this module turns that
account, the region and the role map into the AwsTarget a provider uses.
"""
from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Mapping

from stacks.errors import InvalidSpec
from stacks.model import REGIONS, Cluster, HubConfig, partition_of
from stacks.targets import AwsTarget
from stacks.names import stack_name
from stacks.tenancy import OWNER_ACCOUNT_ANNOTATION, Owners, namespace_of

if TYPE_CHECKING:  # annotations only: stacks.inputs builds on this module (through stacks.mesh)
    from stacks.inputs import StackInputs

DEFAULT_REGION_ANNOTATION = "clusternet.io/default-region"
REGION_ANNOTATION = "clusternet.io/region"

_SESSION_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_+=,.@-]")
ROLE_ARN = re.compile(r"arn:aws(-us-gov|-cn)?:iam::\d{12}:role/[\w+=,.@/-]{1,512}")
_SESSION_NAME_MAX = 64  # STS RoleSessionName


def session_name(purpose: str, cluster: Cluster | None = None) -> str:
    """An STS session name that says clusternet did it, for which cluster (shows in CloudTrail).

    Names longer than STS allows keep their start and end in a hash, so two
    clusters never share a session name.
    """
    subject = stack_name(cluster.metadata.namespace, cluster.metadata.name) if cluster else "service"
    raw = _SESSION_NAME_UNSAFE.sub("-", f"clusternet-{purpose}-{subject}")
    if len(raw) <= _SESSION_NAME_MAX:
        return raw
    digest = hashlib.sha256(raw.encode()).hexdigest()[:10]
    return f"{raw[:_SESSION_NAME_MAX - len(digest) - 1]}-{digest}"


def merged_role_map(hub: HubConfig, configmap: Mapping[str, str] | None) -> dict[str, str]:
    """The HubConfig's map overlaid by the ConfigMap's entries (the ConfigMap wins)."""
    return {**hub.spec.role_account_map, **(configmap or {})}


def cluster_region(cluster: Cluster, hub: HubConfig, ns_annotations: Mapping[str, str]) -> tuple[str, str]:
    """(region, where it came from)."""
    for value, source in (
        (cluster.metadata.annotations.get(REGION_ANNOTATION), f"metadata.annotations[{REGION_ANNOTATION}]"),
        (ns_annotations.get(DEFAULT_REGION_ANNOTATION), f"namespace annotation {DEFAULT_REGION_ANNOTATION}"),
        (cluster.spec.region, "spec.region"),
    ):
        if value:
            if value not in REGIONS:
                raise InvalidSpec.one(cluster.ref, source, f"{value!r} is not a known AWS region")
            return value, source
    return hub.spec.region, "HubConfig spec.region"


def role_for(account_id: str, role_map: Mapping[str, str], hub: HubConfig, *, obj: str, field: str) -> str | None:
    """The role to assume in `account_id`. The hub's own account uses the hub credentials."""
    role = role_map.get(account_id)
    if role:
        if not ROLE_ARN.fullmatch(role):
            raise InvalidSpec.one(obj, field, f"role {role!r} mapped for account {account_id} is not an IAM role ARN "
                                  "(arn:<partition>:iam::<account>:role/<name>); fix the role map",
                                  condition="InvalidRoleARN")
        if role.split(":")[4] != account_id:
            raise InvalidSpec.one(obj, field, f"role {role} mapped for account {account_id} is in another account",
                                  condition="InvalidRoleARN")
        return role
    if account_id == hub.spec.account_id:
        return hub.spec.credentials.role_arn
    raise InvalidSpec.one(
        obj, field, f"account {account_id} has no role in the role map (HubConfig roleAccountMap or the ConfigMap)",
        condition="AccountNotMapped",
    )


def hub_target(hub: HubConfig, cluster: Cluster | None = None) -> AwsTarget:
    """The hub account in the hub's region; without a cluster, for the service's own calls (placement)."""
    creds = hub.spec.credentials
    return AwsTarget(
        account_id=hub.spec.account_id,
        region=hub.spec.region,
        role_arn=creds.role_arn,
        session_name=session_name("hub", cluster),
        external_id=creds.external_id,
        session_duration_seconds=creds.session_duration_seconds,
    )


def cluster_target(cluster: Cluster, owners: Owners, role_map: Mapping[str, str]) -> AwsTarget:
    """Where the cluster's own resources live, refused (InvalidSpec) where its namespace may not go."""
    hub = owners.hub
    account = owners.account(cluster)
    region, source = cluster_region(cluster, hub, owners.annotations(namespace_of(cluster)))
    role = role_for(account, role_map, hub, obj=cluster.ref, field="spec.accountID")
    if role and role.split(":")[1] != partition_of(region):
        raise InvalidSpec.one(
            cluster.ref, source,
            f"region {region} is in partition {partition_of(region)} but role {role} is in {role.split(':')[1]}",
            condition="InvalidRoleARN",
        )
    creds = hub.spec.credentials
    return AwsTarget(
        account_id=account,
        region=region,
        role_arn=role,
        session_name=session_name("cluster", cluster),
        external_id=creds.external_id,
        session_duration_seconds=creds.session_duration_seconds,
    )


def stack_targets(inputs: StackInputs) -> list[AwsTarget]:
    """Every (account, region) the stack program builds a provider for, in a stable order.

    Mirrors stacks.program (tests compare it with the providers of the offline plan;
    a stack with no AWS resources uses none): the audit logs one pivot per target
    before each stack run.
    """
    targets: list[AwsTarget] = []
    link = inputs.private_link
    if link is not None:
        targets.append(inputs.cluster)
        targets.append(inputs.hub.in_region(link.endpoint_vpc.region))
        targets.extend(inputs.hub.in_region(vpc.region) for vpc in link.associated_vpcs if vpc.cidr is None)
    share = inputs.mesh
    if share is not None:  # its own side, and each owned pair's peer (the accepter, its routes and rules)
        targets.append(inputs.cluster)
        targets.extend(pair.peer.target for pair in share.pairs)
    unique: dict[str, AwsTarget] = {}
    for target in targets:
        unique.setdefault(target.key, target)
    return list(unique.values())


def check_move(applied: StackInputs | None, desired: StackInputs) -> None:
    """Refuse to move a cluster that has a stack to another account or region.

    The old resources live where the old stack's providers point; a stack whose
    providers now point elsewhere would orphan them. `applied` is the inputs of
    the last successful `up` (None: no stack, anything goes). Destroying the old
    stack first (delete the Cluster, or revert, destroy, re-apply) lifts the refusal.
    """
    if applied is None:
        return
    ref = f"Cluster {desired.key}"
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
            ref, f"region ({REGION_ANNOTATION}, namespace {DEFAULT_REGION_ANNOTATION}, spec.region, HubConfig spec.region)",
            f"region changed from {applied.cluster.region} to {desired.cluster.region}; {undo}",
            condition="RegionChanged",
        )
