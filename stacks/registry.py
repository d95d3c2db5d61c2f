"""The fleet registry's model and decisions (docs/registry.md). Pure.

A `Tenant` (cluster-scoped) is a team: a display name, its owner account and default region, static facts
and the subjects who administer it. The service materialises it as one Namespace (its name, or the existing
one it adopts) carrying the owner-account and default-region annotations, so the registry and the tenancy
rules of stacks.tenancy are one thing. Its clusters are the `Cluster`s of that namespace.

Here too: generated names (`t-`/`c-` + adjective-noun-digits), bootstrap-token hashing, durations, and
what changed between two versions of a cluster's dynamic facts.
"""
from __future__ import annotations

import hashlib
import random
import re
from typing import Literal, Mapping

from pydantic import Field, model_validator

from stacks.errors import InvalidSpec
from stacks.gitrepos.model import ClusterTemplate, GitRepoTemplate
from stacks.model.fields import INT32_MAX, AccountID, DisplayName, Facts, NamespaceName, Region, Spec
from stacks.model.hub import HubConfig, HubRegistry
from stacks.model.resource import Resource
from stacks.status import Condition
from stacks.names import BOOTSTRAP_LABEL_CHARS

# --------------------------------------------------------------------------- Tenant


class Subject(Spec):
    """An RBAC subject: who administers a tenant's clusters."""

    kind: Literal["User", "Group", "ServiceAccount"] = Field(description="User, Group or ServiceAccount.")
    name: str = Field(min_length=1, max_length=253, description="The subject's name.")
    namespace: NamespaceName | None = Field(None, description="The ServiceAccount's namespace (ServiceAccount only).")

    @model_validator(mode="after")
    def _namespace(self) -> "Subject":
        if (self.kind == "ServiceAccount") != (self.namespace is not None):
            raise ValueError("namespace is given for a ServiceAccount, and only for one")
        return self


class TenantQuota(Spec):
    """What the tenant's namespace may hold, enforced by the API server itself: the controller writes it as a
    ResourceQuota there (stacks.admission.tenant_quota), owned by the Tenant. Unset: no quota."""

    max_clusters: int | None = Field(None, ge=0, le=INT32_MAX,
        description="HubCluster objects the namespace may hold, registered-only ones too.")


class TenantSpec(Spec):
    """A tenant: its display name, owner account, default region, namespace, facts, admins and quota."""

    display_name: DisplayName | None = Field(None, description="A name for people.")
    # The ownership fields: only a cluster administrator may set or change them (the admission policy
    # stacks.admission.tenant_ownership_policy), or a tenant could squat another's account.
    account_id: AccountID | None = Field(None, alias="accountID",
        description="The owner account of the tenant's clusters (12 digits, quoted in YAML). Only a cluster "
                    "administrator may set or change it.")
    default_region: Region | None = Field(None,
        description="The default region of the tenant's clusters. Only a cluster administrator may set or change it.")
    namespace: NamespaceName | None = Field(None,
        description="Adopt this existing namespace (default: the tenant's name). Only a cluster administrator may "
                    "set or change it.")
    facts: Facts = Field(default_factory=dict,
        description="Static facts about the tenant (key: value), kept by the registry.")
    admins: list[Subject] = Field(default_factory=list, max_length=100,
        description="Who administers the tenant's clusters: bound to the tenant-admin role in its namespace.")
    quota: TenantQuota | None = Field(None,
        description="What the tenant's namespace may hold. Only a cluster administrator may set or change it.")
    # The Git part (docs/registry.md "Git repositories"): ownership fields too, since they spend the hub's forge token.
    git_repo_template: GitRepoTemplate | None = Field(None,
        description="The tenant's own repository (<owner>/<tenant>), made as a HubGitRepo in its namespace. Only a "
                    "cluster administrator may set or change it.")
    git_repo_url: str | None = Field(None, alias="gitRepoURL", max_length=1024, pattern=r"^(https?|ssh)://\S+$|^[A-Za-z0-9_.-]+@[A-Za-z0-9.-]+:\S+$",
        description="An existing repository of the tenant, used as it is (instead of gitRepoTemplate).")
    cluster_template: ClusterTemplate | None = Field(None,
        description="What each HubCluster of the tenant gets: its catalog repository. Only a cluster administrator "
                    "may set or change it.")

    @model_validator(mode="after")
    def _one_repository(self) -> "TenantSpec":
        if self.git_repo_template is not None and self.git_repo_url is not None:
            raise ValueError("gitRepoTemplate and gitRepoURL are two ways to give the tenant's repository: give one")
        return self


