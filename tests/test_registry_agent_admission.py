"""Finding 5 of issue #45: the registry API's ServiceAccount may write its agents and nothing else.

RBAC grants the registry `serviceaccounts/token create`, `serviceaccounts` and `roles`/`rolebindings` create/get/
delete cluster-wide (stacks.install.API_RULES: no resourceNames can say "hubwright-agent-* in tenant namespaces").
Acting as the registry, the review minted an `sts.amazonaws.com` token for hubwright-system/hubwright, whose IRSA
role assumes every tenant account's. The install's ValidatingAdmissionPolicy `hubwright-registry-agents`
(stacks.agent_admission) now allows the registry's user only agents' names, in namespaces the tenant controller
labelled, with the hub API server's audiences, and a Role and RoleBinding of exactly the agent's shape.

On the real kube-apiserver, with the registry's objects as the install renders them (`install --render`: its
ServiceAccount, ClusterRole(+Binding) and policy, and the service's ServiceAccount with its IRSA annotation),
acting with the registry's own token.
"""
from __future__ import annotations

import base64
import json
import uuid
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.files import install
from automation.adapters.kube.agent import grant_agent, request_token, revoke_agent
from components.install import REGISTRY, SERVICE
from stacks.deployment import IRSA_ANNOTATION, load_values
from stacks.install import RBAC
from stacks.names import API_VERSION, GROUP, TENANT_LABEL, VERSION, agent_name
from tests import deployed
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from tests.registry_rbac import eventually, service_account_token, undo_all, until_refused

HUB_ROLE = "arn:aws:iam::111111111111:role/hubwright-hub"  # the hub's role: it assumes every tenant account's
STS = "sts.amazonaws.com"
KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
         "ValidatingAdmissionPolicyBinding")


def registrys(obj: dict) -> bool:
    """The registry's objects of the render, and the service's ServiceAccount (the review's target)."""
    name = obj["metadata"]["name"]
    return obj["kind"] in KINDS and (name.startswith(REGISTRY) or (obj["kind"], name) == ("ServiceAccount", SERVICE))



@pytest.fixture(scope="module")
def hub(kube_apiserver) -> Iterator[SimpleNamespace]:  # noqa: F811 - the fixture
    """The install's registry objects in a system namespace of its own; a tenant namespace (labelled as the tenant
    controller labels it) with a HubCluster; the registry's client, with its own token."""
    suffix = uuid.uuid4().hex[:6]
    system, tenant = f"hw-sys-{suffix}", f"acme-{suffix}"
    admin = kube_apiserver.api_client()
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    values = load_values({"namespace": system, "serviceAccount": {"roleArn": HUB_ROLE}})
    objs = [o for o in install.render(values) if registrys(o)]
    core.create_namespace({"metadata": {"name": system}})
    core.create_namespace({"metadata": {"name": tenant, "labels": {TENANT_LABEL: tenant}}})
    core.create_namespaced_service_account(tenant, {"metadata": {"name": "default"}})  # no controller makes it here
    deployed.apply(admin, objs)
    cluster = "prod-1"
    client.CustomObjectsApi(admin).create_namespaced_custom_object(GROUP, VERSION, tenant, "hubclusters", {
        "apiVersion": API_VERSION, "kind": "HubCluster", "metadata": {"name": cluster}, "spec": {}})
    registry = kube_apiserver.api_client(service_account_token(admin, system, REGISTRY))
    env = SimpleNamespace(admin=admin, registry=registry, system=system, tenant=tenant, cluster=cluster,
                          policies=[o["metadata"]["name"] for o in objs if o["kind"] == "ValidatingAdmissionPolicy"])
    # RBAC first (the registry reads HubClusters), then the policy, when the install has one: a ServiceAccount of
    # no agent's name in the registry's own namespace is refused (dry run: nothing is made either way).
    eventually(lambda: client.CustomObjectsApi(registry).list_namespaced_custom_object(GROUP, VERSION, tenant,
                                                                                       "hubclusters"))
    for policy in env.policies:
        until_refused(lambda: client.CoreV1Api(registry).create_namespaced_service_account(
            system, {"metadata": {"name": "probe"}}, dry_run="All"), policy)
    yield env
    registry.close()
    admission = client.AdmissionregistrationV1Api(admin)
    undo_all([lambda: revoke_agent(admin, tenant, cluster), lambda: revoke_agent(admin, tenant, "prod-2"),
              *[lambda n=n: admission.delete_validating_admission_policy_binding(n) for n in env.policies],
              *[lambda n=n: admission.delete_validating_admission_policy(n) for n in env.policies],
              lambda: rbac.delete_cluster_role_binding(REGISTRY), lambda: rbac.delete_cluster_role(REGISTRY),
              lambda: core.delete_namespace(tenant), lambda: core.delete_namespace(system)])
    admin.close()


