"""The audit trail of account pivots: one JSON line per pivot, on the `hubwright.audit` logger.

A pivot is hubwright acting in an AWS account: every boto3 session handed out
by automation.adapters.aws.sessions, and every AwsTarget a stack uses, logged before each stack
run, once per operation (audit.once: a discovery's five clients are one pivot). A line carries who
(cluster, namespace), where (account_id, region), as whom (role_arn, session_name: the name CloudTrail
shows) and what (operation).
Never credentials.

    {"event": "account_pivot", "cluster": "prod-1", "namespace": "acme", "account_id": "222222222222",
     "region": "us-east-1", "role_arn": "arn:aws:iam::222222222222:role/hubwright",
     "session_name": "hubwright-cluster-acme.prod-1", "operation": "up", "stack": "acme.prod-1"}
"""
from __future__ import annotations

import json
import logging
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from stacks.inputs import stack_targets
from stacks.inputs import AwsTarget, StackInputs

LOGGER = logging.getLogger("hubwright.audit")


def pivot_record(target: AwsTarget, *, operation: str, cluster: str | None = None,
                 namespace: str | None = None, stack: str | None = None) -> dict[str, Any]:
    return {
        "event": "account_pivot",
        "cluster": cluster,
        "namespace": namespace,
        "account_id": target.account_id,
        "region": target.region,
        "role_arn": target.role_arn,  # None: the service's own (ambient) credentials
        "session_name": target.session_name,
        "operation": operation,
        "stack": stack,
    }


_SCOPE = threading.local()


@contextmanager
def once() -> Iterator[None]:
    """Inside the block, on this thread, a pivot already logged is not logged again: one operation (a discovery, a
    preflight) says each pivot once, however many clients its lookups build. Blocks nest (the outer one decides)."""
    if getattr(_SCOPE, "seen", None) is not None:
        yield
        return
    _SCOPE.seen = set()
    try:
        yield
    finally:
        _SCOPE.seen = None


def log_pivot(target: AwsTarget, *, operation: str, cluster: str | None = None, namespace: str | None = None,
              stack: str | None = None, logger: logging.Logger | None = None) -> dict[str, Any]:
    """Log one pivot; the message is the JSON line, the record also carries it as `audit` for JSON formatters."""
    record = pivot_record(target, operation=operation, cluster=cluster, namespace=namespace, stack=stack)
    line = json.dumps(record, separators=(",", ":"))
    seen: set[str] | None = getattr(_SCOPE, "seen", None)
    if seen is not None:
        if line in seen:
            return record  # the same pivot of the same operation: said already
        seen.add(line)
    (logger or LOGGER).info(line, extra={"audit": record})
    return record


def audit_stack(inputs: StackInputs, operation: str, *, logger: logging.Logger | None = None) -> list[dict[str, Any]]:
    """Before a stack run: one line per (account, region) the stack's providers will assume into."""
    return [
        log_pivot(target, operation=operation, cluster=inputs.name, namespace=inputs.namespace, stack=inputs.stack,
                  logger=logger)
        for target in stack_targets(inputs).all()
    ]
