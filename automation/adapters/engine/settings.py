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
    # A lock of this service on another host (or a Cloud update of ours) older than this is stale: longer than
    # any run may take (RunLimits.stale_lock_after, which the worker pool checks).
    stale_lock_after_s: float = RunLimits().stale_lock_after
    # The policy pack on every up and preview: mandatory (each rule at its own level), advisory, or off (the
    # emergency switch); policy_config: a pack config file in Pulumi's format; policy_pack: the pack's folder.
    policy: str = "mandatory"
    policy_config: str | None = None
    policy_pack: str = str(PACK_DIR)

    @property
    def backend(self) -> str:
        return self.backend_url or f"file://{Path(self.state_dir).resolve()}"

    @property
    def is_cloud(self) -> bool:
        return self.backend.startswith(("https://", "http://"))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, limits: RunLimits = RunLimits()) -> "PulumiSettings":
        """HUBWRIGHT_STATE_DIR, PULUMI_BACKEND_URL, HUBWRIGHT_PULUMI_ORG, PULUMI_HOME,
        HUBWRIGHT_SECRETS_PROVIDER, HUBWRIGHT_LOCK_HOSTS, HUBWRIGHT_STALE_LOCK_SECONDS, HUBWRIGHT_POLICY,
        HUBWRIGHT_POLICY_CONFIG, HUBWRIGHT_POLICY_PACK."""
        env = os.environ if environ is None else environ
        home = env.get("PULUMI_HOME")
        return cls(
            state_dir=Path(env.get("HUBWRIGHT_STATE_DIR", "state")),
            backend_url=env.get("PULUMI_BACKEND_URL") or None,
            organization=env.get("HUBWRIGHT_PULUMI_ORG") or None,
            pulumi_home=Path(home) if home else None,
            secrets_provider=env.get("HUBWRIGHT_SECRETS_PROVIDER") or None,
            own_hosts=env.get("HUBWRIGHT_LOCK_HOSTS") or None,
            stale_lock_after_s=float(env.get("HUBWRIGHT_STALE_LOCK_SECONDS") or limits.stale_lock_after),
            policy=env.get("HUBWRIGHT_POLICY") or "mandatory",
            policy_config=env.get("HUBWRIGHT_POLICY_CONFIG") or None,
            policy_pack=env.get("HUBWRIGHT_POLICY_PACK") or str(PACK_DIR),
        )

    def to_json(self) -> dict[str, Any]:
        """For a worker process (automation.adapters.engine.worker): sent on its stdin, never on a command line."""
        return {k: (str(v) if isinstance(v, Path) else dict(v) if isinstance(v, Mapping) else v)
                for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "PulumiSettings":
        paths = {"state_dir", "pulumi_home"}
        values: dict[str, Any] = {k: (Path(v) if k in paths and v is not None else v) for k, v in raw.items()}
        return cls(**values)

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
        if self.own_hosts is not None:
            re.compile(self.own_hosts)
        try:
            self.policy_settings()
        except ValueError as err:
            raise ValueError(f"HUBWRIGHT_POLICY / HUBWRIGHT_POLICY_CONFIG: {err}") from None
        if self.policy != "off" and not (Path(self.policy_pack) / "PulumiPolicy.yaml").is_file():
            raise ValueError(f"policy_pack {self.policy_pack}: no PulumiPolicy.yaml there (HUBWRIGHT_POLICY_PACK)")

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
