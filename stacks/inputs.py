"""StackInputs: everything one cluster's stack needs, resolved, validated and frozen.

(AwsTarget lives in stacks.targets and is re-exported here for its many users.)

One StackInputs feeds `pulumi up` (as stack config), the offline plan and the
service (whose skip-check is `digest()`), so the three can never disagree.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from stacks.mesh import MeshShare
from stacks.model import AssociatedVPC, EndpointVPC
from stacks.targets import AwsTarget, Frozen

INPUTS_CONFIG_KEY = "inputs"  # stack config key (clusternet:inputs) that holds the JSON


class PrivateLinkInputs(Frozen):
    infra_id: str
    nlb_name: str  # "{infraID}-int", created by the installer
    api_host: str
    api_port: int
    # None: discovered at run time from the hub provider's caller identity.
    allowed_principal: str | None
    endpoint_vpc: EndpointVPC  # chosen by stacks.placement; stable once chosen
    associated_vpcs: tuple[AssociatedVPC, ...] = ()
    dns_record_type: Literal["Alias", "ARecord"] = "Alias"


class SharedIngressInputs(Frozen):
    """What the cluster's node-side proxy needs: its ID, where it listens, whom it dials and how."""

    cluster_id: str
    central_address: str  # host:port of the central load balancer
    proxy_bind: str  # host:port on every node (the kubernetes service IP)
    wire_mode: Literal["unique-id", "custom-tlv"] = "unique-id"
    tlv_type: int = 0xE0
    image: str = "haproxy:2.6"


class StackInputs(Frozen):
    stack: str  # "<namespace>.<name>": stable, readable, unique
    namespace: str
    name: str
    tenant: str
    generation: int | None = None  # not part of the digest: a no-op edit must not cost a run
    cluster: AwsTarget  # the cluster's account and region
    hub: AwsTarget  # the hub account in its default region
    tags: dict[str, str]
    private_link: PrivateLinkInputs | None = None
    shared_ingress: SharedIngressInputs | None = None
    mesh: MeshShare | None = None  # this stack's share of its mesh group

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_config(self) -> str:
        return self.model_dump_json(exclude={"generation"})

    @classmethod
    def from_config(cls, raw: str) -> "StackInputs":
        return cls.model_validate_json(raw)

    def digest(self) -> str:
        """A stable hash of what the stack should look like."""
        canonical = json.dumps(json.loads(self.to_config()), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]

    def __hash__(self) -> int:  # dict fields make the default hash impossible
        return hash(self.digest())

    def describe(self) -> dict[str, Any]:
        """The stack tags: who and where, for the console and for humans."""
        return {
            "clusternet:cluster": self.key,
            "clusternet:namespace": self.namespace,
            "clusternet:tenant": self.tenant,
            "clusternet:account": self.cluster.account_id,
            "clusternet:region": self.cluster.region,
        }
