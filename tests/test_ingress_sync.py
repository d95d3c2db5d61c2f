"""The service keeps the central proxy's ConfigMap current: against the real API server."""
import pytest
from kubernetes import client

from stacks.haproxy import MAP_FILE
from automation.adapters.kube.ingress_sync import IngressSync, central_files
from automation.adapters.engine.plan import record
from components.ingress import CentralProxy, CentralProxyArgs
from tests.envtest import kube_apiserver  # noqa: F401
from stacks.ingress import Route
from doubles.factories import hub

HUB = hub(sharedIngress={"address": "ingress.hub.example.com:6443", "namespace": "shared-ingress-test"})


def opted_in(name, backend):
    return Route(cluster_id=name, backend=backend, cluster=f"acme/{name}")


def routed(data) -> dict[str, str]:
    return dict(line.split() for line in data[MAP_FILE].splitlines() if line and not line.startswith("#"))


@pytest.mark.live
def test_sync_writes_the_routes_only_when_they_change(kube_apiserver):  # noqa: F811
    api = kube_apiserver.api_client()
    core = client.CoreV1Api(api)
    namespace = HUB.spec.shared_ingress.namespace
    core.create_namespace({"metadata": {"name": namespace}})
    initial, _ = central_files(HUB, [])
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "shared-ingress"}, "data": initial})
    sync = IngressSync(api)

    a, b = opted_in("a", "kas.a.svc:6443"), opted_in("b", "kas.b.svc:6443")
    assert sync.sync(HUB, [a, b]) is True
    stored = core.read_namespaced_config_map("shared-ingress", namespace)
    assert set(routed(stored.data)) == {"a", "b"}

    assert sync.sync(HUB, [b, a]) is False  # same routes, any order: no write
    assert core.read_namespaced_config_map("shared-ingress", namespace).metadata.resource_version == \
        stored.metadata.resource_version

    assert sync.sync(HUB, [b]) is True
    assert set(routed(core.read_namespaced_config_map("shared-ingress", namespace).data)) == {"b"}


@pytest.mark.live
def test_sync_without_a_deployed_proxy_writes_nothing(kube_apiserver):  # noqa: F811
    absent = hub(sharedIngress={"address": "ingress.hub.example.com:6443", "namespace": "not-deployed"})
    assert IngressSync(kube_apiserver.api_client()).sync(absent, [opted_in("a", "kas.a.svc:6443")]) is False


def test_a_hub_without_shared_ingress_is_left_alone():
    assert IngressSync(client.ApiClient()).sync(hub(), [opted_in("a", "kas.a.svc:6443")]) is False


def test_the_deploy_stack_leaves_service_managed_routes_alone():
    import pulumi_kubernetes as k8s

    def build():
        args = CentralProxyArgs.from_hub(HUB.spec.shared_ingress, [], reloader_image="hubwright:1",
                                         routes_from_service=True, route_writer=("hubwright-system", "hubwright"))
        CentralProxy("shared-ingress", args, k8s.Provider("k8s", kubeconfig="{}"))

    plan = record(build, stack="deploy")
    assert plan.one("kubernetes:core/v1:ConfigMap").options["ignoreChanges"] == ["data"]
    role = plan.one("kubernetes:rbac.authorization.k8s.io/v1:Role").inputs
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["shared-ingress"],
                              "verbs": ["get", "update", "patch"]}]
    binding = plan.one("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding").inputs
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hubwright", "namespace": "hubwright-system"}]
    with pytest.raises(ValueError, match="needs reloader_image"):
        CentralProxyArgs.from_hub(HUB.spec.shared_ingress, [], routes_from_service=True)
