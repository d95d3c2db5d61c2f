"""The CustomResourceDefinitions, generated from the pydantic models so they never drift.

`crd_manifests()` returns `hubclusters.hubwright.io` (namespaced) and
`hubconfigs.hubwright.io` (cluster-scoped: one hub configuration serves the
whole fleet and holds the role map, so tenants with rights in their namespace
cannot edit it). Both are apiextensions.k8s.io/v1 dicts, ready to apply.

The pydantic JSON schema is made *structural* for Kubernetes: `$ref`s inlined,
`Optional[X]` (anyOf X|null) turned into `nullable`, `const` into `enum`,
`additionalProperties: false` dropped (the server prunes unknown fields; kubectl's
strict field validation reports them), free maps marked
`x-kubernetes-preserve-unknown-fields`. Checks that pydantic runs as validators
(account IDs, ARNs, regions, CIDRs...) are carried over as `pattern`/`enum` where
they can be, so the API server refuses what the service would refuse; checks that
need several fields or objects stay in the service (reported as InvalidSpec).
"""
from __future__ import annotations

import copy
import inspect
import json
import re
from typing import Any, Callable

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema

from stacks.model import fields
from stacks.model.cluster import ClusterSpec
from stacks.model.hub import HubConfigSpec
from stacks.registry import TenantSpec, TenantStatus
from stacks.runs.model import StackRunSpec, StackRunStatus
from stacks.gitrepos.model import GitRepoSpec, GitRepoStatus
from stacks.names import CATEGORY, CLUSTER, GITREPO, RETAINED, HUBCONFIG, STACKRUN, TENANT, GROUP, VERSION, KindNames, LABEL_MAX, API_URL_PATTERN, BIND_PATTERN, HOST_PORT_PATTERN, STACK_NAME_MAX
from stacks.retention import RetainedStackSpec
from stacks.status import ClusterStatus, HubStatus


# Validators of stacks.model.fields whose rule can be written as a schema keyword.
# (Regex-built validators are found by the compiled pattern in their closure.)
_VALIDATOR_SCHEMAS: dict[str, dict[str, Any]] = {
    # A CEL rule, not a `pattern`: kubectl then prints the model's words and the value, not the raw regex.
    "_region": {"x-kubernetes-validations": [{
        "rule": f"self.matches({json.dumps(fields.REGION_PATTERN)})",
        "message": fields.NOT_A_REGION}]},  # the API server puts the value before it
    "_vpc_cidr": {"pattern": r"^[0-9]{1,3}(\.[0-9]{1,3}){3}/(1[6-9]|2[0-8])$"},
    "_source_cidr": {"pattern": r"^[0-9]{1,3}(\.[0-9]{1,3}){3}/([1-9]|[12][0-9]|3[0-2])$"},
    "_api_url": {"pattern": API_URL_PATTERN},
    "_domain": {"pattern": r"^[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?$"},
    "_host_port": {"pattern": HOST_PORT_PATTERN},
    "_bind": {"pattern": BIND_PATTERN},
    "backend_rule": {"pattern": r"^([0-9A-Fa-f:.]{2,45}/[0-9]{1,3}|[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?)$"},
}


def _validator_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    for name, extra in _VALIDATOR_SCHEMAS.items():
        if getattr(fields, name, None) is fn:
            return dict(extra)
    try:
        nonlocals = inspect.getclosurevars(fn).nonlocals
    except TypeError:
        return {}
    compiled = nonlocals.get("compiled")
    if isinstance(compiled, re.Pattern):
        return {"pattern": f"^(?:{compiled.pattern})$"}  # pydantic fullmatches; Kubernetes searches
    return {}


class _KubeSchema(GenerateJsonSchema):
    """pydantic's generator, plus the rules of AfterValidators that map to schema keywords."""

    def function_after_schema(self, schema):
        out = super().function_after_schema(schema)
        fn = schema.get("function", {}).get("function")
        return {**out, **_validator_schema(fn)} if fn is not None else out


