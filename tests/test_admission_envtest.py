"""The Tenant admission policies (stacks.admission) in the real kube-apiserver: only a holder of
`update hubtenants/ownership` (cluster administrators) sets or changes a Tenant's account, default region or
namespace; everyone who may write Tenants may change the rest; a Tenant that still counts Clusters cannot be
deleted. Users are ServiceAccounts with TokenRequest tokens, bound to exactly the rights each test names.
"""
from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from stacks.admission import (CLUSTER_PROTECTION_POLICY, DELETION_POLICY, OWNERSHIP_POLICY, SOURCE_PROTECTION_POLICY,
                             admission_manifests)
from stacks.names import GROUP, TENANT_OWNERSHIP_SUBRESOURCE, VERSION
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from tests.registry_rbac import (bind_cluster_role, delete_tenant, eventually, install_registry_rules, sa_subject,
                                 service_account_token, unbind_cluster_role)

WRITE_TENANTS = [{"apiGroups": [GROUP], "resources": ["hubtenants"],
                  "verbs": ["get", "list", "create", "update", "patch", "delete"]}]
OWNERSHIP = {"accountID": "111111111111", "defaultRegion": "eu-west-1", "namespace": "team-ns"}


@pytest.fixture(scope="module")
def users(kube_apiserver):  # noqa: F811 - the fixture
    """admin: system:masters; writer: may write Tenants, not their ownership; root: bound to cluster-admin."""
    suffix = uuid.uuid4().hex[:6]
    admin = kube_apiserver.api_client()
    install_registry_rules(admin)
    namespace = f"admission-{suffix}"
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": namespace}})
    bind_cluster_role(admin, f"tenant-writer-{suffix}", WRITE_TENANTS, [sa_subject(namespace, "writer")])
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_cluster_role_binding({
        "metadata": {"name": f"root-{suffix}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [sa_subject(namespace, "root")]})
    clients = {name: kube_apiserver.api_client(service_account_token(admin, namespace, name))
               for name in ("writer", "root")}
    for who in clients.values():  # until RBAC has caught up
        eventually(lambda: api(who).list_cluster_custom_object(GROUP, VERSION, "hubtenants", limit=1))
    yield SimpleNamespace(admin=admin, suffix=suffix, namespace=namespace, **clients)
    for user in clients.values():
        user.close()
    unbind_cluster_role(admin, f"tenant-writer-{suffix}")
    rbac.delete_cluster_role_binding(f"root-{suffix}")
    client.CoreV1Api(admin).delete_namespace(namespace)
    admin.close()


@pytest.fixture
def tenants(users):
    """Names for this test's Tenants (unique), deleted afterwards whatever state they are left in."""
    made: list[str] = []

    def name() -> str:
        made.append(f"t-adm-{uuid.uuid4().hex[:8]}")
        return made[-1]

    yield name
    for tenant in made:
        delete_tenant(users.admin, tenant)


def tenant_doc(name: str, **spec) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HubTenant", "metadata": {"name": name}, "spec": spec}


def api(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def create(api_client, name: str, **spec) -> dict:
    return api(api_client).create_cluster_custom_object(GROUP, VERSION, "hubtenants", tenant_doc(name, **spec))


def patch(api_client, name: str, spec: dict) -> dict:
    return api(api_client).patch_cluster_custom_object(GROUP, VERSION, "hubtenants", name, {"spec": spec})


def refusal(call) -> str:
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status == 403, refused.value.body
    return json.loads(refused.value.body)["message"]


# --------------------------------------------------------------------------- the policies themselves

def test_the_policies_are_installed_bound_to_deny_and_match_only_tenants(users):
    """(Their CEL is exercised below, every branch: an expression that failed to compile or evaluate would refuse
    every request, failurePolicy Fail. The server's type-checking status needs the controller-manager, which the
    test server does not run.)"""
    admission = client.AdmissionregistrationV1Api(users.admin)
    for name in (OWNERSHIP_POLICY, DELETION_POLICY):
        live = admission.read_validating_admission_policy(name)
        assert live.spec.failure_policy == "Fail"
        assert [(r.api_groups, r.resources) for r in live.spec.match_constraints.resource_rules] == \
            [([GROUP], ["hubtenants"])]
        binding = admission.read_validating_admission_policy_binding(name)
        assert binding.spec.validation_actions == ["Deny"] and binding.spec.policy_name == name
    assert {m["metadata"]["name"] for m in admission_manifests()} == {OWNERSHIP_POLICY, DELETION_POLICY, CLUSTER_PROTECTION_POLICY,
                                                                         SOURCE_PROTECTION_POLICY}


# --------------------------------------------------------------------------- ownership

@pytest.mark.parametrize("field", list(OWNERSHIP))
def test_a_tenant_writer_cannot_create_a_tenant_with_an_ownership_field(users, tenants, field):
    name = tenants()
    message = refusal(lambda: create(users.writer, name, **{field: OWNERSHIP[field]}))
    assert f"spec.{field}" in message and TENANT_OWNERSHIP_SUBRESOURCE in message and name in message
    # All three at once are named together.
    message = refusal(lambda: create(users.writer, name, **OWNERSHIP))
    assert "spec.accountID, spec.defaultRegion, spec.namespace" in message


def test_a_tenant_writer_creates_and_edits_everything_but_the_ownership_fields(users, tenants):
    name = tenants()
    create(users.writer, name, displayName="Payments", facts={"team": "payments"})
    admins = [{"kind": "Group", "name": "payments-admins"}]
    edited = patch(users.writer, name, {"displayName": "Payments EU", "facts": {"team": "pay", "tier": "1"},
                                        "admins": admins})
    assert edited["spec"]["displayName"] == "Payments EU" and edited["spec"]["admins"] == admins
    for field, value in OWNERSHIP.items():
        message = refusal(lambda: patch(users.writer, name, {field: value}))
        assert f"spec.{field}" in message
    assert "accountID" not in api(users.admin).get_cluster_custom_object(GROUP, VERSION, "hubtenants", name)["spec"]


def test_a_tenant_writer_cannot_change_or_remove_ownership_fields_an_administrator_set(users, tenants):
    name = tenants()
    create(users.admin, name, displayName="Payments", **OWNERSHIP)
    for field, other in (("accountID", "333333333333"), ("defaultRegion", "us-east-1"), ("namespace", "elsewhere")):
        assert f"spec.{field}" in refusal(lambda: patch(users.writer, name, {field: other}))
        assert f"spec.{field}" in refusal(lambda: patch(users.writer, name, {field: None}))  # removing is a change
    # The rest stays editable, and a whole-object update that keeps the ownership fields passes.
    current = patch(users.writer, name, {"displayName": "Payments (EU)", "facts": {"cost-centre": "42"}})
    current["spec"]["admins"] = [{"kind": "User", "name": "bob"}]
    replaced = api(users.writer).replace_cluster_custom_object(GROUP, VERSION, "hubtenants", name, current)
    assert {k: replaced["spec"][k] for k in OWNERSHIP} == OWNERSHIP


GIT_TEMPLATE = {"forge": "gitea", "apiURL": "https://git.example.com", "credentialsSecretRef": {"name": "forge", "key": "token"},
                "owner": "acme"}


def test_the_git_templates_are_ownership_fields_they_spend_the_hubs_forge_token(users, tenants):
    """A tenant writer who could set gitRepoTemplate or clusterTemplate would make repositories with the hub's
    forge token under any owner it names: set, changed or removed, only with the ownership right."""
    name = tenants()
    for field, value in (("gitRepoTemplate", GIT_TEMPLATE), ("clusterTemplate", {"gitRepoTemplate": GIT_TEMPLATE})):
        assert f"spec.{field}" in refusal(lambda: create(users.writer, name, **{field: value}))
    create(users.admin, name, gitRepoTemplate=GIT_TEMPLATE, clusterTemplate={"gitRepoTemplate": GIT_TEMPLATE})
    elsewhere = {**GIT_TEMPLATE, "owner": "someone-else"}
    assert "spec.gitRepoTemplate" in refusal(lambda: patch(users.writer, name, {"gitRepoTemplate": elsewhere}))
    assert "spec.clusterTemplate" in refusal(
        lambda: patch(users.writer, name, {"clusterTemplate": {"gitRepoTemplate": elsewhere}}))
    assert "spec.gitRepoTemplate" in refusal(lambda: patch(users.writer, name, {"gitRepoTemplate": None}))
    # Untouched, they do not stand in the way of the rest.
    edited = patch(users.writer, name, {"displayName": "Acme"})
    kept = edited["spec"]["gitRepoTemplate"]
    assert {key: kept[key] for key in GIT_TEMPLATE} == GIT_TEMPLATE and edited["spec"]["displayName"] == "Acme"
    changed = patch(users.admin, name, {"gitRepoTemplate": elsewhere})
    assert changed["spec"]["gitRepoTemplate"]["owner"] == "someone-else"


def test_cluster_administrators_set_and_change_the_ownership_fields(users, tenants):
    for who in (users.admin, users.root):  # system:masters, and a user bound to cluster-admin
        name = tenants()
        create(who, name, **OWNERSHIP)
        changed = patch(who, name, {"accountID": "444444444444", "defaultRegion": None, "namespace": "moved"})
        assert changed["spec"] == {"accountID": "444444444444", "namespace": "moved"}


def test_the_ownership_right_can_be_granted_for_one_tenant_by_name(users, tenants):
    mine, other = tenants(), tenants()
    create(users.writer, mine)
    create(users.writer, other)
    role = f"own-{users.suffix}-{mine}"
    bind_cluster_role(users.admin, role, [{"apiGroups": [GROUP], "resources": [TENANT_OWNERSHIP_SUBRESOURCE],
                                           "resourceNames": [mine], "verbs": ["update"]}],
                      [sa_subject(users.namespace, "writer")])
    try:
        updated = eventually(lambda: patch(users.writer, mine, {"accountID": "555555555555"}))
        assert updated["spec"]["accountID"] == "555555555555"
        assert "spec.accountID" in refusal(lambda: patch(users.writer, other, {"accountID": "555555555555"}))
    finally:
        unbind_cluster_role(users.admin, role)


# --------------------------------------------------------------------------- deletion

def test_a_tenant_that_counts_clusters_cannot_be_deleted_until_the_count_is_zero(users, tenants):
    name = tenants()
    create(users.writer, name)
    api(users.admin).patch_cluster_custom_object_status(GROUP, VERSION, "hubtenants", name,
                                                       {"status": {"clusters": 2, "namespace": name}})
    for who in (users.writer, users.admin):  # nobody, not even an administrator
        message = refusal(lambda: api(who).delete_cluster_custom_object(GROUP, VERSION, "hubtenants", name))
        assert f"Tenant {name} still has 2 cluster(s) in namespace {name}" in message
        assert "delete its clusters first" in message
    assert api(users.admin).get_cluster_custom_object(GROUP, VERSION, "hubtenants", name)

    api(users.admin).patch_cluster_custom_object_status(GROUP, VERSION, "hubtenants", name, {"status": {"clusters": 0}})
    api(users.writer).delete_cluster_custom_object(GROUP, VERSION, "hubtenants", name)
    with pytest.raises(ApiException) as gone:
        api(users.admin).get_cluster_custom_object(GROUP, VERSION, "hubtenants", name)
    assert gone.value.status == 404


def test_a_tenant_without_a_status_can_be_deleted(users, tenants):
    name = tenants()
    create(users.writer, name, displayName="never reconciled")
    api(users.writer).delete_cluster_custom_object(GROUP, VERSION, "hubtenants", name)
    with pytest.raises(ApiException) as gone:
        api(users.admin).get_cluster_custom_object(GROUP, VERSION, "hubtenants", name)
    assert gone.value.status == 404
