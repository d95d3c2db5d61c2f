"""The HubGitRepo controller (automation/service/gitrepos.py) called directly, over doubles.objects.FakeObjects and
the in-memory forge (doubles/forge.py) with its faults.

Wired by `gitrepos.setup(manager, ...)` on a Manager that is never started: the fake's HubGitRepo changes go to
the manager's informer store (what the watch would deliver), and tests.test_tenants_direct.settle works the queue
off as the worker would. The attacks a real API server stops (a tenant writing a HubGitRepo, reading the hub's
Secret) and the controller's whole life as its least-privileged ServiceAccount stay in
tests/test_gitrepo_controller_envtest.py.
"""
from __future__ import annotations

import base64
from typing import Any

import pytest

from automation.adapters.backoff import Backoff
from automation.adapters.kube.informer import Source
from automation.kit.objects import HUBGITREPOS, SECRETS, ApiError, Conflict
from automation.kit.queue import Outcome
from automation.kit.runtime import Manager
from automation.service import gitrepos as gitrepo_controller
from doubles.forge import HOST_KEY, MemoryForges, public_key
from doubles.objects import FakeObjects
from stacks.names import ADOPT_REPOSITORY_ANNOTATION, API_VERSION, GITREPO, GITREPO_FINALIZER, GITREPOS
from tests.test_tenants_direct import feed, never, settle

SYSTEM, TEAM = "gitrepo-system", "gitrepo-team"
HUB_TOKEN, TENANT_TOKEN = "hub-token", "tenant-token"


def manifest(name: str, path: str, *, keys=(), policy: str = "Retain", files=None, secret_name: str = "forge",
             annotations=None) -> dict:
    meta = {"name": name, "namespace": TEAM, **({"annotations": annotations} if annotations else {})}
    return {"apiVersion": API_VERSION, "kind": GITREPO.kind, "metadata": meta, "spec": {
        "forge": "gitea", "apiURL": "https://forge.test", "credentialsSecretRef": {"name": secret_name},
        "path": path, "description": "the catalog", "deletionPolicy": policy,
        "deployKeys": [dict(k) for k in keys], "templateFiles": files or {}}}


class Repos:
    """The controller as setup() wires it, a fake API server holding the forge token's Secret in the service's
    namespace (and a same-named one of the tenant's), and a fresh forge."""

    def __init__(self) -> None:
        self.kube = FakeObjects()
        self.forges = MemoryForges(token=HUB_TOKEN)
        self.manager = Manager()
        self.controller = gitrepo_controller.setup(self.manager, objects=self.kube, source=Source(GITREPOS, never),
                                                   namespace=SYSTEM, forge_for=self.forges.forge_for,
                                                   backoff=Backoff(0.01, 0.05))
        feed(self.kube, self.manager, {HUBGITREPOS: GITREPOS})
        self.secret(SYSTEM, "forge", {"token": HUB_TOKEN})
        self.secret(TEAM, "forge", {"token": TENANT_TOKEN})  # the tenant's, of the same name: never read

    def secret(self, namespace: str, name: str, data: dict[str, str]) -> None:
        self.kube.create(SECRETS, {"metadata": {"name": name, "namespace": namespace}, "data": {
            key: base64.b64encode(value.encode()).decode() for key, value in data.items()}})

    @staticmethod
    def path(name: str) -> str:
        return f"org/{name}"

    def create(self, name: str, **kwargs: Any) -> dict:
        return self.kube.create(HUBGITREPOS, manifest(name, self.path(name), **kwargs))

    def patch(self, name: str, body: dict) -> None:
        self.kube.patch(HUBGITREPOS, name, body, TEAM)

    def delete(self, name: str) -> None:
        self.kube.delete(HUBGITREPOS, name, TEAM)

    def get(self, name: str) -> dict | None:
        return self.kube.get(HUBGITREPOS, name, TEAM)

    def status(self, name: str) -> dict:
        return (self.get(name) or {}).get("status") or {}

    def settle(self) -> list[tuple[Any, Any]]:
        return settle(self.controller)

    def resync(self) -> list[tuple[Any, Any]]:
        self.controller.resync.call()
        return self.settle()

    def forge(self):
        return self.forges.forge_for("gitea", "https://forge.test", HUB_TOKEN)


