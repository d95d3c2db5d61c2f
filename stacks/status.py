"""What the service writes into `Cluster.status`: the API contract of the status subresource.

The CRD's status schema is generated from these models (stacks.crds), so a field
the service writes is a field the API server keeps (unknown status fields are
pruned). kstatus conventions: conditions Ready / Reconciling / Stalled, each with
observedGeneration; `observedGeneration` at the top says which spec was seen.
The logic that fills these in lives in automation.adapters.status.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Mapping, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from stacks.names import (CLUSTER_ID, CLUSTER_ID_MAX, DRIFT_CHECK_REQUEST_ANNOTATION, NETWORK_ERROR_STATUS_KEY,
                          NETWORK_STATUS_KEY, RECONCILE_REQUEST_ANNOTATION)
from stacks.network.found import FoundNetwork, NetworkError

CONDITION_TYPES = ("Ready", "Reconciling", "Stalled")  # kstatus: exactly one story at a time
DRIFT_CONDITION = "DriftDetected"  # beside them: True while the last drift check found the cloud changed

# Condition reasons (CamelCase, machine-readable). InvalidSpec and the other
# refusals of stacks.resolve/stacks.accounts arrive as InvalidSpec.reason and are
# reported as they are (AccountNotMapped, AccountMismatch, NoEndpointVPC, ...).
SUCCEEDED = "Succeeded"
PROGRESSING = "Progressing"
DESTROYING = "Destroying"
RETAINING = "Retaining"  # deletionPolicy Retain: removing what the cluster holds outside its account
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
INVALID_MESH_STATUS = "InvalidMeshStatus"  # an entry of HubConfig status.mesh the model cannot parse (left out)

Result = Literal["Running", "Succeeded", "Failed"]
# Bounds for the CRD schema (every string, list and map has one). Integers here are int64s (generations):
# the API server cannot take 2**63 - 1 as a JSON maximum, so they have none.
Time = Annotated[str, Field(max_length=64)]  # RFC 3339
Short = Annotated[str, Field(max_length=512)]


class StatusModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


M = TypeVar("M", bound=StatusModel)


class Condition(StatusModel):
    """A kstatus condition."""

    type: str = Field(max_length=64,
        description="The condition's type: Ready, Reconciling, Stalled (kstatus) or DriftDetected.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024,
        description="Why, in one CamelCase word (Succeeded, InvalidSpec, AccountNotMapped, ...).")
    message: str = Field("", max_length=32768, description="Why, for people: the object, the field and the reason.")
    last_transition_time: Time | None = Field(None, description="When the status last changed (RFC 3339).")
    observed_generation: int | None = Field(None, ge=0,
        description="The metadata.generation this condition was computed for.")


class RunProgress(StatusModel):
    """How far a run has gone, from the engine's events: resources done (their step finished) of those planned so
    far (the engine plans a step per resource as the program registers it, so `planned` can grow during a run)."""

    done: int = Field(ge=0, le=1_000_000, description="Resources whose step finished.")
    planned: int = Field(ge=0, le=1_000_000, description="Resources planned so far (may grow during a run).")


class LastUpdate(StatusModel):
    """The last engine run on the stack (crash safety: Running with no run in flight = a killed run)."""

    operation: Literal["up", "destroy", "preview", "recover"] = Field(description="What ran.")
    result: Result = Field(description="Running, Succeeded or Failed (Running with no run in flight: a killed run).")
    message: str = Field(default="", max_length=32768, description="Why it ran, then what happened.")
    start_time: Time | None = Field(default=None, description="When it started (RFC 3339).")
    end_time: Time | None = Field(default=None, description="When it ended (RFC 3339).")
    permalink: str | None = Field(default=None, max_length=2048,
        description="The backend's page of this update, when it has one.")
    changes: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict, max_length=16,
        description="Resources by operation (create, update, delete, same, ...): the engine's summary.")
    progress: RunProgress | None = Field(default=None,
        description="Resources done / planned, written during a run (at most every few seconds).")
    cause: str | None = Field(default=None, max_length=32,
        description="What caused the run: Create, Spec, Mesh, Hub, Fleet, DriftCheck, Drift, Request, Retry, Leader, "
                    "Delete, Retain, Release (stacks/runs/cause.py).")
    run: str | None = Field(default=None, max_length=253,
        description="The run in the stack's history: `python -m automation history NAMESPACE/NAME --run RUN`, or a "
                    "HubStackRun of this name with runners.")


class Recovery(StatusModel):
    """The last time a run killed mid-way was cleaned up (stale lock cancelled, pending operations cleared)."""

    time: Time = Field(description="When the killed run was cleaned up (RFC 3339).")
    message: str = Field("", max_length=32768, description="What was cleaned up.")


class Peering(StatusModel):
    """A VPC peering this stack owns (stacks.mesh: the later joiner of a pair owns it)."""

    name: str = Field(max_length=201, description="The pair: <stack>+<stack>.")
    id: Short | None = Field(None, description="The peering connection's ID (pcx-...).")
    state: Short | None = Field(None, description="The peering connection's state as AWS reports it.")


class MeshJoin(StatusModel):
    """The cluster's durable place in its mesh group's join order (stacks.mesh reads it; the service writes it)."""

    group: str = Field(max_length=63, description="The mesh group the cluster joined.")
    order: int = Field(ge=0,
        description="Its place in the group's join order (the later joiner of a pair owns the pair's peering).")


class SharedIngressStatus(StatusModel):
    """The shared-ingress ID the cluster was routed on: recorded once, then resolve() routes it on this ID whatever
    the rules become (stacks.ingress.cluster_id_of), so the node proxies already installed keep working."""

    cluster_id: str = Field(alias="clusterID", pattern=f"^{CLUSTER_ID.pattern}$", max_length=CLUSTER_ID_MAX,
        description="The ID the cluster is routed on by the shared ingress.")


class ClaimsStatus(StatusModel):
    """What the fleet's admission granted the cluster, recorded so that it keeps them (stacks.claims): a newcomer never
    takes a VPC, load balancer, infra ID, API host or first-claimed account from the cluster that holds it."""

    vpc_id: Short | None = Field(None, alias="vpcID", description="The VPC the cluster holds.")
    load_balancer: str | None = Field(None, max_length=256,
        description="The ARN of the load balancer the cluster publishes through PrivateLink.")
    infra_id: str | None = Field(None, alias="infraID", max_length=128,
        description="<account>/<infraID>: the install the cluster holds in its account.")
    api_host: str | None = Field(None, max_length=253, description="The API host the cluster holds.")
    account: str | None = Field(None, max_length=12, description="The account the cluster was admitted to.")


class StackOutputs(StatusModel):
    """The stack outputs people and other stacks look for."""

    endpoint: Short | None = Field(None,
        description="DNS name of the hub's interface endpoint to the cluster's API server.")
    endpoint_id: Short | None = Field(None, alias="endpointID", description="The interface endpoint's ID (vpce-...).")
    endpoint_vpc: Short | None = Field(None, alias="endpointVPC",
        description="The hub VPC the endpoint is in (kept, so placement is stable across re-resolves).")
    service_name: Short | None = Field(None, description="The VPC endpoint service in the cluster's account.")
    zone_id: Short | None = Field(None, alias="zoneID",
        description="The private hosted zone that resolves the API host to the endpoint.")
    infra_id: Short | None = Field(None, alias="infraID", description="The install the PrivateLink was built for.")
    peerings: list[Peering] = Field(default_factory=list, max_length=1000,
        description="The mesh peerings this stack owns.")
    # Its VPC attachment to its mesh group's Transit Gateway: the transit stack associates it (stacks.transit).
    transit_attachment: Short | None = Field(None,
        description="Its VPC attachment to its mesh group's Transit Gateway.")


class FactsStatus(StatusModel):
    """The latest dynamic facts the cluster's agent pushed (the registry mirrors them; history: its database)."""

    version: int = Field(ge=1, description="The facts' version, counted from 1 by the registry.")
    time: Time = Field(description="When the agent pushed them (RFC 3339).")
    facts: dict[str, Annotated[str, Field(max_length=1024)]] = Field(default_factory=dict, max_length=100,
        description="The facts (key: value).")


