"""Deletion policy: what deleting a HubCluster does to its stack, and what a retained stack goes on holding. Pure.
docs/service.md "Deletion policy" is the model; docs/security.md says who may change what.

- `policy_of`: a HubCluster's spec.deletionPolicy, else HubConfig spec.deletion.defaultPolicy; Retain only while
  HubConfig spec.deletion.allowRetain (otherwise the cluster is refused, RetainNotAllowed, and a deleted one waits).
- what a retained stack keeps: stacks/keep.py.
- `RetainedStack`: the record of a retained stack (kind HubRetainedStack, cluster-scoped, named after the stack).
  It holds the cluster's VPC, load-balancer and infra-ID claims and a cluster slot under its namespace's caps until
  the hub administrator releases it (spec.release: Destroy or Forget), or a HubCluster re-adopts it.
- `Retention`: the records as admission reads them (stacks.resolve.admit, stacks.tenancy.quota_refusals,
  stacks.claims.claim): who may re-adopt a stack (same namespace, by its UID, and same owner account), which claims
  are reserved, which slots are held.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from stacks.claims import INFRA_ID, LOAD_BALANCER, VPC, Reserved
from stacks.errors import InvalidSpec
from stacks.model.cluster import Cluster
from stacks.model.fields import AccountID, DeletionPolicy, NamespaceName, Region
from stacks.model.hub import HubConfig
from stacks.model.resource import ObjectMeta
from stacks.names import API_VERSION, RETAINED, cluster_key, stack_name

RETAIN_NOT_ALLOWED = "RetainNotAllowed"  # condition reason: Retain asked where the hub does not allow it
POLICY_UNKNOWN = "DeletionPolicyUnknown"  # condition reason: no valid HubConfig to read the default from
STACK_RETAINED = "StackRetained"  # condition reason: a retained stack of this name is not this cluster's to adopt
RETAINED_KINDS = (VPC, LOAD_BALANCER, INFRA_ID)  # the claims a retained stack keeps
SETTING = "HubConfig spec.deletion.allowRetain"
Release = Literal["Destroy", "Forget"]


def policy_of(ref: str, own: DeletionPolicy | None, hub: HubConfig | None) -> DeletionPolicy:
    """The deletion policy of the HubCluster `ref` whose spec.deletionPolicy is `own`: its own, else the hub's
    default. Raises InvalidSpec for Retain where the hub does not allow it (RetainNotAllowed: an explicit value is
    never quietly replaced by another), and where it cannot be known (no valid HubConfig, and the cluster sets none
    or Retain, which the hub must allow: PolicyUnknown): a deleted cluster then waits, keeping its stack."""
    if hub is None:
        if own == "Delete":
            return own
        raise InvalidSpec.one(ref, "spec.deletionPolicy",
                              f"{own or 'unset'}, and there is no valid HubConfig to say what that means ({SETTING}, "
                              "spec.deletion.defaultPolicy): the cluster waits, keeping its stack, until there is one "
                              "or spec.deletionPolicy is Delete", condition=POLICY_UNKNOWN)
    policy: DeletionPolicy = own or hub.spec.deletion.default_policy
    if policy == "Retain" and not hub.spec.deletion.allow_retain:
        raise InvalidSpec.one(ref, "spec.deletionPolicy",
                              f"Retain is not allowed on this hub ({SETTING} is false): set Delete, or ask the hub "
                              "administrator to allow it; a deleted cluster waits, keeping its stack, until one "
                              "of them does", condition=RETAIN_NOT_ALLOWED)
    return policy


def own_policy(spec: Any) -> DeletionPolicy | None:
    """spec.deletionPolicy as written on a HubCluster document (whatever else its spec says), or None."""
    value = spec.get("deletionPolicy") if isinstance(spec, Mapping) else None
    return "Retain" if value == "Retain" else "Delete" if value == "Delete" else None


class RetainedClaims(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)
    vpc_id: str | None = Field(None, alias="vpcID", max_length=64, description="The VPC it holds.")
    load_balancer: str | None = Field(None, max_length=256, description="The load balancer (ARN) it holds.")
    infra_id: str | None = Field(None, alias="infraID", max_length=128, description="The install (account/infraID).")

    def by_kind(self) -> dict[str, str]:
        values = {VPC: self.vpc_id, LOAD_BALANCER: self.load_balancer, INFRA_ID: self.infra_id}
        return {kind: value for kind, value in values.items() if value is not None}


class RetainedStackSpec(BaseModel):
    """A retained stack: whose it was, where it lives, what it holds; and the hub administrator's release."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)
    namespace: NamespaceName = Field(description="The HubCluster's namespace.")
    cluster: str = Field(min_length=1, max_length=253, description="The HubCluster's name.")
    namespace_uid: str = Field(alias="namespaceUID", min_length=1, max_length=64,
        description="The UID of the namespace it was retained from: only a HubCluster of the same name in that same "
                    "namespace (not one re-created with the name) adopts it.")
    account_id: AccountID = Field(alias="accountID", description="The cluster's account, where the stack's resources "
                                                                 "live; an adopter must name it.")
    region: Region = Field(description="The cluster's region.")
    stack: str = Field(min_length=1, max_length=100, description="The Pulumi stack.")
    claims: RetainedClaims = Field(default_factory=RetainedClaims,
        description="What it keeps holding: no other cluster may take these until it is released.")
    kept: list[Annotated[str, Field(max_length=512)]] = Field(default_factory=list, max_length=1000,
        description="The resources the stack kept (type and name), as the retaining run left them.")
    retained_at: str = Field(alias="retainedAt", max_length=64, description="When it was retained (RFC 3339).")
    release: Release | None = Field(None,
        description="Set by the hub administrator: Destroy deletes the stack's resources, Forget drops the stack "
                    "from the state backend and leaves its resources in the account, unmanaged. Either way the "
                    "record goes and its claims and slot are freed.")