def refused(call: Callable[[], Any]) -> str:
    """The message of the 403 `call` gets: the policy's, naming each rule the request breaks."""
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 403, err.value.body
    return json.loads(err.value.body)["message"]


def audiences(token: str) -> list[str]:
    claims = token.split(".")[1]
    aud = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))["aud"]
    return [aud] if isinstance(aud, str) else aud


# --------------------------------------------------------------------------- the attack

def test_the_registry_cannot_mint_an_sts_token_for_the_hubs_service_account(hub):
    """The review's attack: as the registry, a TokenRequest for the service's ServiceAccount (its IRSA annotation is
    the hub role) with the audience AWS STS takes. Refused, the message naming every rule it breaks."""
    core = client.CoreV1Api(hub.registry)
    assert core.read_namespaced_service_account(SERVICE, hub.system).metadata.annotations[IRSA_ANNOTATION] == HUB_ROLE
    message = refused(lambda: core.create_namespaced_service_account_token(
        SERVICE, hub.system, {"spec": {"audiences": [STS], "expirationSeconds": 3600}}))
    assert f"ValidatingAdmissionPolicy '{REGISTRY}-agents'" in message, message
    assert (f"the registry (system:serviceaccount:{hub.system}:{REGISTRY}) writes only its agents' ServiceAccounts, "
            "tokens, Roles and RoleBindings in tenant namespaces: "
            f"namespace {hub.system} is no tenant's (it has no {TENANT_LABEL} label); "
            f"serviceaccounts/token {SERVICE} is no agent's (hubwright-agent-<cluster>); "
            f"audiences {STS} are not the hub API server's (") in message, message
    # Nor with the API server's own audience: the service's identity is not the registry's to hand out.
    message = refused(lambda: core.create_namespaced_service_account_token(SERVICE, hub.system, {"spec": {}}))
    assert f"namespace {hub.system} is no tenant's" in message and "audiences" not in message, message


