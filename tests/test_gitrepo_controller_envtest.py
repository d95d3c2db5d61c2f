"""The Git repository controller (automation/service/gitrepos.py) against the real kube-apiserver, running as a
ServiceAccount that holds exactly stacks.admission.gitrepo_controller_rules() and `get` on Secrets in its own
namespace, over the in-memory forge (doubles/forge.py) with its faults. The attacks first: a tenant cannot write a
HubGitRepo; a repository someone else made is refused, not adopted; a key hubwright did not add is never removed;
a write flag is never added unless the spec says write; the forge token comes from the service's namespace even
when the HubGitRepo's namespace has a Secret of that name. Then the faults and the deletion policy.
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
from automation.service.gitrepos import GitRepoController
from automation.kit.runtime import Manager
from doubles.forge import HOST_KEY, MemoryForges, public_key
from doubles.service_env import wait_until
from stacks.admission import TENANT_ADMIN_CLUSTERROLE, gitrepo_controller_rules
from stacks.names import ADOPT_REPOSITORY_ANNOTATION, API_VERSION, GITREPO, GITREPO_FINALIZER, GITREPOS, GROUP, VERSION
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
        self.controller = GitRepoController(world.controller, self.manager, namespace=world.system,
                                            forge_for=self.forges.forge_for, backoff=Backoff(0.05, 0.5), resync=1.0,
                                            watch_namespace=world.team)
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


# --------------------------------------------------------------------------- attacks

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


def test_the_token_is_read_from_the_services_namespace_never_the_hubgitrepos(repos):
    key = public_key("ops@x")
    repos.create("catalog", keys=[{"name": "ops", "publicKey": key}], files={"README.md": "# catalog\n"})
    status = repos.wait("catalog", "Ready")
    assert set(repos.forges.tokens) == {HUB_TOKEN}  # the same-named Secret of the tenant's namespace: never read
    stored = repos.forges.repos[repos.path("catalog")]
    assert stored.files == {"README.md": "# catalog\n"} and len(stored.commits) == 1
    assert status["repositoryID"] == stored.repo.id and status["ownership"] == "Created" and "creating" not in status
    assert status["url"] == stored.repo.http_url and status["sshURL"] == stored.repo.ssh_url
    assert status["hostKeys"] == [HOST_KEY]
    assert [(k["name"], k["write"]) for k in status["deployKeys"]] == [("ops", False)]
    assert [(k.title, k.read_only) for k in stored.keys.values()] == [("ops", True)]
    assert condition(status, "Ready")["status"] == "True" and condition(status, "Stalled")["status"] == "False"
    assert GITREPO_FINALIZER in repos.get("catalog")["metadata"]["finalizers"]
    assert status["observedGeneration"] == repos.get("catalog")["metadata"]["generation"]
    # seeded once: resyncs later (each lists the keys again), still one commit and the same status
    looks = lambda: sum(1 for call in repos.forges.calls if call[:2] == ("keys", repos.path("catalog")))  # noqa: E731
    seen = looks()
    wait_until(lambda: looks() >= seen + 2, WAIT, what="two resyncs")
    assert len(stored.commits) == 1 and repos.status("catalog")["lastSyncTime"] == status["lastSyncTime"]


def test_a_create_whose_answer_is_lost_and_a_failed_seed_are_finished_on_the_retry(repos):
    """status.creating claims the repository a lost create made (it is not refused as someone else's), and the
    first commit is written once, on the retry, before the repository is recorded."""
    repos.forges.fail_once("create")
    repos.forges.fail_once("seed")
    repos.create("lost", files={"README.md": "x\n"})
    status = repos.wait("lost", "Ready")
    stored = repos.forges.repos[repos.path("lost")]
    assert status["ownership"] == "Created" and status["repositoryID"] == stored.repo.id
    assert stored.commits == ["hubwright: the template's first commit"] and stored.files == {"README.md": "x\n"}
    assert [call[0] for call in repos.forges.calls].count("create") == 1


def test_someone_elses_repository_is_refused_and_untouched_until_the_admin_adopts_it(repos):
    theirs = public_key()
    repos.forges.foreign(repos.path("taken"), key_title="theirs", key=theirs)
    repos.create("taken", keys=[{"name": "ops", "publicKey": public_key()}], policy="Delete")
    status = repos.wait("taken", "Stalled", reason="RepositoryExists")
    assert status["message"].startswith(f"RepositoryExists: {repos.path('taken')} exists on the forge and was not "
                                        "made by hubwright; set hubwright.io/adopt-repository=true")
    assert "repositoryID" not in status and "url" not in status
    writes = [call for call in repos.forges.calls if call[0] not in ("get", "keys", "check", "host_keys")]
    assert writes == []  # not created over, not updated, no key added
    # Deleting a refused one (even with Delete) never deletes their repository
    repos.delete("taken")
    wait_until(lambda: repos.get("taken") is None, WAIT, what="the refused HubGitRepo to go")
    assert repos.path("taken") in repos.forges.repos and len(repos.forges.keys_of(repos.path("taken"))) == 1


def test_the_adopt_annotation_takes_over_an_existing_repository_without_touching_its_keys(repos):
    theirs = public_key()
    repos.forges.foreign(repos.path("adopted"), key_title="theirs", key=theirs)
    repos.create("adopted", keys=[{"name": "ops", "publicKey": public_key()}],
                 annotations={ADOPT_REPOSITORY_ANNOTATION: "true"}, files={"x": "y"})
    status = repos.wait("adopted", "Ready")
    assert status["ownership"] == "Adopted"
    stored = repos.forges.repos[repos.path("adopted")]
    assert stored.commits == []  # only a repository hubwright created is seeded
    assert sorted(k.title for k in stored.keys.values()) == ["ops", "theirs"]


def test_a_key_hubwright_did_not_add_is_never_removed_and_no_write_is_added_unasked(repos):
    ops, ci = public_key(), public_key()
    repos.create("keys", keys=[{"name": "ops", "publicKey": ops}])
    repos.wait("keys", "Ready")
    path = repos.path("keys")
    forge = repos.forges.forge_for("gitea", "https://forge.test", HUB_TOKEN)
    stranger = forge.add_key(forge.get(path), "ci", ci, write=True)  # someone's own key, with write
    since = len(repos.forges.calls)
    # the spec now wants a key named like theirs, and no longer ops
    repos.patch("keys", {"spec": {"deployKeys": [{"name": "ci", "publicKey": public_key()}]}})
    status = wait_until(lambda: (s := repos.status("keys")).get("observedGeneration") == 2 and
                        s.get("phase") == "Stalled" and s, WAIT, what="generation 2")
    held = {k.title: k for k in repos.forges.keys_of(path)}
    assert set(held) == {"ci"} and held["ci"].id == stranger.id and held["ci"].read_only is False  # theirs, as is
    assert status["deployKeys"] == [] and status["message"].startswith("DeployKeyConflict: deploy key ci: a key of")
    assert condition(status, "Stalled")["reason"] == "DeployKeyConflict"
    # a read-only key of ours widened on the forge by hand is put back read only
    repos.patch("keys", {"spec": {"deployKeys": [{"name": "ops", "publicKey": ops}]}})
    repos.wait("keys", "Ready")
    wait_until(lambda: [k.title for k in repos.forges.keys_of(path) if k.title == "ops"], WAIT, what="ops back")
    ours = next(k for k in repos.forges.keys_of(path) if k.title == "ops")
    forge_state = repos.forges.repos[path]
    forge_state.keys[ours.id] = type(ours)(ours.id, ours.title, ours.key, False)  # widened behind our back
    wait_until(lambda: all(k.read_only for k in repos.forges.keys_of(path) if k.title == "ops") and
               any(k.title == "ops" for k in repos.forges.keys_of(path)), WAIT, what="ops read only again")
    adds = [call for call in repos.forges.calls[since:] if call[0] == "add_key"]
    assert len(adds) >= 2 and all(write is False for (_, _, _, write) in adds)  # ops, twice: never with write


def test_a_key_the_forge_refuses_stalls_deploy_key_conflict_not_repository_exists(repos):
    ops = public_key()
    repos.create("dup", keys=[{"name": "ops", "publicKey": ops}])
    repos.wait("dup", "Ready")
    # the same material under a second name: the forge itself refuses it (Gitea: "Key already exists")
    repos.patch("dup", {"spec": {"deployKeys": [{"name": "ops", "publicKey": ops}, {"name": "ops2", "publicKey": ops}]}})
    status = repos.wait("dup", "Stalled", reason="DeployKeyConflict")
    assert status["message"].startswith("DeployKeyConflict: the forge refused a deploy key")
    assert [k["name"] for k in status["deployKeys"]] == ["ops"]  # what is ours stays recorded


def test_a_deploy_key_deleted_on_the_forge_is_added_again(repos):
    repos.create("drift", keys=[{"name": "ops", "publicKey": public_key()}])
    repos.wait("drift", "Ready")
    path = repos.path("drift")
    repos.forges.repos[path].keys.clear()
    wait_until(lambda: [k.title for k in repos.forges.keys_of(path)] == ["ops"], WAIT, what="the key re-added")


# --------------------------------------------------------------------------- faults

def test_the_forge_down_is_retried_with_backoff_and_the_conditions_heal(repos):
    repos.forges.down = True
    repos.create("down")
    status = repos.wait("down", "Retrying", reason="ForgeUnavailable")
    assert condition(status, "Reconciling")["status"] == "True" and condition(status, "Ready")["status"] == "False"
    tries = len(repos.forges.calls)
    wait_until(lambda: len(repos.forges.calls) >= tries + 2, WAIT, what="retries")
    repos.forges.down = False
    status = repos.wait("down", "Ready")
    assert condition(status, "Reconciling")["status"] == "False" and condition(status, "Ready")["status"] == "True"


def test_a_token_without_the_scope_stalls_naming_it_and_heals(repos):
    repos.forges.deny("write:repository")
    repos.create("scope")
    status = repos.wait("scope", "Stalled", reason="TokenScope")
    assert "'write:repository'" in status["message"] and condition(status, "Reconciling")["status"] == "False"
    repos.forges.deny(None)  # the administrator fixed the token: the resync finds it
    status = repos.wait("scope", "Ready")
    assert condition(status, "Stalled")["status"] == "False"


def test_a_missing_secret_stalls_credentials_missing(repos):
    repos.create("nosecret", secret_name=f"absent-{repos.world.suffix}")
    status = repos.wait("nosecret", "Stalled", reason="CredentialsMissing")
    assert f"{repos.world.system}/absent-{repos.world.suffix}" in status["message"]
    assert repos.forges.tokens == []


# --------------------------------------------------------------------------- deletion

def test_retain_keeps_the_repository_and_removes_only_the_managed_keys(repos):
    repos.create("retain", keys=[{"name": "ops", "publicKey": public_key()}])
    repos.wait("retain", "Ready")
    path = repos.path("retain")
    forge = repos.forges.forge_for("gitea", "https://forge.test", HUB_TOKEN)
    forge.add_key(forge.get(path), "theirs", public_key(), write=False)
    repos.delete("retain")
    wait_until(lambda: repos.get("retain") is None, WAIT, what="the finalizer to go")
    assert path in repos.forges.repos and [k.title for k in repos.forges.keys_of(path)] == ["theirs"]


def test_delete_removes_the_repository_and_a_down_forge_holds_the_finalizer(repos):
    repos.create("gone", policy="Delete")
    repos.wait("gone", "Ready")
    repos.forges.down = True
    repos.delete("gone")
    status = repos.wait("gone", "Deleting", reason="ForgeUnavailable")
    assert "finalizer stays" in status["message"] and repos.path("gone") in repos.forges.repos
    repos.forges.down = False
    wait_until(lambda: repos.get("gone") is None, WAIT, what="the deletion")
    assert repos.path("gone") not in repos.forges.repos
