"""stacks.sources.families: the one table of source families, and everything that lists them read from it."""
from __future__ import annotations

from stacks.options import option
from stacks.sources.families import (BY_NAME, FAMILIES, KINDS, SOURCES, controlling, family_of, help_text, kind_of,
                                     of_source_project)
from stacks.sources.hypershift import GUEST_PROXY_WRITER
from stacks.sources.kinds import HOSTED_CLUSTER, HOSTED_CONTROL_PLANE
from stacks.sources.watched import rules


def test_each_family_is_one_row_and_every_list_comes_from_the_rows():
    assert [f.name for f in FAMILIES] == ["capi", "hive", "hypershift"] == list(BY_NAME)
    assert SOURCES == tuple(f.source for f in FAMILIES)
    assert set(KINDS) == {k for f in FAMILIES for k in (f.source, *f.related)}
    for family in FAMILIES:
        assert family_of(family.source) is family
        assert any(family.source.group == g for g in family.groups)  # its own objects are never parsed as ours
    assert family_of(HOSTED_CONTROL_PLANE) is None  # read, not a source


def test_the_rbac_is_each_familys_source_and_what_it_reads():
    granted = {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in rules()}
    for family in FAMILIES:
        assert granted[(family.source.group, family.source.plural)] == ["get", "list", "watch", "update", "patch"]
        assert granted[(family.source.group, f"{family.source.plural}/status")] == ["get", "patch"]
        for kind in family.related:
            assert granted[(kind.group, kind.plural)] == ["get", "list", "watch"]  # read only
    assert granted[("hypershift.openshift.io", "hostedcontrolplanes")] == ["get", "list", "watch"]


def test_a_plan_folder_never_parses_any_object_of_a_source_project_as_ours():
    for api_version in ("cluster.x-k8s.io/v1beta2", "bootstrap.cluster.x-k8s.io/v1beta2", "hive.openshift.io/v1",
                        "hypershift.openshift.io/v1beta1", "hypershift.openshift.io/v1alpha1"):
        assert of_source_project({"apiVersion": api_version, "kind": "NodePool"})
    for api_version in ("hubwright.io/v1alpha1", "v1", "x-k8s.io/v1", "notcluster.x-k8s.io.example/v1"):
        assert not of_source_project({"apiVersion": api_version, "kind": "Cluster"})
    assert kind_of({"apiVersion": "hypershift.openshift.io/v1alpha1", "kind": "HostedCluster"}) == HOSTED_CLUSTER
    assert kind_of({"apiVersion": "hypershift.openshift.io/v1", "kind": "HostedCluster"}) is None  # not served


def test_the_sources_option_names_every_family():
    sources = option("sources")
    assert sources.help == help_text()
    assert all(f.name in sources.help and f.source.kind in sources.help for f in FAMILIES)


def test_who_writes_a_guests_node_proxy_is_read_from_the_controlling_source():
    hosted = [{"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedCluster", "name": "hc-1", "uid": "u",
               "controller": True}]
    family = controlling(hosted)
    assert family is not None and family.guest_proxy_writer == GUEST_PROXY_WRITER
    capi = [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c", "uid": "u", "controller": True}]
    assert controlling(capi).guest_proxy_writer is None  # type: ignore[union-attr]
    assert controlling([{**hosted[0], "controller": False}]) is None and controlling(None) is None


def test_what_a_family_reads_elsewhere_is_watched_in_every_namespace_even_with_watch_namespace():
    from automation.adapters.kube.informer import sources as kube_sources
    from automation.adapters.kube.sources import source_of
    from kubernetes import client
    api = client.ApiClient()
    assert source_of(api, HOSTED_CONTROL_PLANE, "acme").args == (HOSTED_CONTROL_PLANE.group, "v1beta1",
                                                                 HOSTED_CONTROL_PLANE.plural)  # every namespace
    assert source_of(api, HOSTED_CLUSTER, "acme").args[2] == "acme"  # the sources themselves: where asked
    one = kube_sources(api, hub_name="h", role_map_name="r", role_map_namespace="n", watch_namespace="acme")
    every = kube_sources(api, hub_name="h", role_map_name="r", role_map_namespace="n", watch_namespace="acme",
                         every_namespace=True)
    assert one["namespaces"].kwargs == {"field_selector": "metadata.name=acme"} and not every["namespaces"].kwargs
