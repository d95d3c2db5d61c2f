"""Where a stack's resources live and how to get there: one AwsTarget, one aws.Provider."""
from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict


def config_digest(config: str) -> str:
    """A stable hash of a stack's config JSON (key order and spacing do not count): what it should look like."""
    canonical = json.dumps(json.loads(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AwsTarget(Frozen):
    """Where resources live and how to get there: one aws.Provider each."""

    account_id: str
    region: str
    role_arn: str | None = None  # None: the ambient credentials (hub without a role)
    session_name: str = "hubwright"
    external_id: str | None = None
    session_duration_seconds: int | None = None

    @property
    def key(self) -> str:
        return f"{self.account_id}-{self.region}"

    def in_region(self, region: str) -> "AwsTarget":
        return self if region == self.region else self.model_copy(update={"region": region})