class RetainedStack(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)
    api_version: Literal["hubwright.io/v1alpha1"] = API_VERSION
    kind: Literal["HubRetainedStack"] = "HubRetainedStack"
    metadata: ObjectMeta
    spec: RetainedStackSpec
    status: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        """The key of the cluster it was: namespace/name."""
        return cluster_key(self.spec.namespace, self.spec.cluster)

    @property
    def ref(self) -> str:
        return f"{RETAINED.kind} {self.metadata.name}"


def record_of(key: str, namespace_uid: str, account: str, region: str, claims: Mapping[str, str],
              kept: list[str], at: str) -> dict[str, Any]:
    """The HubRetainedStack document for the cluster `key` (namespace/name), retained now (`at`) in `account` and
    `region`, holding what admission granted it (`claims`: its status.claims)."""
    namespace, _, name = key.partition("/")
    held = RetainedClaims.model_validate({k: v for k, v in claims.items() if k in RETAINED_KINDS})
    spec = RetainedStackSpec(namespace=namespace, cluster=name, namespace_uid=namespace_uid, account_id=account,
                             region=region, stack=stack_name(namespace, name), claims=held, kept=kept[:1000],
                             retained_at=at)
    return {"apiVersion": API_VERSION, "kind": RETAINED.kind, "metadata": {"name": spec.stack},
            "spec": spec.model_dump(by_alias=True, exclude_none=True)}


@dataclass(frozen=True)
class Retention:
    """The retained stacks as admission reads them: each by the key of the cluster it was, and the UID of each
    namespace they name (None: the namespace is gone)."""

    records: Mapping[str, RetainedStack] = field(default_factory=dict)
    namespace_uids: Mapping[str, str | None] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> "Retention":
        return cls()

    def holds(self, key: str) -> bool:
        """A retained stack of this key exists: a cluster of the key that is admitted adopts it (and its slot)."""
        return key in self.records

    def adoption_refusal(self, cluster: Cluster, account: str) -> InvalidSpec | None:
        """Why `cluster` (admitted to `account`) may not adopt the retained stack of its name, or None (none, or
        it may). Namespace names are reused: only the same namespace (its UID) and the same owner account adopt."""
        record = self.records.get(cluster.key)
        if record is None:
            return None
        spec, how = record.spec, (f"the hub administrator releases it first (kubectl patch {RETAINED.plural} "
                                  f"{record.metadata.name} --type merge -p '{{\"spec\":{{\"release\":\"Destroy\"}}}}', "
                                  "or Forget)")
        if spec.release is not None:
            why = f"is being released ({spec.release})"
        elif self.namespace_uids.get(spec.namespace) != spec.namespace_uid:
            why = (f"was retained from an earlier namespace {spec.namespace} (UID {spec.namespace_uid}), which was "
                   "deleted: a namespace re-created with the name does not inherit it")
        elif account != spec.account_id:
            why = f"lives in account {spec.account_id}, and this cluster would use {account}"
        else:
            return None
        return InvalidSpec.one(cluster.ref, "metadata.name",
                               f"stack {spec.stack} is a retained stack ({RETAINED.kind} {record.metadata.name}) that "
                               f"{why}; a cluster of this name waits until {how}", condition=STACK_RETAINED)

    def moved(self, new: "Retention") -> list[RetainedStack]:
        """The records (as they were and as they are) that differ between this and `new`, a namespace's UID
        moving included: what admission must look at again."""
        uids = {ns for ns in {*self.namespace_uids, *new.namespace_uids}
                if self.namespace_uids.get(ns) != new.namespace_uids.get(ns)}
        out: list[RetainedStack] = []
        for key in {*self.records, *new.records}:
            was, now = self.records.get(key), new.records.get(key)
            if was != now or any(r.spec.namespace in uids for r in (was, now) if r is not None):
                out += [r for r in (was, now) if r is not None]
        return out

    def slots(self, namespace: str) -> frozenset[str]:
        """The keys of the namespace's retained stacks: each holds a cluster slot under its caps."""
        return frozenset(key for key, record in self.records.items() if record.spec.namespace == namespace)

    def reserved(self) -> dict[tuple[str, str], Reserved]:
        """(claim kind, value) -> the retained stack holding it."""
        out: dict[tuple[str, str], Reserved] = {}
        for key, record in self.records.items():
            for kind, value in record.spec.claims.by_kind().items():
                out[(kind, value)] = Reserved(key, record.spec.namespace)
        return out
