"""Status writes are complete: no field the new status lacks survives, at any depth (issue #14, item 3).

`status_patch` is checked on its own (applied with an RFC 7386 merge, it turns every
`before` into the new document); then the controller kit's StatusWriter (automation/kit/status.py), as the
clusters' ClusterClient holds it, writes through the object port (KubeObjects) over real HTTP to kmock's
emulator (doubles.MockKubeAPI) and to a REAL kube-apiserver with the project's CRDs
(tests/envtest.py; skips naming the binaries where scripts/tools.sh has not built them),
and the object read back from the server is what the last write said.
"""
from __future__ import annotations

import copy
from typing import Any, Callable

import pytest
from kubernetes import client

from automation.adapters.kube.objects import KubeObjects
from automation.kit.objects import HUBCLUSTERS, ApiError
from automation.kit.status import StatusWriter
from automation.service.clusters import ClusterClient, cluster_writer
from stacks.conditions import status_patch
from doubles.kube import MockKubeAPI
from stacks.status import ClusterStatus, Condition, LastUpdate, Peering, StackOutputs
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from doubles.service_env import ServiceEnv


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 MergePatch, as the spec's pseudo-code has it."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


# --------------------------------------------------------------------------- the patch alone

SUCCEEDED = {"lastUpdate": {"operation": "up", "result": "Succeeded", "message": "m",
                            "startTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:01:00Z",
                            "permalink": "https://app.example.com/u/1", "changes": {"create": 3, "same": 9}},
             "outputs": {"endpoint": "vpce-1.example.com", "endpointVPC": "vpc-0hub1",
                         "peerings": [{"name": "a+b", "id": "pcx-1"}]},
             "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded"}],
             "inputsHash": "abc"}
RUNNING = {"lastUpdate": {"operation": "up", "result": "Running", "message": "m2",
                          "startTime": "2026-01-01T00:02:00Z", "changes": {}},
           "outputs": {"endpoint": "vpce-1.example.com", "peerings": []},
           "conditions": [{"type": "Ready", "status": "Unknown", "reason": "Progressing"}],
           "inputsHash": "abc"}


def test_the_patch_nulls_every_removed_field_at_every_depth():
    patch = status_patch(RUNNING, SUCCEEDED)
    assert patch["lastUpdate"] == {"operation": "up", "result": "Running", "message": "m2",
                                   "startTime": "2026-01-01T00:02:00Z", "endTime": None, "permalink": None,
                                   "changes": {"create": None, "same": None}}
    assert patch["outputs"] == {"endpoint": "vpce-1.example.com", "endpointVPC": None, "peerings": []}
    assert patch["conditions"] == RUNNING["conditions"]  # lists go whole
    assert merge(SUCCEEDED, patch) == RUNNING


def test_the_patch_of_an_unchanged_document_is_the_document_without_nulls():
    assert status_patch(SUCCEEDED, SUCCEEDED) == SUCCEEDED
    assert status_patch(SUCCEEDED) == SUCCEEDED
    assert status_patch({}, {}) == {}


def test_the_patch_adds_new_fields_and_removes_whole_objects():
    before = {"a": 1, "gone": {"deep": {"x": 1}}, "kept": {"x": 1}}
    after = {"a": 2, "kept": {"x": 1, "y": {"z": 1}}, "new": {"n": [1, {"m": 2}]}}
    patch = status_patch(after, before)
    assert patch == {"a": 2, "gone": None, "kept": {"x": 1, "y": {"z": 1}}, "new": {"n": [1, {"m": 2}]}}
    assert merge(before, patch) == after


def test_none_in_the_new_document_means_absent():
    patch = status_patch({"a": None, "b": {"c": None, "d": 1}}, {"a": 1, "b": {"c": 2, "d": 1}})
    assert patch == {"a": None, "b": {"c": None, "d": 1}}
    assert merge({"a": 1, "b": {"c": 2, "d": 1}}, patch) == {"b": {"d": 1}}
    assert status_patch({"x": 1}, {"y": None}) == {"x": 1}  # a None before is an absent field: nothing to null


def test_lists_and_scalars_replace_objects_and_the_other_way_round():
    before = {"a": {"x": 1}, "b": [1, 2], "c": "s", "d": [{"k": 1, "gone": 2}]}
    after = {"a": [1], "b": {"y": 1}, "c": {"z": 1}, "d": [{"k": 1}]}
    patch = status_patch(after, before)
    assert patch == after  # nothing to null inside a replaced value; list items are never diffed
    assert merge(before, patch) == after


