"""The HubStackRun kind: one engine operation on one stack, as an object (stacks/runs/__init__.py).

Its spec says what to run and nothing secret: the stack, the operation, the inputs' digest, the name of the
Secret (in the service's namespace) that holds the inputs, a deadline and who asked. Tenants may read the runs of
their namespace (the update history of their stacks, on every backend); what they read is this, the phase, the
changes and the message. The outputs and the drifted resources' names go into the run's Secret.
"""
from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, Mapping

from pydantic import Field, ValidationError

from stacks.model.fields import Spec
from stacks.runs.cause import Cause
from stacks.names import (API_VERSION, RUN_CLUSTER_LABEL, RUN_DIGEST_ANNOTATION, RUN_FOR_ANNOTATION, RUN_OPERATION_LABEL,
                          RUN_SECRET_LABEL, RUN_STACK_ANNOTATION, STACK_NAME_MAX, STACKRUN)
from stacks.status import RunProgress, Short, StatusModel, Time
from stacks.times import rfc3339_seconds

Operation = Literal["up", "destroy", "preview", "recover"]
OPERATIONS: tuple[Operation, ...] = ("up", "destroy", "preview", "recover")
WITH_INPUTS: frozenset[str] = frozenset({"up", "preview"})  # the operations whose Secret holds a stack's inputs
Phase = Literal["Pending", "Running", "Succeeded", "Drifted", "Failed", "Cancelled", "Refused"]
FINISHED: frozenset[str] = frozenset({"Succeeded", "Drifted", "Failed", "Cancelled", "Refused"})
DIGEST = r"^[0-9a-f]{16,64}$"
REFUSED = "RunRefused"
MESSAGE_MAX = 512  # spec.message (Short)  # the reason of a run the runner would not execute (checks.refusal)

# The Secret's keys: `inputs` (the stack's config JSON, up and preview), `result` (written by the runner: outputs
# and drifted resources, JSON).
INPUTS_KEY, RESULT_KEY = "inputs", "result"


class DetailRef(StatusModel):
    """Where a run's detail is in the history store, and what it must hash to."""

    key: str = Field(max_length=1024, description="The detail's key in the history store.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", min_length=64, max_length=64, description="The SHA-256 of the stored (compressed) bytes.")
    bytes: int = Field(ge=0, le=2**31 - 1, description="The stored size.")


class StackRunSpec(Spec):
    """One operation on one stack. Only the service creates runs, and no one edits a run's spec (an admission
    policy refuses both to anyone else; a runner refuses a run whose spec changed after creation)."""

    stack: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", max_length=STACK_NAME_MAX, description="The Pulumi stack.")
    cluster: str | None = Field(None, max_length=253,
        description="The HubCluster (in this namespace) the stack is for; unset for a transit stack.")
    operation: Operation = Field(description="up, destroy, preview (always with refresh) or recover.")
    refresh: bool = Field(False, description="up only: read the state back from the cloud first (up --refresh).")
    inputs_digest: str | None = Field(None, pattern=DIGEST, max_length=64,
        description="The digest of the inputs in the Secret (up and preview): the runner checks it.")
    inputs_secret: str = Field(max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="The Secret in the service's namespace that holds this run's inputs.")
    message: Short = Field("", description="Why it runs (the update's message in the stack's history).")
    deadline: Time = Field(description="When a runner stops it (RFC 3339): the service's run timeout from creation.")
    requested_by: str = Field(max_length=253, description="The service replica that created it.")
    cause: Cause | None = Field(None, description="What caused the run (stacks/runs/cause.py): the `Cause` column.")


class Claim(StatusModel):
    """Which runner holds the run, and until when: the run's lease (claims.py)."""

    holder: str = Field(max_length=253, description="The runner (its pod name) that holds the run.")
    acquire_time: Time = Field(description="When this runner took the run.")
    renew_time: Time = Field(description="When the runner last renewed the claim.")
    ttl_seconds: int = Field(ge=1, le=86400, description="The claim expires this long after renewTime.")
    takeovers: int = Field(0, ge=0, le=1000, description="How many times the run was taken from a runner whose claim expired.")


