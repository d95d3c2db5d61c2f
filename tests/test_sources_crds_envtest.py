"""Source kinds whose CRDs are not installed, on a real kube-apiserver of this module's own (no Cluster API, no Hive):
the service says at start and on /readyz which kinds it does not watch and why, stays ready, and says once, the
same two ways, when a CRD is installed after it started (docs/sources.md, "Which kinds are watched").

The trial: CAPI or Hive CRDs installed after the service started were ignored until a restart, and nothing said so.
"""
from __future__ import annotations

import logging

import pytest

from doubles.engine import RecordingEngine
from doubles.envtest import install_crds
from doubles.service_env import ServiceEnv, wait_until
from doubles.thirdparty import crds
from tests.envtest import kube_apiserver_alone  # noqa: F401 - the fixture

pytestmark = pytest.mark.live

CAPI, HIVE, HOSTED = ("Cluster.cluster.x-k8s.io", "ClusterDeployment.hive.openshift.io",
                      "HostedCluster.hypershift.openshift.io")


def test_unwatched_source_kinds_are_said_at_start_and_a_crd_installed_later_is_said_once(kube_apiserver_alone,  # noqa: F811
                                                                                         caplog):
    env = ServiceEnv.isolated(kube_apiserver_alone.api_client())
    caplog.set_level(logging.WARNING, logger="hubwright")
    with env.running(RecordingEngine(), sources="auto", sources_recheck=0.2) as service:
        ready, detail = service.ready()
        assert ready, detail  # a hub without Hive is ready
        assert set(detail["sourcesNotWatched"]) == {CAPI, HIVE, HOSTED}, detail  # every family's, from its row
        assert "clusterdeployments.hive.openshift.io/v1 was not served" in detail["sourcesNotWatched"][HIVE]
        said = [r.getMessage() for r in caplog.records if "not watching cluster source" in r.getMessage()]
        assert sorted(m.split()[4].rstrip(":") for m in said) == sorted([CAPI, HIVE, HOSTED]), said

        install_crds(env.api_client, [c for c in crds("hive-apis")
                                      if c["metadata"]["name"] == "clusterdeployments.hive.openshift.io"])
        wait_until(lambda: "served now" in service.ready()[1]["sourcesNotWatched"][HIVE], 60,
                   what="/readyz saying the Hive CRD installed since")
        told = [r for r in caplog.records if "installed after the service started" in r.getMessage()]
        assert len(told) == 1 and HIVE in told[0].getMessage() and "restart" in told[0].getMessage()
        assert "was not served" in service.ready()[1]["sourcesNotWatched"][CAPI]  # still missing: still said so
    env.api_client.close()