class BootstrapTokenStatus(StatusModel):
    """The cluster's one-time bootstrap token: its hash, never the token itself."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", max_length=64,
        description="The SHA-256 of the token, hex (the token itself is never stored).")
    valid_until: Time = Field(description="When the token expires (RFC 3339).")
    used: bool = Field(False, description="True once the token has been exchanged.")


class AgentKeyStatus(StatusModel):
    """The SSH public key the cluster's agent made on its first start and pushed (PUT .../deploy-key): the registry
    makes it the read-only deploy key of the cluster's catalog repository. Issuing a new bootstrap token clears it
    (the key leaves the repository; the next install's agent makes a new one)."""

    public_key: str = Field(max_length=16384, description="The OpenSSH public key (one line, no options).")
    fingerprint: str = Field(max_length=128, description="SHA256:... of the key.")
    time: Time = Field(description="When the agent pushed it (RFC 3339).")


# Status fields the registry API writes (docs/registry.md). The service neither writes nor nulls them, and
# resolve() never reads them: a cluster's facts or token can never change its stack.
REGISTRY_STATUS_FIELDS = ("facts", "bootstrapToken", "agentKey")
# Fields of a HubCluster's status that another writer than the cluster reconciler owns (the registry's, and the
# discovery's status.network): the reconciler's patches never carry or null them.
OTHER_WRITERS_STATUS_FIELDS = (*REGISTRY_STATUS_FIELDS, NETWORK_STATUS_KEY, NETWORK_ERROR_STATUS_KEY)


class ClusterStatus(StatusModel):
    """What the service (and, for facts and bootstrapToken, the registry) observed and did."""

    observed_generation: int | None = Field(None, ge=0,
        description="The metadata.generation the service last acted on.")
    stack: str | None = Field(None, max_length=100, description="The cluster's Pulumi stack (<namespace>.<name>).")
    account: str | None = Field(None, max_length=12,
        description="The resolved account (the namespace's owner account).")
    region: str | None = Field(None, max_length=20, description="The resolved region (annotations win over spec).")
    inputs_hash: str | None = Field(None, max_length=64,
        description="The digest of the stack inputs of the last successful up.")
    conditions: list[Condition] = Field(default_factory=list, max_length=8,
        description="Ready, Reconciling and Stalled (kstatus); DriftDetected; and the Warning conditions "
                    "AccountShared, RegionOverridden and UnknownKeys while they hold.")
    last_update: LastUpdate | None = Field(None, description="The last engine run on the stack.")
    last_drift_check: Time | None = Field(None,
        description="When the last drift check ran (RFC 3339); the next is due a jittered interval later.")
    last_recovery: Recovery | None = Field(None, description="The last time a run killed mid-way was cleaned up.")
    outputs: StackOutputs | None = Field(None, description="The stack outputs people and other stacks look for.")
    mesh_join: MeshJoin | None = Field(None,
        description="The cluster's durable place in its mesh group's join order.")
    shared_ingress: SharedIngressStatus | None = Field(None,
        description="The ID the shared ingress routes the cluster on, recorded once.")
    claims: ClaimsStatus | None = Field(None,
        description="What the fleet's admission granted the cluster (VPC, load balancer, infra ID, API host, "
                    "account), recorded so that no newcomer takes it.")
    # The value of the annotation hubwright.io/reconcile-request the service last acted on.
    last_handled_reconcile_request: str | None = Field(None, max_length=256,
        description=f"The value of the annotation {RECONCILE_REQUEST_ANNOTATION} the service last acted on.")
    # The value of the annotation hubwright.io/drift-check-request the service last acted on.
    last_handled_drift_check_request: str | None = Field(None, max_length=256,
        description=f"The value of the annotation {DRIFT_CHECK_REQUEST_ANNOTATION} the service last acted on (a "
                    "drift check, or an up with refresh, ran for it).")
    facts: FactsStatus | None = Field(None,
        description="The latest dynamic facts the cluster's agent pushed (written by the registry).")
    bootstrap_token: BootstrapTokenStatus | None = Field(None,
        description="The cluster's one-time bootstrap token (written by the registry).")
    agent_key: AgentKeyStatus | None = Field(None,
        description="The SSH public key the cluster's agent pushed: its catalog repository's deploy key (written by "
                    "the registry).")
    network: FoundNetwork | None = Field(None,
        description="The cluster's network as discovery read it in its account (written by the discovery).")
    network_error: NetworkError | None = Field(None,
        description="Why the discovery's last read of the network failed, until one succeeds (written by the "
                    "discovery).")

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)


