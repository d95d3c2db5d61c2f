"""The registry's access rules: the tenant-admin ClusterRole, the admission policies and the RBAC the tenant
controller needs, as manifests (plain dicts, ready to apply; `deploy/` installs them), and what that controller
makes of a Tenant: which namespace it may take, how it is marked, who administers it (docs/registry.md). Pure.

Two rules the API server enforces itself, so they hold whoever writes a Tenant (kubectl, the registry API,
a controller) and do not depend on the service running:

- ownership: a Tenant's account, default region, namespace and quota (stacks.registry.OWNERSHIP_FIELDS) decide
  which AWS account its clusters may use, which namespace its admins get and how many clusters it may hold.
  Setting or changing any of them needs `update` on the virtual subresource `hubtenants/ownership`, which only
  cluster administrators hold; otherwise a tenant could squat another's account or namespace through the
  registry, or raise its own quota.
- deletion: a Tenant whose status counts Clusters cannot be deleted. The service keeps `status.clusters`
  (automation/service/tenants.py) and a finalizer backs the rule up for the moments the count lags.

Both are ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, CEL), matching Tenants and nothing else,
with failurePolicy Fail: a rule that cannot be evaluated refuses rather than lets through.

Deletion protection (docs/security.md, "Deletion protection") is two more: the annotation
`hubwright.io/deletion-protection: "true"` makes the API server refuse a DELETE of the object that carries it, a
HubCluster (`cluster_protection_policy`) or a source object, Cluster API's Cluster, Hive's ClusterDeployment or
HyperShift's HostedCluster (`source_protection_policy`: a finalizer cannot stop those projects' own deletion, so the
DELETE itself is refused). Their matchConditions match only objects that carry the annotation with that value, so
every other delete never evaluates them. `kubectl delete --all` is refused object by object; a deletecollection
(the namespace controller's too) stops at the first protected object. Lifting the annotation (whoever may update the
object) lets the delete through.
"""
from __future__ import annotations

import copy
from typing import Any, Mapping

from pydantic import ValidationError

from stacks.names import (CLUSTER, CLUSTERS, TENANT, TENANTS, API_VERSION, BOOTSTRAP_SUBRESOURCE, DEFAULT_REGION_ANNOTATION, FACTS_SUBRESOURCE, GROUP,
                          OWNER_ACCOUNT_ANNOTATION, TENANT_ANNOTATION, TENANT_LABEL, TENANT_OWNERSHIP_SUBRESOURCE,
                          STACKRUNS, GITREPOS, DELETION_PROTECTION_ANNOTATION)
from stacks.registry import OWNERSHIP_FIELDS, Tenant
from stacks.sources.families import SOURCES

Manifest = dict[str, Any]
Rule = dict[str, Any]

RBAC_GROUP = "rbac.authorization.k8s.io"
ADMISSION_API = "admissionregistration.k8s.io/v1"

TENANT_ADMIN_CLUSTERROLE = "hubwright-tenant-admin"  # bound per tenant namespace, never cluster-wide
TENANT_ADMINS_ROLEBINDING = "hubwright-tenant-admins"  # in each tenant's namespace: the Tenant's spec.admins
OWNERSHIP_POLICY = "hubwright-tenant-ownership"
DELETION_POLICY = "hubwright-tenant-deletion"
CLUSTER_PROTECTION_POLICY = "hubwright-cluster-deletion-protection"
SOURCE_PROTECTION_POLICY = "hubwright-source-deletion-protection"


_TENANTS, _OWNERSHIP = TENANT_OWNERSHIP_SUBRESOURCE.split("/")  # "hubtenants", "ownership"


# --------------------------------------------------------------------------- RBAC

