"""Whether a run may reach the engine: the one check every runner makes before it claims a run.

Only the service creates runs and nobody edits a run's spec (the admission policy, stacks/runs/admission.py).
This check holds without it: a run that a tenant forged, or edited after creation, never reaches the engine.
    - the spec is never edited: metadata.generation is 1;
    - the run's Secret (in the service's namespace, which tenants cannot write) names this run, this stack and this
      operation, and records the digest the service computed for the inputs;
    - the inputs in it hash to that digest, which is also the run's spec.inputsDigest;
    - the stack is the run's own namespace's: a cluster's stack is `<namespace>.<cluster>` of the namespace the
      run is in, a transit stack's run is in the service's namespace.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from stacks.inputs import inputs_from_config
from stacks.names import RUN_DIGEST_ANNOTATION, RUN_FOR_ANNOTATION, RUN_OPERATION_LABEL, RUN_STACK_ANNOTATION, stack_name
from stacks.runs.model import INPUTS_KEY, WITH_INPUTS, StackRunSpec
from stacks.transit import is_transit_stack


def refusal(key: str, generation: int | None, spec: StackRunSpec, secret: Mapping[str, Any] | None, *,
            service_namespace: str) -> str | None:
    """Why run `key` (namespace/name) must not run, or None. `secret`: its inputs Secret as
    {"annotations": {...}, "labels": {...}, "data": {key: text}} (None: there is none)."""
    namespace, _, name = key.partition("/")
    if generation != 1:
        return f"its spec was changed after it was created (metadata.generation {generation}): only the service " \
               "creates runs, and a run is never edited"
    if spec.cluster is not None:
        if spec.stack != stack_name(namespace, spec.cluster):
            return f"spec.stack {spec.stack} is not the stack of cluster {namespace}/{spec.cluster}"
    elif not (is_transit_stack(spec.stack) and namespace == service_namespace):
        return f"spec.stack {spec.stack}: a run without spec.cluster is a transit stack's, in {service_namespace} only"
    if secret is None:
        return f"its inputs Secret {service_namespace}/{spec.inputs_secret} does not exist"
    notes = secret.get("annotations") or {}
    if notes.get(RUN_FOR_ANNOTATION) != key:
        return f"Secret {spec.inputs_secret} is for run {notes.get(RUN_FOR_ANNOTATION)!r}, not {key}"
    if notes.get(RUN_STACK_ANNOTATION) != spec.stack:
        return f"Secret {spec.inputs_secret} is for stack {notes.get(RUN_STACK_ANNOTATION)!r}, not {spec.stack}"
    if (secret.get("labels") or {}).get(RUN_OPERATION_LABEL) != spec.operation:
        return f"Secret {spec.inputs_secret} is for another operation than {spec.operation}"
    if spec.operation not in WITH_INPUTS:
        return None
    recorded = notes.get(RUN_DIGEST_ANNOTATION)
    if not spec.inputs_digest or recorded != spec.inputs_digest:
        return f"spec.inputsDigest {spec.inputs_digest!r} is not the digest the service recorded ({recorded!r})"
    text = (secret.get("data") or {}).get(INPUTS_KEY)
    try:
        inputs = inputs_from_config(text) if isinstance(text, str) else None
    except (ValueError, TypeError, KeyError, json.JSONDecodeError) as err:
        return f"the inputs in Secret {spec.inputs_secret} do not parse: {err}"
    if inputs is None:
        return f"Secret {spec.inputs_secret} holds no inputs"
    if inputs.digest() != recorded:
        return f"the inputs in Secret {spec.inputs_secret} do not match the recorded digest {recorded}"
    if inputs.stack != spec.stack:
        return f"the inputs are stack {inputs.stack}'s, not {spec.stack}'s"
    return None
