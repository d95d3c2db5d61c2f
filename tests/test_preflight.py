"""The preflight guard against moto in server mode, alone and inside the reconcile pipeline."""
from __future__ import annotations

import pytest
from kubernetes import client

from automation.adapters.lookups import LookupFailed
from automation.adapters.preflight import Preflight
from stacks.errors import NeedsAttention

from doubles import MockKubeAPI, RecordingEngine
from tests.factories import cluster, hub, resolve_one
from tests.service_env import ServiceEnv, wait_until
from tests.test_aws_sessions import CLUSTER_ACCOUNT, _enforced, _nlb, sessions  # noqa: F401 - fixture


def test_passes_when_every_account_is_reachable_and_the_nlb_exists(moto, sessions):  # noqa: F811
    _nlb(moto, CLUSTER_ACCOUNT, "prod-1-x7k2p-int")
    assert Preflight(sessions)(None, resolve_one(cluster(infraID="prod-1-x7k2p"), hub())) is None


def test_a_missing_nlb_is_a_retryable_lookup_failure(moto, sessions):  # noqa: F811
    with pytest.raises(LookupFailed) as caught:
        Preflight(sessions)(None, resolve_one(cluster(infraID="not-yet-abcde"), hub()))
    assert caught.value.reason == "LoadBalancerNotFound" and "not-yet-abcde-int" in str(caught.value)


def test_an_assume_role_refusal_needs_attention_naming_the_cluster_the_field_and_the_role(moto):
    refused = resolve_one(cluster(accountID="333333333333"), hub())  # the controller may not assume this role
    with pytest.raises(NeedsAttention) as caught:
        Preflight(_enforced(moto))(None, refused)
    assert caught.value.reason == "AssumeRoleFailed"
    assert str(caught.value).startswith("Cluster acme/prod-1: spec.accountID: AssumeRole of role ")
    assert "arn:aws:iam::333333333333:role/clusternet" in str(caught.value)


def test_in_the_pipeline_nothing_runs_until_the_installer_has_made_the_nlb(moto, sessions):  # noqa: F811
    engine = RecordingEngine()
    with MockKubeAPI() as api:
        env = ServiceEnv(client.ApiClient(api.configuration()))
        env.namespace("acme")
        env.hub()
        env.create("prod-1", infraID="prod-1-x7k2p")
        with env.running(engine, guards=[Preflight(sessions)], backoff_base=0.2, backoff_cap=0.5):
            wait_until(lambda: env.reason("prod-1") == "LoadBalancerNotFound", what="LoadBalancerNotFound")
            assert engine.calls == []
            assert "preflight, nothing ran" in env.condition("prod-1")["message"]
            _nlb(moto, CLUSTER_ACCOUNT, "prod-1-x7k2p-int")  # the installer gets there
            wait_until(lambda: env.ready("prod-1"), what="Ready")
    assert [c.operation for c in engine.calls] == ["up"]
