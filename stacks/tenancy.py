"""Tenancy: which accounts and names a namespace's clusters may use. Pure. docs/security.md is the model.

A tenant is a namespace: whoever may create a Cluster there. Only the hub administrator is trusted: the
HubConfig, the Namespaces and their annotations, the role-map ConfigMap. So every rule here reads its
permission from those, and a Cluster's own fields only ever ask.

Accounts (`Owners.account`)
    A cluster lives in its namespace's owner account (annotation hubwright.io/owner-account-id) and
    nowhere else. A namespace without the annotation is refused (NamespaceNotOwned) unless the HubConfig
    sets spec.tenancy.unownedNamespaces: FirstClaim; then its clusters may use an account that no
    namespace owns and no other namespace claimed first, never the hub account. The first claimant is the
    namespace whose cluster holds the account (status.claims.account, stacks.claims), else the oldest
    cluster's. An account two namespaces own is the administrator's explicit choice
    (HubConfig spec.tenancy.sharedAccounts); otherwise new clusters of both are refused (AccountShared) and
    clusters whose stack exists keep running (`contested_accounts`).

Names (`host_errors`; uniqueness is stacks.claims')
    A cluster's API host names a private hosted zone in the hub, so it must be unique across the fleet
    (a claim decided in admission, stacks.claims: the holder keeps it), outside the HubConfig's reserved domains and, when the namespace
    has the annotation hubwright.io/allowed-domains, under one of the domains it lists.

Backends (`allowed_backends`; the rule is stacks.ingress.backend_error)
    The shared proxy sends a cluster's traffic only where the HubConfig's spec.sharedIngress.allowedBackends
    lets it and, when the namespace has the annotation hubwright.io/allowed-backends, where that lets it too.

Tenant (`namespace_tenant`)
    The tenant tag comes from the namespace (its hubwright.io/tenant annotation, else its name).

Quotas (`quota_refusals`)
    A namespace may hold at most so many clusters with a stack and so many PrivateLink endpoints: the HubConfig's
    spec.tenancy.maxClustersPerNamespace and maxEndpointsPerNamespace, or the namespace's annotations
    hubwright.io/max-clusters and hubwright.io/max-endpoints. What already exists keeps its slot (a stack, a
    recorded endpoint VPC), then the other admitted clusters take the slots left, oldest first; the rest are
    refused (QuotaExceeded) and take none, so a namespace can never use up a slot another namespace was promised.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from stacks.claims import ACCOUNT, recorded

from stacks.errors import FieldError, InvalidSpec
from stacks.model.cluster import Cluster
from stacks.model.fields import INT32_MAX, backend_rule
from stacks.model.hub import HubConfig
from stacks.retention import Retention
from stacks.names import (ALLOWED_BACKENDS_ANNOTATION, ALLOWED_DOMAINS_ANNOTATION, MAX_CLUSTERS_ANNOTATION,
                          MAX_ENDPOINTS_ANNOTATION, OWNER_ACCOUNT_ANNOTATION, TAG_VALUE_MAX, TENANT_ANNOTATION,
                          hostname_error, parse_api_url, under)

# Condition reasons of the refusals here.
NAMESPACE_NOT_OWNED = "NamespaceNotOwned"
ACCOUNT_MISMATCH = "AccountMismatch"
ACCOUNT_NOT_OWNED = "AccountNotOwned"
INVALID_NAMESPACE = "InvalidNamespaceAnnotation"
ACCOUNT_SHARED = "AccountShared"
DOMAIN_NOT_ALLOWED = "DomainNotAllowed"
QUOTA_EXCEEDED = "QuotaExceeded"

_ACCOUNT_ID = re.compile(r"\d{12}")
_TAG_VALUE = re.compile(r"[\w .:/=+\-@]+")  # what AWS accepts in a tag value


def cluster_namespace(cluster: Cluster) -> str:
    return cluster.metadata.namespace or "default"


def _age(cluster: Cluster) -> tuple[str, str]:
    """Oldest first; the key breaks ties, so every reader orders claimants alike."""
    return cluster.metadata.creation_timestamp or "", cluster.key


# --------------------------------------------------------------------------- accounts

@dataclass(frozen=True)
class Owners:
    """Who may use which account, for one fleet: the owner annotations and, when allowed, first claims."""

    hub: HubConfig
    namespaces: Mapping[str, Mapping[str, str]]  # namespace -> its annotations
    owned: frozenset[str]  # accounts some namespace's annotation names
    claims: Mapping[str, str]  # account -> the unowned namespace that claimed it first (FirstClaim only)
    # account -> the namespaces that own it, for accounts owned twice and not in spec.tenancy.sharedAccounts
    contested: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The retained stacks (stacks.retention): who may adopt one, the slots and claims they hold.
    retention: Retention = field(default_factory=Retention.empty)

    @classmethod
    def of(cls, hub: HubConfig, clusters: Iterable[Cluster], namespaces: Mapping[str, Mapping[str, str]],
           retention: Retention | None = None) -> "Owners":
        owned = owned_accounts(namespaces)
        return cls(hub, namespaces, owned, first_claims(hub, clusters, namespaces, owned),
                   contested_accounts(hub, namespaces), retention or Retention.empty())

    def annotations(self, namespace: str) -> Mapping[str, str]:
        return self.namespaces.get(namespace, {})

    def account(self, cluster: Cluster) -> str:
        """The account the cluster may live in, which spec.accountID must name; InvalidSpec otherwise."""
        namespace = cluster_namespace(cluster)
        wanted = cluster.spec.aws.account_id
        owner = self.annotations(namespace).get(OWNER_ACCOUNT_ANNOTATION)
        if owner is not None:
            if not _ACCOUNT_ID.fullmatch(owner):
                raise InvalidSpec.one(
                    f"Namespace {namespace}", f"metadata.annotations[{OWNER_ACCOUNT_ANNOTATION}]",
                    f"{owner!r} is not a 12-digit AWS account ID; no cluster of this namespace can be placed",
                    condition="InvalidOwnerAccount")
            if owner != wanted:
                raise InvalidSpec.one(cluster.ref, "spec.accountID",
                                      NOT_THE_OWNER.format(wanted=wanted, owner=owner), condition=ACCOUNT_MISMATCH)
            return owner
        if self.hub.spec.tenancy.unowned_namespaces == "Refuse":
            raise InvalidSpec.one(
                cluster.ref, f"Namespace {namespace} metadata.annotations[{OWNER_ACCOUNT_ANNOTATION}]",
                f"namespace {namespace} owns no account: the hub administrator names the one account its "
                f"clusters may use with the annotation {OWNER_ACCOUNT_ANNOTATION}",
                condition=NAMESPACE_NOT_OWNED)
        if wanted == self.hub.spec.account_id:
            raise InvalidSpec.one(
                cluster.ref, "spec.accountID",
                f"account {wanted} is the hub account; only a namespace whose {OWNER_ACCOUNT_ANNOTATION} "
                "annotation names it may use it", condition=ACCOUNT_NOT_OWNED)
        if wanted in self.owned:
            raise InvalidSpec.one(
                cluster.ref, "spec.accountID",
                f"account {wanted} is owned by another namespace ({OWNER_ACCOUNT_ANNOTATION})",
                condition=ACCOUNT_NOT_OWNED)
        if self.claims.get(wanted) != namespace:
            raise InvalidSpec.one(
                cluster.ref, "spec.accountID",
                f"account {wanted} was claimed first by another namespace (HubConfig "
                "spec.tenancy.unownedNamespaces: FirstClaim gives an unowned account to its first claimant)",
                condition=ACCOUNT_NOT_OWNED)
        return wanted


def owned_accounts(namespaces: Mapping[str, Mapping[str, str]]) -> frozenset[str]:
    """The accounts some namespace's owner annotation names."""
    return frozenset(a for ann in namespaces.values() if (a := ann.get(OWNER_ACCOUNT_ANNOTATION)))


