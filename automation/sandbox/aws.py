"""The sandbox's AWS: moto in server mode on loopback, seeded from a fleet folder, and the environment that points
the real service (`python -m automation serve`) at it.

- `start_moto()` starts moto's server (this interpreter's moto; `stop_moto` stops it). It is moto_server with one
  addition: EC2's VPCs, subnets, route tables and security groups take the ID of a `_custom_id_` tag on create
  (moto's own convention for the services that have it), so the IDs a fleet declares (vpc-0c1, rtb-01, sg-0n1,
  subnet-0a1) exist as declared. Plain credentials land in moto's default account (123456789012); credentials
  from sts:AssumeRole land in the role's account, so one moto holds every account of a fleet.
- `seed_fleet(url, hub, clusters)` loads and resolves the fleet with the project's own loaders (automation.adapters.
  files.inputs.load_fleet, stacks.resolve.resolve_all: one source of truth for accounts, regions, roles, infra IDs
  and CIDRs) and makes, through AssumeRole of the roles the fleet resolves to, what the service's AWS lookups,
  discovery and preflights read (automation.sandbox.aws_seed). Idempotent; a cluster the resolution refuses is
  skipped, with its reason.
- `service_env(url, hub_account, region)` is the environment for `serve`: the endpoint, and credentials of the
  controller role in the hub account (GetCallerIdentity says the hub account, as IRSA would).

With it the service gets through its lookups, discovery and preflights for every example cluster; its runs stop
where the Pulumi AWS provider plugin is needed, which a local run does not have (with the pulumi CLI's automatic
plugin download off, as in the image; with it on, the CLI first tries to download the plugin).
tests/test_sandbox_aws.py runs both against the example fleets.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, NamedTuple

from automation.adapters.files.inputs import load_fleet
from automation.sandbox import tools
from automation.sandbox.aws_seed import (SETUP_ACCOUNT, Place, Seeder, SeedError, base_session, role_arn,
                                         seed_cluster, seed_hub, seed_roles, spare_cidrs)
from stacks.errors import FieldError
from stacks.inputs import StackInputs
from stacks.resolve import resolve_all

__all__ = ["Moto", "MotoMissing", "SeedError", "SeedSummary", "start_moto", "stop_moto", "seed_fleet",
           "service_env", "DEFAULT_ACCOUNT"]

DEFAULT_ACCOUNT = SETUP_ACCOUNT  # moto's default account: where plain credentials land
NEEDS_MOTO = "the sandbox's AWS needs moto[server]: pip install -r requirements-dev.txt"
SERVICE_SESSION = "hubwright-sandbox-service"
# Variables that would pin every request to one account (defeating assumed roles) or turn IAM checks on.
_MOTO_UNSET = ("MOTO_ACCOUNT_ID", "INITIAL_NO_AUTH_ACTION_COUNT")

# moto_server's main, with EC2 honouring `_custom_id_` on CreateVpc, CreateSubnet, CreateRouteTable and
# CreateSecurityGroup (the tag is dropped once the resource has its ID), and taking an ID made so as well-formed
# where moto checks the form (the examples' sg-0le1 is not hex). Run as `python -c` so that importing this module
# needs no moto.
MOTO_MAIN = r'''
import sys, threading
import moto.ec2.models as models
import moto.ec2.models.security_groups as groups
import moto.ec2.utils as ids
from moto.ec2.responses import EC2Response
from moto.server import main

TAG = "_custom_id_"
PREFIXES = {"CreateVpc": "vpc", "CreateSubnet": "subnet", "CreateRouteTable": "rtb", "CreateSecurityGroup": "sg"}
wanted, made = threading.local(), set()
random_id, call_action = ids.random_id, EC2Response.call_action


def accepting(check):
    return lambda resource_id: resource_id in made or check(resource_id)


def custom_or_random(prefix="", size=17):
    return getattr(wanted, "ids", {}).pop(prefix, None) or random_id(prefix=prefix, size=size)


def with_custom_id(self):
    prefix, custom = PREFIXES.get(self._get_action()), None
    if prefix:
        specs = self._get_param("TagSpecifications") or self._get_param("TagSpecification") or []
        custom = next((tag.get("Value") for spec in specs for tag in spec.get("Tags") or spec.get("Tag") or []
                       if tag.get("Key") == TAG), None)
    if custom:
        made.add(custom)
    wanted.ids = {prefix: custom} if custom else {}
    try:
        return call_action(self)
    finally:
        wanted.ids = {}
        if custom:
            self.ec2_backend.delete_tags([custom], {TAG: None})


ids.random_id, EC2Response.call_action = custom_or_random, with_custom_id
models.is_valid_resource_id = accepting(models.is_valid_resource_id)
groups.is_valid_security_group_id = accepting(groups.is_valid_security_group_id)
main(sys.argv[1:])
'''


class MotoMissing(RuntimeError):
    """moto's server is not installed in this interpreter's environment."""


class Moto(NamedTuple):
    """A running moto server: its endpoint URL and its process (the caller stops it: stop_moto)."""

    url: str
    process: subprocess.Popen


def moto_installed() -> bool:
    """Whether this interpreter has moto with its server's extras (moto[server])."""
    return all(importlib.util.find_spec(name) is not None for name in ("moto", "flask", "flask_cors"))


