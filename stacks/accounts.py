"""Which AWS account and region a cluster lives in, and which role reaches it.

Pure functions of the Cluster, its Namespace's annotations, the HubConfig and
the role map (HubConfig's, overlaid by the role-map ConfigMap).

Region precedence, first match wins:
  1. Cluster annotation   clusternet.io/region
  2. Namespace annotation clusternet.io/default-region
  3. Cluster spec.region
  4. HubConfig spec.region
"""
from __future__ import annotations

import re
from typing import Mapping

from stacks.errors import InvalidSpec
from stacks.inputs import AwsTarget
from stacks.model import REGIONS, Cluster, HubConfig

OWNER_ACCOUNT_ANNOTATION = "clusternet.io/owner-account-id"
DEFAULT_REGION_ANNOTATION = "clusternet.io/default-region"
REGION_ANNOTATION = "clusternet.io/region"

_SESSION_NAME_UNSAFE = re.compile(r"[^\w+=,.@-]")


def session_name(purpose: str, cluster: Cluster) -> str:
    """An STS session name that says clusternet did it, for which cluster (shows in CloudTrail)."""
    raw = f"clusternet-{purpose}-{cluster.metadata.namespace or 'default'}.{cluster.metadata.name}"
    return _SESSION_NAME_UNSAFE.sub("-", raw)[:64]


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


def cluster_account(cluster: Cluster, ns_annotations: Mapping[str, str]) -> str:
    owner = ns_annotations.get(OWNER_ACCOUNT_ANNOTATION)
    if owner and owner != cluster.spec.account_id:
        raise InvalidSpec.one(
            cluster.ref,
            "spec.accountID",
            f"account {cluster.spec.account_id} is not the namespace's owner account {owner} "
            f"({OWNER_ACCOUNT_ANNOTATION}); clusters in this namespace must live in {owner}",
            condition="AccountMismatch",
        )
    return owner or cluster.spec.account_id


def role_for(account_id: str, role_map: Mapping[str, str], hub: HubConfig, *, obj: str, field: str) -> str | None:
    """The role to assume in `account_id`. The hub's own account uses the hub credentials."""
    role = role_map.get(account_id)
    if role:
        if not re.fullmatch(r"arn:aws(-us-gov|-cn)?:iam::\d{12}:role/[\w+=,.@/-]+", role):
            raise InvalidSpec.one(obj, field, f"role {role!r} mapped for account {account_id} is not an IAM role ARN",
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


def hub_target(hub: HubConfig, cluster: Cluster) -> AwsTarget:
    creds = hub.spec.credentials
    return AwsTarget(
        account_id=hub.spec.account_id,
        region=hub.spec.region,
        role_arn=creds.role_arn,
        session_name=session_name("hub", cluster),
        external_id=creds.external_id,
        session_duration_seconds=creds.session_duration_seconds,
    )


def cluster_target(
    cluster: Cluster, hub: HubConfig, ns_annotations: Mapping[str, str], role_map: Mapping[str, str]
) -> AwsTarget:
    account = cluster_account(cluster, ns_annotations)
    region, _ = cluster_region(cluster, hub, ns_annotations)
    creds = hub.spec.credentials
    return AwsTarget(
        account_id=account,
        region=region,
        role_arn=role_for(account, role_map, hub, obj=cluster.ref, field="spec.accountID"),
        session_name=session_name("cluster", cluster),
        external_id=creds.external_id,
        session_duration_seconds=creds.session_duration_seconds,
    )
