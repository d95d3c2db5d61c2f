"""The registry API's request and response bodies, and how a Kubernetes object becomes a response.

The specs are the model's own (stacks.registry.TenantSpec, stacks.model.cluster.ClusterSpec), so the OpenAPI document,
the CRD schema and the service's validation say the same thing. A response is a view of the object: its id, its
tenant, its spec and a summary of its status. For a cluster that summary is the Ready condition, the resolved
account and region, the endpoint, the latest dynamic facts and the bootstrap token's validity, never its hash.

Views are built as plain JSON here (routes return them as they are): an object someone wrote with kubectl
whose spec the model refuses is still listed, with its spec as stored and `status.problem` saying why.
"""
from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from stacks.gitrepos.model import Phase, PublicKeyText
from stacks.model.cluster import ClusterSpec
from stacks.model.fields import Facts, NamespaceName
from stacks.names import BOOTSTRAP_TOKEN_LABEL
from stacks.registry import TenantSpec
from stacks.status import FactsStatus

Labels = dict[str, str]
# A JSON merge patch of labels (RFC 7386): a null value removes the label.
LabelsPatch = dict[str, str | None]
RESERVED_LABELS = (BOOTSTRAP_TOKEN_LABEL,)  # set by the registry itself (finds a cluster by its token's hash)


class Body(BaseModel):
    """Request bodies: camelCase, unknown fields refused (a typo is an error, not a silent no-op)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class View(BaseModel):
    """Response bodies (documentation of what the routes return)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


# --------------------------------------------------------------------------- requests

class TenantCreate(Body):
    id: NamespaceName | None = Field(None, description="the Tenant's name; generated (t-adjective-noun-digits) "
                                                       "when left out. Its namespace has this name unless "
                                                       "spec.namespace adopts another.")
    labels: Labels = Field(default_factory=dict)
    spec: TenantSpec = Field(default_factory=TenantSpec)


class ClusterCreate(Body):
    id: NamespaceName | None = Field(None, description="the Cluster's name in its tenant's namespace; generated "
                                                       "(c-adjective-noun-digits) when left out")
    labels: Labels = Field(default_factory=dict)
    spec: ClusterSpec = Field(default_factory=ClusterSpec)


class TenantReplace(Body):
    """PUT: the whole spec. Labels are replaced too when given. resourceVersion: fail with 409 if the Tenant
    changed since you read it."""

    labels: Labels | None = None
    spec: TenantSpec
    resource_version: str | None = None


class ClusterReplace(Body):
    """PUT: the whole spec. Labels are replaced too when given. resourceVersion: fail with 409 if the Cluster
    changed since you read it."""

    labels: Labels | None = None
    spec: ClusterSpec
    resource_version: str | None = None


class Patch(Body):
    """PATCH: a JSON merge patch (RFC 7386) of the spec and the labels; null removes a field or label. The result
    is validated as a whole spec. resourceVersion: fail with 409 if the object changed since you read it."""

    labels: LabelsPatch | None = None
    spec: dict[str, Any] | None = None
    resource_version: str | None = None


class FactsPush(Body):
    facts: Facts = Field(description="the cluster's dynamic facts now (the whole set: keys left out are removed)")


class AgentKeyPut(Body):
    public_key: PublicKeyText = Field(description="the agent's SSH public key: one OpenSSH line '<type> <base64>' and "
                                                  "an optional comment; no options, RSA from 3072 bits")


# --------------------------------------------------------------------------- responses

class ReadyView(View):
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


class TokenView(View):
    """The bootstrap token's validity. The token is shown once, when issued; its hash is never shown."""

    valid_until: str | None = None
    used: bool = False


class ClusterStatusView(View):
    ready: ReadyView | None = None
    account: str | None = None
    region: str | None = None
    endpoint: str | None = None
    facts: FactsStatus | None = None
    bootstrap_token: TokenView | None = None
    problem: str | None = Field(None, description="why the stored spec does not validate (written outside the API)")


class ClusterView(View):
    id: str
    tenant: str | None = Field(description="the Tenant whose namespace holds the cluster (null: none does)")
    namespace: str
    display_name: str | None = None
    labels: Labels = Field(default_factory=dict)
    spec: ClusterSpec
    status: ClusterStatusView
    resource_version: str | None = None
    created: str | None = None
    deleting: bool = False


class TenantStatusView(View):
    namespace: str | None = None
    clusters: int | None = None
    message: str | None = None
    problem: str | None = None


class TenantView(View):
    id: str
    namespace: str = Field(description="the namespace that holds the tenant's clusters")
    display_name: str | None = None
    labels: Labels = Field(default_factory=dict)
    spec: TenantSpec
    status: TenantStatusView
    resource_version: str | None = None
    created: str | None = None
    deleting: bool = False


class ClusterList(View):
    items: list[ClusterView]
    continue_: str | None = Field(None, alias="continue",
                                  description="pass as ?continue= (with the same filters) for the next page")


class TenantList(View):
    items: list[TenantView]
    continue_: str | None = Field(None, alias="continue")


class Deleted(View):
    id: str
    finished: bool = Field(description="false: finalizers hold the object until the service has cleaned up")


class FactsView(View):
    version: int
    time: str
    facts: dict[str, str]


class FactsChange(View):
    version: int
    time: str
    set: dict[str, str]
    removed: list[str]


class FactsHistory(View):
    items: list[FactsChange]


class AgentKeyView(View):
    """The key the registry holds for the cluster's agent (HubCluster status.agentKey)."""

    public_key: str = Field(description="as stored: rebuilt from its parts")
    fingerprint: str = Field(description="SHA256:..., as `ssh-keygen -lf` prints it")
    time: str = Field(description="RFC 3339: when the registry took it")