def start_moto(host: str = "127.0.0.1", *, port: int | None = None, log: Path | None = None,
               timeout: float = 30.0) -> Moto:
    """moto's server on `host`, on a free port unless `port`, answering before this returns; its output appended
    to `log` (else dropped). Raises MotoMissing when moto[server] is not installed, RuntimeError when the server
    exits or does not answer within `timeout` s."""
    if not moto_installed():
        raise MotoMissing(NEEDS_MOTO)
    port = port or tools.free_port()
    url = f"http://{host}:{port}"
    env = {k: v for k, v in os.environ.items() if k not in _MOTO_UNSET}
    out = open(log, "ab") if log is not None else subprocess.DEVNULL
    try:
        process = subprocess.Popen([sys.executable, "-c", MOTO_MAIN, "-H", host, "-p", str(port)], env=env,
                                   stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]
    try:
        _wait_ready(url, process, timeout)
    except BaseException:
        stop_moto(process)
        raise
    return Moto(url, process)


def _wait_ready(url: str, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto's server exited with {process.returncode} before it answered on {url}")
        try:
            with urllib.request.urlopen(url + "/moto-api/", timeout=1):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise RuntimeError(f"moto's server did not answer on {url} within {timeout:.0f}s")


def stop_moto(process: subprocess.Popen | None, timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL after `timeout` s; returns once the process is reaped."""
    tools.stop(process, timeout)


# --- seeding a fleet --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SeedSummary:
    """What seeding made (and found already there), per account and region, for which clusters; what it skipped."""

    endpoint_url: str
    hub_account_id: str
    hub_region: str
    places: tuple[Place, ...]  # by account, then region (IAM, region "", first)
    seeded: tuple[str, ...]  # namespace/name of every cluster whose network was seeded
    skipped: Mapping[str, str] = field(default_factory=dict)  # cluster (or file) -> why not

    @property
    def created(self) -> int:
        """How many resources this seeding made (0: everything was there)."""
        return sum(sum(place.created.values()) for place in self.places)

    def lines(self) -> list[str]:
        head = (f"fake AWS at {self.endpoint_url}: hub account {self.hub_account_id} ({self.hub_region}); "
                f"{len(self.seeded)} cluster{'s' if len(self.seeded) != 1 else ''} seeded"
                + (f", {len(self.skipped)} skipped" if self.skipped else ""))
        return [head, *(f"  {place.line()}" for place in self.places),
                *(f"  skipped {what}: {why}" for what, why in self.skipped.items())]

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _why(errors: list[FieldError], reason: str) -> str:
    return f"{reason}: " + "; ".join(f"{e.field}: {e.reason}" if e.field else e.reason for e in errors)


def seed_fleet(endpoint_url: str, hub_path: str | Path, clusters_path: str | Path) -> SeedSummary:
    """Seed the fake AWS at `endpoint_url` with what the fleet (a HubConfig file, a file or folder of clusters and
    their Namespaces) needs for the service's lookups, discovery and preflights. Idempotent."""
    invalid: list[FieldError] = []
    fleet = load_fleet(str(hub_path), str(clusters_path), invalid=invalid)
    hub = fleet.hub
    resolved = resolve_all(fleet).inputs
    skipped = {error.obj: _why([error], "InvalidSpec") for error in invalid}
    admitted: dict[str, StackInputs] = {}
    for cluster in fleet.clusters:
        answer = resolved.get(cluster.key)
        if answer is None:
            skipped[cluster.key] = "registered only (no spec.network): nothing of it is in AWS"
        elif isinstance(answer, StackInputs):
            admitted[cluster.key] = answer
        else:
            skipped[cluster.key] = _why(answer.errors, answer.reason)
    seeder = Seeder(endpoint_url)
    seed_roles(seeder, hub, {r for i in admitted.values() for r in (i.cluster.role_arn, i.hub.role_arn) if r}
               | ({hub.spec.credentials.role_arn} if hub.spec.credentials.role_arn else set()))
    used = [*(c for cluster in fleet.clusters if cluster.spec.network is not None
              for c in (cluster.spec.network.cidr, *cluster.spec.network.secondary_cidrs) if c),
            *(v.cidr for v in hub.spec.endpoint_vpc_inventory), *(v.cidr for v in hub.spec.associated_vpcs if v.cidr)]
    spare = spare_cidrs(used)
    seed_hub(seeder, hub, spare)
    clusters = {cluster.key: cluster for cluster in fleet.clusters}
    for key, inputs in admitted.items():
        network = clusters[key].spec.aws.network
        seed_cluster(seeder, hub, clusters[key], inputs, network.cidr or next(spare))
    places = tuple(sorted(seeder.places.values(), key=lambda p: (p.account_id, p.region)))
    return SeedSummary(endpoint_url, hub.spec.account_id, hub.spec.region, places, tuple(admitted), skipped)


def service_env(endpoint_url: str, hub_account_id: str, region: str) -> dict[str, str]:
    """The environment `python -m automation serve` needs to use the fake AWS: its endpoint (AWS_ENDPOINT_URL, for
    boto3 and the CLI, and the service's own HUBWRIGHT_AWS_ENDPOINT_URL), the region, and credentials of the
    controller role in the hub account (seed_fleet made it), as the service has them from IRSA in a real hub."""
    sts = base_session(region).client("sts", endpoint_url=endpoint_url)
    creds = sts.assume_role(RoleArn=role_arn(hub_account_id, region), RoleSessionName=SERVICE_SESSION,
                            DurationSeconds=43200)["Credentials"]
    return {
        "AWS_ENDPOINT_URL": endpoint_url,
        "HUBWRIGHT_AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": creds["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
        "AWS_SESSION_TOKEN": creds["SessionToken"],
        "AWS_REGION": region,  # the Go SDK's (the pulumi CLI, the AWS provider)
        "AWS_DEFAULT_REGION": region,  # botocore's
    }
