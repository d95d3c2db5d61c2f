"""A HubTenant's Git repository templates (automation/service/gitrepo_templates.py) called directly, beside the
tenant controller and the HubGitRepo controller, all three wired by their setup() on one Manager (as serve.Pipeline
wires them) over one doubles.objects.FakeObjects and the in-memory forge; tests.test_tenants_direct.settle works
the three queues off in this thread.

The fake has no garbage collector: an owner deleted taking its HubGitRepo with it (and that HubGitRepo's finalizer
carrying out the deletion policy on the forge) stays in tests/test_gitrepo_templates_envtest.py.
"""
from __future__ import annotations

import base64
import time
from typing import Any

import pytest

from automation.adapters.backoff import Backoff
from automation.adapters.kube.informer import Source
from automation.kit.objects import HUBCLUSTERS, HUBGITREPOS, HUBTENANTS, NAMESPACES, SECRETS, Conflict
from automation.kit.runtime import Manager
from automation.service import gitrepo_templates, gitrepos, tenants
from doubles.factories import HUB_ACCOUNT
from doubles.forge import MemoryForges, public_key
from doubles.objects import FakeObjects
from stacks.gitrepos import keys
from stacks.names import AGENT_DEPLOY_KEY, API_VERSION, GITREPO, GITREPO_ROLE_LABEL, GITREPOS, TENANTS
from stacks.times import rfc3339_seconds
from tests.test_tenants_direct import feed, never, settle

SYSTEM = "tpl-system"
TOKEN = "hub-token"


class Hub:
    """The three controllers on one runtime, a fake API server, a fresh forge."""

    def __init__(self) -> None:
        self.kube = FakeObjects()
        self.forges = MemoryForges(token=TOKEN)
        self.manager = Manager()
        for kind in ("clusters", "namespaces"):
            self.manager.source(Source(kind, never))
        backoff = Backoff(0.01, 0.05)
        self.tenants = tenants.setup(self.manager, objects=self.kube, source=Source(TENANTS, never),
                                     hub_account=lambda: HUB_ACCOUNT, backoff=backoff)
        self.gitrepos = gitrepos.setup(self.manager, objects=self.kube, source=Source(GITREPOS, never),
                                       namespace=SYSTEM, forge_for=self.forges.forge_for, backoff=backoff)
        self.templates = gitrepo_templates.setup(self.manager, objects=self.kube, tenants=self.tenants.tenants,
                                                 backoff=backoff)
        feed(self.kube, self.manager, {HUBTENANTS: TENANTS, HUBCLUSTERS: "clusters", NAMESPACES: "namespaces",
                                       HUBGITREPOS: GITREPOS})
        self.kube.create(SECRETS, {"metadata": {"name": "forge", "namespace": SYSTEM},
                                   "data": {"token": base64.b64encode(TOKEN.encode()).decode()}})

    def settle(self) -> list[tuple[Any, Any]]:
        return settle(self.tenants, self.gitrepos, self.templates)

    def resync(self) -> None:
        self.templates.resync.call()
        self.settle()

    @staticmethod
    def template(*, policy: str = "Retain", keys_=(), files=None) -> dict:
        return {"forge": "gitea", "apiURL": "https://forge.test", "credentialsSecretRef": {"name": "forge"},
                "owner": "org", "deletionPolicy": policy, "deployKeys": list(keys_),
                "templateFiles": files if files is not None else {"README.md": "hello\n"}}

    def tenant(self, name: str, **spec: Any) -> dict:
        raw = self.kube.create(HUBTENANTS, {"apiVersion": API_VERSION, "kind": "HubTenant",
                                            "metadata": {"name": name}, "spec": spec})
        self.settle()
        assert self.kube.get(HUBTENANTS, name)["status"]["namespace"] == name
        return raw

    def cluster(self, namespace: str, name: str) -> dict:
        raw = self.kube.create(HUBCLUSTERS, {"apiVersion": API_VERSION, "kind": "HubCluster",
                                             "metadata": {"name": name, "namespace": namespace},
                                             "spec": {"displayName": "registered only"}})
        self.settle()
        return raw

    def agent_key(self, namespace: str, cluster: str, key: str | None) -> None:
        """What the registry API writes when the cluster's agent sends its key (None: a new bootstrap token)."""
        value = {"publicKey": key, "fingerprint": keys.parse(key).fingerprint,
                 "time": rfc3339_seconds(time.time())} if key else None
        self.kube.patch_status(HUBCLUSTERS, cluster, {"agentKey": value}, namespace)
        self.settle()

    def repo(self, namespace: str, name: str) -> dict | None:
        return self.kube.get(HUBGITREPOS, name, namespace)

    def ready(self, namespace: str, name: str) -> dict:
        repo = self.repo(namespace, name)
        assert repo is not None and (repo.get("status") or {}).get("phase") == "Ready", repo
        return repo


