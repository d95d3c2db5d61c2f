"""Errors raised at the edge: each names the object, the field and the reason."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    obj: str  # "HubCluster acme/prod-1", "HubConfig default", a file, a command-line option
    field: str  # "spec.network.cidr", "metadata.annotations[hubwright.io/owner-account-id]"; "" for the whole object
    reason: str

    def __str__(self) -> str:
        return f"{self.obj}: {self.field}: {self.reason}" if self.field else f"{self.obj}: {self.reason}"


class InvalidSpec(ValueError):
    """One or more objects are invalid; nothing may run for them.

    `reason` is the machine-readable condition reason the service reports
    (InvalidSpec, AccountNotMapped, ...).
    """

    def __init__(self, errors: list[FieldError], reason: str = "InvalidSpec"):
        self.errors = list(errors)
        self.reason = reason
        super().__init__("\n".join(str(e) for e in self.errors))

    def __eq__(self, other: object) -> bool:  # a value: the same errors for the same reason
        return isinstance(other, InvalidSpec) and (self.errors, self.reason) == (other.errors, other.reason)

    def __hash__(self) -> int:
        return hash((tuple(self.errors), self.reason))

    @classmethod
    def one(cls, obj: str, field: str, reason: str, *, condition: str = "InvalidSpec") -> "InvalidSpec":
        return cls([FieldError(obj, field, reason)], condition)


class Failure(Exception):
    """Something failed that may pass on a later try; `reason` is the condition reason the service reports.

    The three error classes, decided by type where the error is raised (like controller-runtime's terminal
    errors and kopf's temporary/permanent errors); the reconciler maps each to one behaviour:

    | class                       | examples                                            | the cluster              |
    | Failure (transient)         | throttling, network, 5xx, expired credentials,      | Reconciling, retried     |
    |                             | the installer's NLB not there yet, a failed `up`    | with backoff             |
    | NeedsAttention              | AccessDenied, a wrong account, no credentials       | Stalled, looked at again |
    |                             |                                                     | every --stalled-recheck  |
    | InvalidSpec (not a Failure) | bad input, a refused move                           | Stalled until an input   |
    |                             |                                                     | changes                  |

    The adapters' errors build on these, each in its own family: the engine's (EngineError) and AWS's (AwsError).
    """

    reason = "Failed"

    def __init__(self, message: str, *, reason: str | None = None):
        super().__init__(message)
        if reason:
            self.reason = reason


class NeedsAttention(Failure):
    """A person has to act (grant a permission, fix a trust policy), but it may heal without an input change:
    the cluster is Stalled and looked at again every --stalled-recheck, not retried with backoff."""

    reason = "NeedsAttention"
