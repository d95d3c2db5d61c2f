"""Deletion protection (stacks.admission: cluster_protection_policy, source_protection_policy) in the real
kube-apiserver, driven by the real kubectl and by the client a GitOps prune uses: a HubCluster, a Cluster API
Cluster, a Hive ClusterDeployment or a HyperShift HostedCluster annotated `hubwright.io/deletion-protection: "true"`
cannot be deleted, whichever way the DELETE comes (kubectl, the API, a deletecollection, `kubectl delete --all`, the
namespace controller, the garbage collector), until the annotation is lifted; the refusal says how, and the command it
gives works. Every other object is deleted as before (the policies' matchConditions do not match it).

The trial (issue #50): an accidental `kubectl delete hubcluster prod-db`, or a GitOps tool pruning a file, destroyed a
cluster's networking.

The shared server's tests bind the policies to this module's namespaces only (namespaceSelector); the namespace and
garbage-collector edges run on a server of their own with a kube-controller-manager running those two controllers.
"""
from __future__ import annotations

import json
import re
import subprocess
import uuid
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from doubles.envtest import EnvTest, find_binary, install_crds
from doubles.factories import cluster_doc, hub
from doubles.kubectl import against
from doubles.service_env import wait_until
from doubles.sources import aws_cluster_doc, capi_cluster_doc, cluster_deployment_doc
from doubles.thirdparty import crds
from stacks.admission import (CLUSTER_PROTECTION_POLICY, SOURCE_PROTECTION_POLICY,
                              cluster_protection_policy, policy_binding, source_protection_policy)
from stacks.names import CLUSTERS, DELETION_PROTECTION_ANNOTATION, GROUP, VERSION
from stacks.sources.derive import derive
from stacks.sources.kinds import CAPI_CLUSTER, CLUSTER_DEPLOYMENT, HOSTED_CLUSTER, SourceKind
from stacks.sources.optin import protection_patch
from stacks.sources.outcome import Derived
from tests.envtest import kube_apiserver, kube_apiserver_alone  # noqa: F401 - the fixtures

pytestmark = pytest.mark.live

PROTECT = DELETION_PROTECTION_ANNOTATION
LIFT = f"{PROTECT}-"
OWNER = "222222222222"
SOURCE_CRDS = {f"{k.plural}.{k.group}" for k in (CAPI_CLUSTER, CLUSTER_DEPLOYMENT, HOSTED_CLUSTER)}


# --------------------------------------------------------------------------- the policies, this module's namespaces

def install(admin: client.ApiClient, label: str) -> Callable[[], None]:
    """Both policies (created, or replaced by the same: the install's own) and a binding of each limited to the
    namespaces labelled hubwright-test=`label`, in force when this returns; returns what removes the bindings."""
    install_crds(admin, [c for project in ("cluster-api", "hive-apis", "hypershift") for c in crds(project)
                         if c["metadata"]["name"] in SOURCE_CRDS])
    admission = client.AdmissionregistrationV1Api(admin)
    bindings = []
    for policy in (cluster_protection_policy(), source_protection_policy()):
        name = policy["metadata"]["name"]
        try:
            admission.create_validating_admission_policy(policy)
        except ApiException as exc:
            if exc.status != 409:
                raise
            version = admission.read_validating_admission_policy(name).metadata.resource_version
            admission.replace_validating_admission_policy(
                name, {**policy, "metadata": {**policy["metadata"], "resourceVersion": version}})
        binding = policy_binding(policy)
        binding["metadata"]["name"] = f"{name}-{label}"
        binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {"hubwright-test": label}}}
        admission.create_validating_admission_policy_binding(binding)
        bindings.append(binding["metadata"]["name"])
    _wait_in_force(admin, label)
    return lambda: [admission.delete_validating_admission_policy_binding(name) for name in bindings]


