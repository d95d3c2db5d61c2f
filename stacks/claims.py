"""The fleet's claims, decided inside admission, in one fixed order. Pure. docs/security.md is the model.

Some things are one cluster's in the whole fleet: a VPC, the load balancer PrivateLink publishes, an install (an
infra ID within an account), an API host and a shared-ingress ID. Admission decides who holds each, as part of the
gate every reader of the fleet reads (stacks.resolve.resolve_all and stacks.incremental alike), in this order:

    tenancy (accounts, caps) -> VPC -> load balancer -> infra ID -> API host -> shared-ingress ID

A cluster refused at one stage enters no later stage and takes nothing from the fleet: no endpoint placement, no
mesh pair, no claim of a later stage. Each stage reads only the stages before it, so nothing iterates to a fixpoint.

Who keeps a contested value (`holder_order`): the cluster whose status.claims records it (the service records what
admission granted, `granted`); with no record, one the offline plan's baseline planned (`held`: a Git repository has no
status), then the oldest by creationTimestamp, then by key. That fallback is the
rule from before records, so the first resolve after an upgrade records the holders that rule picked and no holder
changes. So a newcomer never takes a resource from the cluster that holds it, and an old placeholder repointed at a
running cluster's VPC is refused, however old it is.

The VPC and the load balancer are the cloud's word (status.network, as discovery read it in the cluster's admitted
account and region; a stale read claims nothing): a declared-only network is not, and claims nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from stacks.errors import InvalidSpec
from stacks.model.cluster import Cluster
from stacks.names import CLAIMS_STATUS_KEY, parse_api_url
from stacks.network.found import found_of, stale
from stacks.network.query import uses_network
from stacks.targets import AwsTarget

VPC, LOAD_BALANCER, INFRA_ID, API_HOST, ACCOUNT = "vpcID", "loadBalancer", "infraID", "apiHost", "account"
STAGES = (VPC, LOAD_BALANCER, INFRA_ID, API_HOST)  # in admission's order (the shared-ingress ID comes last)

VPC_CLAIMED = "VPCClaimed"
LOAD_BALANCER_CLAIMED = "LoadBalancerClaimed"
INFRA_ID_CLAIMED = "InfraIDClaimed"
HOST_TAKEN = "APIHostTaken"

_REASON = {VPC: VPC_CLAIMED, LOAD_BALANCER: LOAD_BALANCER_CLAIMED, INFRA_ID: INFRA_ID_CLAIMED, API_HOST: HOST_TAKEN}
_FIELD = {VPC: "spec.network.vpcID", LOAD_BALANCER: "spec.privateLink.loadBalancerName", INFRA_ID: "spec.infraID",
          API_HOST: "spec.apiURL"}
_WHAT = {VPC: "VPC", LOAD_BALANCER: "load balancer", INFRA_ID: "install (account/infraID)", API_HOST: "host"}
_WHY = {VPC: "a VPC is one cluster's", LOAD_BALANCER: "a load balancer is published for one cluster only",
        INFRA_ID: "an infra ID names one install in an account", API_HOST: "API hosts are unique across the fleet"}


@dataclass(frozen=True)
class Claimant:
    """A cluster admitted so far: its network merged, and where it lives."""

    cluster: Cluster
    target: AwsTarget

    @property
    def key(self) -> str:
        return self.cluster.key


@dataclass(frozen=True)
class Reserved:
    """A value a retained stack holds (stacks.retention): the holder is no cluster any more."""

    key: str  # the cluster it was (namespace/name)
    namespace: str


def recorded(cluster: Cluster) -> Mapping[str, Any]:
    """status.claims: what the service recorded that admission granted the cluster ({} when nothing)."""
    raw = (cluster.status or {}).get(CLAIMS_STATUS_KEY)
    return raw if isinstance(raw, Mapping) else {}


def ask(kind: str, cluster: Cluster, target: AwsTarget) -> str | None:
    """What the cluster (admitted to `target`, its network merged) claims of `kind`; None: nothing."""
    if kind == API_HOST:
        return parse_api_url(cluster.spec.aws.api_url)[0].lower()
    network = cluster.spec.network
    if network is None or not uses_network(cluster):
        return None
    if kind == INFRA_ID:
        return f"{target.account_id}/{cluster.spec.infra_id}" if cluster.spec.infra_id else None
    found = found_of(cluster.status)
    if found is None or stale(found, target.account_id, target.region, network.vpc_id) is not None:
        return None  # not the cloud's word (yet)
    if kind == VPC:
        return found.vpc_id
    balancer = found.load_balancer
    if kind == LOAD_BALANCER and cluster.spec.private_link.enabled and balancer is not None:
        return balancer.arn or f"{target.account_id}/{target.region}/{balancer.name}"
    return None


def holder_order(kind: str, value: str, cluster: Cluster, held: frozenset[str] = frozenset()) -> tuple[bool, bool, str, str]:
    """Sort key among the claimants of one value: the recorded holder first, then one `held` (the offline plan's
    clusters its baseline planned, which has no records), then the oldest, then by key."""
    return (recorded(cluster).get(kind) != value, cluster.key not in held, cluster.metadata.creation_timestamp or "",
            cluster.key)


def _namespace(cluster: Cluster) -> str:
    return cluster.metadata.namespace or "default"


def claim(kind: str, claimants: Iterable[Claimant], held: frozenset[str] = frozenset(),
          reserved: Mapping[tuple[str, str], Reserved] | None = None) -> dict[str, InvalidSpec]:
    """Cluster key -> refusal, for every claimant of a `kind` value another claimant holds (`holder_order`), or a
    retained stack holds (`reserved`: stacks.retention; only the cluster it was, re-adopting it, may claim it)."""
    by_value: dict[str, list[Claimant]] = {}
    for claimant in claimants:
        value = ask(kind, claimant.cluster, claimant.target)
        if value is not None:
            by_value.setdefault(value, []).append(claimant)
    refused: dict[str, InvalidSpec] = {}
    for value, contenders in by_value.items():
        keeper = (reserved or {}).get((kind, value))
        if keeper is not None:
            refused.update({c.key: retained_refusal(kind, value, c.cluster, keeper)
                            for c in contenders if c.key != keeper.key})
            contenders = [c for c in contenders if c.key == keeper.key]
        if len(contenders) < 2:
            continue
        ordered = sorted(contenders, key=lambda c: holder_order(kind, value, c.cluster, held))
        holder = ordered[0].cluster
        for other in ordered[1:]:
            refused[other.key] = refusal(kind, value, other.cluster, holder)
    return refused


def refusal(kind: str, value: str, cluster: Cluster, holder: Cluster) -> InvalidSpec:
    """Why `cluster` may not have `value`: `holder` holds it. Another namespace's cluster is not named."""
    whose = holder.ref if _namespace(holder) == _namespace(cluster) else "a cluster in another namespace"
    return InvalidSpec.one(cluster.ref, _FIELD[kind],
                           f"{_WHAT[kind]} {value} is already held by {whose}, which keeps it; {_WHY[kind]}",
                           condition=_REASON[kind])