def contested_accounts(hub: HubConfig, namespaces: Mapping[str, Mapping[str, str]]) -> dict[str, tuple[str, ...]]:
    """Account -> the namespaces owning it, for every account two or more namespaces' owner annotations name that
    HubConfig spec.tenancy.sharedAccounts does not list."""
    owners: dict[str, list[str]] = {}
    for name, annotations in namespaces.items():
        if (account := annotations.get(OWNER_ACCOUNT_ANNOTATION)):
            owners.setdefault(account, []).append(name)
    shared = set(hub.spec.tenancy.shared_accounts)
    return {a: tuple(sorted(n)) for a, n in owners.items() if len(n) > 1 and a not in shared}


def shared_refusal(cluster: Cluster, account: str, owners: tuple[str, ...]) -> InvalidSpec:
    """Why a new cluster may not use an account two namespaces own without the administrator saying so."""
    return InvalidSpec.one(
        cluster.ref, "spec.accountID",
        f"account {account} is owned by namespaces {', '.join(owners)} ({OWNER_ACCOUNT_ANNOTATION}) and is not in "
        "HubConfig spec.tenancy.sharedAccounts: namespaces sharing an account are kept apart only by the fleet's "
        "claims, so the hub administrator must list it there first; clusters whose stack exists keep running",
        condition=ACCOUNT_SHARED)


