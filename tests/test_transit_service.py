"""The Transit Gateway topology through the service, against a REAL kube-apiserver (tests/envtest.py).

The transit stack is a queue key of its own; its outputs and each group's state live in HubConfig status.mesh
(a status subresource the CRD now has); a join costs the joiner's stack and the transit stack; a migration
goes attach -> routes -> done in both directions, each step recorded once every stack applied it.
"""
from __future__ import annotations

from dataclasses import astuple

from doubles.engine import RecordingEngine
from stacks.transit import GroupState, phase_of
from stacks.names import GROUP, MESH_ENABLED_ANNOTATION, MESH_LABEL, VERSION
from tests.envtest import env, kube_apiserver  # noqa: F401 - the fixtures
from doubles.factories import HUB_ACCOUNT, cluster_doc
from doubles.service_env import ServiceEnv, quiet, wait_until

TRANSIT = f"_tgw_{HUB_ACCOUNT}"


def member_doc(env: ServiceEnv, i: int) -> dict:
    return cluster_doc(
        f"m{i}", env.ns, labels={MESH_LABEL: "core"}, annotations={MESH_ENABLED_ANNOTATION: "true"},
        privateLink={"enabled": False},
        network={"vpcID": f"vpc-0m{i}", "cidr": f"10.{i + 1}.0.0/16", "routeTableIDs": [f"rtb-0m{i}"],
                 "nodeSecurityGroupIDs": [f"sg-0m{i}"],
                 "transitSubnets": [{"subnetID": f"subnet-0m{i}", "availabilityZone": "us-east-1a"}]})


def add(env: ServiceEnv, i: int) -> None:
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "hubclusters", member_doc(env, i))


def hub_status(env: ServiceEnv) -> dict:
    hub = env.custom.get_cluster_custom_object(GROUP, VERSION, "hubconfigs", env.hub_name)
    return (hub.get("status") or {}).get("mesh") or {}


def group_core(env: ServiceEnv, **config) -> None:
    env.patch_hub({"spec": {"mesh": {"groups": {"core": config}}}})


def settled(env: ServiceEnv, svc, engine: RecordingEngine, members: int, topology: str) -> None:
    """The group's state is `topology` and every member's stack applied it. The hub records the last step
    (`routes` applied everywhere) before the members' final up drops the old topology's parts, so the status
    alone is not the end: the test waits for that up too, not for a quiet spell that a late watch event beats."""
    want = {"topology": topology, "members": members}
    try:
        wait_until(lambda: hub_status(env).get("groups", {}).get(f"{env.ns}/core") == want, 30,
                   what=f"group core settled on {topology} with {members} members")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; status.mesh: {hub_status(env)}") from None
    final = phase_of(GroupState(topology=topology))
    wait_until(lambda: all(_phases(engine, f"{env.ns}.m{i}")[-1:] == [astuple(final)] for i in range(members)), 30,
               what=f"every member's stack applied {topology}'s final phase")
    wait_until(lambda: all(env.ready(f"m{i}") for i in range(members)), 30, what="every member Ready")
    quiet(svc, horizon=1.0, timeout=30)