def retained_refusal(kind: str, value: str, cluster: Cluster, keeper: Reserved) -> InvalidSpec:
    """Why `cluster` may not have `value`: a retained stack holds it. Another namespace's is not named."""
    whose = (f"the retained stack of HubCluster {keeper.key} (deleted with deletionPolicy Retain)"
             if keeper.namespace == _namespace(cluster) else "a retained stack in another namespace")
    return InvalidSpec.one(cluster.ref, _FIELD[kind],
                           f"{_WHAT[kind]} {value} is already held by {whose}, which keeps it until the hub "
                           f"administrator releases it; {_WHY[kind]}", condition=_REASON[kind])


def gate(claimants: Iterable[Claimant], held: frozenset[str] = frozenset(),
         reserved: Mapping[tuple[str, str], Reserved] | None = None) -> dict[str, InvalidSpec]:
    """The claim stages over the clusters admitted so far, in order: a cluster refused at one stage enters no later
    one. Cluster key -> its (first) refusal."""
    live = list(claimants)
    refused: dict[str, InvalidSpec] = {}
    for kind in STAGES:
        refused.update(claim(kind, live, held, reserved))
        live = [c for c in live if c.key not in refused]
    return refused


def granted(cluster: Cluster, target: AwsTarget) -> dict[str, str]:
    """What admission granted a cluster it let through every stage: the record the service writes (status.claims)."""
    out = {kind: value for kind in STAGES if (value := ask(kind, cluster, target)) is not None}
    out[ACCOUNT] = target.account_id
    return out
