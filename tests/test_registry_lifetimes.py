"""Credential lifetimes and an agent's standing, without a server: the decisions of stacks.registry that the
bootstrap, install and rotation routes and the service's sweep share."""
from __future__ import annotations

import pytest

from stacks.errors import InvalidSpec
from stacks.model.hub import HubConfig
from stacks.registry import agent_standing, agent_token_seconds, bootstrap_token_seconds, max_token_lifetime

CLUSTER = "HubCluster acme/prod-1"


def hub(**registry) -> HubConfig:
    return HubConfig.model_validate({"apiVersion": "hubwright.io/v1alpha1", "kind": "HubConfig",
                                     "metadata": {"name": "default"},
                                     "spec": {"accountID": "111111111111", "region": "us-east-1",
                                              "registry": registry}})


def test_the_default_cap_is_seven_days_with_or_without_a_hubconfig():
    assert max_token_lifetime(None)[0] == max_token_lifetime(hub())[0] == 7 * 86400
    assert bootstrap_token_seconds(CLUSTER, None, None) == 86400  # a Cluster's own default: 24h
    assert bootstrap_token_seconds(CLUSTER, "168h", hub()) == 7 * 86400


def test_a_bootstrap_token_longer_than_the_hub_allows_is_refused_naming_both():
    """The finding: tokenLifetime accepted 9999h999999m99999999s (6.2 years)."""
    with pytest.raises(InvalidSpec) as refused:
        bootstrap_token_seconds(CLUSTER, "9999h999999m99999999s", None)
    (error,) = refused.value.errors
    assert (error.obj, error.field) == (CLUSTER, "spec.tokenLifetime")
    assert "9999h999999m99999999s" in error.reason and "maxTokenLifetime (168h)" in error.reason
    with pytest.raises(InvalidSpec) as refused:
        bootstrap_token_seconds(CLUSTER, "2h", hub(maxTokenLifetime="1h"))
    assert "HubConfig default spec.registry.maxTokenLifetime (1h)" in str(refused.value)
    with pytest.raises(InvalidSpec):
        bootstrap_token_seconds(CLUSTER, "0s", None)
    assert bootstrap_token_seconds(CLUSTER, "1h", hub(maxTokenLifetime="1h")) == 3600  # the limit itself is fine


def test_the_agent_token_is_capped_by_the_hub():
    assert agent_token_seconds(86400, None) == 86400
    assert agent_token_seconds(10 * 86400, None) == 7 * 86400
    assert agent_token_seconds(86400, hub(maxTokenLifetime="2h")) == 7200


@pytest.mark.parametrize("recorded, agent_made, uid, cluster_made, standing", [
    ("u1", "2026-01-01T00:00:05Z", "u1", "2026-01-01T00:00:00Z", "current"),
    ("u1", "2026-01-01T00:00:05Z", "u2", "2026-01-01T00:00:09Z", "orphan"),  # a later Cluster of the name
    ("u1", "2026-01-01T00:00:05Z", None, None, "orphan"),  # the Cluster is gone
    (None, "2026-01-01T00:00:05Z", "u1", "2026-01-01T00:00:00Z", "adopt"),  # granted before uids were recorded
    (None, "2026-01-01T00:00:05Z", "u2", "2026-01-01T00:00:09Z", "orphan"),  # older than the Cluster
    (None, "2026-01-01T00:00:05Z", "u2", "2026-01-01T00:00:05Z", "orphan"),  # the same second: cannot tell
    (None, None, "u1", "2026-01-01T00:00:00Z", "orphan"),
])
def test_an_agent_belongs_to_the_cluster_whose_uid_it_records(recorded, agent_made, uid, cluster_made, standing):
    assert agent_standing(recorded, agent_made, uid, cluster_made) == standing