class DeployKeyView(View):
    name: str
    fingerprint: str = Field(description="SHA256:... of the public key")
    write: bool = Field(description="whether it may push")


class GitRepoView(View):
    """A tenant's or a cluster's Git repository, as its HubGitRepo's status tells (or the tenant's spec.gitRepoURL)."""

    name: str | None = Field(None, description="the HubGitRepo (null: the tenant's spec.gitRepoURL, not managed)")
    managed: bool = Field(description="false: an existing repository the tenant names (spec.gitRepoURL), used as is")
    path: str | None = Field(None, description="owner/name on the forge")
    url: str | None = Field(None, description="the HTTPS clone URL")
    ssh_url: str | None = Field(None, alias="sshURL", description="the SSH clone URL")
    host_keys: list[str] = Field(default_factory=list, description="the forge's SSH host keys (known_hosts lines)")
    phase: Phase | None = None
    ready: ReadyView | None = None
    deploy_keys: list[DeployKeyView] = Field(default_factory=list,
                                             description="the deploy keys hubwright keeps on the repository")


class Problem(View):
    detail: str = Field(description="why; Kubernetes' own message when Kubernetes refused")


ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "no bearer token, or one Kubernetes does not accept"},
    403: {"model": Problem, "description": "Kubernetes RBAC refused the caller"},
    404: {"model": Problem, "description": "no such tenant or cluster"},
}
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": Problem, "description": "the name is taken, or the object changed since resourceVersion"}}


# --------------------------------------------------------------------------- views of Kubernetes objects

def _dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True)


def spec_view(model: type[BaseModel], raw: Any) -> tuple[Any, str | None]:
    """The spec as the model writes it, or as stored with the reason when the model refuses it."""
    try:
        return _dump(model.model_validate(raw if raw is not None else {})), None
    except ValidationError as exc:
        return raw, "; ".join(f"spec.{'.'.join(map(str, err['loc'])) or '(object)'}: "
                              f"{err['msg'].removeprefix('Value error, ')}" for err in exc.errors())


def _meta_view(doc: Mapping[str, Any]) -> dict[str, Any]:
    meta = doc.get("metadata") or {}
    return {"id": meta.get("name"), "labels": dict(meta.get("labels") or {}),
            "resourceVersion": meta.get("resourceVersion"), "created": meta.get("creationTimestamp"),
            "deleting": bool(meta.get("deletionTimestamp"))}


def _ready(status: Mapping[str, Any]) -> dict[str, Any] | None:
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return {"status": condition.get("status", "Unknown"), "reason": condition.get("reason"),
                    "message": condition.get("message"), "lastTransitionTime": condition.get("lastTransitionTime")}
    return None


def _facts(status: Mapping[str, Any]) -> dict[str, Any] | None:
    facts = status.get("facts")
    try:
        return _dump(FactsStatus.model_validate(facts)) if facts else None
    except ValidationError:
        return None


def section(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """doc[key] when it is a mapping, else empty: an object is shown (or filtered) before it is validated."""
    value = doc.get(key)
    return value if isinstance(value, Mapping) else {}


def controlled_by(doc: Mapping[str, Any], kind: str, uid: Any) -> bool:
    """Whether `doc`'s controller (ownerReference) is the object of this kind and uid: a HubGitRepo made for an
    earlier HubCluster of the same name is not the current one's."""
    refs = section(doc, "metadata").get("ownerReferences")
    return bool(uid) and isinstance(refs, list) and any(
        isinstance(ref, Mapping) and ref.get("kind") == kind and ref.get("uid") == uid and ref.get("controller") is True
        for ref in refs)


def cluster_view(doc: Mapping[str, Any], tenant: str | None) -> dict[str, Any]:
    """A Cluster as the API shows it (ClusterView)."""
    spec, problem = spec_view(ClusterSpec, doc.get("spec"))
    status = section(doc, "status")
    token = status.get("bootstrapToken") if isinstance(status.get("bootstrapToken"), Mapping) else None
    outputs = section(status, "outputs")
    return {
        **_meta_view(doc),
        "tenant": tenant,
        "namespace": (doc.get("metadata") or {}).get("namespace"),
        "displayName": (spec or {}).get("displayName") if isinstance(spec, Mapping) else None,
        "spec": spec,
        "status": {
            "ready": _ready(status),
            "account": status.get("account"),
            "region": status.get("region"),
            "endpoint": outputs.get("endpoint"),
            "facts": _facts(status),
            "bootstrapToken": None if token is None else {"validUntil": token.get("validUntil"),
                                                          "used": bool(token.get("used"))},
            "problem": problem,
        },
    }


def tenant_namespace(doc: Mapping[str, Any]) -> str:
    """The namespace of a Tenant's clusters: the one it adopts (spec.namespace), else its own name."""
    namespace = section(doc, "spec").get("namespace") or section(doc, "metadata").get("name")
    return namespace if isinstance(namespace, str) else ""  # the API server always gives a name


def tenant_view(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A Tenant as the API shows it (TenantView)."""
    spec, problem = spec_view(TenantSpec, doc.get("spec"))
    status = section(doc, "status")
    return {
        **_meta_view(doc),
        "namespace": tenant_namespace(doc),
        "displayName": spec.get("displayName") if isinstance(spec, Mapping) else None,
        "spec": spec,
        "status": {"namespace": status.get("namespace"), "clusters": status.get("clusters"),
                   "message": status.get("message"), "problem": problem},
    }
