"""What the service writes into `Cluster.status`: the API contract of the status subresource.

The CRD's status schema is generated from these models (stacks.crds), so a field
the service writes is a field the API server keeps (unknown status fields are
pruned). kstatus conventions: conditions Ready / Reconciling / Stalled, each with
observedGeneration; `observedGeneration` at the top says which spec was seen.
The logic that fills these in lives in automation.adapters.status.
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from stacks.names import CLUSTER_ID, CLUSTER_ID_MAX

CONDITION_TYPES = ("Ready", "Reconciling", "Stalled")  # kstatus: exactly one story at a time
DRIFT_CONDITION = "DriftDetected"  # beside them: True while the last drift check found the cloud changed

# Condition reasons (CamelCase, machine-readable). InvalidSpec and the other
# refusals of stacks.resolve/stacks.accounts arrive as InvalidSpec.reason and are
# reported as they are (AccountNotMapped, AccountMismatch, NoEndpointVPC, ...).
SUCCEEDED = "Succeeded"
PROGRESSING = "Progressing"
DESTROYING = "Destroying"
RECOVERING = "Recovering"
DRIFT_DETECTED = "DriftDetected"
NO_DRIFT = "NoDrift"
DRIFT_CORRECTED = "DriftCorrected"
UPDATE_FAILED = "UpdateFailed"
DESTROY_FAILED = "DestroyFailed"
STACK_LOCKED = "StackLocked"
INVALID_SPEC = "InvalidSpec"
HUB_NOT_FOUND = "HubConfigNotFound"
REGISTERED = "Registered"  # a registered-only cluster (no AWS part): Ready, with no stack to run

Result = Literal["Running", "Succeeded", "Failed"]
# Bounds for the CRD schema (every string, list and map has one). Integers here are int64s (generations):
# the API server cannot take 2**63 - 1 as a JSON maximum, so they have none.
Time = Annotated[str, Field(max_length=64)]  # RFC 3339
Short = Annotated[str, Field(max_length=512)]


class StatusModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class Condition(StatusModel):
    type: str = Field(max_length=64)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024)
    message: str = Field("", max_length=32768)
    last_transition_time: Time | None = None  # RFC 3339
    observed_generation: int | None = Field(None, ge=0)


class LastUpdate(StatusModel):
    """The last engine run on the stack (crash safety: Running with no run in flight = a killed run)."""

    operation: Literal["up", "destroy", "preview", "recover"]
    result: Result
    message: str = Field("", max_length=32768)  # why it ran, then what happened
    start_time: Time | None = None
    end_time: Time | None = None
    permalink: str | None = Field(None, max_length=2048)  # the backend's page of this update, when it has one
    changes: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict, max_length=16)


class Recovery(StatusModel):
    """The last time a run killed mid-way was cleaned up (stale lock cancelled, pending operations cleared)."""

    time: Time
    message: str = Field("", max_length=32768)


class Peering(StatusModel):
    """A VPC peering this stack owns (stacks.mesh: the later joiner of a pair owns it)."""

    name: str = Field(max_length=201)  # "<stack>+<stack>"
    id: Short | None = None  # pcx-...
    state: Short | None = None


class MeshJoin(StatusModel):
    """The cluster's durable place in its mesh group's join order (stacks.mesh reads it; the service writes it)."""

    group: str = Field(max_length=63)
    order: int = Field(ge=0)


class SharedIngressStatus(StatusModel):
    """The shared-ingress ID the cluster was routed on: recorded once, then resolve() routes it on this ID whatever
    the rules become (stacks.ingress.cluster_id_of), so the node proxies already installed keep working."""

    cluster_id: str = Field(alias="clusterID", pattern=f"^{CLUSTER_ID.pattern}$", max_length=CLUSTER_ID_MAX)


class StackOutputs(StatusModel):
    """The stack outputs people and other stacks look for."""

    endpoint: Short | None = None  # DNS name of the hub's interface endpoint
    endpoint_id: Short | None = Field(None, alias="endpointID")
    endpoint_vpc: Short | None = Field(None, alias="endpointVPC")  # keeps placement stable across re-resolves
    service_name: Short | None = None  # the VPC endpoint service in the cluster's account
    zone_id: Short | None = Field(None, alias="zoneID")
    infra_id: Short | None = Field(None, alias="infraID")  # the install the PrivateLink was built for
    peerings: list[Peering] = Field(default_factory=list, max_length=1000)  # the mesh peerings this stack owns
    # Its VPC attachment to its mesh group's Transit Gateway: the transit stack associates it (stacks.transit).
    transit_attachment: Short | None = None


class FactsStatus(StatusModel):
    """The latest dynamic facts the cluster's agent pushed (the registry mirrors them; history: its database)."""

    version: int = Field(ge=1)
    time: Time
    facts: dict[str, Annotated[str, Field(max_length=1024)]] = Field(default_factory=dict, max_length=100)