def shared_warning(account: str, owners: tuple[str, ...]) -> str:
    """What a running cluster in an account two namespaces own, unlisted, is told (it keeps running)."""
    return (f"account {account} is owned by namespaces {', '.join(owners)} and is not in HubConfig "
            "spec.tenancy.sharedAccounts: this cluster keeps running, but no new cluster of these namespaces is "
            "admitted there (AccountShared) until the hub administrator lists the account or one namespace gives it up")


def first_claims(hub: HubConfig, clusters: Iterable[Cluster], namespaces: Mapping[str, Mapping[str, str]],
                 owned: frozenset[str]) -> dict[str, str]:
    """FirstClaim: account -> the unowned namespace that claimed it first: whose cluster holds it (status.claims),
    else the oldest cluster's. An account's claim depends only on the clusters naming it, so a caller may pass just
    those (stacks.incremental does)."""
    claims: dict[str, str] = {}
    if hub.spec.tenancy.unowned_namespaces != "FirstClaim":
        return claims
    def order(cluster: Cluster) -> tuple[bool, str, str]:
        return (recorded(cluster).get(ACCOUNT) != cluster.spec.aws.account_id, *_age(cluster))

    for cluster in sorted(clusters, key=order):
        namespace, account = cluster_namespace(cluster), cluster.spec.aws.account_id
        if OWNER_ACCOUNT_ANNOTATION in namespaces.get(namespace, {}):
            continue
        if account != hub.spec.account_id and account not in owned:
            claims.setdefault(account, namespace)
    return claims


# --------------------------------------------------------------------------- tenant

def namespace_tenant(namespace: str, annotations: Mapping[str, str]) -> str:
    """The tenant of a namespace's clusters: its hubwright.io/tenant annotation, else the namespace. The one rule:
    the stack's tags and the registry's install answer (automation/api/bootstrap.py, what the agent pushes as)
    both come from here. The annotation is the hub administrator's (the tenant controller writes the Tenant's
    name there); the hubwright.io/tenant label is not read: a namespace labelled for another Tenant, but not
    annotated, must not make the hub name that Tenant."""
    tenant = annotations.get(TENANT_ANNOTATION) or namespace
    if len(tenant) > TAG_VALUE_MAX or not _TAG_VALUE.fullmatch(tenant):
        raise InvalidSpec.one(
            f"Namespace {namespace}", f"metadata.annotations[{TENANT_ANNOTATION}]",
            f"{tenant[:64]!r} cannot be an AWS tag value (at most {TAG_VALUE_MAX} letters, digits, spaces "
            "and _.:/=+-@)", condition=INVALID_NAMESPACE)
    return tenant


