"""Other projects' cluster objects as they appear on a hub (docs/sources.md): a Cluster API `Cluster` (v1beta1 or
v1beta2) with its CAPA `AWSCluster` or EKS `AWSManagedControlPlane`, a Hive `ClusterDeployment`, and a HyperShift
`HostedCluster` (v1alpha1 or v1beta1) with its control-plane namespace and `HostedControlPlane`. Every field
path is the real CRDs' (tests/test_sources_schema.py walks them in .tools/crds); the values are a CAPA cluster's
and an OpenShift install's after they have reconciled.

    objects = [namespace_doc("acme"), capi_cluster_doc("web-1", mesh="payments"), aws_cluster_doc("web-1")]
"""
from __future__ import annotations

from typing import Any

from stacks.names import (ENABLED_ANNOTATION, MESH_ENABLED_ANNOTATION, MESH_LABEL, PRIVATELINK_ANNOTATION,
                          SHARED_INGRESS_ANNOTATION)
from stacks.errors import FieldError
from stacks.sources.families import kind_of
from stacks.sources.hypershift import CLUSTER_LINK, CONTROL_PLANE_LABEL, control_plane_namespace
from stacks.sources.kinds import NAMESPACE, SourceKind
from stacks.sources.outcome import Derived, Refused
from stacks.sources.part import get

CAPI_V1BETA1 = "cluster.x-k8s.io/v1beta1"
CAPI_V1BETA2 = "cluster.x-k8s.io/v1beta2"
CAPA = "infrastructure.cluster.x-k8s.io/v1beta2"
CAPA_CONTROL_PLANE = "controlplane.cluster.x-k8s.io/v1beta2"
HIVE = "hive.openshift.io/v1"
HYPERSHIFT = "hypershift.openshift.io"
POD_NETWORKS = "cluster" + "Network"  # HyperShift's pod networks field (spelled so: tests/test_release.py)