# TenantSpec's aliases (paths) the policy guards
OWNERSHIP_FIELDS = ("accountID", "defaultRegion", "namespace", "quota.maxClusters", "gitRepoTemplate", "clusterTemplate")


class Tenant(Resource):
    kind: Literal["HubTenant"] = "HubTenant"
    spec: TenantSpec = Field(default_factory=TenantSpec)

    @property
    def namespace(self) -> str:
        """The namespace that holds the tenant's clusters."""
        return self.spec.namespace or self.metadata.name

    @property
    def ref(self) -> str:
        return f"Tenant {self.metadata.name}"


class TenantStatus(Spec):
    """What the service writes into Tenant.status."""

    model_config = Spec.model_config | {"extra": "ignore", "strict": False}
    namespace: NamespaceName | None = Field(None, description="The namespace that holds the tenant's clusters.")
    clusters: int | None = Field(None, ge=0,
        description="HubClusters in the namespace: a tenant with any cannot be deleted.")
    message: str | None = Field(None, max_length=1024, description="What the controller did, or why not.")
    # While the controller refuses the Tenant (nothing applied): Stalled, its reason and message. Absent otherwise.
    conditions: list[Condition] | None = Field(None, max_length=8,
        description="While the controller refuses the tenant (nothing applied): Stalled, its reason and message. "
                    "Absent otherwise.")


# --------------------------------------------------------------------------- generated names

ADJECTIVES = tuple("""amber ancient autumn billowing bitter black blue bold brave broad broken calm cold cool crimson
curly damp dark dawn delicate divine dry empty falling fancy flat floral fragrant frosty gentle green hidden holy
icy jolly late lingering little lively long lucky misty morning muddy nameless noisy odd old orange patient plain
polished proud purple quiet rapid raspy red restless rough round royal shiny shrill shy silent small snowy soft
solitary sparkling spring square steep still summer super sweet throbbing tight tiny twilight wandering weathered
white wild winter wispy withered yellow young""".split())
NOUNS = tuple("""art band bar base bird block boat bonus bread breeze brook bush butterfly cake cell cherry cloud
credit darkness dawn dew disk dream dust feather field fire firefly flower fog forest frog frost glade glitter grass
hall hat haze heart hill king lab lake leaf limit math meadow mode moon morning mountain mouse mud night paper pine
poetry pond queen rain recipe resonance rice river salad scene sea shadow shape silence sky smoke snow snowflake
sound star sun sunset surf term thunder tooth tree truth union unit violet voice water waterfall wave wildflower
wind wood""".split())
ID_PREFIXES = {"Tenant": "t-", "Cluster": "c-"}
ID_ATTEMPTS = 10  # generated names a create tries before it gives up (the API server says which are taken)


def new_id(kind: Literal["Tenant", "Cluster"], rng: random.Random | None = None) -> str:
    """`t-`/`c-` + adjective-noun-six digits: DNS-safe, at most 30 characters, ~10^10 of them.

    Not checked here: the caller creates under it and the API server's AlreadyExists is the collision check
    (automation.api.kube.create_named draws again, up to ID_ATTEMPTS times)."""
    rng = rng or random.SystemRandom()
    return f"{ID_PREFIXES[kind]}{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}-{rng.randrange(10**6):06d}"


# --------------------------------------------------------------------------- bootstrap tokens and durations

def token_hash(token: str) -> str:
    """The SHA-256 of a bootstrap token, hex: all that is ever stored of it."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_label(digest: str) -> str:
    """The label value that finds a cluster by its token's hash (label values stop at 63 characters)."""
    return digest[:BOOTSTRAP_LABEL_CHARS]


