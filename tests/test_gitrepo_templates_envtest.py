"""A HubTenant's Git repository templates (automation/service/gitrepo_templates.py) against the real kube-apiserver
with a kube-controller-manager (garbage collector), beside the tenant controller and the HubGitRepo controller, all
three wired by their setup() on one runtime as one ServiceAccount holding exactly their rules, over the in-memory
forge (doubles/forge.py): what only a real API server shows.

An owner deleted has the garbage collector delete its HubGitRepo (the ownerReferences the templates write), whose
finalizer carries out the deletion policy on the forge first: a HubCluster's catalog keeps its repository (Retain)
without the agent's key, a HubTenant's repository (Delete) goes. What the templates make and remove, and how a
HubGitRepo follows them: tests/test_gitrepo_templates_direct.py, over the fake API server.
"""
from __future__ import annotations

import base64
import time
import uuid
from types import SimpleNamespace

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.backoff import Backoff
from automation.adapters.kube.informer import sources
from automation.adapters.kube.kit_sources import gitrepo_source, tenant_source
from automation.adapters.kube.objects import KubeObjects
from automation.kit.runtime import Manager
from automation.service import gitrepo_templates, gitrepos, tenants
from stacks.times import rfc3339_seconds
from doubles.envtest import delete_tenant
from doubles.factories import HUB_ACCOUNT
from doubles.forge import MemoryForges, public_key
from doubles.service_env import wait_until
from stacks.admission import gitrepo_controller_rules, tenant_controller_rules
from stacks.gitrepos import keys
from stacks.names import AGENT_DEPLOY_KEY, API_VERSION, CLUSTERS, GITREPO_FINALIZER, GITREPOS, GROUP, TENANTS, VERSION
from tests.envtest import kube_apiserver_gc  # noqa: F401 - the fixture
from tests.registry_rbac import (bind_cluster_role, install_registry_rules, sa_subject, service_account_token,
                                 unbind_cluster_role)

WAIT = 30.0
TOKEN = "hub-token"