def opt_in(*, enabled: bool = True, mesh: str | None = None, privatelink: bool = False, shared_ingress: bool = False,
           labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """metadata's labels and annotations of a source object that opts in (or not) as docs/sources.md says."""
    ann = {**({ENABLED_ANNOTATION: "true"} if enabled else {}),
           **({MESH_ENABLED_ANNOTATION: "true"} if mesh else {}),
           **({PRIVATELINK_ANNOTATION: "true"} if privatelink else {}),
           **({SHARED_INGRESS_ANNOTATION: "true"} if shared_ingress else {}), **(annotations or {})}
    return {"labels": {**({MESH_LABEL: mesh} if mesh else {}), **(labels or {})}, "annotations": ann}


def _meta(name: str, namespace: str, uid: str | None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, **({"uid": uid} if uid else {}),
            "creationTimestamp": "2025-03-01T10:00:00Z", **extra}


def capi_cluster_doc(name: str = "web-1", namespace: str = "acme", *, version: str = "v1beta2",
                     infra_kind: str = "AWSCluster", infra_name: str | None = None, infra_namespace: str | None = None,
                     control_plane: tuple[str, str] | None = None, endpoint: str | None = None,
                     uid: str | None = None, **opt: Any) -> dict[str, Any]:
    """A Cluster API Cluster naming its infrastructure object: v1beta2 `{apiGroup, kind, name}`, v1beta1
    `{apiVersion, kind, name, namespace}`. `control_plane` (group, kind) adds a controlPlaneRef (EKS:
    ("controlplane.cluster.x-k8s.io", "AWSManagedControlPlane")); `endpoint` a spec.controlPlaneEndpoint host."""
    infra_group = "controlplane.cluster.x-k8s.io" if infra_kind == "AWSManagedControlPlane" else \
        "infrastructure.cluster.x-k8s.io"

    def ref(group: str, kind: str, ref_name: str, ref_namespace: str | None) -> dict[str, Any]:
        if version == "v1beta1":
            return {"apiVersion": f"{group}/v1beta2", "kind": kind, "name": ref_name,
                    **({"namespace": ref_namespace} if ref_namespace else {})}
        return {"apiGroup": group, "kind": kind, "name": ref_name}

    spec: dict[str, Any] = {"infrastructureRef": ref(infra_group, infra_kind, infra_name or name,
                                                     infra_namespace or (namespace if version == "v1beta1" else None))}
    if control_plane:
        spec["controlPlaneRef"] = ref(*control_plane, name, namespace if version == "v1beta1" else None)
    if endpoint:
        spec["controlPlaneEndpoint"] = {"host": endpoint, "port": 6443}
    return {"apiVersion": f"cluster.x-k8s.io/{version}", "kind": "Cluster",
            "metadata": _meta(name, namespace, uid, **opt_in(**opt)), "spec": spec}


def _capa_network(cluster: str, vpc: str, cidr: str, secondary: tuple[str, ...], zones: tuple[str, ...],
                  tag: str) -> dict[str, Any]:
    subnets = []
    for i, zone in enumerate(zones):
        for public in (False, True):
            n = 2 * i + int(public)
            subnets.append({"id": f"{cluster}-subnet-{'public' if public else 'private'}-{zone}",
                            "resourceID": f"subnet-0{tag}{n}", "availabilityZone": zone, "isPublic": public,
                            "cidrBlock": f"{cidr.rsplit('.', 2)[0]}.{n * 16}.0/20",
                            "routeTableId": f"rtb-0{tag}{n}"})
    return {"vpc": {"id": vpc, "cidrBlock": cidr,
                    "secondaryCidrBlocks": [{"ipv4CidrBlock": block} for block in secondary]},
            "subnets": subnets}


def aws_cluster_doc(name: str = "web-1", namespace: str = "acme", *, region: str = "us-east-1",
                    vpc: str = "vpc-0web1", cidr: str = "10.20.0.0/16", secondary: tuple[str, ...] = (),
                    zones: tuple[str, ...] | None = None, lb_type: str | None = "nlb", elb_name: str | None = None,
                    endpoint: str | None = None, node_group: str | None = "sg-0web1node", tag: str = "w1",
                    uid: str | None = None) -> dict[str, Any]:
    """A CAPA AWSCluster (v1beta2) once CAPA has reconciled it: its VPC, a private and a public subnet per zone,
    each with its route table, the node security group, and the control-plane load balancer (`lb_type`: nlb,
    classic, ... or None for CAPA's default, classic)."""
    zones = zones or (f"{region}a", f"{region}b")
    spec: dict[str, Any] = {"region": region, "network": _capa_network(name, vpc, cidr, secondary, zones, tag),
                            "controlPlaneEndpoint": {"host": endpoint or f"api.{name}.{namespace}.example.com",
                                                     "port": 6443}}
    if lb_type is not None:
        spec["controlPlaneLoadBalancer"] = {"loadBalancerType": lb_type, "scheme": "internal"}
    groups = {"controlplane": {"id": f"sg-0{tag}cp", "name": f"{name}-controlplane"}}
    if node_group:
        groups["node"] = {"id": node_group, "name": f"{name}-node"}
    status: dict[str, Any] = {"ready": True, "networkStatus": {"securityGroups": groups}}
    if elb_name:
        status["networkStatus"]["apiServerElb"] = {"name": elb_name, "loadBalancerType": lb_type or "classic"}
    return {"apiVersion": CAPA, "kind": "AWSCluster", "metadata": _meta(name, namespace, uid), "spec": spec,
            "status": status}


def aws_managed_control_plane_doc(name: str = "eks-1", namespace: str = "acme", *, region: str = "us-east-1",
                                  vpc: str = "vpc-0eks1", cidr: str = "10.30.0.0/16", tag: str = "e1",
                                  endpoint: str = "0123456789abcdef.gr7.us-east-1.eks.amazonaws.com") -> dict[str, Any]:
    """CAPA's EKS control plane (v1beta2): the network as on an AWSCluster, the endpoint EKS gave it."""
    return {"apiVersion": CAPA_CONTROL_PLANE, "kind": "AWSManagedControlPlane", "metadata": _meta(name, namespace, None),
            "spec": {"region": region, "eksClusterName": f"{namespace}_{name}",
                     "network": _capa_network(name, vpc, cidr, (), (f"{region}a", f"{region}b"), tag),
                     "controlPlaneEndpoint": {"host": endpoint, "port": 443}},
            "status": {"ready": True, "networkStatus": {"securityGroups": {
                "node": {"id": f"sg-0{tag}node", "name": f"{name}-node"}}}}}


def cluster_deployment_doc(name: str = "ocp-1", namespace: str = "acme", *, infra_id: str | None = "ocp-1-x7k2p",
                           base_domain: str = "acme.example.com", region: str = "us-east-1",
                           hive_privatelink: bool | None = None, installed: bool = True,
                           uid: str | None = None, **opt: Any) -> dict[str, Any]:
    """A Hive ClusterDeployment (hive.openshift.io/v1); `infra_id` None: not installed yet (no clusterMetadata).
    `hive_privatelink`: Hive's own spec.platform.aws.privateLink.enabled."""
    aws: dict[str, Any] = {"region": region, "credentialsSecretRef": {"name": f"{name}-aws-creds"}}
    if hive_privatelink is not None:
        aws["privateLink"] = {"enabled": hive_privatelink}
    spec: dict[str, Any] = {"clusterName": name, "baseDomain": base_domain, "platform": {"aws": aws},
                            "pullSecretRef": {"name": "pull-secret"}, "installed": installed and infra_id is not None}
    if infra_id is not None:
        spec["clusterMetadata"] = {"infraID": infra_id, "clusterID": f"{infra_id}-id",
                                   "adminKubeconfigSecretRef": {"name": f"{name}-admin-kubeconfig"}}
    return {"apiVersion": HIVE, "kind": "ClusterDeployment", "metadata": _meta(name, namespace, uid, **opt_in(**opt)),
            "spec": spec}


def hosted_cluster_doc(name: str = "hc-1", namespace: str = "acme", *, version: str = "v1beta1",
                       region: str = "us-east-1", infra_id: str | None = "hc-1-9m2xq", vpc: str | None = "vpc-0hc1",
                       cidr: str | None = "10.40.0.0/16", endpoint_access: str | None = "Public",
                       endpoint: str | None = "api-hc-1.hcp.acme.example.com", uid: str | None = None,
                       **opt: Any) -> dict[str, Any]:
    """A HyperShift HostedCluster on AWS as `hypershift create cluster aws` writes it and HyperShift reconciles it.
    Every field HyperShift's CRDs require is there, so the real API server takes it as it is. v1alpha1 writes the
    machine network as spec.networking.machineCIDR, v1beta1 as machineNetwork[].cidr;
    `endpoint`: the APIServer's published hostname (external DNS, HyperShift's --external-dns-domain); None:
    HyperShift has not reported status.controlPlaneEndpoint yet."""
    aws: dict[str, Any] = {"region": region, "rolesRef": {  # required: the roles live in the guest's account
        role: f"arn:aws:iam::999999999999:role/{name}-{role}" for role in (
            "controlPlaneOperatorARN", "imageRegistryARN", "ingressARN", "kubeCloudControllerARN", "networkARN",
            "nodePoolManagementARN", "storageARN")}}
    if version == "v1alpha1":  # v1alpha1 also requires its credential Secrets
        aws |= {creds: {"name": f"{name}-{creds.lower()}"} for creds in (
            "controlPlaneOperatorCreds", "kubeCloudControllerCreds", "nodePoolManagementCreds")}
    if vpc is not None:
        aws["cloudProviderConfig"] = {"vpc": vpc, "subnet": {"id": "subnet-0hc1a"}, "zone": f"{region}a"}
    if endpoint_access is not None:
        aws["endpointAccess"] = endpoint_access
    networking: dict[str, Any] = {"networkType": "OVNKubernetes",
                                  POD_NETWORKS: [{"cidr": "10.132.0.0/14", "hostPrefix": 23}]}
    if cidr is not None:
        if version == "v1alpha1":
            networking["machineCIDR"] = cidr
        else:
            networking["machineNetwork"] = [{"cidr": cidr}]
    spec: dict[str, Any] = {
        "release": {"image": "quay.io/openshift-release-dev/ocp-release:4.14.0-x86_64"},
        "pullSecret": {"name": f"{name}-pull-secret"}, "sshKey": {"name": f"{name}-ssh-key"},
        "networking": networking, "platform": {"type": "AWS", "aws": aws},
        "services": [{"service": "APIServer", "servicePublishingStrategy": {
            "type": "LoadBalancer", **({"loadBalancer": {"hostname": endpoint}} if endpoint else {})}}]}
    if infra_id is not None:
        spec["infraID"] = infra_id
    doc: dict[str, Any] = {"apiVersion": f"{HYPERSHIFT}/{version}", "kind": "HostedCluster",
                           "metadata": _meta(name, namespace, uid, **opt_in(**opt)), "spec": spec}
    if endpoint is not None:
        doc["status"] = {"controlPlaneEndpoint": {"host": endpoint, "port": 6443}}
    return doc


def control_plane_namespace_doc(hosted_namespace: str = "acme", hosted_name: str = "hc-1", *,
                                hypershift_label: bool = True,
                                annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """The Namespace HyperShift runs a HostedCluster's control plane in, labelled as HyperShift labels it."""
    labels = {CONTROL_PLANE_LABEL: "true"} if hypershift_label else {}
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": control_plane_namespace(hosted_namespace, hosted_name), "labels": labels,
                         **({"annotations": annotations} if annotations else {})}}


