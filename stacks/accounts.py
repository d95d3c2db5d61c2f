"""Which AWS account and region a cluster lives in, and which role reaches it.

Pure functions of the Cluster, its Namespace's annotations, the HubConfig and
the role map (HubConfig's, overlaid by the role-map ConfigMap).

Region precedence: a default applies only where nothing explicit is set (HubConfig
spec.regionPrecedence: Explicit, the default). First match wins:
  1. Cluster annotation   hubwright.io/region
  2. Cluster spec.region
  3. Namespace annotation hubwright.io/default-region
  4. HubConfig spec.region
Two exceptions, both the hub administrator's:
  - a Namespace annotation hubwright.io/pinned-region is the region of every cluster there; a cluster whose
    annotation or spec.region names another is refused (RegionPinned), never moved;
  - spec.regionPrecedence: Legacy keeps the order of earlier releases (the namespace default before
    spec.region) for an upgrade, and `region_overridden` says which clusters it overrides.

Account: which account a namespace's clusters may use is a tenancy rule
(stacks.tenancy.Owners.account: the namespace's owner annotation, refused
without one unless the HubConfig allows first claims); this module turns that
account, the region and the role map into the AwsTarget a provider uses.
"""
from __future__ import annotations

import hashlib
import re
from typing import Iterable, Mapping

from stacks.errors import InvalidSpec
from stacks.model.cluster import Cluster
from stacks.model.fields import partition_of, region_error
from stacks.model.hub import HubConfig
from stacks.targets import AwsTarget
from stacks.names import DEFAULT_REGION_ANNOTATION, PINNED_REGION_ANNOTATION, REGION_ANNOTATION, ROLE_ARN
from stacks.tenancy import Owners, cluster_namespace


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


REGION_PINNED = "RegionPinned"
REGION_OVERRIDDEN = "RegionOverridden"
_CLUSTER_REGION = f"metadata.annotations[{REGION_ANNOTATION}]"
_NAMESPACE_DEFAULT = f"namespace annotation {DEFAULT_REGION_ANNOTATION}"
_NAMESPACE_PIN = f"namespace annotation {PINNED_REGION_ANNOTATION}"


def cluster_region(cluster: Cluster, hub: HubConfig, ns_annotations: Mapping[str, str]) -> tuple[str, str]:
    """(region, where it came from): the module's precedence. InvalidSpec for a value that is not a region name
    (naming where it came from) and for a cluster that asks for a region other than its namespace's pin."""
    pinned = _checked(cluster, ns_annotations.get(PINNED_REGION_ANNOTATION), _NAMESPACE_PIN)
    annotation = (cluster.metadata.annotations.get(REGION_ANNOTATION), _CLUSTER_REGION)
    spec = (cluster.spec.region, "spec.region")
    explicit = [(value, source) for value, source in (annotation, spec) if value]
    if pinned is not None:
        for value, source in explicit:
            if value != pinned:
                raise InvalidSpec.one(
                    cluster.ref, source,
                    f"region {value} is not {pinned}, the region the hub administrator pinned for namespace "
                    f"{cluster_namespace(cluster)} ({PINNED_REGION_ANNOTATION}): remove it or set it to {pinned}",
                    condition=REGION_PINNED)
        return pinned, _NAMESPACE_PIN
    default = (ns_annotations.get(DEFAULT_REGION_ANNOTATION), _NAMESPACE_DEFAULT)
    order = (annotation, spec, default) if hub.spec.region_precedence == "Explicit" else (annotation, default, spec)
    for candidate, source in order:
        if candidate:
            _checked(cluster, candidate, source)
            return candidate, source
    return hub.spec.region, "HubConfig spec.region"


def region_overridden(cluster: Cluster, hub: HubConfig, ns_annotations: Mapping[str, str]) -> str | None:
    """Under spec.regionPrecedence: Legacy, why the cluster is not in the region its spec.region names (the
    RegionOverridden Warning condition and Event, and the plan's list), or None: no override, or Explicit."""
    if hub.spec.region_precedence != "Legacy" or not cluster.spec.region:
        return None
    try:
        region, source = cluster_region(cluster, hub, ns_annotations)
    except InvalidSpec:
        return None  # refused: the refusal says why
    if source != _NAMESPACE_DEFAULT or region == cluster.spec.region:
        return None
    return (f"spec.region is {cluster.spec.region} but the cluster is in {region}, its namespace's "
            f"{DEFAULT_REGION_ANNOTATION}, because HubConfig spec.regionPrecedence is Legacy; under Explicit (the "
            f"default) it would be in {cluster.spec.region}: set spec.region to {region} (or remove it) before the "
            "hub administrator switches to Explicit (docs/security.md)")


def overridden_regions(hub: HubConfig, clusters: Iterable[Cluster],
                       namespaces: Mapping[str, Mapping[str, str]]) -> list[tuple[str, str]]:
    """(cluster ref, why) for each cluster `region_overridden` names, in the clusters' order: what the plan lists
    so that an administrator knows when Legacy can go."""
    found = []
    for cluster in clusters:
        if cluster.spec.provisioned:
            why = region_overridden(cluster, hub, namespaces.get(cluster_namespace(cluster), {}))
            if why is not None:
                found.append((cluster.ref, why))
    return found


def _checked(cluster: Cluster, value: str | None, source: str) -> str | None:
    if value:
        problem = region_error(value)
        if problem is not None:
            raise InvalidSpec.one(cluster.ref, source, problem)
    return value or None


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
    region, source = cluster_region(cluster, hub, owners.annotations(cluster_namespace(cluster)))
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