@pytest.fixture
def repos() -> Repos:
    return Repos()


def condition(status: dict, type_: str) -> dict:
    return next(c for c in status.get("conditions") or [] if c["type"] == type_)


def phase(status: dict, reason: str | None = None) -> tuple[str, str | None]:
    """(phase, the reason of the condition that is True among Stalled/Reconciling, else None)."""
    true = [c["reason"] for c in status.get("conditions") or [] if c["type"] in ("Stalled", "Reconciling")
            and c["status"] == "True"]
    return status.get("phase"), (true[0] if true else None)


# --------------------------------------------------------------------------- the happy path

def test_the_token_is_read_from_the_services_namespace_never_the_hubgitrepos(repos):
    key = public_key("ops@x")
    repos.create("catalog", keys=[{"name": "ops", "publicKey": key}], files={"README.md": "# catalog\n"})
    repos.settle()
    status = repos.status("catalog")
    assert status["phase"] == "Ready"
    assert set(repos.forges.tokens) == {HUB_TOKEN}  # the same-named Secret of the tenant's namespace: never read
    assert ("get", "secrets", f"{TEAM}/forge") not in repos.kube.calls
    stored = repos.forges.repos[repos.path("catalog")]
    assert stored.files == {"README.md": "# catalog\n"} and len(stored.commits) == 1
    assert status["repositoryID"] == stored.repo.id and status["ownership"] == "Created" and "creating" not in status
    assert status["url"] == stored.repo.http_url and status["sshURL"] == stored.repo.ssh_url
    assert status["hostKeys"] == [HOST_KEY]
    assert [(k["name"], k["write"]) for k in status["deployKeys"]] == [("ops", False)]
    assert [(k.title, k.read_only) for k in stored.keys.values()] == [("ops", True)]
    assert condition(status, "Ready")["status"] == "True" and condition(status, "Stalled")["status"] == "False"
    assert repos.get("catalog")["metadata"]["finalizers"] == [GITREPO_FINALIZER]
    assert status["observedGeneration"] == repos.get("catalog")["metadata"]["generation"]
    # Seeded once: resyncs later (each lists the keys again), still one commit and no status write.
    writes = len(repos.kube.status_writes)
    looks = lambda: sum(1 for call in repos.forges.calls if call[:2] == ("keys", repos.path("catalog")))  # noqa: E731
    seen = looks()
    repos.resync()
    repos.resync()
    assert looks() == seen + 2
    assert len(stored.commits) == 1 and len(repos.kube.status_writes) == writes


def test_the_host_keys_pinned_in_the_secret_are_used_not_asked_of_the_forge(repos):
    repos.secret(SYSTEM, "pinned", {"token": HUB_TOKEN, "hostKeys": "# ours\n[forge.test]:2222 ssh-ed25519 AAAA\n"})
    repos.create("pinned", secret_name="pinned")
    repos.settle()
    assert repos.status("pinned")["hostKeys"] == ["[forge.test]:2222 ssh-ed25519 AAAA"]
    assert not [call for call in repos.forges.calls if call[0] == "host_keys"]


