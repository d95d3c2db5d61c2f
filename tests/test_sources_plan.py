"""A plan folder holding Cluster API, CAPA and Hive objects beside ours (docs/sources.md): the loader derives their
HubClusters with the one derive() the service calls, names every refused or pending source object, and lets a
hand-written HubCluster win only when it says so."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from automation.adapters.files.inputs import load_fleet
from doubles.factories import cluster_doc, namespace_doc
from doubles.sources import aws_cluster_doc, capi_cluster_doc, cluster_deployment_doc
from stacks.errors import InvalidSpec
from stacks.names import OVERRIDES_SOURCE_ANNOTATION

HUB = "examples/hub.yaml"


def folder(tmp_path: Path, *docs: dict) -> str:
    where = tmp_path / "clusters"
    where.mkdir(exist_ok=True)
    (where / "all.yaml").write_text(yaml.safe_dump_all([namespace_doc("acme"), *docs]))
    return str(where)


def test_a_cluster_api_cluster_in_a_plan_folder_is_read_as_a_source_not_refused_as_ours(tmp_path):
    # Before sources, a Cluster API Cluster was parsed as one of our kinds and refused.
    fleet = load_fleet(HUB, folder(tmp_path, capi_cluster_doc("web-1"), aws_cluster_doc("web-1")))
    (cluster,) = fleet.clusters
    assert cluster.key == "acme/web-1"
    assert cluster.spec.account_id == "222222222222"  # the namespace's owner account, not anything the source says
    assert cluster.spec.network is not None and cluster.spec.network.vpc_id == "vpc-0web1"
