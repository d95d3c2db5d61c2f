"""The object port's contract, on the real API server (KubeObjects over kube-apiserver, the project's CRDs installed)
and on the fake every controller's direct tests use (doubles.objects.FakeObjects): one set of assertions, so a
direct test over the fake means what it would mean against the API server.

What it pins: get/patch/patch_status/delete of something missing read as None/False; a write at a stale
resourceVersion is a Conflict; a create of an existing name is a Conflict; a spec change moves the generation and a
status write does not; a deleted object with finalizers is held until the finalizer helper releases it; the
finalizer helper reads again after a conflict; core and RBAC kinds go through the same port.
"""
from __future__ import annotations

import uuid
from typing import Iterator

import pytest

from automation.adapters.kube.objects import KubeObjects
from automation.kit.finalizers import ensure_finalizer, release_finalizer
from automation.kit.objects import HUBTENANTS, NAMESPACES, ROLEBINDINGS, Conflict, Obj, Objects
from doubles.objects import FakeObjects
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture

FINALIZER = "hubwright.io/port-test"


@pytest.fixture(params=["fake", pytest.param("kube-apiserver", marks=pytest.mark.live)])
def objects(request) -> Iterator[Objects]:
    if request.param == "fake":
        yield FakeObjects()
        return
    env = request.getfixturevalue("kube_apiserver")
    api_client = env.api_client()
    port = KubeObjects(api_client)
    yield port
    port.close()
    api_client.close()


def _tenant(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"namespace": name, "admins": [{"kind": "User", "name": "alice"}]}}


def test_what_is_missing_reads_as_none_and_deletes_as_false(objects):
    name = f"missing-{uuid.uuid4().hex[:8]}"
    assert objects.get(HUBTENANTS, name) is None
    assert objects.patch(HUBTENANTS, name, {"metadata": {"labels": {"a": "b"}}}) is None
    assert objects.patch_status(HUBTENANTS, name, {"message": "x"}) is None
    assert objects.delete(HUBTENANTS, name) is False


def test_a_stale_resource_version_and_a_second_create_are_conflicts(objects):
    name = f"t-{uuid.uuid4().hex[:8]}"
    made = objects.create(HUBTENANTS, _tenant(name))
    stale = Obj(made).resource_version
    moved = objects.patch(HUBTENANTS, name, {"metadata": {"labels": {"a": "1"}, "resourceVersion": stale}})
    assert moved is not None and Obj(moved).labels["a"] == "1"
    with pytest.raises(Conflict):
        objects.patch(HUBTENANTS, name, {"metadata": {"labels": {"a": "2"}, "resourceVersion": stale}})
    with pytest.raises(Conflict):
        objects.patch_status(HUBTENANTS, name, {"message": "late"}, resource_version=stale)
    with pytest.raises(Conflict):
        objects.create(HUBTENANTS, _tenant(name))
    objects.delete(HUBTENANTS, name)


def test_a_spec_change_moves_the_generation_and_a_status_write_does_not(objects):
    name = f"t-{uuid.uuid4().hex[:8]}"
    made = Obj(objects.create(HUBTENANTS, _tenant(name)))
    assert made.generation == 1 and made.uid
    respec = Obj(objects.patch(HUBTENANTS, name, {"spec": {"admins": [{"kind": "User", "name": "bob"}]}}) or {})
    assert respec.generation == 2
    written = Obj(objects.patch_status(HUBTENANTS, name, {"message": "hello"},
                                       resource_version=respec.resource_version) or {})
    assert written.generation == 2 and written.status["message"] == "hello"
    assert written.spec["admins"] == [{"kind": "User", "name": "bob"}]
    objects.delete(HUBTENANTS, name)


def test_a_finalizer_holds_a_deletion_until_the_helper_releases_it_reading_again_after_a_conflict(objects):
    name = f"t-{uuid.uuid4().hex[:8]}"
    made = objects.create(HUBTENANTS, _tenant(name))
    held = ensure_finalizer(objects, HUBTENANTS, made, FINALIZER)
    assert held is not None and Obj(held).finalizers == [FINALIZER]
    # `made` is stale now: adding a second finalizer from it conflicts once, reads again and keeps the first.
    both = ensure_finalizer(objects, HUBTENANTS, made, "hubwright.io/second")
    assert both is not None and Obj(both).finalizers == [FINALIZER, "hubwright.io/second"]
    assert objects.delete(HUBTENANTS, name) is True
    deleting = objects.get(HUBTENANTS, name)
    assert deleting is not None and Obj(deleting).deleting
    after = release_finalizer(objects, HUBTENANTS, deleting, "hubwright.io/second")
    assert after is not None and Obj(after).finalizers == [FINALIZER]
    release_finalizer(objects, HUBTENANTS, after, FINALIZER)
    assert objects.get(HUBTENANTS, name) is None  # the last finalizer gone: the deletion completes


def test_core_and_rbac_kinds_go_through_the_same_port(objects):
    namespace = f"ns-{uuid.uuid4().hex[:8]}"
    objects.create(NAMESPACES, {"metadata": {"name": namespace, "labels": {"hubwright.io/tenant": "acme"}}})
    assert Obj(objects.get(NAMESPACES, namespace) or {}).labels["hubwright.io/tenant"] == "acme"
    binding = {"metadata": {"name": "admins", "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}
    objects.create(ROLEBINDINGS, binding, namespace)
    listed = objects.list(ROLEBINDINGS, namespace)
    assert [Obj(item).name for item in listed["items"]] == ["admins"]
    assert objects.delete(ROLEBINDINGS, "admins", namespace) is True
    assert objects.get(ROLEBINDINGS, "admins", namespace) is None


def test_a_delete_with_a_uid_precondition_spares_another_object_of_the_name(objects):
    name = f"t-{uuid.uuid4().hex[:8]}"
    first = Obj(objects.create(HUBTENANTS, _tenant(name)))
    objects.delete(HUBTENANTS, name)
    second = Obj(objects.create(HUBTENANTS, _tenant(name)))  # made since the first was read
    with pytest.raises(Conflict):
        objects.delete(HUBTENANTS, name, uid=first.uid)
    assert Obj(objects.get(HUBTENANTS, name) or {}).uid == second.uid
    assert objects.delete(HUBTENANTS, name, uid=second.uid) is True
