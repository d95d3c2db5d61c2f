"""PulumiSettings: where the stacks live and how the CLI runs (backend, state directory, secrets provider,
policy, stale-lock rule), and load_program: the stack program by its `module:function` name. Secrets stay in the
environment, never here."""
from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from automation.adapters.engine.policy import PACK_DIR, PolicySettings
from automation.adapters.engine.protocol import RunLimits
from stacks.inputs import StackProgramInputs
from stacks.options import SERVE, default, environment

ProgramFactory = Callable[[StackProgramInputs], Mapping[str, Any]]


@dataclass(frozen=True)
class PulumiSettings:
    """Where stacks live and how the CLI runs. Secrets stay in the environment, never here."""

    state_dir: Path = Path("state")
    backend_url: str | None = None  # None: file://<state_dir>
    organization: str | None = None  # Pulumi Cloud organization (stack name org/hubwright/<stack>)
    pulumi_home: Path | None = None  # None: the CLI's default ($PULUMI_HOME or ~/.pulumi)
    secrets_provider: str | None = None  # None: passphrase (DIY backends) or the service (Cloud)
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # extra CLI environment: may hold secrets
    # Locks written by hosts matching this regex are this service's (e.g. the pods of its Deployment,
    # r"hubwright-[a-z0-9]+-[a-z0-9]+"). None: this host only.
    own_hosts: str | None = None
    # Locks written by hosts matching this regex are runners' (--runner-hosts, their pod names): stale once that
    # runner holds no live claim on the stack (stacks.runs.claims.live_holders; locks.lock_is_stale). None: none.
    runner_hosts: str | None = None
    # A lock of this service on another host (or a Cloud update of ours) older than this is stale: longer than
    # any run may take (RunLimits.stale_lock_after, which the worker pool checks).
    stale_lock_after_s: float = RunLimits().stale_lock_after
    # The policy pack on every up and preview: mandatory (each rule at its own level), advisory, or off (the
    # emergency switch); policy_config: a pack config file in Pulumi's format; policy_pack: the pack's folder.
    policy: str = "mandatory"
    policy_config: str | None = None
    policy_pack: str = str(PACK_DIR)
    # The end of each run's output kept for its history entry (protocol.Trace.log): --history-log-kib * 1024.
    log_bytes: int = default("history-log-kib") * 1024

    @property
    def backend(self) -> str:
        return self.backend_url or f"file://{Path(self.state_dir).resolve()}"

    @property
    def is_cloud(self) -> bool:
        return self.backend.startswith(("https://", "http://"))

    @classmethod
    def from_options(cls, values: Mapping[str, Any], *, limits: RunLimits = RunLimits()) -> "PulumiSettings":
        """From `serve`'s parsed options ({dest: value}, stacks.options.values): --state-dir, --backend,
        --pulumi-org, --pulumi-home, --secrets-provider, --lock-hosts, --stale-lock-seconds (default: from
        `limits`), --policy, --policy-config, --policy-pack (default: the pack this release ships),
        --history-log-kib (log_bytes)."""
        home, stale, pack = values.get("pulumi_home"), values.get("stale_lock_seconds"), values.get("policy_pack")
        kib = values.get("history_log_kib")
        # Absolute from here on: the worker processes run in the checkout's import root, and a relative --state-dir
        # or --pulumi-home means the folder the user ran the command from.
        return cls(
            state_dir=Path(values.get("state_dir") or default("state-dir")).absolute(),
            backend_url=values.get("backend") or None,
            organization=values.get("pulumi_org") or None,
            pulumi_home=Path(home).absolute() if home else None,
            secrets_provider=values.get("secrets_provider") or None,
            own_hosts=values.get("lock_hosts") or None,
            runner_hosts=values.get("runner_hosts") or None,
            stale_lock_after_s=limits.stale_lock_after if stale is None else float(stale),
            policy=values.get("policy") or default("policy"),
            policy_config=values.get("policy_config") or None,
            policy_pack=pack or str(PACK_DIR),
            log_bytes=int(default("history-log-kib") if kib is None else kib) * 1024,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, limits: RunLimits = RunLimits()) -> "PulumiSettings":
        """For a caller without `serve`'s command line (a test, a bench): the same options, from the environment
        variables `serve --help` lists (stacks.options), else their defaults."""
        return cls.from_options(environment(SERVE, os.environ if environ is None else environ), limits=limits)

    def to_json(self) -> dict[str, Any]:
        """For a worker process (automation.adapters.engine.worker): sent on its stdin, never on a command line."""
        return {k: (str(v) if isinstance(v, Path) else dict(v) if isinstance(v, Mapping) else v)
                for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "PulumiSettings":
        paths = {"state_dir", "pulumi_home"}
        fields: dict[str, Any] = {k: (Path(v) if k in paths and v is not None else v) for k, v in raw.items()}
        return cls(**fields)

    def check(self) -> None:
        """Fail at start-up, naming the setting, rather than at the first update."""
        scheme = self.backend.split("://", 1)[0]
        if scheme not in {"file", "s3", "gs", "azblob", "https", "http", "postgres"}:
            raise ValueError(f"backend_url: unsupported scheme {scheme!r} in {self.backend!r}")
        if not self.is_cloud and self.secrets_provider in (None, "passphrase"):
            merged = {**os.environ, **self.env}
            if "PULUMI_CONFIG_PASSPHRASE" not in merged and "PULUMI_CONFIG_PASSPHRASE_FILE" not in merged:
                raise ValueError(
                    f"backend {self.backend}: set PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE "
                    "(the passphrase secrets provider of DIY backends), or configure secrets_provider"
                )
        for pattern in (self.own_hosts, self.runner_hosts):
            if pattern is not None:
                re.compile(pattern)
        try:
            self.policy_settings()
        except ValueError as err:
            raise ValueError(f"--policy / --policy-config (HUBWRIGHT_POLICY / HUBWRIGHT_POLICY_CONFIG): {err}") \
                from None
        if self.policy != "off" and not (Path(self.policy_pack) / "PulumiPolicy.yaml").is_file():
            raise ValueError(f"--policy-pack {self.policy_pack}: no PulumiPolicy.yaml there (HUBWRIGHT_POLICY_PACK)")

    def policy_settings(self) -> PolicySettings:
        return PolicySettings.load(self.policy, self.policy_config)


def load_program(ref: str, options: Mapping[str, Any] | None = None) -> ProgramFactory:
    """The program named `module:function` (worker processes import it by name: no closures cross a process),
    called as function(inputs, **options)."""
    module, _, attr = ref.partition(":")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"program {ref!r}: not an importable module:function ({err})") from None
    return functools.partial(factory, **options) if options else factory
