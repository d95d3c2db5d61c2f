"""moto in server mode on 127.0.0.1, for tests that talk real HTTP to a fake AWS.

Fixtures:

* ``moto_server`` (session): starts moto's server on a free port (the sandbox's start,
  automation.sandbox.aws.start_moto), yields a :class:`MotoServer`, stops it at the end.
* ``moto`` (function): the same server, reset before the test (all accounts
  emptied, IAM enforcement off) — use this one in tests; ``moto.url`` is the
  endpoint URL for boto3.

Requests signed with any key land in the default account (``MotoServer.account_id``);
requests signed with credentials from ``sts:AssumeRole`` land in the role's account,
so cross-account code runs unchanged. ``enforce_iam()`` turns on moto's IAM
checks (identity policies of the caller; trust policies only in the caller's own
account) for the rest of the test.
"""
from __future__ import annotations

import contextlib
import subprocess
import urllib.request
from typing import Any, Iterator

import boto3
import pytest

from automation.sandbox import aws as sandbox_aws
from doubles.ports import free_port

DEFAULT_ACCOUNT = sandbox_aws.DEFAULT_ACCOUNT  # moto's default account


class MotoServer:
    def __init__(self, url: str, process: subprocess.Popen):
        self.url = url
        self.process = process
        self.account_id = DEFAULT_ACCOUNT

    def _post(self, path: str, body: bytes = b"") -> bytes:
        # Not form-encoded (urllib's default): moto reads the raw body.
        request = urllib.request.Request(self.url + path, data=body, method="POST",
                                         headers={"Content-Type": "text/plain"})
        # A reset empties every account the session's tests filled: it went past 10 s on a loaded CI (2026-11-30).
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.read()

    def reset(self) -> None:
        """Empty every account and switch IAM enforcement off."""
        self.relax_iam()
        self._post("/moto-api/reset")

    def relax_iam(self) -> None:
        """IAM enforcement off (moto's default)."""
        self._post("/moto-api/reset-auth", b"inf")

    def enforce_iam(self) -> None:
        """From the next request on, every call is checked against the caller's IAM policies."""
        self._post("/moto-api/reset-auth", b"0")


@contextlib.contextmanager
def start_moto(host: str = "127.0.0.1") -> Iterator[MotoServer]:
    """The sandbox's moto (automation.sandbox.aws.start_moto: one copy of the start), stopped at the end."""
    url, process = sandbox_aws.start_moto(host, port=free_port())  # this xdist worker's block
    try:
        yield MotoServer(url, process)
    finally:
        sandbox_aws.stop_moto(process)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    with start_moto() as server:
        yield server


@pytest.fixture
def moto(moto_server: MotoServer) -> Iterator[MotoServer]:
    moto_server.reset()
    yield moto_server
    moto_server.relax_iam()  # the next test resets the rest


# The test credentials every S3 test on moto uses, in the environment of what the test starts (the pulumi CLI, a
# store's boto3 client) as well.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
               "AWS_EC2_METADATA_DISABLED": "true"}


def s3_bucket(moto: MotoServer, monkeypatch: pytest.MonkeyPatch, bucket: str) -> Any:
    """boto3's S3 client on `moto`, `bucket` made; CREDENTIALS also in this process's environment (what reads them
    from there: the CLI a test runs by hand, a store's own client)."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    client = boto3.client("s3", endpoint_url=moto.url, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket=bucket)
    return client