def test_the_registry_writes_no_identity_but_its_agents(hub):
    """Each way around the allow-list, one rule broken at a time, is refused naming that rule."""
    core, rbac = client.CoreV1Api(hub.registry), client.RbacAuthorizationV1Api(hub.registry)
    uid = client.CustomObjectsApi(hub.admin).get_namespaced_custom_object(
        GROUP, VERSION, hub.tenant, "hubclusters", hub.cluster)["metadata"]["uid"]
    grant_agent(hub.registry, hub.tenant, hub.cluster, uid, 600)  # its ServiceAccount: a TokenRequest needs one
    agent = agent_name("prod-2")
    meta = {"name": agent}
    facts = {"apiGroups": [GROUP], "resources": ["hubclusters/facts"], "resourceNames": ["prod-2"], "verbs": ["create"]}
    role_binding = {"metadata": meta, "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": agent},
                    "subjects": [{"kind": "ServiceAccount", "name": agent, "namespace": hub.tenant}]}
    # The agent's Role, as the registry would make it (by the administrator here): a binding needs its Role to exist.
    client.RbacAuthorizationV1Api(hub.admin).create_namespaced_role(hub.tenant, {"metadata": meta, "rules": [facts]})
    attempts: list[tuple[str, Callable[[], Any], str]] = [
        ("an agent's name outside a tenant namespace", lambda: core.create_namespaced_service_account(
            hub.system, {"metadata": meta}), f"namespace {hub.system} is no tenant's"),
        ("another name in a tenant namespace", lambda: core.create_namespaced_service_account(
            hub.tenant, {"metadata": {"name": "deployer"}}), "serviceaccounts deployer is no agent's"),
        ("a token of the namespace's default ServiceAccount", lambda: core.create_namespaced_service_account_token(
            "default", hub.tenant, {"spec": {}}), "serviceaccounts/token default is no agent's"),
        ("an agent's token for STS", lambda: core.create_namespaced_service_account_token(
            agent_name(hub.cluster), hub.tenant, {"spec": {"audiences": [STS]}}), f"audiences {STS} are not"),
        ("an agent's token for STS and the API server", lambda: core.create_namespaced_service_account_token(
            agent_name(hub.cluster), hub.tenant, {"spec": {"audiences": [
                "https://kubernetes.default.svc.cluster.local", STS]}}), f"{STS} are not"),
        # Its own ClusterRole bound in a tenant namespace needs no `bind` (it holds every right of it): that would
        # give a tenant hubclusters/status there.
        ("its own rights bound to someone", lambda: rbac.create_namespaced_role_binding(hub.tenant, {
            "metadata": meta, "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": REGISTRY},
            "subjects": [{"kind": "User", "name": "mallory", "apiGroup": RBAC}]}), "the RoleBinding must bind"),
        ("the agent's Role bound to another", lambda: rbac.create_namespaced_role_binding(hub.tenant, {
            **role_binding, "subjects": [{"kind": "ServiceAccount", "name": agent, "namespace": hub.system}]}),
         "the RoleBinding must bind"),
        ("a Role with a right beside the agent's", lambda: rbac.create_namespaced_role(hub.tenant, {
            "metadata": meta, "rules": [facts, {"apiGroups": [""], "resources": ["serviceaccounts/token"],
                                                "verbs": ["create"]}]}), "the Role must hold exactly"),
        ("a Role for another cluster's facts", lambda: rbac.create_namespaced_role(hub.tenant, {
            "metadata": meta, "rules": [{**facts, "resourceNames": ["prod-1"]}]}), "the Role must hold exactly"),
        ("deleting the service's ServiceAccount", lambda: core.delete_namespaced_service_account(
            SERVICE, hub.system), f"namespace {hub.system} is no tenant's"),
    ]
    let_through = [what for what, call, rule in attempts if not refusal(call, rule)]
    assert let_through == []
    assert not any(exists(lambda: read(agent, hub.tenant)) for read in (
        client.CoreV1Api(hub.admin).read_namespaced_service_account,
        client.RbacAuthorizationV1Api(hub.admin).read_namespaced_role_binding))
    assert exists(lambda: client.CoreV1Api(hub.admin).read_namespaced_service_account(SERVICE, hub.system))


def refusal(call: Callable[[], Any], rule: str) -> bool:
    """Whether `call` is refused 403 by the policy naming `rule` (anything else let through is False)."""
    try:
        call()
    except ApiException as exc:
        return exc.status == 403 and rule in json.loads(exc.body)["message"]
    return False


def exists(read: Callable[[], Any]) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


# --------------------------------------------------------------------------- what the registry does still works

def test_the_registry_still_grants_rotates_and_revokes_its_agents(hub, kube_apiserver):  # noqa: F811
    """An agent's ServiceAccount, Role, RoleBinding and token in a tenant namespace, as the install route makes
    them (the API server's own audience), its rotation, an explicit API audience, and revoking it."""
    uid = client.CustomObjectsApi(hub.admin).get_namespaced_custom_object(
        GROUP, VERSION, hub.tenant, "hubclusters", hub.cluster)["metadata"]["uid"]
    token, _ = grant_agent(hub.registry, hub.tenant, hub.cluster, uid, 600)
    grant_agent(hub.registry, hub.tenant, hub.cluster, uid, 600)  # again: the three deleted and made afresh
    name, core = agent_name(hub.cluster), client.CoreV1Api(hub.registry)
    rotated, _ = request_token(core, hub.tenant, name, 600)
    explicit = core.create_namespaced_service_account_token(name, hub.tenant, {"spec": {
        "audiences": ["https://kubernetes.default.svc.cluster.local"], "expirationSeconds": 600}}).status.token
    assert audiences(rotated) == audiences(explicit) == ["https://kubernetes.default.svc.cluster.local"]
    with kube_apiserver.api_client(rotated) as agent:
        review = client.AuthorizationV1Api(agent).create_self_subject_access_review({"spec": {"resourceAttributes": {
            "group": GROUP, "resource": "hubclusters", "subresource": "facts", "verb": "create",
            "namespace": hub.tenant, "name": hub.cluster}}})
        assert review.status.allowed
    revoke_agent(hub.registry, hub.tenant, hub.cluster, keep="another-uid")  # owned by this uid: deleted
    admin_core = client.CoreV1Api(hub.admin)
    assert not exists(lambda: admin_core.read_namespaced_service_account(name, hub.tenant))
    assert token != rotated