@pytest.fixture
def hub() -> Hub:
    return Hub()


def owner_uids(raw: dict) -> list[str]:
    return [ref["uid"] for ref in raw["metadata"].get("ownerReferences") or [] if ref.get("controller")]


def test_the_templates_make_owned_hubgitrepos_and_the_agents_key_follows_the_cluster(hub):
    ops = public_key("ops@x")
    raw = hub.tenant("acme", gitRepoTemplate=hub.template(keys_=[{"name": "ops", "publicKey": ops}]),
                     clusterTemplate={"gitRepoTemplate": hub.template()})
    mine = hub.ready("acme", "tenant-acme")
    assert owner_uids(mine) == [raw["metadata"]["uid"]] and mine["spec"]["path"] == "org/acme"
    assert mine["metadata"]["labels"][GITREPO_ROLE_LABEL] == "tenant"
    assert [k["name"] for k in mine["spec"]["deployKeys"]] == ["ops"]
    assert hub.forges.repos["org/acme"].files == {"README.md": "hello\n"}

    cluster = hub.cluster("acme", "c1")
    catalog = hub.ready("acme", "cluster-c1")
    assert owner_uids(catalog) == [cluster["metadata"]["uid"]] and catalog["spec"]["path"] == "org/acme.c1"
    assert catalog["spec"]["deployKeys"] == [] and catalog["spec"]["displayName"] == "registered only"
    # The agent pushes its key (the registry API writes status.agentKey): the catalog's read-only deploy key.
    agent = public_key("agent@c1")
    hub.agent_key("acme", "c1", agent)
    assert [(k.title, k.read_only) for k in hub.forges.keys_of("org/acme.c1")] == [(AGENT_DEPLOY_KEY, True)]
    # A new bootstrap token clears the key: it leaves the repository.
    hub.agent_key("acme", "c1", None)
    assert hub.forges.keys_of("org/acme.c1") == []


def test_a_clusters_status_written_by_the_stacks_controller_does_not_wake_the_templates(hub):
    hub.tenant("quiet", clusterTemplate={"gitRepoTemplate": hub.template()})
    hub.cluster("quiet", "c1")
    hub.kube.patch_status(HUBCLUSTERS, "c1", {"conditions": [{"type": "Ready", "status": "True"}]}, "quiet")
    assert hub.templates.queue.depth == 0
    hub.kube.patch(HUBCLUSTERS, "c1", {"spec": {"displayName": "edge one"}}, "quiet")  # what the catalog is made of
    assert hub.templates.queue.depth == 1
    hub.settle()
    assert hub.repo("quiet", "cluster-c1")["spec"]["displayName"] == "edge one"


def test_a_template_removed_deletes_only_the_hubgitrepos_it_made(hub):
    hub.tenant("t2", clusterTemplate={"gitRepoTemplate": hub.template()})
    hub.cluster("t2", "made")
    hub.ready("t2", "cluster-made")
    # The administrator's own HubGitRepo, under the name the template would give the next cluster's.
    own = {"apiVersion": API_VERSION, "kind": GITREPO.kind, "metadata": {"name": "cluster-own", "namespace": "t2"},
           "spec": {**{k: v for k, v in hub.template().items() if k != "owner"}, "path": "admin/own"}}
    hub.kube.create(HUBGITREPOS, own)
    hub.cluster("t2", "own")
    hub.resync()
    kept = hub.repo("t2", "cluster-own")
    assert kept["spec"]["path"] == "admin/own" and "ownerReferences" not in kept["metadata"]
    assert GITREPO_ROLE_LABEL not in (kept["metadata"].get("labels") or {})
    assert kept["metadata"]["generation"] == 1
    hub.kube.patch(HUBTENANTS, "t2", {"spec": {"clusterTemplate": None}})
    hub.settle()
    assert hub.repo("t2", "cluster-made") is None  # deleted, its finalizer carried out (Retain: the repo stays)
    hub.resync()  # a resync more: the administrator's stays
    assert hub.repo("t2", "cluster-own")["spec"]["path"] == "admin/own"
    assert "org/t2.made" in hub.forges.repos
    assert ("delete", "hubgitrepos", "t2/cluster-own") not in hub.kube.calls


