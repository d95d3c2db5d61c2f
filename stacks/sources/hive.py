"""A Hive `ClusterDeployment` (hive.openshift.io/v1) as a HubCluster's inputs. Pure; the field paths are those of
the CRD generated from Hive's Go types (tests/test_sources_schema.py walks them).

| HubCluster input         | read from                                                             |
| infraID                  | spec.clusterMetadata.infraID (written once Hive installs the cluster) |
| region                   | spec.platform.aws.region                                              |
| apiURL                   | https://api.<spec.clusterName>.<spec.baseDomain>:6443                 |
| network                  | nothing: discovery finds the VPC tagged kubernetes.io/cluster/<infraID> |
| privateLink              | the annotation <group>/privatelink; the NLB stays <infraID>-int       |

Never twice: Hive's own spec.platform.aws.privateLink.enabled means Hive's PrivateLink controller builds the
endpoint and the private zone api.<clusterName>.<baseDomain> already, and Route 53 refuses two private zones of
one name on one VPC; a ClusterDeployment asking both is refused, naming Hive's field.
"""
from __future__ import annotations

from typing import Any, Mapping

from stacks.errors import FieldError
from stacks.model.hub import HubConfig
from stacks.names import PRIVATELINK_ANNOTATION
from stacks.sources.kinds import SourceKind, SourceRef
from stacks.sources.outcome import Pending, Refused
from stacks.sources.part import Asks, Part, Provenance, Related, get

OPENSHIFT_API_PORT = 6443
HIVE_PRIVATELINK = "spec.platform.aws.privateLink.enabled"


def reads(deployment: Mapping[str, Any]) -> list[tuple[SourceKind, str, str]]:
    """A ClusterDeployment is read alone."""
    return []


def hive_part(deployment: Mapping[str, Any], related: Related, *, hub: HubConfig, asks: Asks,
              ref: SourceRef) -> Part | Refused | Pending:
    """The HubCluster inputs of a ClusterDeployment (see the table above), or why not (yet)."""
    privatelink = asks.privatelink
    aws = get(deployment, "spec.platform.aws")
    if not isinstance(aws, Mapping):
        platforms = get(deployment, "spec.platform")
        other = ", ".join(sorted(platforms)) if isinstance(platforms, Mapping) and platforms else "none"
        return Refused.one(ref, ref, "spec.platform.aws",
                           f"is not set (the platform is {other}): only AWS clusters are connected")
    if privatelink and get(deployment, HIVE_PRIVATELINK) is True:
        return Refused.one(ref, ref, HIVE_PRIVATELINK,
                           f"is true, and metadata.annotations[{PRIVATELINK_ANNOTATION}] asks hubwright for "
                           "PrivateLink too: Hive's PrivateLink controller already builds the endpoint and the private "
                           "zone of the API host, and Route 53 refuses two private zones of one name on one VPC; "
                           "keep one of the two")
    name, domain, region = (get(deployment, f) for f in ("spec.clusterName", "spec.baseDomain",
                                                         "spec.platform.aws.region"))
    for field, value in (("spec.clusterName", name), ("spec.baseDomain", domain), ("spec.platform.aws.region", region)):
        if not isinstance(value, str) or not value:
            return Refused.one(ref, ref, field, "is not set")
    infra_id = get(deployment, "spec.clusterMetadata.infraID")
    if not isinstance(infra_id, str) or not infra_id or get(deployment, "spec.installed") is not True:
        return Pending(ref, FieldError(str(ref), "spec.installed",
                                       "Hive has not installed the cluster yet (spec.clusterMetadata.infraID)"))
    provenance: Provenance = {"spec.infraID": (ref, "spec.clusterMetadata.infraID"),
                              "spec.region": (ref, "spec.platform.aws.region"),
                              "spec.apiURL": (ref, "spec.clusterName, spec.baseDomain"),
                              "metadata.name": (ref, "metadata.name")}
    spec: dict[str, Any] = {"region": region, "infraID": infra_id,
                            "apiURL": f"https://api.{name}.{domain}:{OPENSHIFT_API_PORT}", "network": {}}
    if privatelink:
        spec["privateLink"] = {"enabled": True}
    return Part(spec, provenance)
