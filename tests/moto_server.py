"""moto in server mode on 127.0.0.1, for tests that talk real HTTP to a fake AWS.

Fixtures:

* ``moto_server`` (session): starts ``moto_server`` from the venv on a free port,
  yields a :class:`MotoServer`, stops it at the end.
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
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import boto3
import pytest
from doubles.ports import free_port as _free_port

DEFAULT_ACCOUNT = "123456789012"  # moto's default account
_BIN = Path(sys.executable).parent / "moto_server"



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


def _wait_ready(url: str, process: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto_server exited with {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url + "/moto-api/", timeout=1):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise RuntimeError(f"moto_server did not answer on {url} within {timeout}s")


@contextlib.contextmanager
def start_moto(host: str = "127.0.0.1") -> Iterator[MotoServer]:
    if not _BIN.exists():
        pytest.skip(f"moto_server is not installed in this environment ({_BIN} missing; pip install 'moto[server]')")
    port = _free_port()
    url = f"http://{host}:{port}"
    # MOTO_ACCOUNT_ID would pin every request to one account, defeating assumed-role accounts.
    env = {k: v for k, v in os.environ.items() if k not in ("MOTO_ACCOUNT_ID", "INITIAL_NO_AUTH_ACTION_COUNT")}
    process = subprocess.Popen([str(_BIN), "-H", host, "-p", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_ready(url, process)
        yield MotoServer(url, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


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