def tenant_admin_clusterrole() -> Manifest:
    """What a tenant's admins may do in the tenant's namespace (a RoleBinding there grants it): run its Clusters,
    push their facts and issue their bootstrap tokens through the registry API, and read the namespace's Events and
    HubStackRuns (its stacks' update history; never write one: only the service creates runs, only runners write
    their status, and their inputs Secrets stay in the service's namespace).
    Never `hubclusters/status` (it feeds resolution and belongs to the service) and nothing outside the namespace."""
    return {
        "apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRole",
        "metadata": {"name": TENANT_ADMIN_CLUSTERROLE,
                     "labels": {"app.kubernetes.io/name": "hubwright", "app.kubernetes.io/component": "registry"}},
        "rules": [
            {"apiGroups": [GROUP], "resources": [CLUSTERS],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": [GROUP], "resources": [FACTS_SUBRESOURCE, BOOTSTRAP_SUBRESOURCE], "verbs": ["create"]},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [GROUP], "resources": [STACKRUNS], "verbs": ["get", "list", "watch"]},
            # their repositories (HubGitRepos: the templates make them; the registry's GET .../gitrepo reads them as
            # the caller): read only, as their stack runs; one a tenant wrote would spend the hub's forge token
            {"apiGroups": [GROUP], "resources": [GITREPOS], "verbs": ["get", "list", "watch"]},
        ],
    }


def tenant_controller_rules() -> list[Rule]:
    """The least the tenant controller (automation/service/tenants.py) needs, cluster-wide.

    It grants tenant admins the ClusterRole above through RoleBindings, so it needs `bind` on that one role and
    not its rights (nor `escalate`). It reads Namespaces one at a time (get), creates a tenant's, and patches
    labels and annotations on the ones it adopts (and watches them: an adoption annotation acts at once); it never deletes one. It counts Clusters from a watch, and
    writes each tenant namespace's ResourceQuota (tenant_quota) and each Tenant's reader role (tenant_reader).
    `hubtenants/finalizers` matters where the OwnerReferencesPermissionEnforcement plugin is on.
    """
    return [
        {"apiGroups": [GROUP], "resources": [TENANTS], "verbs": ["get", "list", "watch", "update", "patch"]},
        {"apiGroups": [GROUP], "resources": [f"{TENANTS}/status", f"{TENANTS}/finalizers"], "verbs": ["update", "patch"]},
        {"apiGroups": [GROUP], "resources": [CLUSTERS], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch", "create", "patch"]},
        {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["get", "create", "update", "patch", "delete"]},
        {"apiGroups": [RBAC_GROUP], "resources": ["rolebindings"],
         "verbs": ["get", "create", "update", "patch", "delete"]},
        {"apiGroups": [RBAC_GROUP], "resources": ["clusterroles"], "resourceNames": [TENANT_ADMIN_CLUSTERROLE],
         "verbs": ["bind"]},
        # tenant_reader: each Tenant's admins read that one HubTenant. Roles are created, never changed or deleted
        # (the garbage collector removes them with their Tenant); a binding's subjects are patched. The API
        # server's escalation check holds both to rights the controller has itself (no `escalate`).
        {"apiGroups": [RBAC_GROUP], "resources": ["clusterroles"], "verbs": ["get", "create"]},
        {"apiGroups": [RBAC_GROUP], "resources": ["clusterrolebindings"], "verbs": ["get", "create", "patch"]},
    ]


def gitrepo_controller_rules() -> list[Rule]:
    """The least the Git repository controllers (automation/service/gitrepos.py, gitrepo_templates.py) need,
    cluster-wide: HubGitRepos in every namespace (the templates' are made, changed and deleted; each one's
    finalizer and status written). The forge tokens' Secrets are read in the service's own namespace only: that
    `get` is a namespaced Role's (components/controlplane.py), never cluster-wide."""
    return [
        {"apiGroups": [GROUP], "resources": [GITREPOS],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [GROUP], "resources": [f"{GITREPOS}/status", f"{GITREPOS}/finalizers"],
         "verbs": ["update", "patch"]},
    ]


# --------------------------------------------------------------------------- admission

def validating_policy(name: str, match: dict[str, Any], validations: list[dict[str, Any]],
                      variables: list[dict[str, Any]] | None = None, *, failure: str = "Fail",
                      conditions: list[dict[str, Any]] | None = None) -> Manifest:
    """A ValidatingAdmissionPolicy, failing closed unless `failure` is "Ignore" (a policy that only warns): the one
    envelope of every policy here. `conditions` are its matchConditions (CEL, all true for the policy to apply; one
    that fails to evaluate counts as `failure` says)."""
    spec: dict[str, Any] = {"failurePolicy": failure, "matchConstraints": match}
    if conditions:
        spec["matchConditions"] = conditions
    if variables:
        spec["variables"] = variables
    spec["validations"] = validations
    return {"apiVersion": ADMISSION_API, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
            "spec": spec}


def namespaced(resource: str, *operations: str) -> dict[str, Any]:
    """Match one namespaced resource of ours (not its subresources), whatever the version."""
    return {"resourceRules": [{"apiGroups": [GROUP], "apiVersions": ["*"], "operations": list(operations),
                               "resources": [resource], "scope": "Namespaced"}]}


def _tenants(*operations: str) -> dict[str, Any]:
    """Match Tenants only (not their status subresource, which the service writes), whatever the version."""
    return {"resourceRules": [{"apiGroups": [GROUP], "apiVersions": ["*"], "operations": list(operations),
                               "resources": [_TENANTS], "scope": "Cluster"}]}


def _changed(field: str) -> str:
    """CEL: ['field'] when spec.<field> (a path: quota.maxClusters) is set on create, or set, changed or removed on
    update; else []. Unset reads as '' (a string field) or -1 (a number, which CEL will not compare to '')."""
    path = ".?".join(field.split("."))
    if field in _OBJECTS:  # compared whole, as optionals: set, changed or removed
        old = f"(request.operation == 'CREATE' ? optional.none() : oldObject.?spec.?{path})"
        return f"(object.?spec.?{path} != {old} ? ['{field}'] : [])"
    empty = "-1" if field in _NUMBERS else "''"
    new = f"object.?spec.?{path}.orValue({empty})"
    old = f"(request.operation == 'CREATE' ? {empty} : oldObject.?spec.?{path}.orValue({empty}))"
    return f"({new} != {old} ? ['{field}'] : [])"


_NUMBERS = ("quota.maxClusters",)
_OBJECTS = ("gitRepoTemplate", "clusterTemplate")


def tenant_ownership_policy() -> Manifest:
    """Setting or changing spec.accountID, spec.defaultRegion or spec.namespace needs `update` on
    hubtenants/ownership for that Tenant (authorizer check: RBAC decides, so a role can grant it per Tenant name)."""
    changed = " + ".join(_changed(field) for field in OWNERSHIP_FIELDS)
    right = (f"authorizer.group('{GROUP}').resource('{_TENANTS}').subresource('{_OWNERSHIP}')"
             ".name(object.metadata.name).check('update')")
    message = ("'setting or changing spec.' + variables.changed.join(', spec.') + ' of Tenant ' + object.metadata.name"
               f" + ' needs the right to update {TENANT_OWNERSHIP_SUBRESOURCE} in {GROUP}"
               " (cluster administrators have it): ask one to set it'")
    return validating_policy(
        OWNERSHIP_POLICY, _tenants("CREATE", "UPDATE"),
        [{"expression": "size(variables.changed) == 0 || variables.ownership.allowed()",
          "messageExpression": message, "reason": "Forbidden"}],
        variables=[{"name": "changed", "expression": changed}, {"name": "ownership", "expression": right}])


def tenant_deletion_policy() -> Manifest:
    """A Tenant whose status.clusters is above zero cannot be deleted: its clusters go first."""
    count = "oldObject.?status.?clusters.orValue(0)"
    namespace = "oldObject.?status.?namespace.orValue(oldObject.metadata.name)"
    message = (f"'Tenant ' + oldObject.metadata.name + ' still has ' + string({count}) + ' cluster(s) in namespace '"
               f" + {namespace} + ': delete its clusters first'")
    return validating_policy(DELETION_POLICY, _tenants("DELETE"), [
        {"expression": f"{count} <= 0", "messageExpression": message, "reason": "Forbidden"}])


# CEL, on a DELETE (`object` is null there, the stored object is `oldObject`): the object carries the annotation
# with the value "true". Optionals throughout: an object without annotations is not protected, never an error (an
# error in a matchCondition would refuse every delete, failurePolicy Fail).
PROTECTED = (f"oldObject != null && oldObject.metadata.?annotations[?'{DELETION_PROTECTION_ANNOTATION}']"
             ".orValue('') == 'true'")
_LIFT = f"{DELETION_PROTECTION_ANNOTATION}-"  # kubectl annotate's removal of the annotation
_PROTECTED_BY = f"' is protected from deletion by its annotation {DELETION_PROTECTION_ANNOTATION}: \"true\".'"


def _protection(name: str, match: dict[str, Any], message: str, variables: list[dict[str, Any]] | None = None
                ) -> Manifest:
    """A policy that refuses a DELETE of the objects `match` names that carry the annotation, and matches no other
    (matchConditions): every unprotected delete goes as before, whatever the policy's CEL."""
    return validating_policy(
        name, match, [{"expression": f"!({PROTECTED})", "messageExpression": message, "reason": "Forbidden",
                       "message": f"the object is protected from deletion by its annotation "
                                  f"{DELETION_PROTECTION_ANNOTATION}: remove the annotation first"}],
        variables, conditions=[{"name": "deletion-protected", "expression": PROTECTED}])


def cluster_protection_policy() -> Manifest:
    """A HubCluster annotated `hubwright.io/deletion-protection: "true"` cannot be deleted: kubectl delete, a
    client's (a GitOps prune's) delete, a deletecollection item, the namespace controller and the garbage collector
    are all refused until the annotation is removed. The message says how; for a HubCluster a source keeps (its
    controller ownerReference), the annotation is the source's (copied by the sources controller), so the message
    names the source and lifts it there, or on the HubCluster once the source is gone (the garbage collector's
    delete of a HubCluster whose source went is refused too)."""
    meta = "oldObject.metadata"
    source = "variables.source[0]"
    lift_here = f"(' kubectl annotate {CLUSTER.kind.lower()} -n ' + {meta}.namespace + ' ' + {meta}.name + ' {_LIFT}')"
    lift_source = (f"' It is copied from its source ' + {source}.kind + ' ' + {meta}.namespace + '/' + {source}.name"
                   f" + ', so lift it there: kubectl annotate ' + variables.kinds[?({source}.kind + '.' + "
                   f"{source}.apiVersion.split('/')[0])].orValue({source}.kind.lowerAscii() + '.' + "
                   f"{source}.apiVersion.split('/')[0]) + ' -n ' + {meta}.namespace + ' ' + {source}.name + "
                   f"' {_LIFT} (once the source is gone, here:' + {lift_here} + ')'")
    message = (f"'HubCluster ' + {meta}.namespace + '/' + {meta}.name + {_PROTECTED_BY} + "
               f"(size(variables.source) == 0 ? ' To delete it, lift the protection first:' + {lift_here} : "
               f"{lift_source})")
    kinds = ", ".join(f"'{k.qualified}': '{k.plural}.{k.group}'" for k in SOURCES)
    return _protection(CLUSTER_PROTECTION_POLICY, namespaced(CLUSTERS, "DELETE"), message, [
        {"name": "source", "expression": f"{meta}.?ownerReferences.orValue([])"
                                         ".filter(r, r.?controller.orValue(false))"},
        {"name": "kinds", "expression": f"{{{kinds}}}"}])


def source_protection_policy() -> Manifest:
    """A source object (Cluster API's Cluster, Hive's ClusterDeployment, HyperShift's HostedCluster) annotated
    `hubwright.io/deletion-protection: "true"` cannot be deleted. Our finalizer on a source cannot stop its
    project's own deletion, which starts on the deletion timestamp; so the DELETE itself is refused. The message
    names the kind, the object and how to lift the protection."""
    rules = [{"apiGroups": [kind.group], "apiVersions": ["*"], "operations": ["DELETE"], "resources": [kind.plural],
              "scope": "Namespaced"} for kind in SOURCES]
    meta = "oldObject.metadata"
    resource = "request.resource.resource + '.' + request.resource.group"
    message = (f"request.kind.kind + '.' + request.kind.group + ' ' + {meta}.namespace + '/' + {meta}.name + "
               f"{_PROTECTED_BY} + ' To delete it, lift the protection first: kubectl annotate ' + {resource} + "
               f"' -n ' + {meta}.namespace + ' ' + {meta}.name + ' {_LIFT}'")
    return _protection(SOURCE_PROTECTION_POLICY, {"resourceRules": rules}, message)


def policy_binding(policy: Manifest) -> Manifest:
    """The binding that makes `policy` deny (same name)."""
    name = policy["metadata"]["name"]
    return {
        "apiVersion": ADMISSION_API, "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }


def admission_manifests() -> list[Manifest]:
    """Each policy followed by its binding (apply in this order), as dicts (a fresh copy on every call)."""
    manifests: list[Manifest] = []
    for policy in (tenant_ownership_policy(), tenant_deletion_policy(), cluster_protection_policy(),
                   source_protection_policy()):
        manifests += [policy, policy_binding(policy)]
    return copy.deepcopy(manifests)


# --------------------------------------------------------------------------- a tenant's namespace and RoleBinding
# What the tenant controller (automation/service/tenants.py) makes of a Tenant, decided here so it can be read
# (and tested) without a server.

MESSAGE_MAX = 1024  # TenantStatus.message

def parse_tenant(doc: Mapping[str, Any]) -> tuple[Tenant | None, str | None]:
    """The Tenant of a document, or None and why not ("spec.admins[0]: ..."): the controller changes nothing for
    an invalid Tenant and says so in its status.message."""
    body = {key: doc[key] for key in ("apiVersion", "kind", "metadata", "spec") if key in doc}
    try:
        return Tenant.model_validate(body), None
    except ValidationError as exc:
        return None, "; ".join(": ".join(filter(None, (_path(err["loc"]), err["msg"].removeprefix("Value error, "))))
                               for err in exc.errors())[:MESSAGE_MAX]


def _path(loc: tuple) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path  # "" for the whole object: its message then stands alone


def adoption_refusal(tenant: Tenant, namespace: Mapping[str, Any] | None) -> str | None:
    """Why `tenant` may not take the existing `namespace` (a Namespace document; None: it does not exist yet),
    or None when it may.

    A namespace is this Tenant's when it is labelled for it (made or adopted before), when the hub administrator
    annotated it hubwright.io/tenant=<tenant>, or when the Tenant names it in spec.namespace, which only a
    cluster administrator can write (the ownership policy). Never one labelled or annotated for another Tenant.
    A namespace merely named like the Tenant is not enough: anyone who may create Tenants could otherwise take
    an existing namespace (kube-system, another team's) and its owner account by choosing the Tenant's name.
    """
    if namespace is None:
        return None
    name, ns = tenant.metadata.name, tenant.namespace
    meta = namespace.get("metadata") or {}
    label = (meta.get("labels") or {}).get(TENANT_LABEL)
    marked = (meta.get("annotations") or {}).get(TENANT_ANNOTATION)
    if label and label != name:
        return f"namespace {ns} belongs to Tenant {label} (label {TENANT_LABEL}); not adopted"
    if marked and marked != name:
        return f"namespace {ns} is set aside for Tenant {marked} (annotation {TENANT_ANNOTATION}); not adopted"
    if meta.get("deletionTimestamp"):
        return f"namespace {ns} is being deleted; not adopted"
    if label == name or marked == name or tenant.spec.namespace == ns:
        return None
    return (f"namespace {ns} exists and is not this Tenant's: a cluster administrator adopts it by setting "
            f"spec.namespace or by annotating it {TENANT_ANNOTATION}={name}")


# Condition reasons of a refused Tenant (its status.conditions: Stalled; nothing is applied).
HUB_ACCOUNT = "HubAccount"
HUB_ACCOUNT_UNKNOWN = "HubAccountUnknown"
OWNER_ACCOUNT_DIFFERS = "OwnerAccountDiffers"
NOT_ADOPTED = "NamespaceNotAdopted"


def tenant_refusal(tenant: Tenant, namespace: Mapping[str, Any] | None, hub_account: str | None
                   ) -> tuple[str, str] | None:
    """Why the controller applies nothing of `tenant` (reason, message), or None when it may: the one rule of what
    a Tenant may take. Never silently:

    - the hub account as a tenant's owner account: its clusters would run in, and its namespace could reach, the
      hub's own account (only the hub administrator annotates a namespace with it). Unknown (no valid HubConfig):
      a Tenant that names an account waits, since it cannot be told apart;
    - adopting a namespace whose owner account (hubwright.io/owner-account-id, the hub administrator's) is not
      the Tenant's: the annotation would be rewritten and every cluster there would move or be refused;
    - and what adoption_refusal refuses.
    """
    account = tenant.spec.account_id
    if account is not None and hub_account is None:
        return HUB_ACCOUNT_UNKNOWN, (f"spec.accountID {account} cannot be checked against the hub account yet "
                                     "(no valid HubConfig): nothing is applied until it can")
    if account is not None and account == hub_account:
        return HUB_ACCOUNT, (f"spec.accountID {account} is the hub account: a Tenant never owns it (the hub "
                             f"administrator may annotate a namespace {OWNER_ACCOUNT_ANNOTATION}={account} by hand)")
    refusal = adoption_refusal(tenant, namespace)
    if refusal is not None:
        return NOT_ADOPTED, refusal
    meta = (namespace or {}).get("metadata") or {}
    owner = (meta.get("annotations") or {}).get(OWNER_ACCOUNT_ANNOTATION)
    adopting = namespace is not None and (meta.get("labels") or {}).get(TENANT_LABEL) != tenant.metadata.name
    if adopting and account is not None and owner is not None and owner != account:
        return OWNER_ACCOUNT_DIFFERS, (
            f"namespace {tenant.namespace} is owned by account {owner} ({OWNER_ACCOUNT_ANNOTATION}) and the Tenant "
            f"says {account}: not adopted, nothing changed; a cluster administrator makes them agree")
    return None


def namespace_metadata(tenant: Tenant) -> dict[str, dict[str, str]]:
    """The labels and annotations the tenant's namespace carries: the tenant's name, its owner account and
    default region when the Tenant sets them (when it does not, what the namespace has stays)."""
    name, spec = tenant.metadata.name, tenant.spec
    annotations = {TENANT_ANNOTATION: name}
    if spec.account_id:
        annotations[OWNER_ACCOUNT_ANNOTATION] = spec.account_id
    if spec.default_region:
        annotations[DEFAULT_REGION_ANNOTATION] = spec.default_region
    return {"labels": {TENANT_LABEL: name}, "annotations": annotations}


def released_metadata() -> dict[str, dict[str, None]]:
    """A strategic-merge patch that lets a namespace go: no tenant label or annotation, so a new Tenant of the
    same name cannot take it back without a cluster administrator. The owner-account and default-region
    annotations stay: the namespace and what the hub administrator put in it outlive the Tenant."""
    return {"labels": {TENANT_LABEL: None}, "annotations": {TENANT_ANNOTATION: None}}


def admins_rolebinding(tenant: Tenant) -> Manifest | None:
    """The RoleBinding granting the tenant's admins the tenant-admin ClusterRole in its namespace; None when the
    Tenant names no admins (then there is none)."""
    if not tenant.spec.admins:
        return None
    subjects = [{"kind": s.kind, "name": s.name, "namespace": s.namespace} if s.kind == "ServiceAccount"
                else {"kind": s.kind, "name": s.name, "apiGroup": RBAC_GROUP} for s in tenant.spec.admins]
    return {
        "apiVersion": f"{RBAC_GROUP}/v1", "kind": "RoleBinding",
        "metadata": {"name": TENANT_ADMINS_ROLEBINDING, "namespace": tenant.namespace,
                     "labels": {TENANT_LABEL: tenant.metadata.name}},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": TENANT_ADMIN_CLUSTERROLE},
        "subjects": subjects,
    }


def tenant_reader(tenant: Tenant, uid: str) -> tuple[Manifest, Manifest]:
    """The ClusterRole and ClusterRoleBinding that let the tenant's admins read their own HubTenant: get and watch
    on that one object by name (HubTenant is cluster-scoped, so the namespace's RoleBinding cannot), never another
    Tenant, the list, a write or the status subresource. Named `hubwright-tenant-admin:<tenant>` and owned by the
    Tenant (uid: its metadata.uid): the garbage collector removes them with it, so the controller never deletes a
    ClusterRole or a binding. The role depends on the name alone (immutable): it is created, never updated; the
    binding's subjects are spec.admins (none: a binding that grants nobody)."""
    binding = admins_rolebinding(tenant)
    name = f"{TENANT_ADMIN_CLUSTERROLE}:{tenant.metadata.name}"
    meta = {"name": name, "labels": {TENANT_LABEL: tenant.metadata.name},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": TENANT.kind, "name": tenant.metadata.name,
                                 "uid": uid, "controller": True}]}
    role = {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRole", "metadata": meta,
            "rules": [{"apiGroups": [GROUP], "resources": [TENANTS], "resourceNames": [tenant.metadata.name],
                       "verbs": ["get", "watch"]}]}
    return role, {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRoleBinding", "metadata": meta,
                  "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
                  "subjects": binding["subjects"] if binding is not None else []}


TENANT_QUOTA = "hubwright-tenant-quota"  # the ResourceQuota in each tenant's namespace
CLUSTER_COUNT = f"count/{CLUSTERS}.{GROUP}"  # object count quota of Clusters (registered-only ones too)


def tenant_quota(tenant: Tenant, uid: str) -> Manifest | None:
    """The ResourceQuota the tenant's namespace carries from spec.quota, owned by the Tenant (uid: its
    metadata.uid), so it goes with it; None when the Tenant sets no quota (then there is none). The API server
    refuses a Cluster beyond it, whoever creates it; kube-controller-manager keeps its usage."""
    limit = tenant.spec.quota.max_clusters if tenant.spec.quota is not None else None
    if limit is None:
        return None
    return {
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": TENANT_QUOTA, "namespace": tenant.namespace,
                     "labels": {TENANT_LABEL: tenant.metadata.name},
                     "ownerReferences": [{"apiVersion": API_VERSION, "kind": TENANT.kind, "name": tenant.metadata.name,
                                          "uid": uid, "controller": True}]},
        "spec": {"hard": {CLUSTER_COUNT: str(limit)}},
    }
