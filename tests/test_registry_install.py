"""The install answer and the rate limiter, without a server: what the manifests promise and how buckets refill."""
from __future__ import annotations

from automation.api.ratelimit import RateLimiter
from stacks.inputs import SharedIngressInputs
from stacks.install import (AGENT, AGENT_NAMESPACE, API_RULES, agent_rules, install_response,
                            node_proxy_config_map)
from stacks.model.cluster import Cluster
from stacks.names import GROUP


def cluster(**spec) -> Cluster:
    return Cluster.model_validate({"apiVersion": "hubwright.io/v1alpha1", "kind": "HubCluster",
                                   "metadata": {"name": "c1", "namespace": "team-a"}, "spec": spec})


def answer(c: Cluster | None = None, **extra) -> dict:
    return install_response(c or cluster(), tenant="t-team", api_url="https://registry.example.com",
                            agent_image="img:1", agent_token="agent-token", expires_at="2030-01-01T00:00:00Z",
                            **extra)


def test_the_agent_may_push_its_own_facts_nothing_else_not_even_mint_tokens():
    assert agent_rules("c1") == [
        {"apiGroups": [GROUP], "resources": ["hubclusters/facts"], "resourceNames": ["c1"], "verbs": ["create"]}]


def test_the_api_holds_what_it_grants_and_no_wildcard():
    held = {(group, resource, verb) for rule in API_RULES for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}
    for rule in agent_rules("c1"):  # RBAC: no escalate, so the writer of the Role holds its rights
        assert {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]} <= held
    assert not any("*" in str(rule) for rule in API_RULES)
    assert (GROUP, "hubclusters/status", "update") not in held and ("", "secrets", "get") not in held
    # the install answer's catalog repository: read one HubGitRepo's status, never list or change one
    assert {(g, r, v) for g, r, v in held if r.startswith("hubgitrepos")} == {(GROUP, "hubgitrepos", "get")}


def test_the_agent_is_never_told_where_the_hubs_kubernetes_api_is():
    """It rotates its token through the registry (--api), so it needs no address or CA of the hub's API."""
    body = answer()
    assert body["privateLinkEndpoint"] is None and body["expiresAt"] == "2030-01-01T00:00:00Z"
    secret = next(m for m in body["items"] if m["kind"] == "Secret")
    assert secret["metadata"] == {"name": AGENT, "namespace": AGENT_NAMESPACE, "labels": secret["metadata"]["labels"]}
    assert set(secret["stringData"]) == {"token", "apiURL", "tenant", "cluster", "namespace"}
    assert secret["stringData"]["token"] == "agent-token"
    container = next(m for m in body["items"] if m["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"][0]
    assert "--hub-url" not in container["args"] and "--token-file" in container["args"]
    assert not any(var["name"] == "HUBWRIGHT_HUB_URL" for var in container["env"])


def test_the_endpoint_is_shown_only_for_a_private_link_cluster():
    aws = dict(accountID="222222222222", infraID="demo-abc12", apiURL="https://api.demo.example.com:6443",
               network={"vpcID": "vpc-0abc", "cidr": "10.20.0.0/16"})
    on = cluster(privateLink={"enabled": True}, **aws).model_copy(update={"status": {"outputs": {"endpoint": "vpce-1"}}})
    off = cluster(**aws).model_copy(update={"status": {"outputs": {"endpoint": "vpce-1"}}})
    assert answer(on)["privateLinkEndpoint"] == "vpce-1"
    assert answer(off)["privateLinkEndpoint"] is None


def test_the_node_proxy_config_map_is_the_stacks_own():
    guest = SharedIngressInputs(cluster_id="prod-1", central_address="ingress.example.com:6443",
                                proxy_bind="172.31.0.1:6443")
    config_map = node_proxy_config_map(guest)
    assert config_map["kind"] == "ConfigMap" and "unique-id-format prod-1" in config_map["data"]["haproxy.cfg"]
    assert answer(node_proxy=guest)["items"][-1] == config_map


def test_buckets_hold_a_burst_and_refill_at_the_rate():
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0, 0, 0]
    assert limiter.take("a") == 0.5  # one token comes back every 0.5 s
    assert limiter.take("b") == 0  # its own bucket
    now[0] += 0.5
    assert limiter.take("a") == 0
    now[0] += 100
    assert [limiter.take("a") for _ in range(4)][-1] > 0  # refilled to the burst, no further


def test_the_limiter_forgets_the_least_recently_seen_addresses_first():
    limiter = RateLimiter(rate=0.001, burst=1, max_keys=2, clock=lambda: 0.0)
    assert limiter.take("a") == 0 and limiter.take("b") == 0
    assert limiter.take("a") > 0  # a is now the most recent
    assert limiter.take("c") == 0  # b is forgotten
    assert limiter.take("a") > 0
    assert limiter.take("b") == 0  # a fresh bucket
