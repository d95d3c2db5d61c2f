"""ServiceOptions: what the service is told at start, one field per `serve` option of the one table
(stacks/options.py), which gives each its flag, default, environment variable and help. The `serve` command itself
(flags -> options -> Service) is automation/service/command.py."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

from stacks.options import SERVE, default, option, values

T = TypeVar("T")


@dataclass(frozen=True)
class ServiceOptions:
    """The service's knobs: each field is the `serve` option of its name (--lease-duration: lease_duration), with
    the table's default. The engine's (--state-dir, --policy, ...) become PulumiSettings instead."""

    kubeconfig: str | None = default("kubeconfig")
    context: str | None = default("context")
    namespace: str = default("namespace")
    watch_namespace: str | None = default("watch-namespace")
    hub_name: str = default("hub-name")
    role_map_configmap: str = default("role-map-configmap")
    watch_timeout: int = default("watch-timeout")
    tenants: bool = default("tenants")
    gitrepos: bool = default("gitrepos")
    gitrepo_resync: float = default("gitrepo-resync")
    sources: str = default("sources")
    sources_recheck: float = default("sources-recheck")
    workers: int = default("workers")
    run_timeout: float = default("run-timeout")
    cancel_grace: float = default("cancel-grace")
    worker_runs: int = default("worker-runs")
    backoff_base: float = default("backoff-base")
    backoff_cap: float = default("backoff-cap")
    lock_retry: float = default("lock-retry")
    settle: float = default("settle")
    drift_interval: float = default("drift-interval")
    drift_jitter: float = default("drift-jitter")
    drift_policy: str = default("drift-policy")
    stalled_recheck: float = default("stalled-recheck")
    endpoint_census_interval: float = default("endpoint-census-interval")
    metrics_bind: str = default("metrics-bind")
    metrics_port: int = default("metrics-port")
    leader_election: bool = default("leader-election")
    leader_election_id: str = default("leader-election-id")
    lease_duration: float = default("lease-duration")
    renew_deadline: float = default("renew-deadline")
    retry_period: float = default("retry-period")
    identity: str | None = default("identity")
    executor: str = default("executor")
    keep_runs: int = default("keep-runs")
    history_keep: int = default("history-keep")
    claim_ttl: float = default("claim-ttl")

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            choices = option(field.name.replace("_", "-")).choices
            if choices and getattr(self, field.name) not in choices:
                raise ValueError(f"--{field.name.replace('_', '-')}: {getattr(self, field.name)!r} is not one of "
                                 f"{', '.join(choices)}")
        if self.keep_runs < 1 or self.claim_ttl < 3:
            raise ValueError(f"--keep-runs must be >= 1 and --claim-ttl >= 3 seconds (got {self.keep_runs}, "
                             f"{self.claim_ttl})")
        if self.history_keep < 1:
            raise ValueError(f"--history-keep must be >= 1 (got {self.history_keep})")
        if self.stalled_recheck <= 0:
            raise ValueError(f"--stalled-recheck must be > 0 seconds (got {self.stalled_recheck})")

    @classmethod
    def from_args(cls, args: Any) -> "ServiceOptions":
        """From `serve`'s parsed flags, by name."""
        return cls(**values(args, SERVE, (f.name for f in dataclasses.fields(cls))))

    def part(self, kind: type[T]) -> T:
        """The options a part of the service takes (a dataclass whose fields are some of these, by name:
        ReconcileOptions), so that none is passed by position."""
        return kind(**{f.name: getattr(self, f.name) for f in dataclasses.fields(kind)})  # type: ignore[arg-type]
