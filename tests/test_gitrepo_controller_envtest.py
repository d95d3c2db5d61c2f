"""The Git repository controller (automation/service/gitrepos.py) against the real kube-apiserver, running as a
ServiceAccount that holds exactly stacks.admission.gitrepo_controller_rules() and `get` on Secrets in its own
namespace, over the in-memory forge (doubles/forge.py): what only a real API server shows. A tenant cannot write a
HubGitRepo nor read the hub's forge token (RBAC); the controller's whole life as that ServiceAccount (the token's
Secret read, the finalizer, the status subresource, the real watch, a deletion held by the finalizer while the
forge is down). The controller's own logic (ownership, deploy keys, faults, the deletion policy):
tests/test_gitrepos_direct.py, over the fake API server.
The test server has no controller-manager (no GC): every name is unique.
"""
from __future__ import annotations

import base64
import uuid
from types import SimpleNamespace

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.backoff import Backoff
from automation.adapters.kube.kit_sources import gitrepo_source
from automation.adapters.kube.objects import KubeObjects
from automation.kit.runtime import Manager
from automation.service import gitrepos as gitrepo_controller
from doubles.forge import HOST_KEY, MemoryForges, public_key
from doubles.service_env import wait_until
from stacks.admission import TENANT_ADMIN_CLUSTERROLE, gitrepo_controller_rules
from stacks.names import API_VERSION, GITREPO, GITREPO_FINALIZER, GITREPOS, GROUP, VERSION
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from tests.registry_rbac import (bind_cluster_role, eventually, install_registry_rules, sa_subject,
                                 service_account_token, unbind_cluster_role)

WAIT = 20.0
HUB_TOKEN, TENANT_TOKEN = "hub-token", "tenant-token"


