"""NetworkQuery: what discovery is asked for one cluster, decided here from the cluster, its admitted target and
the HubConfig. Pure.

Discovery only ever looks in the account the tenancy gate admitted for the cluster (its namespace's owner
account, stacks.resolve.admit), with that account's role: a tenant cannot make it read another account by naming
a VPC there. The VPC is the declared one, or the one tagged kubernetes.io/cluster/<infraID> (owned or shared) in
that account.
"""
from __future__ import annotations

from stacks.model.cluster import Cluster
from stacks.model.hub import HubConfig, TagMatch
from stacks.names import INSTALLER_CLUSTER_TAG_PREFIX, MESH_LABEL
from stacks.targets import AwsTarget, Frozen


class NetworkQuery(Frozen):
    """One cluster's discovery: where to look and what to look for."""

    key: str  # namespace/name of the HubCluster
    target: AwsTarget  # the admitted account, region and role: the only place discovery looks
    infra_id: str
    vpc_id: str | None = None  # declared; None: found by the installer tag
    load_balancer_name: str | None = None  # PrivateLink's NLB; None: no PrivateLink, no look-up
    private_subnet_tag: str = "kubernetes.io/role/internal-elb"
    node_security_groups: tuple[tuple[str, str], ...] = ()  # (tag key, value) with {infraID} filled in
    interval: str = "10m"  # between reads: HubConfig spec.discovery.interval (a duration, stacks.registry.seconds)

    @property
    def installer_tag(self) -> str:
        """kubernetes.io/cluster/<infraID>: the tag OpenShift installers and CAPA put on the cluster's VPC."""
        return f"{INSTALLER_CLUSTER_TAG_PREFIX}{self.infra_id}"


def _fill(match: TagMatch, infra_id: str) -> tuple[str, str]:
    return match.key, match.value.replace("{infraID}", infra_id)


def uses_network(cluster: Cluster) -> bool:
    """Whether anything is built on the cluster's network: PrivateLink (its NLB) or a mesh group (its VPC, CIDR
    blocks, route tables and groups). A cluster that only uses the shared ingress builds nothing there, so its
    network is neither read nor waited for."""
    return cluster.spec.network is not None and (cluster.spec.private_link.enabled
                                                  or bool(cluster.metadata.labels.get(MESH_LABEL)))


def query_of(cluster: Cluster, target: AwsTarget, hub: HubConfig) -> NetworkQuery | None:
    """The discovery query of a provisioned cluster admitted to `target`; None for a registered-only one, or one
    that builds nothing on its network (uses_network)."""
    spec = cluster.spec
    if spec.network is None or spec.infra_id is None or not uses_network(cluster):
        return None
    link = spec.private_link
    settings = hub.spec.discovery
    return NetworkQuery(
        key=cluster.key, target=target, infra_id=spec.infra_id, vpc_id=spec.network.vpc_id,
        load_balancer_name=(link.load_balancer_name or f"{spec.infra_id}-int") if link.enabled else None,
        private_subnet_tag=settings.private_subnet_tag,
        node_security_groups=tuple(_fill(m, spec.infra_id) for m in settings.node_security_groups),
        interval=settings.interval)