# --------------------------------------------------------------------------- names

def api_host(cluster: Cluster) -> str:
    return parse_api_url(cluster.spec.aws.api_url)[0]


def allowed_domains(namespace: str, annotations: Mapping[str, str]) -> tuple[str, ...] | None:
    """The domains the namespace's API hosts must be under (None: the annotation is absent)."""
    raw = annotations.get(ALLOWED_DOMAINS_ANNOTATION)
    if raw is None:
        return None
    domains = tuple(d.strip().lower() for d in raw.split(",") if d.strip())
    for domain in domains:
        problem = hostname_error(domain, min_labels=1)
        if problem is not None:
            raise InvalidSpec.one(f"Namespace {namespace}", f"metadata.annotations[{ALLOWED_DOMAINS_ANNOTATION}]",
                                  f"domain {domain!r} {problem}", condition=INVALID_NAMESPACE)
    return domains


def allowed_backends(namespace: str, annotations: Mapping[str, str]) -> tuple[str, ...] | None:
    """The CIDR blocks and domains the namespace's shared-ingress backends must be in (None: no annotation)."""
    raw = annotations.get(ALLOWED_BACKENDS_ANNOTATION)
    if raw is None:
        return None
    rules = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        try:
            rules.append(backend_rule(item))
        except ValueError as exc:
            raise InvalidSpec.one(f"Namespace {namespace}", f"metadata.annotations[{ALLOWED_BACKENDS_ANNOTATION}]",
                                  str(exc), condition=INVALID_NAMESPACE) from None
    return tuple(rules)


# The words of two refusals the API server gives too, at `kubectl apply` (stacks.cluster_policy renders them in CEL):
# {placeholders} are filled by both.
NOT_THE_OWNER = (f"account {{wanted}} is not the namespace's owner account {{owner}} ({OWNER_ACCOUNT_ANNOTATION}); "
                 "clusters in this namespace must live in {owner}")
NOT_UNDER = (f"host {{host}} is not under the domains namespace {{namespace}} may use ({{domains}}; annotation "
             f"{ALLOWED_DOMAINS_ANNOTATION})")


def host_errors(cluster: Cluster, hub: HubConfig, annotations: Mapping[str, str]) -> InvalidSpec | None:
    """The API host outside what the hub reserves and, if the namespace is limited, inside its domains."""
    host = api_host(cluster)
    reserved = next((d for d in hub.spec.tenancy.reserved_domains if under(host, d)), None)
    if reserved is not None:
        return InvalidSpec.one(cluster.ref, "spec.apiURL",
                               f"host {host} is under {reserved}, reserved by the hub administrator "
                               "(HubConfig spec.tenancy.reservedDomains)", condition=DOMAIN_NOT_ALLOWED)
    namespace = cluster_namespace(cluster)
    allowed = allowed_domains(namespace, annotations)
    if allowed is not None and not any(under(host, d) for d in allowed):
        return InvalidSpec.one(cluster.ref, "spec.apiURL", NOT_UNDER.format(
            host=host, namespace=namespace, domains=", ".join(allowed) or "none"), condition=DOMAIN_NOT_ALLOWED)
    return None


# --------------------------------------------------------------------------- quotas

_COUNT = re.compile(r"\d{1,10}")
_CAPS = (("clusters", MAX_CLUSTERS_ANNOTATION, "max_clusters_per_namespace", "maxClustersPerNamespace"),
         ("endpoints", MAX_ENDPOINTS_ANNOTATION, "max_endpoints_per_namespace", "maxEndpointsPerNamespace"))


@dataclass(frozen=True)
class Cap:
    limit: int
    source: str  # where it comes from, for the refusal: the annotation or the HubConfig field