class StackRunStatus(StatusModel):
    """What happened. The outputs and the drifted resources' names are in the run's Secret, not here."""

    phase: Phase = Field("Pending", description="Pending, Running, Succeeded, Drifted, Failed, Cancelled or Refused.")
    runner: str | None = Field(None, max_length=253, description="The runner that ran it (the last one, after a takeover).")
    claim: Claim | None = Field(None, description="The runner's lease on the run while it runs.")
    start_time: Time | None = Field(None, description="When the engine started it (RFC 3339).")
    end_time: Time | None = Field(None, description="When it finished (RFC 3339).")
    reason: str | None = Field(None, max_length=128,
        description="Why it failed, as the cluster's condition says it (UpdateFailed, StackLocked, RunRefused, ...).")
    changes: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict, max_length=16,
        description="Resources by operation (create, update, delete, same, ...).")
    summary: Short = Field("", description="The changes in words (the printer column).")
    message: str = Field("", max_length=32768, description="What happened, for people.")
    drifted: int = Field(0, ge=0, le=1_000_000, description="preview: how many resources would change.")
    permalink: str | None = Field(None, max_length=2048, description="The backend's page of this update.")
    progress: RunProgress | None = Field(None, description="While it runs: resources done of those planned so far.")
    observed_generation: int | None = Field(None, ge=0, description="The generation the runner executed.")
    detail: DetailRef | None = Field(None, description="The run's diff and engine log in the history store "
                                                       "(outside etcd): their SHA-256 and size.")


def _dns(text: str) -> str:
    """`text` as a DNS label part: lowercase letters, digits and hyphens."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-") or "x"


def run_name(stack: str, operation: str, now: datetime, nonce: str) -> str:
    """`<stack>-<UTC time to the millisecond>-<operation>-<nonce>`: a stack's runs sort by time (kubectl lists them
    in order; retention breaks creationTimestamp's one-second ties with it), unique with the nonce."""
    when = now.astimezone(timezone.utc)
    return f"{_dns(stack)[:180]}-{when:%Y%m%d-%H%M%S}{when.microsecond // 1000:03d}-{operation}-{_dns(nonce)[:8]}"


def secret_name(namespace: str, name: str) -> str:
    """The inputs Secret of run namespace/name (in the service's namespace): a hash, so it fits and cannot be
    guessed into another run's."""
    return "hubwright-run-" + hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:40]


def documents(*, operation: Operation, namespace: str, name: str, stack: str, cluster: str | None,
              inputs_config: str | None, digest: str | None, message: str, refresh: bool, deadline: datetime,
              requested_by: str, service_namespace: str,
              cause: Cause | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the HubStackRun, its inputs Secret), as the service creates them (automation/service/executor.py): the run
    beside its cluster, naming the Secret; the Secret in the service's namespace, naming the run, the stack, the
    operation and the digest the runner checks (checks.refusal)."""
    secret = secret_name(namespace, name)
    spec = StackRunSpec(stack=stack, cluster=cluster, operation=operation, refresh=refresh, inputs_digest=digest,
                        inputs_secret=secret, message=message[:MESSAGE_MAX], deadline=rfc3339_seconds(deadline),
                        requested_by=requested_by, cause=cause)
    labels = {RUN_OPERATION_LABEL: operation, **({RUN_CLUSTER_LABEL: cluster} if cluster else {})}
    run = {"apiVersion": API_VERSION, "kind": STACKRUN.kind,
           "metadata": {"name": name, "namespace": namespace, "labels": labels,
                        "annotations": {RUN_STACK_ANNOTATION: stack}},
           "spec": spec.model_dump(by_alias=True, exclude_none=True)}
    notes = {RUN_FOR_ANNOTATION: f"{namespace}/{name}", RUN_STACK_ANNOTATION: stack,
             **({RUN_DIGEST_ANNOTATION: digest} if digest else {})}
    body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret, "namespace": service_namespace, "annotations": notes,
                         "labels": {RUN_SECRET_LABEL: "true", RUN_OPERATION_LABEL: operation}},
            "stringData": {INPUTS_KEY: inputs_config} if inputs_config is not None else {}}
    return run, body


def summary(changes: Mapping[str, int]) -> str:
    """"2 to create, 1 to update" (what `same` counts is not a change); "no changes"."""
    text = ", ".join(f"{n} to {op}" for op, n in sorted(changes.items()) if op != "same" and n)
    return text or "no changes"


def result_payload(outputs: Mapping[str, Any], drifted: list[str]) -> str:
    return json.dumps({"outputs": dict(outputs), "drifted": list(drifted)}, sort_keys=True)


def status_of(raw: Mapping[str, Any]) -> StackRunStatus:
    """The run's status as the model reads it (none yet: Pending). One that does not parse (written by hand: only
    runners and the service write it) reads as Refused, so nothing acts on it."""
    try:
        return StackRunStatus.model_validate(raw.get("status") or {})
    except ValidationError as err:
        return StackRunStatus(phase="Refused", reason=REFUSED, message=f"status unreadable: {err.errors()[0]['msg']}")


def spec_of(raw: Mapping[str, Any]) -> StackRunSpec | str:
    """The run's spec, or why it is not one (the runner refuses it, naming the field)."""
    try:
        return StackRunSpec.model_validate(raw.get("spec") or {})
    except ValidationError as err:
        first = err.errors()[0]
        return f"spec.{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