def test_a_create_whose_answer_is_lost_and_a_failed_seed_are_finished_on_the_retry(repos):
    """status.creating claims the repository a lost create made (it is not refused as someone else's), and the
    first commit is written once, on the retry, before the repository is recorded."""
    repos.forges.fail_once("create")
    repos.forges.fail_once("seed")
    repos.create("lost", files={"README.md": "x\n"})
    seen = repos.settle()
    assert [outcome for _, outcome in seen][:2] == [Outcome.retry(), Outcome.retry()]
    status = repos.status("lost")
    stored = repos.forges.repos[repos.path("lost")]
    assert status["phase"] == "Ready"
    assert status["ownership"] == "Created" and status["repositoryID"] == stored.repo.id
    assert stored.commits == ["hubwright: the template's first commit"] and stored.files == {"README.md": "x\n"}
    assert [call[0] for call in repos.forges.calls].count("create") == 1
    # The intent was written before the create, and withdrawn once the repository was recorded.
    intents = [w.status for w in repos.kube.status_writes if "creating" in w.status]
    assert intents[0] == {"creating": repos.path("lost"), "repositoryID": None, "ownership": None, "deployKeys": []}
    assert "creating" not in status


# --------------------------------------------------------------------------- ownership

def test_someone_elses_repository_is_refused_and_untouched_until_the_admin_adopts_it(repos):
    repos.forges.foreign(repos.path("taken"), key_title="theirs", key=public_key())
    repos.create("taken", keys=[{"name": "ops", "publicKey": public_key()}], policy="Delete")
    seen = repos.settle()
    assert seen[-1][1] == Outcome.stall("RepositoryExists", recheck=300.0)
    status = repos.status("taken")
    assert phase(status) == ("Stalled", "RepositoryExists")
    assert status["message"].startswith(f"RepositoryExists: {repos.path('taken')} exists on the forge and was not "
                                        "made by hubwright; set hubwright.io/adopt-repository=true")
    assert "repositoryID" not in status and "url" not in status
    writes = [call for call in repos.forges.calls if call[0] not in ("get", "keys", "check", "host_keys")]
    assert writes == []  # not created over, not updated, no key added
    # Deleting a refused one (even with Delete) never deletes their repository.
    repos.delete("taken")
    repos.settle()
    assert repos.get("taken") is None
    assert repos.path("taken") in repos.forges.repos and len(repos.forges.keys_of(repos.path("taken"))) == 1


def test_the_adopt_annotation_takes_over_an_existing_repository_without_touching_its_keys(repos):
    repos.forges.foreign(repos.path("adopted"), key_title="theirs", key=public_key())
    repos.create("adopted", keys=[{"name": "ops", "publicKey": public_key()}],
                 annotations={ADOPT_REPOSITORY_ANNOTATION: "true"}, files={"x": "y"})
    repos.settle()
    status = repos.status("adopted")
    assert status["phase"] == "Ready" and status["ownership"] == "Adopted"
    stored = repos.forges.repos[repos.path("adopted")]
    assert stored.commits == []  # only a repository hubwright created is seeded
    assert sorted(k.title for k in stored.keys.values()) == ["ops", "theirs"]
    assert stored.repo.description == "the catalog"  # the description follows the spec


def test_the_adopt_annotation_set_later_wakes_the_controller(repos):
    repos.forges.foreign(repos.path("later"))
    repos.create("later")
    repos.settle()
    assert phase(repos.status("later")) == ("Stalled", "RepositoryExists")
    repos.patch("later", {"metadata": {"annotations": {ADOPT_REPOSITORY_ANNOTATION: "true"}}})
    assert repos.controller.queue.depth == 1  # an annotation is what a reconcile reads: it wakes it
    repos.settle()
    assert repos.status("later")["ownership"] == "Adopted"


# --------------------------------------------------------------------------- deploy keys

