"""HubConfig status.mesh on a REAL kube-apiserver (tests/envtest.py): what only the API server can show, its RBAC
(a tenant may not write it); and the one model every reader goes through (stacks.status.MeshHubStatus).

The writer is automation/service/transit.py's MeshHub over the controller kit's status writer; its contract (each
entry whole, a stale cache, an unreadable entry run again and reported, the transit reconciler's Events) is shown
over the in-memory API server in tests/test_transit_direct.py, and end to end in tests/test_transit_service.py.
"""
from __future__ import annotations

import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from automation.adapters.kube.objects import KubeObjects
from automation.service.cache import Cache
from automation.service.transit import MeshHub
from components.controlplane import TENANT_RULES
from stacks.names import GROUP, HUBCONFIGS, VERSION
from stacks.status import MeshHubStatus, TransitOutputsStatus, TransitRegionStatus, TransitStatus
from stacks.transit import GroupState, MeshStatus, transit_stack
from tests.envtest import TENANT_USER, kube_apiserver  # noqa: F401 - the fixture
from doubles.factories import HUB_ACCOUNT, cluster_doc, hub_doc
from doubles.service_env import wait_until

TRANSIT = transit_stack(HUB_ACCOUNT)
EAST = "us-east-1"


class Hub:
    """A HubConfig of its own on the shared API server, with a cache fed from it as the informer would."""

    def __init__(self, api_client: client.ApiClient):
        self.api_client = api_client
        self.name = f"hub-{uuid.uuid4().hex[:8]}"
        self.custom = client.CustomObjectsApi(api_client)
        doc = hub_doc()
        doc["metadata"]["name"] = self.name
        self.raw = self.custom.create_cluster_custom_object(GROUP, VERSION, HUBCONFIGS, doc)
        self.cache = Cache(hub_name=self.name, role_map_name="none", role_map_namespace="default",
                           parse_role_map=lambda raw: {})
        self.refresh()
        self.objects = KubeObjects(api_client)
        self.mesh = MeshHub(self.objects, self.cache)

    def refresh(self) -> dict:
        """Read the HubConfig back into the cache (the watch event of the last write); its status.mesh."""
        self.raw = self.custom.get_cluster_custom_object(GROUP, VERSION, HUBCONFIGS, self.name)
        self.cache.stores()["hubconfigs"].apply("MODIFIED", self.raw)
        return (self.raw.get("status") or {}).get("mesh") or {}

    def close(self) -> None:
        self.objects.close()
        self.custom.delete_cluster_custom_object(GROUP, VERSION, HUBCONFIGS, self.name)


@pytest.fixture
def hub(kube_apiserver):  # noqa: F811 - the fixture
    api_client = kube_apiserver.api_client()
    hub = Hub(api_client)
    yield hub
    hub.close()
    api_client.close()


def test_a_tenant_cannot_write_the_hubs_status_mesh(kube_apiserver, hub):  # noqa: F811 - the fixture
    """status.mesh points members at gateways and says which migration step is done: the service's alone. A tenant
    that may create HubClusters in its namespace is refused any write of hubconfigs/status."""
    hub.mesh.patch(transit={TRANSIT: TransitStatus(inputs_hash="c" * 64, outputs=TransitOutputsStatus(
        regions={EAST: TransitRegionStatus(transit_gateway_id="tgw-0hub")}))})
    written = hub.refresh()
    ns = f"tenant-{uuid.uuid4().hex[:6]}"
    core, rbac = client.CoreV1Api(hub.api_client), client.RbacAuthorizationV1Api(hub.api_client)
    core.create_namespace({"metadata": {"name": ns}})
    role = f"hubwright-tenant-{ns}"
    rbac.create_cluster_role({"metadata": {"name": role}, "rules": TENANT_RULES})
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": "tenant"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                    "name": role},
        "subjects": [{"kind": "User", "name": TENANT_USER, "apiGroup": "rbac.authorization.k8s.io"}]})
    tenant = client.ApiClient(kube_apiserver.configuration(kube_apiserver.tenant_token))
    try:
        custom = client.CustomObjectsApi(tenant)

        def create() -> dict | None:
            try:
                return custom.create_namespaced_custom_object(GROUP, VERSION, ns, "hubclusters", cluster_doc("mine", ns))
            except ApiException as exc:
                if exc.status == 403:
                    return None
                raise
        assert wait_until(create, 10, what="the tenant's rights to take effect")["metadata"]["name"] == "mine"
        forged = {"status": {"mesh": {"transit": {TRANSIT: {"outputs": {"regions": {
            EAST: {"transitGatewayId": "tgw-0attacker"}}}}}, "groups": {"acme/core": {"topology": "transitGateway",
                                                                               "members": 1}}}}}
        for attempt in (lambda: custom.patch_cluster_custom_object_status(GROUP, VERSION, HUBCONFIGS, hub.name, forged),
                        lambda: custom.replace_cluster_custom_object_status(GROUP, VERSION, HUBCONFIGS, hub.name,
                                                                           {**hub.raw, **forged})):
            with pytest.raises(ApiException) as denied:
                attempt()
            assert denied.value.status == 403
        assert hub.refresh() == written
    finally:
        tenant.close()
        custom_admin = client.CustomObjectsApi(hub.api_client)
        custom_admin.delete_namespaced_custom_object(GROUP, VERSION, ns, "hubclusters", "mine")
        rbac.delete_cluster_role(role)
        core.delete_namespace(ns)


# --------------------------------------------------------------------------- entries the model cannot parse

GARBAGE = {"mesh": {
    "groups": {"acme/core": {"topology": "ring", "members": 2}, "acme/ok": {"topology": "peering", "members": 2}},
    "transit": {TRANSIT: {"inputsHash": "x" * 65, "lastUpdate": {"operation": "dance", "result": "Succeeded"},
                          "outputs": {"regions": {EAST: {"transitGatewayId": "tgw-0old"}}}}}}}


def test_an_entry_the_model_cannot_parse_is_left_out_and_named_not_raised():
    mesh, problems = MeshHubStatus.read(GARBAGE)
    assert set(mesh.groups) == {"acme/ok"} and mesh.transit == {}
    assert any(p.startswith("status.mesh.groups[acme/core]: topology") for p in problems), problems
    assert any(p.startswith(f"status.mesh.transit[{TRANSIT}]: inputsHash") for p in problems), problems
    planned = MeshStatus.from_hub_status(GARBAGE)
    assert planned.groups == {"acme/ok": GroupState(topology="peering")} and planned.problems == problems
    assert MeshHubStatus.read({"mesh": ["not", "an", "object"]})[1] == ("status.mesh: not an object (list)",)
