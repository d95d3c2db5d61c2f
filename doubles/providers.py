"""The dynamic providers of the live tests' programs, in a module that imports only the standard library and
pulumi.dynamic.

Pulumi pickles a dynamic provider by reference to its class, so the provider process (`python -m pulumi.dynamic`,
one per run that registers a dynamic resource) imports the module that defines it. Defined beside the programs,
each run imported doubles/ and automation/ (kubernetes, kmock, pydantic models): about 3 s of CPU per run, most of
what a no-op `up` cost. Here, only pulumi. Keep it so: no imports from doubles/, automation/, stacks/ or tests/.

- SleepProvider, LoggedProvider, GateProvider: a create held while a test watches (doubles.pulumi_programs'
  sleepy and held programs, test_s3_backend_live's gated one).
- MarkerProvider: an imitated endpoint service that leaves a file behind (the policy pack's tests).
- FileCloudProvider: a "cloud" of one file per resource that a test can change behind Pulumi's back (drift).
- GatewayTableProvider: a transit gateway's route tables (tests/transit_live_programs.py).
- PairProvider: a mesh pair, the peer's routes created through moto's EC2 (tests/mesh_live_programs.py).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Mapping

from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult


class SleepProvider(ResourceProvider):
    def create(self, props: dict) -> CreateResult:
        if props.get("marker"):
            Path(props["marker"]).write_text(str(os.getpid()))
        if props.get("hold"):  # held while the file `hold` exists (a test releases it), at most `sleep` seconds
            _held_by(props["hold"], float(props.get("sleep") or 0))
        else:
            time.sleep(float(props.get("sleep") or 0))
        return CreateResult(id_=f"{props['label']}-id", outs=dict(props))

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        keys = ("label", "sleep")
        return DiffResult(changes=any(olds.get(k) != news.get(k) for k in keys))

    def update(self, _id: str, _olds: dict, news: dict) -> UpdateResult:
        return UpdateResult(outs=dict(news))


def _held_by(hold: str, at_most: float) -> None:
    """Wait while the file `hold` exists, at most `at_most` seconds (a test removes it to let the create end)."""
    deadline = time.monotonic() + at_most
    while Path(hold).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


class MarkerProvider(ResourceProvider):
    def create(self, props: dict) -> CreateResult:
        if props.get("marker"):
            Path(props["marker"]).write_text(props["label"])
        return CreateResult(id_=f"vpce-svc-{props['label']}", outs=dict(props))


class FileCloudProvider(ResourceProvider):
    def create(self, props: dict) -> CreateResult:
        if props.get("fail"):
            raise RuntimeError(f"{props['name']}: the cloud refused the create (fail=True)")
        _cloud_file(props).write_text(props["value"])
        return CreateResult(id_=props["name"], outs=dict(props))

    def read(self, id_: str, props: dict) -> ReadResult:
        """What the cloud holds now; gone from the cloud: gone from the state (a preview then shows a create)."""
        try:
            value = _cloud_file(props).read_text()
        except FileNotFoundError:
            return ReadResult(None, {})
        return ReadResult(id_, {**props, "value": value})

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        replaces = [k for k in ("cloud", "name") if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(replaces) or olds.get("value") != news.get("value"), replaces=replaces)

    def update(self, _id: str, _olds: dict, news: dict) -> UpdateResult:
        _cloud_file(news).write_text(news["value"])
        return UpdateResult(outs=dict(news))

    def delete(self, _id: str, props: dict) -> None:
        _cloud_file(props).unlink(missing_ok=True)


def _cloud_file(props: Mapping[str, Any]) -> Path:
    return Path(props["cloud"]) / props["name"]


class LoggedProvider(ResourceProvider):
    def create(self, props: dict) -> CreateResult:
        with open(props["log"], "a") as log:
            log.write(props["name"] + "\n")
        if props.get("hold"):
            _held_by(props["hold"], 120)
        return CreateResult(id_=props["name"], outs=dict(props))


class GateProvider(ResourceProvider):
    def create(self, props: dict) -> CreateResult:
        Path(props["started"]).write_text("started")
        deadline = time.monotonic() + 300
        while props["release"] and not Path(props["release"]).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return CreateResult(id_=f"{props['label']}-id", outs=dict(props))

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        return DiffResult(changes=olds.get("label") != news.get("label"))


class GatewayTableProvider(ResourceProvider):
    def create(self, props: dict) -> CreateResult:
        for cidr in props.get("entries") or []:
            _entry(props, cidr).write_text(props["name"])
        _log(props, "create")
        return CreateResult(id_=props["name"], outs={**props, "id": props["name"]})

    def delete(self, _id: str, props: dict) -> None:
        for cidr in props.get("entries") or []:
            _entry(props, cidr).unlink(missing_ok=True)
        _log(props, "delete")


def _entry(props: Mapping[str, Any], cidr: str) -> Path:
    table = Path(props["cloud"]) / props["table"]
    table.mkdir(parents=True, exist_ok=True)
    return table / f"{cidr}~{props['source']}~{props['name']}".replace('/', '_')


def routed(cloud: Path) -> dict[str, list[str]]:
    """Every CIDR each table routes now (static or propagated)."""
    return {table.name: sorted({f.name.split("~")[0].replace("_", "/") for f in table.iterdir()})
            for table in sorted(cloud.iterdir()) if table.is_dir()}


def _log(props: Mapping[str, Any], op: str) -> None:
    cloud = Path(props["cloud"])
    line = json.dumps({"op": op, "kind": props["kind"], "name": props["name"], "routed": routed(cloud)}) + "\n"
    fd = os.open(cloud / "ops.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # one write per line: whole lines
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class PairProvider(ResourceProvider):
    def create(self, props: dict) -> CreateResult:
        if props.get("endpoint"):  # the peer's side: its account's API
            _create_route(props)
        else:
            (Path(props["cloud"]) / props["name"]).write_text(props["kind"])
        outs = {**props, "id": props["id"]} if props.get("id") else dict(props)
        return CreateResult(id_=props.get("id") or props["name"], outs=outs)


def _create_route(props: Mapping[str, Any]) -> None:
    import boto3  # here, not at the top: only the peer side of a pair calls an API
    from botocore.exceptions import ClientError

    sts = boto3.client("sts", endpoint_url=props["endpoint"], region_name=props["region"],
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    creds = sts.assume_role(RoleArn=props["roleArn"], RoleSessionName=props["sessionName"])["Credentials"]
    ec2 = boto3.client("ec2", endpoint_url=props["endpoint"], region_name=props["region"],
                       aws_access_key_id=creds["AccessKeyId"], aws_secret_access_key=creds["SecretAccessKey"],
                       aws_session_token=creds["SessionToken"])
    try:
        ec2.create_route(RouteTableId=props["routeTableId"], DestinationCidrBlock=props["destinationCidrBlock"],
                         VpcPeeringConnectionId=props["vpcPeeringConnectionId"])
    except ClientError as err:  # terraform-provider-aws: "creating Route in Route Table (%s) with destination (%s): %w"
        raise RuntimeError(f"creating Route in Route Table ({props['routeTableId']}) with destination "
                           f"({props['destinationCidrBlock']}): {err}") from None