def test_a_key_hubwright_did_not_add_is_never_removed_and_no_write_is_added_unasked(repos):
    ops, ci = public_key(), public_key()
    repos.create("keys", keys=[{"name": "ops", "publicKey": ops}])
    repos.settle()
    path = repos.path("keys")
    forge = repos.forge()
    stranger = forge.add_key(forge.get(path), "ci", ci, write=True)  # someone's own key, with write
    since = len(repos.forges.calls)
    # The spec now wants a key named like theirs, and no longer ops.
    repos.patch("keys", {"spec": {"deployKeys": [{"name": "ci", "publicKey": public_key()}]}})
    repos.settle()
    status = repos.status("keys")
    assert status["observedGeneration"] == 2 and phase(status) == ("Stalled", "DeployKeyConflict")
    held = {k.title: k for k in repos.forges.keys_of(path)}
    assert set(held) == {"ci"} and held["ci"].id == stranger.id and held["ci"].read_only is False  # theirs, as is
    assert status["deployKeys"] == [] and status["message"].startswith("DeployKeyConflict: deploy key ci: a key of")
    # A read-only key of ours widened on the forge by hand is put back read only.
    repos.patch("keys", {"spec": {"deployKeys": [{"name": "ops", "publicKey": ops}]}})
    repos.settle()
    assert repos.status("keys")["phase"] == "Ready"
    ours = next(k for k in repos.forges.keys_of(path) if k.title == "ops")
    repos.forges.repos[path].keys[ours.id] = type(ours)(ours.id, ours.title, ours.key, False)  # widened
    repos.resync()
    assert [k.read_only for k in repos.forges.keys_of(path) if k.title == "ops"] == [True]
    adds = [call for call in repos.forges.calls[since:] if call[0] == "add_key"]
    assert len(adds) == 2 and all(write is False for (_, _, _, write) in adds)  # ops, twice: never with write


def test_a_key_the_forge_refuses_stalls_deploy_key_conflict_not_repository_exists(repos):
    ops = public_key()
    repos.create("dup", keys=[{"name": "ops", "publicKey": ops}])
    repos.settle()
    # The same material under a second name: the forge itself refuses it (Gitea: "Key already exists").
    repos.patch("dup", {"spec": {"deployKeys": [{"name": "ops", "publicKey": ops},
                                                {"name": "ops2", "publicKey": ops}]}})
    repos.settle()
    status = repos.status("dup")
    assert phase(status) == ("Stalled", "DeployKeyConflict")
    assert status["message"].startswith("DeployKeyConflict: the forge refused a deploy key")
    assert [k["name"] for k in status["deployKeys"]] == ["ops"]  # what is ours stays recorded


def test_a_deploy_key_deleted_on_the_forge_is_added_again(repos):
    repos.create("drift", keys=[{"name": "ops", "publicKey": public_key()}])
    repos.settle()
    path = repos.path("drift")
    repos.forges.repos[path].keys.clear()
    repos.resync()
    assert [k.title for k in repos.forges.keys_of(path)] == ["ops"]


# --------------------------------------------------------------------------- faults

def test_the_forge_down_is_retried_with_backoff_and_the_conditions_heal(repos):
    repos.forges.down = True
    repos.create("down")
    repos.controller.reconcile(f"{TEAM}/down")
    status = repos.status("down")
    assert phase(status) == ("Retrying", "ForgeUnavailable")
    assert condition(status, "Reconciling")["status"] == "True" and condition(status, "Ready")["status"] == "False"
    # Through the queue: each try fails and is put back with a longer backoff.
    repos.controller.queue.add(f"{TEAM}/down")
    settle(repos.controller, wait=0.0)
    assert repos.controller.queue.failures(f"{TEAM}/down") == 1 and repos.controller.queue.next_due() is not None
    repos.forges.down = False
    repos.settle()
    status = repos.status("down")
    assert status["phase"] == "Ready" and repos.controller.queue.failures(f"{TEAM}/down") == 0
    assert condition(status, "Reconciling")["status"] == "False" and condition(status, "Ready")["status"] == "True"


def test_a_token_without_the_scope_stalls_naming_it_and_heals(repos):
    repos.forges.deny("write:repository")
    repos.create("scope")
    repos.settle()
    status = repos.status("scope")
    assert phase(status) == ("Stalled", "TokenScope")
    assert "'write:repository'" in status["message"] and condition(status, "Reconciling")["status"] == "False"
    repos.forges.deny(None)  # the administrator fixed the token: the resync finds it
    repos.resync()
    status = repos.status("scope")
    assert status["phase"] == "Ready" and condition(status, "Stalled")["status"] == "False"