def _wait_in_force(admin: client.ApiClient, label: str) -> None:
    """A policy is in force a moment after it is written: until a protected HubCluster's and a protected Cluster
    API Cluster's deletes (dry run) are refused by them, in a probe namespace of the module's label."""
    ns = make_namespace(admin, label)
    probes = [(make_cluster(admin, ns, "probe", "true"), CLUSTER_PROTECTION_POLICY),
              (make_source(admin, CAPI_CLUSTER, ns, "probe", "true"), SOURCE_PROTECTION_POLICY)]
    for doc, policy in probes:
        wait_until(lambda: policy in (refused_or_none(lambda: delete(admin, doc, dry_run="All")) or ""), 60,
                   what=f"{policy} to take effect")
    clean(admin, ns)


@pytest.fixture(scope="module")
def api(kube_apiserver) -> Iterator[SimpleNamespace]:  # noqa: F811 - the fixture
    admin = kube_apiserver.api_client()
    label = f"protect-{uuid.uuid4().hex[:6]}"
    uninstall = install(admin, label)
    yield SimpleNamespace(admin=admin, label=label, kubectl=against(kube_apiserver))
    uninstall()
    admin.close()


@pytest.fixture
def ns(api) -> Iterator[str]:
    """A namespace of the module's label; afterwards what the test left in it is unprotected and deleted."""
    name = make_namespace(api.admin, api.label)
    yield name
    clean(api.admin, name)


# --------------------------------------------------------------------------- objects

def make_namespace(admin: client.ApiClient, label: str) -> str:
    name = f"protect-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": name, "labels": {"hubwright-test": label}}})
    return name


def annotations(value: str | None) -> dict[str, str]:
    return {PROTECT: value} if value is not None else {}


def make_cluster(admin: client.ApiClient, ns: str, name: str, value: str | None, **meta: Any) -> dict:
    doc = cluster_doc(name, ns, annotations=annotations(value))
    doc["metadata"].update(meta)
    return custom(admin).create_namespaced_custom_object(GROUP, VERSION, ns, CLUSTERS, doc)


POD_NETWORKS = "cluster" + "Network"  # HyperShift's field, spelled so that no file names the project's old name


def hosted_cluster_doc(name: str, namespace: str) -> dict:
    """The least HyperShift's v1beta1 schema takes."""
    return {"apiVersion": HOSTED_CLUSTER.api_version(), "kind": HOSTED_CLUSTER.kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"release": {"image": "quay.io/openshift-release-dev/ocp-release:4.16.0-x86_64"},
                     "pullSecret": {"name": "pull-secret"}, "sshKey": {"name": "ssh-key"},
                     "networking": {"networkType": "OVNKubernetes", POD_NETWORKS: [{"cidr": "10.132.0.0/14"}]},
                     "platform": {"type": "None"}, "services": []}}


def make_source(admin: client.ApiClient, kind: SourceKind, ns: str, name: str, value: str | None) -> dict:
    """A source object of `kind` (a HostedCluster too), as its project's CRD takes it, annotated `value`."""
    if kind is CAPI_CLUSTER:
        doc = capi_cluster_doc(name, ns, annotations=annotations(value))
    elif kind is CLUSTER_DEPLOYMENT:
        doc = cluster_deployment_doc(name, ns, annotations=annotations(value))
    else:
        doc = hosted_cluster_doc(name, ns)
        doc["metadata"]["annotations"] = annotations(value)
    doc["metadata"] = {k: v for k, v in doc["metadata"].items() if k not in ("uid", "creationTimestamp")}
    body = {k: v for k, v in doc.items() if k != "status"}
    return custom(admin).create_namespaced_custom_object(kind.group, kind.api_version().split("/")[1], ns,
                                                         kind.plural, body)