def test_the_patch_turns_every_before_into_the_new_document():
    """Written by this service, on the server, in a lagging cache: whichever is really there, it ends as `new`."""
    mine = {"lastUpdate": {"endTime": "t1", "permalink": "p"}, "outputs": {"endpointVPC": "v"}, "account": "1"}
    server = {"lastUpdate": {"endTime": "t0", "changes": {"create": 1}}, "lastRecovery": {"time": "t"}}
    cached = {"outputs": {"zoneID": "z"}}
    new = {"lastUpdate": {"result": "Running"}, "outputs": {"endpoint": "e"}}
    patch = status_patch(new, mine, server, cached)
    for before in (mine, server, cached, {}):
        assert merge(before, patch) == new
    assert merge(copy.deepcopy(SUCCEEDED), status_patch(RUNNING, SUCCEEDED, {}, RUNNING)) == RUNNING


# --------------------------------------------------------------------------- StatusWriter over HTTP

class Writer(ClusterClient):
    """The clusters' ClusterClient over KubeObjects: its status writer (`writer`) is the kit's, over the port."""

    def __init__(self, api_client: client.ApiClient):
        self.port = KubeObjects(api_client)
        super().__init__(self.port, writer=cluster_writer(self.port))

    def close(self) -> None:
        super().close()
        self.port.close()


def succeeded_status() -> ClusterStatus:
    return ClusterStatus(
        observed_generation=1, stack="acme.prod-1", account="222222222222", region="us-east-1", inputs_hash="abc",
        conditions=[Condition(type="Ready", status="True", reason="Succeeded", message="up to date",
                              last_transition_time="2026-01-01T00:01:00Z", observed_generation=1)],
        last_update=LastUpdate(operation="up", result="Succeeded", message="created: 3 created",
                               start_time="2026-01-01T00:00:00Z", end_time="2026-01-01T00:01:00Z",
                               permalink="https://app.pulumi.com/acme/hubwright/acme.prod-1/updates/7",
                               changes={"create": 3, "same": 9}),
        outputs=StackOutputs(endpoint="vpce-0abc.vpce-svc.us-east-1.vpce.amazonaws.com", endpoint_id="vpce-0abc",
                             endpoint_vpc="vpc-0hub1", service_name="com.amazonaws.vpce.us-east-1.vpce-svc-1",
                             zone_id="Z123", infra_id="prod-1-x7k2p",
                             peerings=[Peering(name="acme.prod-1+acme.prod-2", id="pcx-1", state="active")]),
        last_drift_check="2026-01-01T00:01:00Z")


def running_status(before: ClusterStatus) -> ClusterStatus:
    """The Running mark of the next run, after PrivateLink was turned off (no endpointVPC)."""
    return before.model_copy(update={
        "observed_generation": 2,
        "conditions": [Condition(type="Ready", status="Unknown", reason="Progressing", message="spec changed",
                                 last_transition_time="2026-01-01T00:02:00Z", observed_generation=2)],
        "last_update": LastUpdate(operation="up", result="Running", message="spec changed",
                                  start_time="2026-01-01T00:02:00Z"),
        "outputs": before.outputs.model_copy(update={"endpoint_vpc": None, "peerings": []}),
    })


class Server:
    """One Cluster on an API server, written through a StatusWriter and read back."""

    def __init__(self, api_client: client.ApiClient, namespace: str):
        self.api_client = api_client
        self.writers: list[Writer] = []
        self.ns = namespace
        self.env = ServiceEnv(api_client, namespace=namespace)

    def create(self, name: str = "prod-1") -> dict:
        return self.env.create(name)

    def read(self, name: str = "prod-1") -> dict:
        return self.env.get(name)

    def status(self, name: str = "prod-1") -> dict:
        return self.read(name).get("status") or {}

    def writer(self) -> Writer:
        """A writer of its own (a process of the service), closed with the server."""
        self.writers.append(Writer(self.api_client))
        return self.writers[-1]

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


def assert_running_replaced_succeeded(status: dict) -> None:
    last, outputs = status["lastUpdate"], status["outputs"]
    assert {"endTime", "permalink"}.isdisjoint(last), last
    assert not last.get("changes"), last  # the last run's counts are gone ({} or absent)
    assert last["result"] == "Running" and last["startTime"] == "2026-01-01T00:02:00Z"
    assert "endpointVPC" not in outputs, outputs
    assert outputs["endpoint"] == "vpce-0abc.vpce-svc.us-east-1.vpce.amazonaws.com"
    assert (outputs["endpointID"], outputs["zoneID"], outputs["infraID"]) == ("vpce-0abc", "Z123", "prod-1-x7k2p")
    assert not outputs.get("peerings")
    assert [c["reason"] for c in status["conditions"]] == ["Progressing"]
    assert (status["inputsHash"], status["stack"], status["observedGeneration"]) == ("abc", "acme.prod-1", 2)
    assert status["lastDriftCheck"] == "2026-01-01T00:01:00Z"
    assert ClusterStatus.model_validate(status) == running_status(succeeded_status())