@pytest.mark.parametrize("refused", [None, ApiError(403, "Forbidden")])
def test_a_missing_or_unreadable_secret_stalls_credentials_missing(repos, refused):
    if refused is not None:  # every read (the finalizer's write wakes it once more)
        repos.kube.fail("get", SECRETS, refused, times=10)
    repos.create("nosecret", secret_name="absent" if refused is None else "forge")
    repos.settle()
    status = repos.status("nosecret")
    assert phase(status) == ("Stalled", "CredentialsMissing")
    assert f"{SYSTEM}/{'absent' if refused is None else 'forge'}" in status["message"]
    assert repos.forges.tokens == []


def test_an_invalid_spec_stalls_before_the_finalizer_and_the_forge(repos):
    bad = manifest("bad", "not a path", keys=[{"name": "ops", "publicKey": "not a key"}])
    repos.kube.create(HUBGITREPOS, bad)
    repos.settle()
    status = repos.status("bad")
    assert phase(status) == ("Stalled", "InvalidSpec") and "spec." in status["message"]
    assert not repos.get("bad")["metadata"].get("finalizers") and repos.forges.calls == []


def test_an_api_error_is_retried_with_backoff_and_a_finalizer_conflict_read_again(repos):
    repos.kube.fail("get", HUBGITREPOS, ApiError(500, "Internal Server Error"))
    repos.kube.fail("patch", HUBGITREPOS, Conflict(409, "the object has been modified"))
    repos.create("flaky")
    seen = repos.settle()
    assert isinstance(seen[0][1], ApiError)
    assert repos.status("flaky")["phase"] == "Ready"
    assert repos.get("flaky")["metadata"]["finalizers"] == [GITREPO_FINALIZER]
    assert repos.kube.conflicts == 0  # the conflict was the injected one: answered by a fresh read


def test_its_own_status_write_does_not_wake_it(repos):
    repos.create("quiet")
    repos.settle()
    repos.kube.patch_status(HUBGITREPOS, "quiet", {"message": "someone"}, TEAM)
    assert repos.controller.queue.depth == 0
    assert repos.controller.reconcile(f"{TEAM}/gone") == Outcome.done()


# --------------------------------------------------------------------------- deletion

def test_retain_keeps_the_repository_and_removes_only_the_managed_keys(repos):
    repos.create("retain", keys=[{"name": "ops", "publicKey": public_key()}])
    repos.settle()
    path = repos.path("retain")
    forge = repos.forge()
    forge.add_key(forge.get(path), "theirs", public_key(), write=False)
    repos.delete("retain")
    repos.settle()
    assert repos.get("retain") is None
    assert path in repos.forges.repos and [k.title for k in repos.forges.keys_of(path)] == ["theirs"]


def test_delete_removes_the_repository_and_a_down_forge_holds_the_finalizer(repos):
    repos.create("gone", policy="Delete")
    repos.settle()
    repos.forges.down = True
    repos.delete("gone")
    repos.controller.reconcile(f"{TEAM}/gone")
    status = repos.status("gone")
    assert phase(status) == ("Deleting", "ForgeUnavailable")
    assert "finalizer stays" in status["message"] and repos.path("gone") in repos.forges.repos
    assert repos.get("gone")["metadata"]["finalizers"] == [GITREPO_FINALIZER]
    repos.forges.down = False
    repos.settle()
    assert repos.get("gone") is None and repos.path("gone") not in repos.forges.repos


def test_setup_declares_the_source_a_worker_and_the_resync(repos):
    manager = repos.manager
    assert set(manager.informers) == {GITREPOS} and manager.store(GITREPOS) is repos.controller.store
    assert [(c.name, c.workers.count) for c in manager.controllers] == [("gitrepo", 1)]
    assert repos.controller.resync in manager._runnables
