"""Builders for HubConfig and Cluster documents: a valid default, changed with keyword overrides."""
from __future__ import annotations

import copy
from typing import Any

from stacks.model import Cluster, HubConfig, parse

HUB_ACCOUNT = "111111111111"
HUB_ROLE = f"arn:aws:iam::{HUB_ACCOUNT}:role/clusternet-hub"


def hub_doc(**spec: Any) -> dict:
    doc = {
        "apiVersion": "clusternet.io/v1alpha1",
        "kind": "HubConfig",
        "metadata": {"name": "default"},
        "spec": {
            "accountID": HUB_ACCOUNT,
            "region": "us-east-1",
            "credentials": {"roleARN": HUB_ROLE},
            "roleAccountMap": {
                "222222222222": "arn:aws:iam::222222222222:role/clusternet",
                "333333333333": "arn:aws:iam::333333333333:role/clusternet",
            },
            "endpointVPCInventory": [
                {"region": "us-east-1", "vpcID": "vpc-0hub1", "cidr": "10.100.0.0/16",
                 "subnets": [{"subnetID": "subnet-0a", "availabilityZone": "us-east-1a"},
                             {"subnetID": "subnet-0b", "availabilityZone": "us-east-1b"},
                             {"subnetID": "subnet-0c", "availabilityZone": "us-east-1c"}]},
                {"region": "eu-west-1", "vpcID": "vpc-0hubeu", "cidr": "10.110.0.0/16",
                 "subnets": [{"subnetID": "subnet-0eua", "availabilityZone": "eu-west-1a"}]},
            ],
            "associatedVPCs": [{"region": "us-east-1", "vpcID": "vpc-0mgmt", "cidr": "10.0.0.0/16"}],
        },
    }
    doc["spec"].update(copy.deepcopy(spec))
    return doc


def cluster_doc(name: str = "prod-1", namespace: str = "acme", *, labels=None, annotations=None, **spec: Any) -> dict:
    doc = {
        "apiVersion": "clusternet.io/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {
            "accountID": "222222222222",
            "region": "us-east-1",
            "infraID": f"{name}-x7k2p"[:28],
            "apiURL": f"https://api.{name}.example.com:6443",
            "network": {"vpcID": "vpc-0c1", "cidr": "10.1.0.0/16", "routeTableIDs": ["rtb-01", "rtb-02"],
                        "nodeSecurityGroupIDs": ["sg-0n1"]},
            "privateLink": {"enabled": True},
        },
    }
    doc["spec"].update(copy.deepcopy(spec))
    return doc


def hub(**spec: Any) -> HubConfig:
    return parse(hub_doc(**spec))


def cluster(name: str = "prod-1", namespace: str = "acme", **kw: Any) -> Cluster:
    return parse(cluster_doc(name, namespace, **kw))
