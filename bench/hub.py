"""A real hub API server for the benchmarks that must not import tests/: etcd and kube-apiserver on 127.0.0.1
(binaries from .tools/bin, built by scripts/tools.sh, or PATH), with the project's CRDs installed.

    with local_hub() as hub:      # hub.host, hub.token (system:masters), hub.kubeconfig, hub.client()
        ...

Certificates are made with openssl in a temporary folder, removed afterwards with the processes.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from kubernetes import client
from kubernetes.client.rest import ApiException

from stacks.crds import crd_manifests

ROOT = Path(__file__).resolve().parent.parent
BINARIES = ("etcd", "kube-apiserver")


def binary(name: str) -> str | None:
    local = ROOT / ".tools" / "bin" / name
    return str(local) if local.is_file() and os.access(local, os.X_OK) else shutil.which(name)


def missing() -> list[str]:
    return [name for name in BINARIES if binary(name) is None]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Hub:
    host: str
    token: str
    ca_file: str
    kubeconfig: Path

    def client(self, token: str | None = None) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host, configuration.ssl_ca_cert = self.host, self.ca_file
        configuration.api_key = {"BearerToken": f"Bearer {token or self.token}",
                                 "authorization": f"Bearer {token or self.token}"}
        return client.ApiClient(configuration)


def _pki(folder: Path) -> None:
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", "ca.key", "-out", "ca.crt",
            "-subj", "/CN=bench-ca", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=kube-apiserver")
    (folder / "server.ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "1", "-out", "server.crt", "-extfile", "server.ext")
    openssl("genrsa", "-out", "sa.key", "2048")
    openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")


def _ready(hub: Hub, processes: list[subprocess.Popen], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(proc.poll() is not None for proc in processes):
            raise RuntimeError("etcd or kube-apiserver exited while starting")
        with hub.client() as api:
            try:
                client.ApiextensionsV1Api(api).list_custom_resource_definition(_request_timeout=2)
                return
            except Exception:  # noqa: BLE001 - not up yet, whatever the way it fails
                time.sleep(0.25)
    raise RuntimeError(f"kube-apiserver not ready after {timeout:.0f} s")


def _install_crds(hub: Hub, timeout: float = 60) -> None:
    with hub.client() as api:
        extensions, objects = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
        crds = list(crd_manifests())
        for crd in crds:
            extensions.create_custom_resource_definition(crd)
        deadline = time.monotonic() + timeout
        for crd in crds:
            spec = crd["spec"]
            while True:
                try:
                    objects.list_cluster_custom_object(spec["group"], spec["versions"][0]["name"],
                                                       spec["names"]["plural"], limit=1)
                    break
                except ApiException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)


@contextlib.contextmanager
def local_hub(ready_timeout: float = 90) -> Iterator[Hub]:
    folder = Path(tempfile.mkdtemp(prefix="bench-hub-"))
    processes: list[subprocess.Popen] = []
    try:
        _pki(folder)
        token = secrets.token_hex(16)
        (folder / "tokens.csv").write_text(f'{token},bench-admin,bench-admin,"system:masters"\n')
        etcd, peer, port = free_port(), free_port(), free_port()
        with open(folder / "etcd.log", "wb") as log:
            processes.append(subprocess.Popen([
                binary("etcd"), "--name=bench", f"--data-dir={folder / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd}", f"--advertise-client-urls=http://127.0.0.1:{etcd}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=bench=http://127.0.0.1:{peer}", "--unsafe-no-fsync", "--log-level=warn"],
                stdout=log, stderr=subprocess.STDOUT, cwd=folder, start_new_session=True))
        with open(folder / "kube-apiserver.log", "wb") as log:
            processes.append(subprocess.Popen([
                binary("kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd}", "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={folder / 'certs'}",
                f"--tls-cert-file={folder / 'server.crt'}", f"--tls-private-key-file={folder / 'server.key'}",
                f"--token-auth-file={folder / 'tokens.csv'}", "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={folder / 'sa.pub'}",
                f"--service-account-signing-key-file={folder / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24", "--endpoint-reconciler-type=none", "--profiling=false"],
                stdout=log, stderr=subprocess.STDOUT, cwd=folder, start_new_session=True))
        host = f"https://127.0.0.1:{port}"
        kubeconfig = folder / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "bench",
            "clusters": [{"name": "bench", "cluster": {"server": host, "certificate-authority": str(folder / "ca.crt")}}],
            "users": [{"name": "admin", "user": {"token": token}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "admin"}}]}))
        hub = Hub(host, token, str(folder / "ca.crt"), kubeconfig)
        _ready(hub, processes, ready_timeout)
        _install_crds(hub)
        yield hub
    finally:
        for proc in reversed(processes):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
        shutil.rmtree(folder, ignore_errors=True)