def test_the_spec_is_replaced_whole_so_what_the_template_drops_goes(hub):
    ops = public_key()
    hub.tenant("t3", gitRepoTemplate=hub.template(keys_=[{"name": "ops", "publicKey": ops}],
                                                  files={"README.md": "hello\n", "old.txt": "x\n"}))
    assert set(hub.ready("t3", "tenant-t3")["spec"]["templateFiles"]) == {"README.md", "old.txt"}
    hub.kube.patch(HUBTENANTS, "t3", {"spec": {"gitRepoTemplate": hub.template(  # a merge patch: None removes
        files={"README.md": "hi\n", "old.txt": None})}})
    assert set(hub.kube.get(HUBTENANTS, "t3")["spec"]["gitRepoTemplate"]["templateFiles"]) == {"README.md"}
    hub.settle()
    repo = hub.repo("t3", "tenant-t3")
    assert repo["spec"]["templateFiles"] == {"README.md": "hi\n"} and repo["spec"]["deployKeys"] == []
    assert hub.forges.keys_of("org/t3") == []  # the key taken out of the template left the repository


def test_a_generated_hubgitrepo_edited_by_hand_is_put_back(hub):
    hub.tenant("t4", gitRepoTemplate=hub.template())
    hub.kube.patch(HUBGITREPOS, "tenant-t4", {"spec": {"path": "org/elsewhere"},
                                              "metadata": {"labels": {"extra": "kept"}}}, "t4")
    hub.settle()
    repo = hub.repo("t4", "tenant-t4")
    assert repo["spec"]["path"] == "org/t4" and repo["metadata"]["labels"]["extra"] == "kept"


def test_a_hubgitrepo_made_meanwhile_is_looked_at_again(hub):
    hub.kube.fail("create", HUBGITREPOS, Conflict(409, "already exists"))
    hub.kube.create(HUBTENANTS, {"apiVersion": API_VERSION, "kind": "HubTenant", "metadata": {"name": "t5"},
                                 "spec": {"gitRepoTemplate": hub.template()}})
    seen = hub.settle()
    errors = [outcome for key, outcome in seen if key == "tenant:t5" and isinstance(outcome, Exception)]
    assert len(errors) == 1 and "was created meanwhile: looked at again" in str(errors[0])
    assert hub.ready("t5", "tenant-t5")
    assert hub.templates.queue.failures("tenant:t5") == 0


def test_nothing_is_made_for_a_tenant_without_its_namespace_or_being_deleted(hub):
    hub.kube.create(HUBTENANTS, {"apiVersion": API_VERSION, "kind": "HubTenant", "metadata": {"name": "t6"},
                                 "spec": {"accountID": HUB_ACCOUNT, "gitRepoTemplate": hub.template()}})
    hub.settle()  # refused (the hub account): no namespace, so no HubGitRepo
    assert hub.kube.objects_of(HUBGITREPOS) == {}
    hub.tenant("t7", gitRepoTemplate=hub.template())
    hub.kube.patch(HUBTENANTS, "t7", {"metadata": {"finalizers": ["test/hold"]}})
    hub.kube.delete(HUBTENANTS, "t7")
    hub.kube.patch(HUBTENANTS, "t7", {"spec": {"gitRepoTemplate": None}})
    hub.settle()
    assert hub.repo("t7", "tenant-t7") is not None  # going: the garbage collector's, not the template's removal


def test_setup_declares_the_handlers_a_worker_and_the_resync(hub):
    assert [(c.name, c.workers.count) for c in hub.manager.controllers] == [
        ("tenant", 1), ("gitrepo", 1), ("gitrepo-templates", 1)]
    assert hub.templates.resync in hub.manager._runnables
    assert hub.templates._cluster_store() is hub.manager.store("clusters")