def through_write(server: Server, writer: Writer) -> None:
    raw = server.create()
    first = succeeded_status()
    assert writer.write(raw, first, previous=ClusterStatus())
    assert server.status()["lastUpdate"]["endTime"] == "2026-01-01T00:01:00Z"
    assert server.status()["outputs"]["endpointVPC"] == "vpc-0hub1"
    assert writer.write(server.read(), running_status(first), previous=first)


def through_write_later(server: Server, writer: Writer) -> None:
    raw = server.create()
    first = succeeded_status()
    writer.write_later(raw, first, previous=ClusterStatus())
    writer.close()  # waits for it: the next write does not supersede this one
    writer.write_later(raw, running_status(first), previous=first)  # the cache has not seen either yet
    writer.close()


def from_the_server_copy_alone(server: Server, writer: Writer) -> None:
    """A restarted service: it wrote nothing yet; what to remove comes from the server's copy."""
    server.create()
    first = succeeded_status()
    server.writer().write(server.read(), first, previous=ClusterStatus())
    assert writer.write(server.read(), running_status(first), previous=ClusterStatus())


def over_a_lagging_cache(server: Server, writer: Writer) -> None:
    """Neither `previous` nor the cache has the first write: the writer remembers what it sent."""
    raw = server.create()
    first = succeeded_status()
    assert writer.write(raw, first, previous=ClusterStatus())
    assert writer.write(raw, running_status(first), previous=ClusterStatus())


def after_a_write_that_failed_but_landed(server: Server, writer: Writer) -> None:
    """The answer to a write was lost (it landed): the next write removes its fields too."""
    raw = server.create()
    real = writer.port.patch_status

    def lost_answer(*args, **kwargs):
        real(*args, **kwargs)
        raise ApiError(504, "Gateway Timeout")

    writer.port.patch_status = lost_answer  # type: ignore[method-assign]
    first = succeeded_status()
    with pytest.raises(ApiError):
        writer.write(raw, first, previous=ClusterStatus())
    writer.port.patch_status = real  # type: ignore[method-assign]
    assert writer.write(raw, running_status(first), previous=ClusterStatus())


def after_a_write_that_failed_before_it_was_sent(server: Server, writer: Writer) -> None:
    """A write that never reached the server: the next one still removes what the one before it wrote."""
    raw = server.create()
    first = succeeded_status()
    assert writer.write(raw, first, previous=ClusterStatus())
    real = writer.port.patch_status

    def refused(*args, **kwargs):
        raise ConnectionRefusedError("no route")

    writer.port.patch_status = refused  # type: ignore[method-assign]
    between = first.model_copy(update={"account": None})
    with pytest.raises(ConnectionRefusedError):
        writer.write(raw, between, previous=first)
    writer.port.patch_status = real  # type: ignore[method-assign]
    assert writer.write(raw, running_status(first), previous=between)


SCENARIOS: list[Callable[[Server, Writer], None]] = [
    through_write, through_write_later, from_the_server_copy_alone, over_a_lagging_cache,
    after_a_write_that_failed_but_landed, after_a_write_that_failed_before_it_was_sent]


@pytest.fixture
def kmock_server():
    with MockKubeAPI() as api:
        api_client = client.ApiClient(api.configuration())
        server = Server(api_client, "acme")
        server.env.namespace("acme")
        yield server
        server.close()
        api_client.close()


@pytest.fixture
def real_server(kube_apiserver):  # noqa: F811 - the fixture
    env = ServiceEnv.isolated(kube_apiserver.api_client())
    server = Server(env.api_client, env.ns)
    yield server
    server.close()
    env.api_client.close()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_a_status_write_removes_nested_fields_on_kmock(kmock_server, scenario):
    writer = kmock_server.writer()
    scenario(kmock_server, writer)
    writer.close()
    assert_running_replaced_succeeded(kmock_server.status())


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_a_status_write_removes_nested_fields_on_the_real_api_server(real_server, scenario):
    writer = real_server.writer()
    scenario(real_server, writer)
    writer.close()
    assert_running_replaced_succeeded(real_server.status())