@pytest.fixture(scope="module")
def world(kube_apiserver):  # noqa: F811 - the fixture
    """The service's namespace (the forge token's Secret there), a tenant namespace (with a same-named Secret of
    the tenant's), the controller's ServiceAccount (gitrepo_controller_rules() + get Secrets in its namespace) and
    `mallory`, an admin of the tenant namespace (the tenant-admin ClusterRole through a RoleBinding)."""
    suffix = uuid.uuid4().hex[:6]
    admin = kube_apiserver.api_client()
    install_registry_rules(admin)
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    system, team = f"gitrepo-system-{suffix}", f"gitrepo-team-{suffix}"
    for namespace in (system, team):
        core.create_namespace({"metadata": {"name": namespace}})
    role = f"hubwright-gitrepos-{suffix}"
    bind_cluster_role(admin, role, gitrepo_controller_rules(), [sa_subject(system, "controller")])
    rbac.create_namespaced_role(system, {"metadata": {"name": "secrets"},
                                         "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]})
    rbac.create_namespaced_role_binding(system, {
        "metadata": {"name": "secrets"}, "subjects": [sa_subject(system, "controller")],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secrets"}})
    rbac.create_namespaced_role_binding(team, {
        "metadata": {"name": "admins"}, "subjects": [sa_subject(team, "mallory")],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": TENANT_ADMIN_CLUSTERROLE}})
    secret(core, system, "forge", {"token": HUB_TOKEN})
    secret(core, team, "forge", {"token": TENANT_TOKEN})  # the tenant's, of the same name: never read
    controller = kube_apiserver.api_client(service_account_token(admin, system, "controller"))
    mallory = kube_apiserver.api_client(service_account_token(admin, team, "mallory"))
    yield SimpleNamespace(admin=admin, system=system, team=team, controller=controller, mallory=mallory,
                          suffix=suffix)
    controller.close()
    mallory.close()
    unbind_cluster_role(admin, role)
    for namespace in (system, team):
        core.delete_namespace(namespace)
    admin.close()


def secret(core: client.CoreV1Api, namespace: str, name: str, data: dict[str, str]) -> None:
    core.create_namespaced_secret(namespace, {"metadata": {"name": name}, "data": {
        key: base64.b64encode(value.encode()).decode() for key, value in data.items()}})


def manifest(name: str, namespace: str, path: str, *, keys=(), policy: str = "Retain", files=None,
             secret_name: str = "forge", annotations=None) -> dict:
    meta = {"name": name, "namespace": namespace, **({"annotations": annotations} if annotations else {})}
    return {"apiVersion": API_VERSION, "kind": GITREPO.kind, "metadata": meta, "spec": {
        "forge": "gitea", "apiURL": "https://forge.test", "credentialsSecretRef": {"name": secret_name},
        "path": path, "description": "the catalog", "deletionPolicy": policy,
        "deployKeys": [dict(k) for k in keys], "templateFiles": files or {}}}


class Repos:
    """One test's controller over a fresh forge, and its HubGitRepos (removed afterwards, finalizers dropped)."""

    def __init__(self, world):
        self.world = world
        self.custom = client.CustomObjectsApi(world.admin)
        self.forges = MemoryForges(token=HUB_TOKEN)
        self.names: list[str] = []
        self.manager = Manager(watch_timeout=30)
        self.controller = gitrepo_controller.setup(
            self.manager, objects=KubeObjects(world.controller), source=gitrepo_source(world.controller, world.team),
            namespace=world.system, forge_for=self.forges.forge_for, backoff=Backoff(0.05, 0.5), resync=1.0)
        self.manager.start()
        wait_until(lambda: self.manager.started.is_set(), WAIT, what="the controller to sync")

    def path(self, name: str) -> str:
        return f"org/{name}-{self.world.suffix}"

    def create(self, name: str, **kwargs) -> dict:
        self.names.append(name)
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.world.team, GITREPOS,
                                                           manifest(name, self.world.team, self.path(name), **kwargs))

    def get(self, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.world.team, GITREPOS, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def status(self, name: str) -> dict:
        return (self.get(name) or {}).get("status") or {}

    def patch(self, name: str, body: dict) -> dict:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.world.team, GITREPOS, name, body)

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.world.team, GITREPOS, name)

    def wait(self, name: str, phase: str, *, reason: str | None = None) -> dict:
        def there():
            status = self.status(name)
            if status.get("phase") != phase:
                return None
            if reason is not None and not any(c.get("reason") == reason and c.get("status") == "True"
                                              for c in status.get("conditions") or []):
                return None
            return status
        return wait_until(there, WAIT, what=f"{name} {phase} {reason or ''}")

    def close(self) -> None:
        self.manager.stop()
        for name in self.names:
            try:
                self.patch(name, {"metadata": {"finalizers": None}})
                self.delete(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


@pytest.fixture
def repos(world):
    repos = Repos(world)
    yield repos
    repos.close()


def condition(status: dict, type_: str) -> dict:
    return next(c for c in status.get("conditions") or [] if c["type"] == type_)


# --------------------------------------------------------------------------- RBAC

def test_a_tenant_cannot_create_or_edit_a_hubgitrepo_only_read_it(world):
    """A HubGitRepo a tenant wrote would spend the hub's forge token (its path, its keys): tenant admins read."""
    mallory = client.CustomObjectsApi(world.mallory)
    name = f"mine-{world.suffix}"
    body = manifest(name, world.team, f"victim/{name}", keys=[{"name": "backdoor", "publicKey": public_key(),
                                                               "write": True}])
    with pytest.raises(ApiException) as refused:
        mallory.create_namespaced_custom_object(GROUP, VERSION, world.team, GITREPOS, body)
    assert refused.value.status == 403
    admin = client.CustomObjectsApi(world.admin)
    admin.create_namespaced_custom_object(GROUP, VERSION, world.team, GITREPOS, body)
    try:
        assert eventually(lambda: mallory.get_namespaced_custom_object(GROUP, VERSION, world.team, GITREPOS, name))
        for write in (lambda: mallory.patch_namespaced_custom_object(GROUP, VERSION, world.team, GITREPOS, name,
                                                                     {"spec": {"path": "victim/other"}}),
                      lambda: mallory.patch_namespaced_custom_object_status(GROUP, VERSION, world.team, GITREPOS,
                                                                            name, {"status": {"repositoryID": "1"}}),
                      lambda: mallory.delete_namespaced_custom_object(GROUP, VERSION, world.team, GITREPOS, name)):
            with pytest.raises(ApiException) as refused:
                write()
            assert refused.value.status == 403
        # ... and the hub's forge token is not theirs to read
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(world.mallory).read_namespaced_secret("forge", world.system)
        assert refused.value.status == 403
    finally:
        admin.delete_namespaced_custom_object(GROUP, VERSION, world.team, GITREPOS, name)


# --------------------------------------------------------------------------- its life as the ServiceAccount

def test_delete_removes_the_repository_and_a_down_forge_holds_the_finalizer(repos):
    repos.create("gone", policy="Delete", keys=[{"name": "ops", "publicKey": public_key()}])
    status = repos.wait("gone", "Ready")  # as the ServiceAccount: the Secret, the finalizer, the status written
    assert set(repos.forges.tokens) == {HUB_TOKEN} and status["hostKeys"] == [HOST_KEY]
    assert GITREPO_FINALIZER in repos.get("gone")["metadata"]["finalizers"]
    assert [(k.title, k.read_only) for k in repos.forges.keys_of(repos.path("gone"))] == [("ops", True)]
    repos.forges.down = True
    repos.delete("gone")
    status = repos.wait("gone", "Deleting", reason="ForgeUnavailable")
    assert "finalizer stays" in status["message"] and repos.path("gone") in repos.forges.repos
    repos.forges.down = False
    wait_until(lambda: repos.get("gone") is None, WAIT, what="the deletion")
    assert repos.path("gone") not in repos.forges.repos