def _resolve_refs(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**_resolve_refs(target, defs), **{k: v for k, v in node.items() if k != "$ref"}}
            return _resolve_refs(merged, defs)
        return {k: _resolve_refs(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve_refs(v, defs) for v in node]
    return node


def _structural(node: dict[str, Any]) -> dict[str, Any]:
    """One pydantic schema node → a structural Kubernetes schema node."""
    node = dict(node)
    for key in ("title", "$defs", "propertyNames", "examples"):
        node.pop(key, None)

    variants = node.pop("anyOf", None) or node.pop("oneOf", None)
    if variants is not None:
        kinds = [v for v in variants if v.get("type") != "null"]
        nullable = len(kinds) < len(variants)
        if len(kinds) != 1:
            raise ValueError(f"no structural schema for a union of {kinds}")
        outer = {k: v for k, v in node.items() if k in ("description", "default")}
        node = {**_structural(kinds[0]), **outer}
        if nullable:
            node["nullable"] = True

    if "const" in node:
        node["enum"] = [node.pop("const")]
    if node.get("default", 0) is None:
        del node["default"]  # the server would prune it; absence means the same
    if "patternProperties" in node:  # dict keys with a pattern: Kubernetes cannot check keys
        values = list(node.pop("patternProperties").values())
        if len(values) == 1:
            node["additionalProperties"] = values[0]
    if node.get("type") == "object":
        if "properties" in node:
            node["properties"] = {k: _structural(v) for k, v in node["properties"].items()}
            node.pop("additionalProperties", None)
        elif isinstance(node.get("additionalProperties"), dict):
            node["additionalProperties"] = _structural(node["additionalProperties"])
        else:  # a free map: dict[str, Any]
            node.pop("additionalProperties", None)
            node["x-kubernetes-preserve-unknown-fields"] = True
    if node.get("type") == "array" and "items" in node:
        node["items"] = _structural(node["items"])
    return node


def schema_of(model_cls: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a model, camelCase field names."""
    raw = model_cls.model_json_schema(by_alias=True, mode="validation", schema_generator=_KubeSchema)
    defs = raw.pop("$defs", {})
    return _structural(_resolve_refs(raw, defs))


# A Cluster's stack is "<namespace>.<name>" and Pulumi allows 100 characters: the API server can check the
# name's share of that (a namespace has at least one character); stacks.resolve checks the whole.
CLUSTER_NAME_MAX = STACK_NAME_MAX - 2


# Every field has a description (`kubectl explain`): the models' Field(description=...) and docstrings, and these
# for the envelope every Kubernetes object shares (the wording of the API server's own types). The API server
# refuses anything but a type in `metadata` (and name's bounds): it describes metadata itself (ObjectMeta).
API_VERSION_DESCRIPTION = ("APIVersion defines the versioned schema of this representation of an object: "
                           f"{GROUP}/{VERSION}.")
KIND_DESCRIPTION = "Kind is a string value representing the REST resource this object represents."


def _resource_schema(spec: type[BaseModel], status: type[BaseModel] | None, description: str,
                     metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {
        "apiVersion": {"type": "string", "description": API_VERSION_DESCRIPTION},
        "kind": {"type": "string", "description": KIND_DESCRIPTION},
        "metadata": {"type": "object", **(metadata or {})},
        "spec": schema_of(spec),
    }
    if status is not None:
        props["status"] = schema_of(status)
    return {"type": "object", "description": description, "required": ["spec"], "properties": props}


def _crd(names: KindNames, scope: str, schema: dict[str, Any], *, columns: list[dict[str, Any]],
         status: bool) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "additionalPrinterColumns": columns,
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{names.plural}.{GROUP}", "labels": {"app.kubernetes.io/part-of": CATEGORY}},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"kind": names.kind, "listKind": f"{names.kind}List", "plural": names.plural,
                      "singular": names.singular, "shortNames": list(names.short), "categories": [CATEGORY]},
            "versions": [version],
        },
    }


def _ready(field: str) -> str:
    return f'.status.conditions[?(@.type=="Ready")].{field}'


CLUSTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Account", "type": "string", "jsonPath": ".status.account"},
    {"name": "Region", "type": "string", "jsonPath": ".status.region"},
    {"name": "Ready", "type": "string", "jsonPath": _ready("status")},
    {"name": "Reason", "type": "string", "jsonPath": _ready("reason")},
    {"name": "Endpoint", "type": "string", "jsonPath": ".status.outputs.endpoint", "priority": 1},
    {"name": "Last-Update", "type": "string", "jsonPath": ".status.lastUpdate.result", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

HUB_COLUMNS = [
    {"name": "Account", "type": "string", "jsonPath": ".spec.accountID"},
    {"name": "Region", "type": "string", "jsonPath": ".spec.region"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


# The AWS part of a Cluster (stacks.model.cluster.AWS_FIELDS): all or none, and never taken away once given.
CLUSTER_SPEC_RULES = [
    {"rule": "has(self.accountID) == has(self.network) && has(self.infraID) == has(self.network)"
             " && has(self.apiURL) == has(self.network)",
     "message": "accountID, infraID, apiURL and network are given together, or none of them (registered only)"},
    {"rule": "!has(oldSelf.network) || has(self.network)",
     "message": "the AWS part (accountID, infraID, apiURL, network) cannot be removed: delete the Cluster to "
                "destroy its stack"},
]


def cluster_crd() -> dict[str, Any]:
    schema = _resource_schema(ClusterSpec, ClusterStatus,
                              "A Kubernetes cluster on AWS that hubwright connects (one Pulumi stack each).",
                              {"properties": {"name": {"type": "string", "maxLength": CLUSTER_NAME_MAX}}})
    schema["properties"]["spec"]["x-kubernetes-validations"] = copy.deepcopy(CLUSTER_SPEC_RULES)
    return _crd(CLUSTER, "Namespaced", schema, columns=CLUSTER_COLUMNS, status=True)


TENANT_COLUMNS = [
    {"name": "Display-Name", "type": "string", "jsonPath": ".spec.displayName"},
    {"name": "Account", "type": "string", "jsonPath": ".spec.accountID"},
    {"name": "Namespace", "type": "string", "jsonPath": ".status.namespace"},
    {"name": "Clusters", "type": "integer", "jsonPath": ".status.clusters"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def tenant_crd() -> dict[str, Any]:
    schema = _resource_schema(TenantSpec, TenantStatus,
                              "A tenant of the fleet: its namespace, owner account, facts and admins (cluster-scoped).",
                              {"properties": {"name": {"type": "string", "maxLength": LABEL_MAX}}})
    schema["required"] = []  # a Tenant may be all defaults
    return _crd(TENANT, "Cluster", schema, columns=TENANT_COLUMNS, status=True)


def hubconfig_crd() -> dict[str, Any]:
    schema = _resource_schema(HubConfigSpec, HubStatus,
                              "The hub account, its endpoint VPCs, role map and mesh settings (cluster-scoped).")
    return _crd(HUBCONFIG, "Cluster", schema, columns=HUB_COLUMNS, status=True)


STACKRUN_COLUMNS: list[dict[str, Any]] = [
    {"name": "Cluster", "type": "string", "jsonPath": ".spec.cluster"},
    {"name": "Operation", "type": "string", "jsonPath": ".spec.operation"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Changes", "type": "string", "jsonPath": ".status.summary"},
    {"name": "Cause", "type": "string", "jsonPath": ".spec.cause.kind"},
    {"name": "Reason", "type": "string", "jsonPath": ".status.reason", "priority": 1},
    {"name": "Why", "type": "string", "jsonPath": ".spec.cause.message", "priority": 1},
    {"name": "Runner", "type": "string", "jsonPath": ".status.runner", "priority": 1},
    {"name": "Refresh", "type": "boolean", "jsonPath": ".spec.refresh", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def stackrun_crd() -> dict[str, Any]:
    """HubStackRun (namespaced, beside its cluster): one engine operation on one stack, executed by a runner
    (stacks/runs/). `kubectl get hubstackruns -n <tenant>` is the update history of the tenant's stacks."""
    schema = _resource_schema(StackRunSpec, StackRunStatus,
                              "One Pulumi operation on one stack, run by a runner: the stack's update history.")
    return _crd(STACKRUN, "Namespaced", schema, columns=STACKRUN_COLUMNS, status=True)


GITREPO_COLUMNS: list[dict[str, Any]] = [
    {"name": "Path", "type": "string", "jsonPath": ".spec.path"},
    {"name": "Forge", "type": "string", "jsonPath": ".spec.forge"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Ready", "type": "string", "jsonPath": _ready("status")},
    {"name": "Reason", "type": "string", "jsonPath": _ready("reason"), "priority": 1},
    {"name": "SSH-URL", "type": "string", "jsonPath": ".status.sshURL", "priority": 1},
    {"name": "Deletion", "type": "string", "jsonPath": ".spec.deletionPolicy", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def gitrepo_crd() -> dict[str, Any]:
    """HubGitRepo (namespaced): one repository on a forge, kept matching its spec (stacks/gitrepos/)."""
    schema = _resource_schema(GitRepoSpec, GitRepoStatus,
                              "A Git repository on a forge (Gitea, GitLab, GitHub) and its deploy keys: a tenant's "
                              "repository or a cluster's catalog.")
    return _crd(GITREPO, "Namespaced", schema, columns=GITREPO_COLUMNS, status=True)


RETAINED_COLUMNS: list[dict[str, Any]] = [
    {"name": "Namespace", "type": "string", "jsonPath": ".spec.namespace"},
    {"name": "Cluster", "type": "string", "jsonPath": ".spec.cluster"},
    {"name": "Account", "type": "string", "jsonPath": ".spec.accountID"},
    {"name": "Region", "type": "string", "jsonPath": ".spec.region"},
    {"name": "VPC", "type": "string", "jsonPath": ".spec.claims.vpcID", "priority": 1},
    {"name": "Release", "type": "string", "jsonPath": ".spec.release"},
    {"name": "Retained", "type": "date", "jsonPath": ".spec.retainedAt"},
]


def retained_crd() -> dict[str, Any]:
    """HubRetainedStack (cluster-scoped, named after the stack): a HubCluster's stack kept by deletionPolicy Retain,
    holding its claims and slot until the hub administrator releases it (stacks/retention.py)."""
    schema = _resource_schema(RetainedStackSpec, None,
                              "A stack kept after its HubCluster was deleted with deletionPolicy Retain: what it "
                              "holds, until the hub administrator releases it (spec.release) or a HubCluster of "
                              "the same name in the same namespace adopts it.")
    return _crd(RETAINED, "Cluster", schema, columns=RETAINED_COLUMNS, status=False)


def crd_manifests() -> list[dict[str, Any]]:
    """The CRDs (Cluster, HubConfig, Tenant, StackRun, GitRepo, RetainedStack), as dicts (a fresh copy on every
    call)."""
    return copy.deepcopy([cluster_crd(), hubconfig_crd(), tenant_crd(), stackrun_crd(), gitrepo_crd(),
                          retained_crd()])