@pytest.fixture(scope="module")
def world(kube_apiserver_gc):  # noqa: F811 - the fixture
    suffix = uuid.uuid4().hex[:6]
    admin = kube_apiserver_gc.api_client()
    install_registry_rules(admin)
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    system = f"tpl-system-{suffix}"
    core.create_namespace({"metadata": {"name": system}})
    role = f"hubwright-templates-{suffix}"
    bind_cluster_role(admin, role, [*tenant_controller_rules(), *gitrepo_controller_rules()],
                      [sa_subject(system, "service")])
    rbac.create_namespaced_role(system, {"metadata": {"name": "secrets"},
                                         "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]})
    rbac.create_namespaced_role_binding(system, {
        "metadata": {"name": "secrets"}, "subjects": [sa_subject(system, "service")],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secrets"}})
    core.create_namespaced_secret(system, {"metadata": {"name": "forge"},
                                           "data": {"token": base64.b64encode(TOKEN.encode()).decode()}})
    service = kube_apiserver_gc.api_client(service_account_token(admin, system, "service"))
    yield SimpleNamespace(admin=admin, system=system, service=service, suffix=suffix)
    service.close()
    unbind_cluster_role(admin, role)
    core.delete_namespace(system)
    admin.close()


class Hub:
    """The three controllers on one runtime (as serve.Pipeline wires them), a fresh forge, and this test's objects."""

    def __init__(self, world):
        self.world = world
        self.custom = client.CustomObjectsApi(world.admin)
        self.forges = MemoryForges(token=TOKEN)
        self.tenants: list[str] = []
        self.manager = Manager(watch_timeout=30)
        for kind, source in sources(world.service, hub_name="hub", role_map_name="none",
                                    role_map_namespace=world.system, every_namespace=True).items():
            if kind in ("clusters", "namespaces"):
                self.manager.source(source)
        backoff, objects = Backoff(0.05, 0.5), KubeObjects(world.service)
        self.tenant_controller = tenants.setup(self.manager, objects=objects, source=tenant_source(world.service),
                                               hub_account=lambda: HUB_ACCOUNT, backoff=backoff)
        self.gitrepos = gitrepos.setup(self.manager, objects=objects, source=gitrepo_source(world.service),
                                       namespace=world.system, forge_for=self.forges.forge_for, backoff=backoff,
                                       resync=1.0)
        self.templates = gitrepo_templates.setup(self.manager, objects=objects, tenants=self.tenant_controller.tenants,
                                                 backoff=backoff, resync=1.0)
        self.manager.start()
        wait_until(lambda: self.manager.started.is_set(), WAIT, what="the controllers to sync")

    def template(self, *, policy: str = "Retain", keys_=()) -> dict:
        return {"forge": "gitea", "apiURL": "https://forge.test", "credentialsSecretRef": {"name": "forge"},
                "owner": "org", "deletionPolicy": policy, "deployKeys": list(keys_),
                "templateFiles": {"README.md": "hello\n"}}

    def tenant(self, **spec) -> tuple[str, dict]:
        name = f"tpl-{uuid.uuid4().hex[:8]}"
        self.tenants.append(name)
        raw = self.custom.create_cluster_custom_object(GROUP, VERSION, TENANTS, {
            "apiVersion": API_VERSION, "kind": "HubTenant", "metadata": {"name": name}, "spec": spec})
        wait_until(lambda: (self.custom.get_cluster_custom_object(GROUP, VERSION, TENANTS, name).get("status")
                            or {}).get("namespace") == name, WAIT, what="the tenant's namespace")
        return name, raw

    def cluster(self, namespace: str, name: str) -> dict:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, CLUSTERS, {
            "apiVersion": API_VERSION, "kind": "HubCluster", "metadata": {"name": name, "namespace": namespace},
            "spec": {"displayName": "registered only"}})

    def repo(self, namespace: str, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, GITREPOS, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def ready(self, namespace: str, name: str) -> dict:
        return wait_until(lambda: (r := self.repo(namespace, name)) and (r.get("status") or {}).get("phase") == "Ready"
                          and r, WAIT, what=f"HubGitRepo {namespace}/{name} Ready")

    def close(self) -> None:
        self.manager.stop()
        for name in self.tenants:
            for item in self.custom.list_namespaced_custom_object(GROUP, VERSION, name, GITREPOS)["items"]:
                self.custom.patch_namespaced_custom_object(GROUP, VERSION, name, GITREPOS, item["metadata"]["name"],
                                                           {"metadata": {"finalizers": None}})
            for item in self.custom.list_namespaced_custom_object(GROUP, VERSION, name, CLUSTERS)["items"]:
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, name, CLUSTERS, item["metadata"]["name"])
            delete_tenant(self.world.admin, name)


@pytest.fixture
def hub(world):
    hub = Hub(world)
    yield hub
    hub.close()


def owner_uids(raw: dict) -> list[str]:
    return [ref["uid"] for ref in raw["metadata"].get("ownerReferences") or [] if ref.get("controller")]


def test_a_clusters_catalog_goes_with_it_through_the_garbage_collector_and_its_finalizer(hub):
    tenant, _ = hub.tenant(clusterTemplate={"gitRepoTemplate": hub.template()})
    cluster = hub.cluster(tenant, "c1")
    catalog = hub.ready(tenant, "cluster-c1")
    assert owner_uids(catalog) == [cluster["metadata"]["uid"]] and catalog["spec"]["path"] == f"org/{tenant}.c1"
    # The agent pushes its key (the registry API writes status.agentKey): the catalog's read-only deploy key.
    agent = public_key("agent@c1")
    hub.custom.patch_namespaced_custom_object_status(GROUP, VERSION, tenant, CLUSTERS, "c1", {"status": {"agentKey": {
        "publicKey": agent, "fingerprint": keys.parse(agent).fingerprint, "time": rfc3339_seconds(time.time())}}})
    path = f"org/{tenant}.c1"
    wait_until(lambda: [(k.title, k.read_only) for k in hub.forges.keys_of(path)] == [(AGENT_DEPLOY_KEY, True)],
               WAIT, what="the agent's key on the catalog")

    # The HubCluster deleted: the garbage collector deletes its HubGitRepo, whose finalizer removes our keys first
    hub.custom.delete_namespaced_custom_object(GROUP, VERSION, tenant, CLUSTERS, "c1")
    wait_until(lambda: hub.repo(tenant, "cluster-c1") is None, WAIT, what="the garbage collector and the finalizer")
    assert path in hub.forges.repos and hub.forges.keys_of(path) == []  # Retain: kept, our key gone
    assert ("delete_key", path) in {call[:2] for call in hub.forges.calls}


def test_a_tenant_deleted_takes_its_hubgitrepo_and_delete_takes_the_repository(hub):
    tenant, _ = hub.tenant(gitRepoTemplate=hub.template(policy="Delete"))
    repo = hub.ready(tenant, f"tenant-{tenant}")
    assert GITREPO_FINALIZER in repo["metadata"]["finalizers"] and f"org/{tenant}" in hub.forges.repos
    hub.custom.delete_cluster_custom_object(GROUP, VERSION, TENANTS, tenant)
    wait_until(lambda: hub.repo(tenant, f"tenant-{tenant}") is None, WAIT, what="the garbage collector")
    assert f"org/{tenant}" not in hub.forges.repos
    assert ("delete", f"org/{tenant}") in hub.forges.calls