# --------------------------------------------------------------------------- what the writer kept doing

class CountingPatches:
    def __init__(self, writer: Writer):
        self.calls: list[dict] = []
        real = writer.port.patch_status

        def counted(*args, **kwargs):
            self.calls.append(args[2])
            return real(*args, **kwargs)

        writer.port.patch_status = counted  # type: ignore[method-assign]


def test_a_write_of_an_unchanged_status_sends_nothing(kmock_server):
    writer = kmock_server.writer()
    patches = CountingPatches(writer)
    raw = kmock_server.create()
    first = succeeded_status()
    assert writer.write(raw, first, previous=ClusterStatus())
    assert len(patches.calls) == 1
    assert writer.write(kmock_server.read(), first, previous=first)  # the cache caught up: nothing to do
    assert len(patches.calls) == 1
    restarted = kmock_server.writer()
    restarted_patches = CountingPatches(restarted)
    assert restarted.write(kmock_server.read(), first, previous=first)
    assert restarted_patches.calls == []


def test_a_cache_that_shows_an_older_status_does_not_skip_the_write(kmock_server):
    """The cache and `previous` both show the status before our last write: the server has something else."""
    writer = kmock_server.writer()
    raw = kmock_server.create()
    first = succeeded_status()
    assert writer.write(raw, first, previous=ClusterStatus())
    before = kmock_server.read()
    second = running_status(first)
    assert writer.write(before, second, previous=first)
    assert writer.write(before, first, previous=first)  # back to `first`, which the stale cache shows
    assert ClusterStatus.model_validate(kmock_server.status()) == first


def test_a_write_to_a_deleted_cluster_says_false(kmock_server):
    writer = kmock_server.writer()
    raw = kmock_server.create()
    kmock_server.env.delete("prod-1")
    assert writer.write(raw, succeeded_status(), previous=ClusterStatus()) is False


# --------------------------------------------------------------------------- named entries, beside the whole status

NETWORK = {"vpcID": "vpc-0c1", "cidrs": ["10.1.0.0/16"], "observedAt": "2026-01-01T00:00:00Z",
           "loadBalancer": {"name": "api-int", "type": "network"}}


def test_an_entry_is_written_whole_and_the_whole_status_never_touches_another_writers_field(kmock_server):
    """status.network (the discovery's) through `write_entries` and the cluster's own status through a whole write,
    both through one writer: neither nulls the other's, and an entry that drops a field drops it on the server."""
    writer = kmock_server.writer()
    entries = writer.writer
    raw = kmock_server.create()
    assert entries.write_entries(raw, {("network",): NETWORK, ("networkError",): None})
    first = succeeded_status()
    assert writer.write(kmock_server.read(), first, previous=ClusterStatus())
    assert kmock_server.status()["network"] == NETWORK  # the whole write left it alone
    assert writer.write(raw, running_status(first), previous=first)  # over a copy that has no network yet
    assert kmock_server.status()["network"] == NETWORK
    without_lb = {k: v for k, v in NETWORK.items() if k != "loadBalancer"}
    assert entries.write_entries(raw, {("network",): without_lb})  # the stale copy shows none: the writer knows
    status = kmock_server.status()
    assert status["network"] == without_lb and status["lastUpdate"]["result"] == "Running"
    assert entries.write_entries(raw, {("networkError",): {"reason": "VpcNotFound", "message": "no VPC"}})
    assert entries.write_entries(kmock_server.read(), {("network",): NETWORK, ("networkError",): None})
    assert "networkError" not in kmock_server.status() and kmock_server.status()["network"] == NETWORK


def test_an_entry_write_that_failed_but_landed_leaves_nothing_behind(kmock_server):
    """The answer to an entry's write was lost: the next write of the entry nulls what the lost one wrote."""
    port = KubeObjects(kmock_server.api_client)
    writer = StatusWriter(port, HUBCLUSTERS)
    raw = kmock_server.create()
    real = port.patch_status

    def lost_answer(*args, **kwargs):
        real(*args, **kwargs)
        raise ApiError(504, "Gateway Timeout")

    port.patch_status = lost_answer  # type: ignore[method-assign]
    with pytest.raises(ApiError):
        writer.write_entries(raw, {("network",): NETWORK})
    port.patch_status = real  # type: ignore[method-assign]
    assert writer.write_entries(raw, {("network",): {"vpcID": "vpc-0c2"}})  # `raw` shows no network at all
    assert kmock_server.status()["network"] == {"vpcID": "vpc-0c2"}
    port.close()