def hosted_control_plane_doc(hosted_namespace: str = "acme", hosted_name: str = "hc-1", *, version: str = "v1beta1",
                             link: str | None = None) -> dict[str, Any]:
    """The HostedControlPlane HyperShift makes for a HostedCluster, in its control-plane namespace, with HyperShift's
    owner link (the annotation naming the HostedCluster's namespace/name; `link` another value)."""
    namespace = control_plane_namespace(hosted_namespace, hosted_name)
    return {"apiVersion": f"{HYPERSHIFT}/{version}", "kind": "HostedControlPlane",
            "metadata": {"name": hosted_name, "namespace": namespace,
                         "annotations": {CLUSTER_LINK: link if link is not None else f"{hosted_namespace}/{hosted_name}"}},
            "spec": {"releaseImage": "quay.io/openshift-release-dev/ocp-release:4.14.0-x86_64",
                     "pullSecret": {"name": "pull-secret"}, "sshKey": {"name": "ssh-key"}, "issuerURL": "https://oidc",
                     "networking": {"networkType": "OVNKubernetes",
                                    POD_NETWORKS: [{"cidr": "10.132.0.0/14", "hostPrefix": 23}]}, "services": [],
                     "platform": {"type": "AWS"}, "infraID": "hc-1-9m2xq", "dns": {"baseDomain": "hcp.example.com"},
                     "etcd": {"managementType": "Managed", "managed": {"storage": {"type": "PersistentVolume"}}}}}


def related_in(*docs: dict[str, Any]):
    """related(kind, namespace, name) over `docs` (a Namespace by its name), as derive() asks it, recording every
    question asked (the attack tests check that an object of another namespace is never even asked for)."""
    index: dict[tuple[SourceKind | None, str, str], dict[str, Any]] = {}
    for doc in docs:
        kind = NAMESPACE if doc.get("kind") == "Namespace" else kind_of(doc)
        namespace, name = get(doc, "metadata.namespace") or "", get(doc, "metadata.name")
        if isinstance(namespace, str) and isinstance(name, str):  # a junk name is no object of that name
            index[(kind, namespace, name)] = doc
    asked: list[tuple[str, str, str]] = []

    def related(kind: SourceKind, namespace: str, name: str) -> dict | None:
        asked.append((kind.kind, namespace, name))
        return index.get((kind, namespace, name))

    related.asked = asked  # type: ignore[attr-defined]
    return related


def refusal(outcome: object) -> FieldError:
    """The one error of a Refused outcome."""
    assert isinstance(outcome, Refused), outcome
    (error,) = outcome.errors
    return error


def derived(outcome: object) -> Derived:
    assert isinstance(outcome, Derived), outcome
    return outcome