def test_a_transit_gateway_group_forms_and_a_join_or_leave_costs_two_runs(env):
    group_core(env, topology="transitGateway", summaryCIDRs=["10.0.0.0/8"])
    engine = RecordingEngine()
    with env.running(engine, watch_namespace=env.ns) as svc:
        for i in range(3):
            add(env, i)
        settled(env, svc, engine, 3, "transitGateway")
        transit = hub_status(env)["transit"][TRANSIT]
        assert transit["lastUpdate"]["result"] == "Succeeded"
        assert transit["outputs"]["regions"]["us-east-1"]["transitGatewayId"] == f"tgw-{HUB_ACCOUNT}-us-east-1"
        applied = engine.stacks[TRANSIT]
        [group] = applied.regions[0].groups
        assert {a.cluster for a in group.attachments} == {f"{env.ns}/m{i}" for i in range(3)}  # all associated
        for i in range(3):
            share = engine.stacks[f"{env.ns}.m{i}"].mesh
            assert share.attachment.transit_gateway_id == f"tgw-{HUB_ACCOUNT}-us-east-1" and not share.peerings
            assert env.get(f"m{i}")["status"]["outputs"]["transitAttachment"] == f"tgw-attach-{env.ns}.m{i}"

        def runs_since(before: int, want: list) -> list:
            """The runs since `before` once `want` happened and the service is quiet again: the transit stack's up
            follows the joiner's status write, whose watch event the cache may not have yet when `settled` looks."""
            wait_until(lambda: all(w in [(c.operation, c.stack) for c in engine.calls[before:]] for w in want), 30,
                       what=f"the runs {want}")
            quiet(svc, horizon=1.0, timeout=30)
            return sorted((c.operation, c.stack) for c in engine.calls[before:])

        before = len(engine.calls)
        add(env, 3)
        settled(env, svc, engine, 4, "transitGateway")
        # the joiner's, then its association: exactly two runs
        assert runs_since(before, [("up", TRANSIT), ("up", f"{env.ns}.m3")]) == [("up", TRANSIT), ("up", f"{env.ns}.m3")]

        before = len(engine.calls)
        env.delete("m3")
        wait_until(lambda: env.get("m3") is None, 30, what="the leaver gone")
        settled(env, svc, engine, 3, "transitGateway")
        assert runs_since(before, [("destroy", f"{env.ns}.m3"), ("up", TRANSIT)]) == [("destroy", f"{env.ns}.m3"),
                                                                                    ("up", TRANSIT)]
        # Each transit run is told on the HubConfig (Events of a cluster-scoped object go to `default`).
        def told() -> int:
            return sum(r == "UpdateSucceeded" and TRANSIT in m for _, r, m in env.events("default", env.hub_name))
        wait_until(lambda: told() == engine.count("up", TRANSIT), 10, what="an Event on the hub per transit up")
        assert engine.count("up", TRANSIT) >= 3  # the group forming, the join, the leave


def _phases(engine: RecordingEngine, stack: str) -> list[tuple]:
    """What each up of `stack` built: (peerings, attached, routes via), consecutive repeats dropped."""
    out: list[tuple] = []
    for call in engine.runs("up", stack):
        share = call.inputs.mesh
        phase = (share.peerings, share.attachment is not None, share.routes_via)
        if not out or out[-1] != phase:
            out.append(phase)
    return out


def test_a_group_migrates_to_a_transit_gateway_and_back_one_applied_step_at_a_time(env):
    group_core(env, topology="peering")
    engine = RecordingEngine()
    with env.running(engine, watch_namespace=env.ns) as svc:
        for i in range(3):
            add(env, i)
        settled(env, svc, engine, 3, "peering")

        group_core(env, topology="transitGateway")
        settled(env, svc, engine, 3, "transitGateway")
        for i in range(3):
            assert _phases(engine, f"{env.ns}.m{i}") == [
                (True, False, "peering"),  # before
                (True, True, "peering"),  # attach: the gateway beside the peerings
                (True, True, "transitGateway"),  # routes: every route's target moves
                (False, True, "transitGateway"),  # done: the peerings go
            ]
        # The transit stack ran before any member attached (the members read its gateway from the hub's status).
        first_transit = next(c.started for c in engine.runs("up", TRANSIT))
        first_attached = min(c.started for i in range(3) for c in engine.runs("up", f"{env.ns}.m{i}")
                             if c.inputs.mesh.attachment is not None)
        assert first_transit < first_attached

        mark = len(engine.calls)
        group_core(env, topology="peering")
        settled(env, svc, engine, 3, "peering")
        for i in range(3):
            assert _phases(engine, f"{env.ns}.m{i}")[-4:] == [
                (False, True, "transitGateway"),
                (True, True, "transitGateway"),  # attach: peerings beside the gateway
                (True, True, "peering"),  # routes move back
                (True, False, "peering"),  # done: the attachments go
            ]
        wait_until(lambda: TRANSIT not in hub_status(env).get("transit", {}), 30, what="the transit stack recorded gone")
        assert ("destroy", TRANSIT) in [(c.operation, c.stack) for c in engine.calls[mark:]]
