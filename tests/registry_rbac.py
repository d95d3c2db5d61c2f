"""Test helpers for the registry's RBAC and admission policies on the shared envtest kube-apiserver.

`install_registry_rules` applies stacks.admission's ClusterRole and policies idempotently (create, or replace
what is there), so every module that needs them can call it; the policies match Tenants only, so the other
tests on the shared server are not affected. `hold_to_agents` gives a test's registry ServiceAccount the policy
the install gives the registry's (it matches that one user). Users are ServiceAccounts with TokenRequest tokens:
the test server has no controller-manager, but TokenRequest works.
"""
from __future__ import annotations

import time
import uuid
from typing import Any, Callable, Iterable

from kubernetes import client
from kubernetes.client.rest import ApiException

from doubles.envtest import delete_tenant  # noqa: F401 - the tests' helper, shared with bench/
from stacks.admission import admission_manifests, tenant_admin_clusterrole
from stacks.agent_admission import agent_policy
from stacks.names import GROUP, VERSION

RBAC = "rbac.authorization.k8s.io"


def _apply(create: Callable[[Any], Any], read: Callable[[str], Any], replace: Callable[[str, Any], Any],
           body: dict) -> None:
    try:
        create(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        current = read(body["metadata"]["name"])
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": current.metadata.resource_version}}
        replace(body["metadata"]["name"], body)


def install_registry_rules(api_client: client.ApiClient) -> None:
    """The tenant-admin ClusterRole and the Tenant admission policies with their bindings, then wait until the
    policies are in force (a VAP takes effect a moment after it is written)."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    _apply(rbac.create_cluster_role, rbac.read_cluster_role, rbac.replace_cluster_role, tenant_admin_clusterrole())
    admission = client.AdmissionregistrationV1Api(api_client)
    for manifest in admission_manifests():
        if manifest["kind"] == "ValidatingAdmissionPolicy":
            _apply(admission.create_validating_admission_policy, admission.read_validating_admission_policy,
                   admission.replace_validating_admission_policy, manifest)
        else:
            _apply(admission.create_validating_admission_policy_binding,
                   admission.read_validating_admission_policy_binding,
                   admission.replace_validating_admission_policy_binding, manifest)
    _wait_for_policies(api_client)


def _wait_for_policies(api_client: client.ApiClient, timeout: float = 30.0) -> None:
    """Probe with a throwaway Tenant whose status counts a cluster: once deleting it is refused, the deletion
    policy is loaded (the ownership policy was written before it, in the same sync)."""
    custom = client.CustomObjectsApi(api_client)
    name = f"probe-{uuid.uuid4().hex[:8]}"
    custom.create_cluster_custom_object(GROUP, VERSION, "hubtenants", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "HubTenant", "metadata": {"name": name}})
    try:
        custom.patch_cluster_custom_object_status(GROUP, VERSION, "hubtenants", name, {"status": {"clusters": 1}})
        deadline = time.monotonic() + timeout
        while True:
            try:
                custom.delete_cluster_custom_object(GROUP, VERSION, "hubtenants", name, dry_run="All")
            except ApiException as exc:
                if exc.status == 403:
                    break
                raise
            if time.monotonic() > deadline:
                raise TimeoutError("the Tenant admission policies did not take effect")
            time.sleep(0.2)
    finally:
        custom.patch_cluster_custom_object_status(GROUP, VERSION, "hubtenants", name, {"status": {"clusters": 0}})
        delete_tenant(api_client, name)


def hold_to_agents(admin: client.ApiClient, registry: client.ApiClient, namespace: str, name: str,
                   timeout: float = 30.0) -> Callable[[], None]:
    """The admission policy the install gives the registry's ServiceAccount (stacks.agent_admission), for the
    ServiceAccount `namespace/name` whose client is `registry`, in force when this returns (its names end in
    `-<namespace>`: unique on the shared server). Returns the call that removes it."""
    admission = client.AdmissionregistrationV1Api(admin)
    policy, binding = agent_policy(namespace, name)
    policy["metadata"]["name"] = binding["metadata"]["name"] = binding["spec"]["policyName"] = \
        f"{policy['metadata']['name']}-{namespace}"
    _apply(admission.create_validating_admission_policy, admission.read_validating_admission_policy,
           admission.replace_validating_admission_policy, policy)
    _apply(admission.create_validating_admission_policy_binding, admission.read_validating_admission_policy_binding,
           admission.replace_validating_admission_policy_binding, binding)
    # in force once a ServiceAccount of no agent's name, in its own namespace, is refused by it
    until_refused(lambda: client.CoreV1Api(registry).create_namespaced_service_account(
        namespace, {"metadata": {"name": "probe"}}, dry_run="All"), policy["metadata"]["name"], timeout)
    made = policy["metadata"]["name"]
    return lambda: undo_all([lambda: admission.delete_validating_admission_policy_binding(made),
                             lambda: admission.delete_validating_admission_policy(made)])


def undo_all(calls: Iterable[Callable[[], Any]]) -> None:
    """Run each clean-up call; what is gone already (404) is fine, any other error is raised."""
    for call in calls:
        try:
            call()
        except ApiException as exc:
            if exc.status != 404:
                raise


def service_account_token(api_client: client.ApiClient, namespace: str, name: str) -> str:
    """A ServiceAccount (created if missing) and a short-lived token for it (TokenRequest)."""
    core = client.CoreV1Api(api_client)
    try:
        core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    request = core.create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": 3600}})
    return request.status.token


def bind_cluster_role(api_client: client.ApiClient, name: str, rules: list[dict], subjects: list[dict]) -> None:
    """A ClusterRole of `rules` bound cluster-wide to `subjects` (both named `name`)."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})
    rbac.create_cluster_role_binding({"metadata": {"name": name},
                                      "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
                                      "subjects": subjects})


def unbind_cluster_role(api_client: client.ApiClient, name: str) -> None:
    rbac = client.RbacAuthorizationV1Api(api_client)
    for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
        try:
            delete(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def sa_subject(namespace: str, name: str) -> dict:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def eventually(call: Callable[[], Any], timeout: float = 10.0, *, refused: int = 403) -> Any:
    """`call()` once RBAC has caught up: retry while it is refused with `refused` (RBAC changes take a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except ApiException as exc:
            if exc.status != refused or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def until_refused(call: Callable[[], Any], policy: str, timeout: float = 30.0) -> None:
    """Until `call` is refused by `policy`: a ValidatingAdmissionPolicy is in force a moment after it is written."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            call()
        except ApiException as exc:
            if exc.status != 403:
                raise
            if f"'{policy}'" in (exc.body or ""):
                return
        assert time.monotonic() < deadline, "the registry's admission policy did not take effect"
        time.sleep(0.2)