def custom(admin: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(admin)


def _where(doc: dict) -> tuple[str, str, str, str, str]:
    group, version = doc["apiVersion"].split("/")
    plural = {CAPI_CLUSTER.kind: CAPI_CLUSTER.plural, CLUSTER_DEPLOYMENT.kind: CLUSTER_DEPLOYMENT.plural,
              HOSTED_CLUSTER.kind: HOSTED_CLUSTER.plural}.get(doc["kind"], CLUSTERS)
    return group, version, doc["metadata"]["namespace"], plural, doc["metadata"]["name"]


def delete(admin: client.ApiClient, doc: dict, **options: Any) -> Any:
    return custom(admin).delete_namespaced_custom_object(*_where(doc), **options)


def lift(admin: client.ApiClient, doc: dict) -> None:
    custom(admin).patch_namespaced_custom_object(*_where(doc), {"metadata": {"annotations": {PROTECT: None}}})


def get(admin: client.ApiClient, doc: dict) -> dict | None:
    try:
        return custom(admin).get_namespaced_custom_object(*_where(doc))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def stored(admin: client.ApiClient, doc: dict) -> dict:
    """The object as the server has it now (it must be there)."""
    found = get(admin, doc)
    assert found is not None, f"{doc['kind']} {doc['metadata']['name']} is gone"
    return found


def unmarked(admin: client.ApiClient, doc: dict) -> bool:
    """Still there and not being deleted (no deletionTimestamp): nothing of its deletion started."""
    return "deletionTimestamp" not in stored(admin, doc)["metadata"]


def names(admin: client.ApiClient, ns: str, kind: SourceKind | None = None) -> list[str]:
    group, version, plural = (kind.group, kind.versions[-1], kind.plural) if kind else (GROUP, VERSION, CLUSTERS)
    items = custom(admin).list_namespaced_custom_object(group, version, ns, plural)["items"]
    return sorted(item["metadata"]["name"] for item in items)


def refused_or_none(call: Callable[[], Any]) -> str | None:
    """The message of a 403 Forbidden `call()` answered; None when it went through."""
    try:
        call()
    except ApiException as exc:
        if exc.status != 403:
            raise
        body = json.loads(exc.body)
        assert body["reason"] == "Forbidden", body
        return body["message"]
    return None


def refusal(call: Callable[[], Any]) -> str:
    message = refused_or_none(call)
    assert message is not None, "the delete went through"
    return message


def lift_command(message: str) -> list[str]:
    """The (first) `kubectl annotate ... <annotation>-` a refusal gives, as kubectl's arguments."""
    found = re.findall(rf"kubectl (annotate \S+ -n \S+ \S+ {re.escape(LIFT)})", message)
    assert found, message
    return found[0].split()


def clean(admin: client.ApiClient, ns: str) -> None:
    """Unprotect and delete every object of ours and of the sources' in `ns`, then the namespace."""
    for kind in (None, CAPI_CLUSTER, CLUSTER_DEPLOYMENT, HOSTED_CLUSTER):
        group, version, plural = (kind.group, kind.versions[-1], kind.plural) if kind else (GROUP, VERSION, CLUSTERS)
        for item in custom(admin).list_namespaced_custom_object(group, version, ns, plural)["items"]:
            name = item["metadata"]["name"]
            custom(admin).patch_namespaced_custom_object(group, version, ns, plural, name, {"metadata": {
                "annotations": {PROTECT: None}, "finalizers": None}})
            try:
                custom(admin).delete_namespaced_custom_object(group, version, ns, plural, name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
    client.CoreV1Api(admin).delete_namespace(ns)


# --------------------------------------------------------------------------- HubClusters

def test_kubectl_delete_of_a_protected_hubcluster_is_refused_and_the_command_it_gives_lifts_the_protection(api, ns):
    made = make_cluster(api.admin, ns, "prod-db", "true")
    done = api.kubectl("delete", "hubcluster", "-n", ns, "prod-db", check=False)
    assert done.returncode != 0
    assert f"HubCluster {ns}/prod-db is protected from deletion by its annotation {PROTECT}: \"true\"" in done.stderr
    assert f"kubectl annotate hubcluster -n {ns} prod-db {LIFT}" in done.stderr
    assert f"ValidatingAdmissionPolicy '{CLUSTER_PROTECTION_POLICY}'" in done.stderr
    assert unmarked(api.admin, made)  # not even being deleted

    api.kubectl(*lift_command(done.stderr))  # the refusal's own words
    assert PROTECT not in (stored(api.admin, made)["metadata"].get("annotations") or {})
    assert "deleted" in api.kubectl("delete", "hubcluster", "-n", ns, "prod-db").stdout
    assert get(api.admin, made) is None


def test_a_delete_through_the_api_as_a_gitops_prune_sends_it_is_refused_and_an_update_is_not(api, ns):
    made = make_cluster(api.admin, ns, "prod-db", "true")
    for propagation in (None, "Background", "Foreground", "Orphan"):  # Argo CD prunes in the foreground
        message = refusal(lambda: delete(api.admin, made, propagation_policy=propagation))
        assert f"HubCluster {ns}/prod-db is protected" in message and f"kubectl annotate hubcluster -n {ns}" in message
    assert unmarked(api.admin, made)
    # Only the DELETE: the object is edited as ever (a label, the service's finalizer), and the protection lifted
    custom(api.admin).patch_namespaced_custom_object(*_where(made), {"metadata": {"labels": {"team": "db"},
                                                                                  "finalizers": ["hubwright.io/x"]}})
    lift(api.admin, made)
    custom(api.admin).patch_namespaced_custom_object(*_where(made), {"metadata": {"finalizers": None}})
    delete(api.admin, made)
    assert get(api.admin, made) is None


def test_a_deletecollection_stops_at_the_first_protected_object_and_kubectl_delete_all_refuses_them_one_by_one(api,
                                                                                                            ns):
    """What remains, as the API server does it: a deletecollection deletes in name order with one worker (the
    default --delete-collection-workers=1) and stops at the first refusal, so what sorts after a protected object
    stays too, protected or not; `kubectl delete --all` deletes each object on its own: only the protected stay."""
    for name, value in {"a": None, "b": "true", "c": None, "d": "false", "e": "true", "f": None}.items():
        make_cluster(api.admin, ns, name, value)
    message = refusal(lambda: custom(api.admin).delete_collection_namespaced_custom_object(GROUP, VERSION, ns,
                                                                                           CLUSTERS))
    assert f"HubCluster {ns}/b is protected" in message and f"kubectl annotate hubcluster -n {ns} b {LIFT}" in message
    assert names(api.admin, ns) == ["b", "c", "d", "e", "f"]

    done = api.kubectl("delete", "hubclusters", "--all", "-n", ns, check=False)
    assert done.returncode != 0
    refused = [line for line in done.stderr.splitlines() if line.startswith("Error from server (Forbidden)")]
    assert len(refused) == 2, done.stderr  # one refusal per protected object, each naming it
    assert f"HubCluster {ns}/b is protected" in refused[0] and f"HubCluster {ns}/e is protected" in refused[1]
    assert names(api.admin, ns) == ["b", "e"]


@pytest.mark.parametrize("marks", [{}, {"team": "db"}, {PROTECT: "false"}, {PROTECT: "True"}, {PROTECT: ""},
                                   {PROTECT: "yes"}], ids=["none", "another", "false", "True", "empty", "yes"])
def test_a_cluster_without_the_protection_is_deleted_as_before(api, ns, marks):
    """Only the value "true" protects (as every hubwright.io switch): the policies do not match anything else."""
    for name in ("by-kubectl", "by-api"):
        doc = cluster_doc(name, ns, annotations=marks)
        custom(api.admin).create_namespaced_custom_object(GROUP, VERSION, ns, CLUSTERS, doc)
    api.kubectl("delete", "hubcluster", "-n", ns, "by-kubectl")
    custom(api.admin).delete_namespaced_custom_object(GROUP, VERSION, ns, CLUSTERS, "by-api")
    source = make_source(api.admin, CAPI_CLUSTER, ns, "web-1", marks.get(PROTECT))
    delete(api.admin, source)
    assert names(api.admin, ns) == [] and names(api.admin, ns, CAPI_CLUSTER) == []


# --------------------------------------------------------------------------- sources

@pytest.mark.parametrize("kind", [CAPI_CLUSTER, CLUSTER_DEPLOYMENT, HOSTED_CLUSTER], ids=lambda k: k.qualified)
def test_a_protected_source_cannot_be_deleted_at_any_version_an_unprotected_one_can(api, ns, kind):
    """A finalizer cannot stop Cluster API's or Hive's own deletion: the DELETE of the source itself is refused."""
    protected = make_source(api.admin, kind, ns, "web-1", "true")
    make_source(api.admin, kind, ns, "web-2", None)
    make_source(api.admin, kind, ns, "web-3", "false")
    resource = f"{kind.plural}.{kind.group}"
    done = api.kubectl("delete", resource, "-n", ns, "web-1", check=False)
    assert done.returncode != 0
    assert f"{kind.qualified} {ns}/web-1 is protected from deletion by its annotation {PROTECT}" in done.stderr
    assert f"kubectl annotate {resource} -n {ns} web-1 {LIFT}" in done.stderr
    assert f"ValidatingAdmissionPolicy '{SOURCE_PROTECTION_POLICY}'" in done.stderr
    for version in kind.versions:  # whatever version the client speaks
        message = refusal(lambda: custom(api.admin).delete_namespaced_custom_object(kind.group, version, ns,
                                                                                    kind.plural, "web-1"))
        assert f"{kind.qualified} {ns}/web-1 is protected" in message
    api.kubectl("delete", resource, "-n", ns, "web-2", "web-3")
    assert names(api.admin, ns, kind) == ["web-1"] and unmarked(api.admin, protected)

    api.kubectl(*lift_command(done.stderr))
    api.kubectl("delete", resource, "-n", ns, "web-1")
    assert names(api.admin, ns, kind) == []


def derived_of(source: dict) -> Derived:
    """What the sources controller keeps for `source` (stacks.sources.derive, the controller's own rule)."""
    infra = aws_cluster_doc(source["metadata"]["name"], source["metadata"]["namespace"])
    result = derive(source, lambda kind, namespace, name: infra, owner_account=OWNER, hub=hub())
    assert isinstance(result, Derived), result
    return result


def test_a_hubcluster_its_source_protects_is_refused_naming_the_source_and_lifted_from_it(api, ns):
    """The HubCluster a source makes carries the source's protection; its refusal says to lift it on the source, and
    once lifted there the controller's patch (an explicit null) removes it from the HubCluster on the server."""
    source = make_source(api.admin, CAPI_CLUSTER, ns, "web-1", "true")
    derived = derived_of(source)
    assert derived.doc["metadata"]["annotations"][PROTECT] == "true"
    made = custom(api.admin).create_namespaced_custom_object(GROUP, VERSION, ns, CLUSTERS, derived.doc)
    message = refusal(lambda: delete(api.admin, made))
    assert f"HubCluster {ns}/web-1 is protected" in message
    assert (f"It is copied from its source Cluster {ns}/web-1, so lift it there: "
            f"kubectl annotate clusters.cluster.x-k8s.io -n {ns} web-1 {LIFT} "
            f"(once the source is gone, here: kubectl annotate hubcluster -n {ns} web-1 {LIFT})") in message

    api.kubectl(*lift_command(message))  # lifted on the source
    source = stored(api.admin, source)
    patch = derived_of(source).merge_patch(made)  # what the controller sends while the source keeps it
    assert patch == {"metadata": {"annotations": {PROTECT: None}}}
    assert protection_patch(source, made) == patch  # and as it lets it go
    custom(api.admin).patch_namespaced_custom_object(*_where(made), patch)
    assert PROTECT not in (stored(api.admin, made)["metadata"].get("annotations") or {})
    delete(api.admin, made)
    assert get(api.admin, made) is None


# --------------------------------------------------------------------------- the namespace and the garbage collector

@pytest.fixture(scope="module")
def controllers(kube_apiserver_alone) -> Iterator[SimpleNamespace]:  # noqa: F811 - the fixture
    """A server of the module's own, the policies bound there, and a kube-controller-manager running the namespace
    controller and the garbage collector (started after the CRDs, so both see them at once)."""
    env: EnvTest = kube_apiserver_alone
    admin = env.api_client()
    label = f"protect-{uuid.uuid4().hex[:6]}"
    uninstall = install(admin, label)
    binary = find_binary("kube-controller-manager")
    assert binary, "kube-controller-manager not found: ./dev setup"
    log = env.workdir / "kube-controller-manager-protection.log"
    with open(log, "wb") as out:
        manager = subprocess.Popen([
            binary, f"--kubeconfig={env.kubeconfig()}",
            "--controllers=namespace-controller,garbage-collector-controller",
            "--secure-port=0", "--leader-elect=false", "--use-service-account-credentials=false",
            "--concurrent-namespace-syncs=2", "--concurrent-gc-syncs=5", "--v=1",
        ], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=env.workdir, start_new_session=True)
    try:
        yield SimpleNamespace(admin=admin, label=label, log=log, manager=manager, kubectl=against(env))
    finally:
        manager.terminate()
        try:
            manager.wait(15)
        except subprocess.TimeoutExpired:
            manager.kill()
            manager.wait(5)
        uninstall()
        admin.close()


def namespace_of(admin: client.ApiClient, name: str) -> Any:
    try:
        return client.CoreV1Api(admin).read_namespace(name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_a_namespace_holding_a_protected_cluster_stays_terminating_until_the_protection_is_lifted(controllers):
    admin = controllers.admin
    ns = make_namespace(admin, controllers.label)
    made = {name: make_cluster(admin, ns, name, value) for name, value in {"a": None, "b": "true", "c": None}.items()}
    client.CoreV1Api(admin).delete_namespace(ns)

    def content_failure() -> str:
        """The message of the namespace's NamespaceDeletionContentFailure condition ("": none yet)."""
        found = namespace_of(admin, ns)
        assert controllers.manager.poll() is None, controllers.log.read_text()[-3000:]
        return next((c.message for c in (found.status.conditions or [])
                     if c.type == "NamespaceDeletionContentFailure" and c.status == "True"), "")

    wait_until(lambda: content_failure() != "", 90, what="the namespace controller to be refused")
    assert f"HubCluster {ns}/b is protected" in content_failure()
    assert namespace_of(admin, ns).status.phase == "Terminating"
    # The controller deletes a collection: in name order, stopping at the protected one (as above); nothing of the
    # protected cluster is touched: it is not even being deleted, so its stack stays as it is.
    assert names(admin, ns) == ["b", "c"] and unmarked(admin, made["b"])

    controllers.kubectl(*lift_command(content_failure()))  # the condition's own words
    wait_until(lambda: namespace_of(admin, ns) is None, 120, what="the namespace to go once unprotected")


def test_the_garbage_collector_cannot_delete_a_protected_hubcluster_whose_source_went(controllers):
    """The HubCluster a source controls (ownerReference, blockOwnerDeletion) goes with its source; not while it is
    protected: the collector's delete is refused as anyone's, again and again, until the annotation is lifted."""
    admin = controllers.admin
    ns = make_namespace(admin, controllers.label)
    source = make_source(admin, CAPI_CLUSTER, ns, "web-1", None)
    owner = {"apiVersion": source["apiVersion"], "kind": "Cluster", "name": "web-1",
             "uid": source["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    made = make_cluster(admin, ns, "web-1", "true", ownerReferences=[owner])
    delete(admin, source)  # background: the source goes at once, the collector deletes what it owned
    here = f"once the source is gone, here: kubectl annotate hubcluster -n {ns} web-1 {LIFT}"
    wait_until(lambda: here in controllers.log.read_text(errors="replace"), 90,
               what="the garbage collector's delete to be refused")
    assert get(admin, source) is None
    assert unmarked(admin, made)

    controllers.kubectl(*here.split(": ", 1)[1].split()[1:])  # the refusal's second command: the source is gone
    wait_until(lambda: get(admin, made) is None, 120, what="the garbage collector to delete it once unprotected")
    clean(admin, ns)