# --- HubConfig.status: the mesh's shared state (stacks.transit), written by the service's leader ------------
# The one model of status.mesh: the CRD's schema is generated from it (stacks.crds), the planner reads the recorded
# state through it (stacks.transit.MeshStatus.from_hub_status), and the service's writer patches with it
# (automation/service/transit.py, MeshHub, through automation/kit/status.py).

class GroupStatus(StatusModel):
    """A mesh group's state: what its stacks are built for (stacks.transit.GroupState), and a word on it."""

    topology: Literal["peering", "transitGateway"] = Field(description="What the group's stacks are built for now.")
    migrating_to: Literal["peering", "transitGateway"] | None = Field(default=None,
        description="The topology the group is moving to, during a migration.")
    step: Literal["attach", "routes"] | None = Field(default=None,
        description="The migration's current step: attach, then routes.")
    members: int = Field(default=0, ge=0, description="The group's member count.")
    message: str | None = Field(default=None, max_length=4096,
        description="Why the group is not where its spec says yet.")


class TransitRegionStatus(StatusModel):
    """A region's Transit Gateway in a transit stack."""

    transit_gateway_id: Short = Field(description="The region's Transit Gateway (tgw-...).")
    route_tables: dict[str, Short] = Field(default_factory=dict, max_length=1000,
        description="The gateway's route table of each group, by group key.")


