"""Builders for HubConfig and Cluster documents: a valid default, changed with keyword overrides."""
from __future__ import annotations

import copy
import hashlib
from typing import Any

from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig
from stacks.model.loading import parse
from stacks.names import API_VERSION

HUB_ACCOUNT = "111111111111"
HUB_ROLE = f"arn:aws:iam::{HUB_ACCOUNT}:role/hubwright-hub"


def hub_doc(**spec: Any) -> dict:
    doc = {
        "apiVersion": API_VERSION,
        "kind": "HubConfig",
        "metadata": {"name": "default"},
        "spec": {
            "accountID": HUB_ACCOUNT,
            "region": "us-east-1",
            "credentials": {"roleARN": HUB_ROLE},
            "roleAccountMap": {
                "222222222222": "arn:aws:iam::222222222222:role/hubwright",
                "333333333333": "arn:aws:iam::333333333333:role/hubwright",
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


def vpc_of(name: str) -> str:
    """The default VPC of the cluster `name`: vpc-0c1 for prod-1, one derived from the name for any other."""
    return "vpc-0c1" if name == "prod-1" else f"vpc-0{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def infra_of(name: str) -> str:
    """The default infra ID of the cluster `name`: <name>-x7k2p, or, for a long name, one cut to 28 characters that
    a hash keeps unique (an infra ID names one install in an account: stacks.claims)."""
    infra = f"{name}-x7k2p"
    return infra if len(infra) <= 28 else f"{name[:15]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def cluster_doc(name: str = "prod-1", namespace: str = "acme", *, labels=None, annotations=None, **spec: Any) -> dict:
    doc = {
        "apiVersion": API_VERSION,
        "kind": "HubCluster",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {
            "accountID": "222222222222",
            "region": "us-east-1",
            "infraID": infra_of(name),
            "apiURL": f"https://api.{name}.example.com:6443",
            # A VPC each (one VPC is one cluster's: stacks.claims); prod-1's is vpc-0c1.
            "network": {"vpcID": vpc_of(name), "cidr": "10.1.0.0/16", "routeTableIDs": ["rtb-01", "rtb-02"],
                        "nodeSecurityGroupIDs": ["sg-0n1"]},
            "privateLink": {"enabled": True},
        },
    }
    doc["spec"].update(copy.deepcopy(spec))
    return doc


# A hub with a shared ingress whose administrator lets backends be in 10.0.0.0/8 or Services (*.svc).
INGRESS = {"address": "lb.example.com:6443", "allowedBackends": ["10.0.0.0/8", "svc"]}


def hub(**spec: Any) -> HubConfig:
    return parse(hub_doc(**spec))


def cluster(name: str = "prod-1", namespace: str = "acme", **kw: Any) -> Cluster:
    return parse(cluster_doc(name, namespace, **kw))


# --- tenancy: which namespace owns which account (the hub administrator's annotations) ---------------------

OWNER_ANNOTATION = "hubwright.io/owner-account-id"
OWNERS = {"acme": "222222222222", "globex": "333333333333"}  # the tests' tenants


def owned(account: str, **annotations: str) -> dict[str, str]:
    """A namespace's annotations making it the owner of `account`."""
    return {OWNER_ANNOTATION: account, **annotations}


NAMESPACES = {ns: owned(account) for ns, account in OWNERS.items()}


def namespace_doc(name: str = "acme", account: str | None = None, **annotations: str) -> dict:
    """A Namespace object as the hub administrator writes it (for the CLI's folders)."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "annotations": owned(account or OWNERS[name], **annotations)}}


def fleet(h: HubConfig | None = None, clusters=(), *, namespaces=None, **kw: Any):
    """A Fleet whose namespaces own their accounts as OWNERS says (unless `namespaces` is given)."""
    from stacks.resolve import Fleet

    return Fleet(hub=h or hub(), clusters=tuple(clusters), namespaces=NAMESPACES if namespaces is None else namespaces,
                 **kw)


def resolve_one(c: Cluster, h: HubConfig | None = None, **kw: Any):
    """stacks.resolve.resolve for a cluster whose namespace owns the account it names (unless told otherwise)."""
    from stacks.resolve import resolve

    kw.setdefault("ns_annotations", owned(c.spec.account_id))  # its namespace owns the account it names
    return resolve(c, h or hub(), **kw)
