"""The placeholder attack of the fourth adversarial review (issue #45, High 1 b) on the real kube-apiserver and
service: an old HubCluster that claimed nothing is repointed at a running cluster's VPC in a shared account. The
holder keeps its VPC (recorded in status.claims), the placeholder is Stalled VPCClaimed, and the holder's stack does
not move."""
from __future__ import annotations

import pytest

from automation.adapters.aws.discovery_standin import StandInDiscovery
from doubles.engine import RecordingEngine
from doubles.service_env import ServiceEnv, wait_until
from stacks.model.cluster import Network
from tests.envtest import kube_apiserver_alone  # noqa: F401 - the fixture

pytestmark = pytest.mark.live


def test_an_old_placeholder_repointed_at_a_running_clusters_vpc_is_stalled_and_the_holder_keeps_it(
        kube_apiserver_alone):  # noqa: F811 - the fixture
    env = ServiceEnv.isolated(kube_apiserver_alone.api_client())
    rival = f"rival-{env.ns.removeprefix('team-')}"
    env.namespace(rival)  # owns the same account as env.ns: the hub lists it in spec.tenancy.sharedAccounts
    victim_net = {"vpcID": "vpc-0victim", "cidr": "10.60.0.0/16", "routeTableIDs": ["rtb-0victim"],
                  "nodeSecurityGroupIDs": ["sg-0victim"]}
    engine = RecordingEngine()
    # The placeholder first (the oldest object), claiming nothing: no PrivateLink, no mesh, never discovered.
    env.create("placeholder", rival, privateLink={"enabled": False},
               network={"vpcID": "vpc-0decoy", "cidr": "10.61.0.0/16"})
    # Discovery reads the victim's VPC for both (the account is the same): what each declares, as the cloud has it.
    seen = {f"{env.ns}/victim": Network.model_validate(victim_net),
            f"{rival}/placeholder": Network.model_validate(victim_net)}
    with env.running(engine, discovery=StandInDiscovery(seen), watch_namespace=None):
        wait_until(lambda: env.ready("placeholder", rival), 30, what="the placeholder Ready")
        env.create("victim", network=victim_net)
        wait_until(lambda: env.ready("victim") and (env.get("victim")["status"].get("claims") or {}).get("vpcID")
                   == "vpc-0victim", 30, what="the victim Ready with its VPC recorded")
        before = env.get("victim")["status"]
        runs = len(engine.calls)

        env.patch("placeholder", {"spec": {"privateLink": {"enabled": True}, "network": victim_net}}, rival)
        wait_until(lambda: env.reason("placeholder", rival) == "VPCClaimed", 30, what="the placeholder VPCClaimed")
        message = env.condition("placeholder", "Stalled", rival)["message"]
        assert "VPC vpc-0victim is already held by a cluster in another namespace" in message
        assert env.ns not in message  # another tenant's cluster is never named
        now = env.get("victim")["status"]
        assert env.ready("victim")
        assert (now["inputsHash"], now["lastUpdate"]) == (before["inputsHash"], before["lastUpdate"])
        assert [c.stack for c in engine.calls[runs:]] == []  # neither the placeholder nor the victim ran