class TransitOutputsStatus(StatusModel):
    """The outputs of a transit stack that member stacks read."""

    regions: dict[str, TransitRegionStatus] = Field(default_factory=dict, max_length=40,
        description="The gateway of each region, by region.")

    @classmethod
    def from_stack(cls, outputs: Mapping[str, Any]) -> "TransitOutputsStatus":
        """From the transit stack's outputs (components.transit: {"regions": {region: {...}}}): a region without a
        gateway ID, or one the model cannot hold, is left out; a route table that is not a string too."""
        regions = {}
        raw_regions = outputs.get("regions") if isinstance(outputs, Mapping) else None
        for region, raw in (raw_regions.items() if isinstance(raw_regions, Mapping) else ()):
            if isinstance(raw, Mapping) and isinstance(raw.get("transitGatewayId"), str):
                tables = raw.get("routeTables")
                tables = tables if isinstance(tables, Mapping) else {}
                try:
                    regions[region] = TransitRegionStatus(
                        transit_gateway_id=raw["transitGatewayId"],
                        route_tables={k: v for k, v in tables.items() if isinstance(v, str)})
                except ValidationError:
                    continue
        return cls(regions=regions)


class TransitStatus(StatusModel):
    """A transit stack (one per network account, `_tgw_<account>`): its last run and the outputs members read."""

    inputs_hash: str | None = Field(default=None, max_length=64,
        description="The digest of the transit stack's inputs of its last successful up.")
    last_update: LastUpdate | None = Field(default=None, description="The last engine run on the transit stack.")
    outputs: TransitOutputsStatus | None = Field(default=None,
        description="The transit stack's outputs, which member stacks read.")


class MeshHubStatus(StatusModel):
    """The mesh's shared state: each group's, and each transit stack's."""

    groups: dict[str, GroupStatus] = Field(default_factory=dict, max_length=10000,
        description="Each mesh group's state, by group key.")
    transit: dict[str, TransitStatus] = Field(default_factory=dict, max_length=1000,
        description="Each transit stack (one per network account), by account.")

    @classmethod
    def read(cls, status: object) -> tuple["MeshHubStatus", tuple[str, ...]]:
        """status.mesh out of a HubConfig's whole status, entry by entry: an entry the model cannot parse is left
        out (a group without a recorded state; a transit stack not applied, so it runs again and is rewritten) and
        named in the problems (the field and the reason), never raised: one bad entry stops nothing else."""
        mesh = status.get("mesh") if isinstance(status, Mapping) else None
        if mesh is None:
            return cls(), ()
        if not isinstance(mesh, Mapping):
            return cls(), (f"status.mesh: not an object ({type(mesh).__name__})",)
        problems: list[str] = []
        groups = _entries(mesh, "groups", GroupStatus, problems)
        transit = _entries(mesh, "transit", TransitStatus, problems)
        return cls(groups=groups, transit=transit), tuple(problems)


def _entries(mesh: Mapping[str, Any], field: str, model: type[M], problems: list[str]) -> dict[str, M]:
    raw = mesh.get(field)
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.append(f"status.mesh.{field}: not an object ({type(raw).__name__})")
        return {}
    out: dict[str, M] = {}
    for key, entry in raw.items():
        try:
            out[str(key)] = model.model_validate(entry)
        except ValidationError as exc:
            where = ", ".join(f"{'.'.join(str(p) for p in err['loc']) or '(entry)'}: {err['msg']}"
                              for err in exc.errors()[:3])
            problems.append(f"status.mesh.{field}[{key}]: {where}")
    return out


class HubStatus(StatusModel):
    """The hub's shared state, written by the service's leader."""

    mesh: MeshHubStatus | None = Field(default=None,
        description="The mesh's shared state, written by the service's leader.")


def applied(inputs_hash: object, last_update: object, digest: str | None) -> bool:
    """Did the last `up` apply these inputs? The one rule, for a cluster's status and a transit stack's entry in
    HubConfig status.mesh alike: the recorded inputs hash is `digest` and the last run was an `up` that succeeded.
    `last_update` is a LastUpdate or its status dict (camelCase keys); anything else (None, a tenant's garbage
    the status subresource could not have held) is not applied."""
    if digest is None or inputs_hash != digest:
        return False
    if isinstance(last_update, LastUpdate):
        return last_update.operation == "up" and last_update.result == "Succeeded"
    if isinstance(last_update, dict):
        return last_update.get("operation") == "up" and last_update.get("result") == "Succeeded"
    return False