@dataclass(frozen=True)
class Seat:
    """One cluster of a namespace, as its caps see it."""

    cluster: Cluster
    admitted: bool  # passed `admit` (only an admitted cluster takes a new slot)
    endpoint: bool  # asks for a PrivateLink endpoint
    stack: bool  # its stack exists (status.stack): it holds a cluster slot, whatever happens to it now
    placed: bool  # its status records an endpoint VPC: it holds an endpoint slot (and a cluster slot)


def namespace_caps(hub: HubConfig, namespace: str, annotations: Mapping[str, str]) -> dict[str, Cap]:
    """The namespace's caps by what they count ("clusters", "endpoints"); absent: no cap. An annotation that is
    not a whole number is refused (InvalidSpec naming the Namespace)."""
    caps: dict[str, Cap] = {}
    for what, annotation, attribute, alias in _CAPS:
        raw = annotations.get(annotation)
        if raw is not None:
            if not _COUNT.fullmatch(raw.strip()) or int(raw) > INT32_MAX:
                raise InvalidSpec.one(f"Namespace {namespace}", f"metadata.annotations[{annotation}]",
                                      f"{raw[:64]!r} is not a whole number of {what} (0 to {INT32_MAX})",
                                      condition=INVALID_NAMESPACE)
            caps[what] = Cap(int(raw), f"annotation {annotation} of Namespace {namespace}")
        elif (limit := getattr(hub.spec.tenancy, attribute)) is not None:
            caps[what] = Cap(limit, f"HubConfig {hub.metadata.name} spec.tenancy.{alias}")
    return caps


def quota_refusals(hub: HubConfig, namespace: str, annotations: Mapping[str, str],
                   seats: Iterable[Seat], retained: frozenset[str] = frozenset()) -> dict[str, InvalidSpec]:
    """By cluster key, a refusal (QuotaExceeded) for every admitted cluster of `namespace` that would take a slot
    beyond one of its caps. Every seat of the namespace is given, refused at admission or not: what exists holds
    its slot either way (refusing never destroys it), and so does each of the namespace's retained stacks
    (`retained`, by the key of the cluster it was: stacks.retention), once: as the seat of a cluster of its key
    (stacks.resolve.seat_of), else on its own, until the hub administrator releases it. The rest take the slots left, oldest first; one that cannot have every slot
    it needs takes none. The one rule of the caps: stacks.resolve and stacks.incremental call it."""
    caps = namespace_caps(hub, namespace, annotations)
    if not caps:
        return {}
    seats = list(seats)
    seated = {s.cluster.key for s in seats}  # a cluster of a retained stack's key holds its slot as its own seat
    used = {"clusters": sum(1 for s in seats if s.stack or s.placed) + len(retained - seated),
            "endpoints": sum(1 for s in seats if s.placed)}
    refused: dict[str, InvalidSpec] = {}
    for seat in sorted((s for s in seats if s.admitted), key=lambda s: _age(s.cluster)):
        needs = {"clusters": not (seat.stack or seat.placed), "endpoints": seat.endpoint and not seat.placed}
        over = [what for what, needed in needs.items() if needed and what in caps and used[what] >= caps[what].limit]
        if over:
            refused[seat.cluster.key] = InvalidSpec([FieldError(
                seat.cluster.ref, "metadata.namespace" if what == "clusters" else "spec.privateLink.enabled",
                f"namespace {namespace} already uses {used[what]} of its {caps[what].limit} {_NOUN[what]} "
                f"({caps[what].source}): existing stacks keep theirs and older clusters come first; this cluster "
                "takes none until one is freed or the hub administrator raises the cap") for what in over],
                QUOTA_EXCEEDED)
            continue
        for what, needed in needs.items():
            used[what] += needed
    return refused


_NOUN = {"clusters": "cluster slots", "endpoints": "PrivateLink endpoint slots"}
