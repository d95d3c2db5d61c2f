"""Which AWS account and region a cluster lives in, and which role reaches it.

Pure functions of the Cluster, its Namespace's annotations, the HubConfig and
the role map (HubConfig's, overlaid by the role-map ConfigMap).

Region precedence, first match wins:
  1. Cluster annotation   hubwright.io/region
  2. Namespace annotation hubwright.io/default-region
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
from typing import Mapping

from stacks.errors import InvalidSpec
from stacks.model.cluster import Cluster
from stacks.model.fields import partition_of, region_error
from stacks.model.hub import HubConfig
from stacks.targets import AwsTarget
from stacks.names import DEFAULT_REGION_ANNOTATION, REGION_ANNOTATION, ROLE_ARN
from stacks.tenancy import Owners, namespace_of


_SESSION_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_+=,.@-]")
_SESSION_NAME_MAX = 64  # STS RoleSessionName


def session_name(purpose: str, cluster: Cluster | None = None) -> str:
    """An STS session name that says hubwright did it, for which cluster (shows in CloudTrail).

    Names longer than STS allows keep their start and end in a hash, so two
    clusters never share a session name.
    """
    subject = cluster.stack if cluster else "service"
    raw = _SESSION_NAME_UNSAFE.sub("-", f"hubwright-{purpose}-{subject}")
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
            problem = region_error(value)
            if problem is not None:
                raise InvalidSpec.one(cluster.ref, source, problem)
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