class BootstrapTokenStatus(StatusModel):
    """The cluster's one-time bootstrap token: its hash, never the token itself."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", max_length=64)
    valid_until: Time
    used: bool = False


# Status fields the registry API writes (docs/registry.md). The service neither writes nor nulls them, and
# resolve() never reads them: a cluster's facts or token can never change its stack.
REGISTRY_STATUS_FIELDS = ("facts", "bootstrapToken")


class ClusterStatus(StatusModel):
    observed_generation: int | None = Field(None, ge=0)
    stack: str | None = Field(None, max_length=100)  # the Pulumi stack name
    account: str | None = Field(None, max_length=12)  # resolved account (the namespace's owner account)
    region: str | None = Field(None, max_length=20)  # resolved region (annotations win over spec)
    inputs_hash: str | None = Field(None, max_length=64)  # StackInputs.digest() of the last successful up
    conditions: list[Condition] = Field(default_factory=list, max_length=8)
    last_update: LastUpdate | None = None
    last_drift_check: Time | None = None  # RFC 3339; the next one is due a jittered interval later
    last_recovery: Recovery | None = None
    outputs: StackOutputs | None = None
    mesh_join: MeshJoin | None = None
    shared_ingress: SharedIngressStatus | None = None  # status.sharedIngress: the routed ID (resolve() reads it)
    # The value of the annotation hubwright.io/reconcile-request the service last acted on.
    last_handled_reconcile_request: str | None = Field(None, max_length=256)
    facts: FactsStatus | None = None  # the registry's (REGISTRY_STATUS_FIELDS)
    bootstrap_token: BootstrapTokenStatus | None = None  # the registry's (REGISTRY_STATUS_FIELDS)

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)


# --- HubConfig.status: the mesh's shared state (stacks.transit), written by the service's leader ------------

class GroupStatus(StatusModel):
    """A mesh group's state: what its stacks are built for (stacks.transit.GroupState), and a word on it."""

    topology: Literal["peering", "transitGateway"]
    migrating_to: Literal["peering", "transitGateway"] | None = None
    step: Literal["attach", "routes"] | None = None
    members: int = Field(0, ge=0)
    message: str | None = Field(None, max_length=4096)  # why it is not where its spec says yet


class TransitRegionStatus(StatusModel):
    transit_gateway_id: Short
    route_tables: dict[str, Short] = Field(default_factory=dict, max_length=1000)  # group key -> route table


class TransitOutputsStatus(StatusModel):
    regions: dict[str, TransitRegionStatus] = Field(default_factory=dict, max_length=40)


class TransitStatus(StatusModel):
    """A transit stack (one per network account, `_tgw_<account>`): its last run and the outputs members read."""

    inputs_hash: str | None = Field(None, max_length=64)
    last_update: LastUpdate | None = None
    outputs: TransitOutputsStatus | None = None


class MeshHubStatus(StatusModel):
    groups: dict[str, GroupStatus] = Field(default_factory=dict, max_length=10000)
    transit: dict[str, TransitStatus] = Field(default_factory=dict, max_length=1000)


class HubStatus(StatusModel):
    mesh: MeshHubStatus | None = None