_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def seconds(duration: str) -> int:
    """Seconds in a duration such as "24h", "1h30m" or "90s"; ValueError for anything else."""
    found = _DURATION.fullmatch(duration)
    if not duration or found is None:
        raise ValueError(f"{duration!r} is not a duration such as 24h, 30m or 1h30m")
    hours, minutes, secs = (int(part or 0) for part in found.groups())
    return hours * 3600 + minutes * 60 + secs


# --------------------------------------------------------------------------- credential lifetimes

DEFAULT_TOKEN_LIFETIME = "24h"  # a Cluster's spec.tokenLifetime when it gives none (stacks.model.cluster.ClusterSpec)


def max_token_lifetime(hub: HubConfig | None) -> tuple[int, str]:
    """(seconds, where the limit comes from): HubConfig spec.registry.maxTokenLifetime, or its default when the
    hub has no HubConfig."""
    limit = (hub.spec.registry if hub is not None else HubRegistry()).max_token_lifetime
    where = f"{hub.ref} spec.registry.maxTokenLifetime" if hub is not None else "the default maxTokenLifetime"
    return seconds(limit), f"{where} ({limit})"


def bootstrap_token_seconds(cluster: str, token_lifetime: str | None, hub: HubConfig | None) -> int:
    """How long a bootstrap token issued now for `cluster` ("HubCluster ns/name") lives: its spec.tokenLifetime.
    Above the hub's maxTokenLifetime it is refused (InvalidSpec naming both), never silently shortened: the
    tenant asked for a lifetime the hub does not give."""
    lifetime = token_lifetime or DEFAULT_TOKEN_LIFETIME
    wanted = seconds(lifetime)
    limit, where = max_token_lifetime(hub)
    if wanted > limit:
        allowed = (hub.spec.registry if hub is not None else HubRegistry()).max_token_lifetime
        raise InvalidSpec.one(cluster, "spec.tokenLifetime",
                              f"{lifetime} is longer than {where} allows; ask for {allowed} or less")
    if wanted <= 0:
        raise InvalidSpec.one(cluster, "spec.tokenLifetime", f"{lifetime} is no time at all")
    return wanted


def agent_token_seconds(wanted: int, hub: HubConfig | None) -> int:
    """The lifetime of an agent's hub token (the first one and every rotation): the API's --agent-token-seconds,
    capped by the hub's maxTokenLifetime. (The API server asks for 10 minutes at least: a lower limit leaves
    agents without a token, never with a longer one.)"""
    return min(wanted, max_token_lifetime(hub)[0])


# --------------------------------------------------------------------------- a facts agent's standing

AgentStanding = Literal["current", "adopt", "orphan"]


def agent_standing(recorded_uid: str | None, agent_created: str | None, cluster_uid: str | None,
                   cluster_created: str | None) -> AgentStanding:
    """Whether a facts agent's hub identity belongs to the Cluster of its name that exists now.

    "current": its ServiceAccount records this Cluster's uid. "orphan": the Cluster is gone, or the uid it
    records is another's (a later Cluster of the same name): revoke it, and the registry refuses it meanwhile.
    "adopt": it records none (granted before uids were recorded) and was made after this Cluster was, so it
    was granted for it: record the uid. Made in the same second or earlier, it may be an earlier Cluster's:
    an orphan (RFC 3339 times of one format compare as text)."""
    if cluster_uid is None:
        return "orphan"
    if recorded_uid is not None:
        return "current" if recorded_uid == cluster_uid else "orphan"
    if agent_created and cluster_created and agent_created > cluster_created:
        return "adopt"
    return "orphan"


# --------------------------------------------------------------------------- facts history

def facts_change(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, object]:
    """What changed from one version of a cluster's facts to the next: {"set": {...}, "removed": [...]}."""
    return {
        "set": {key: value for key, value in sorted(after.items()) if before.get(key) != value},
        "removed": sorted(key for key in before if key not in after),
    }
