"""A real etcd + kube-apiserver (+ kube-controller-manager) on loopback: the sandbox's hub, and the tests' envtest.

:class:`ControlPlane` owns one folder: a PKI made with openssl (a CA, the serving certificate for 127.0.0.1 and
localhost, the ServiceAccount signing key pair), a static token file (a system:masters admin, and any other user
it is given), etcd's data and each process's log. ``start()`` runs etcd and kube-apiserver and returns once
``/readyz`` answers 200; ``start_controller_manager()`` then runs kube-controller-manager with the controllers
asked for; ``stop()`` stops all three. doubles/envtest.py builds the tests' EnvTest on it (one copy of the PKI and
the flags); the sandbox (supervisor.py) runs one for a person.
"""
from __future__ import annotations

import json
import secrets
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from automation.sandbox.tools import free_port, require, spawn, stop, tail

ETCD, APISERVER, CONTROLLER_MANAGER = "etcd", "kube-apiserver", "kube-controller-manager"
ADMIN = "envtest-admin"  # the system:masters user of the admin token

# The garbage collector (ownerReferences) and the ResourceQuota controller: the tests' envtest.
GC_CONTROLLERS = ("garbage-collector-controller", "resourcequota-controller")
# The sandbox's: those, and a namespace deleted is emptied and goes, every namespace has its `default`
# ServiceAccount and a ServiceAccount token Secret is filled.
SANDBOX_CONTROLLERS = (*GC_CONTROLLERS, "namespace-controller", "serviceaccount-controller",
                       "serviceaccount-token-controller")


class StartFailed(RuntimeError):
    """A piece did not start: its name, what happened, and its log's tail in the message."""

    def __init__(self, piece: str, what: str, log: Optional[Path] = None):
        self.piece = piece
        self.log = log
        lines = tail(log) if log is not None else ""
        super().__init__(f"{piece} {what}" + (f"\n--- the end of {log}:\n{lines}" if lines else ""))


def _openssl(binary: str, *args: str, cwd: Path) -> None:
    done = subprocess.run([binary, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise StartFailed("openssl", f"{args[0]} failed ({done.returncode}): {done.stderr.strip()[-500:]}")


def make_pki(folder: Path, openssl: str = "openssl") -> None:
    """ca.crt/ca.key, server.crt/server.key for 127.0.0.1 and localhost, and the ServiceAccount key pair
    sa.key/sa.pub, made in `folder`."""
    _openssl(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
             "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=hubwright-envtest-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)
    _openssl(openssl, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
             "-out", "server.csr", "-subj", "/CN=kube-apiserver", cwd=folder)
    (folder / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n")
    _openssl(openssl, "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "30", "-out", "server.crt", "-extfile", "server.ext", cwd=folder)
    _openssl(openssl, "genrsa", "-out", "sa.key", "2048", cwd=folder)
    _openssl(openssl, "rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=folder)


class ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager) over one folder, on free loopback ports.

    `binaries` maps etcd, kube-apiserver (and kube-controller-manager, openssl) to their paths: by default
    automation.sandbox.tools.require finds them. `port` hands out the ports (the tests' hands out a block per
    pytest-xdist worker). `users` are more token-file users: (token, name, group).
    """

    def __init__(self, workdir: Path, binaries: Optional[Mapping[str, str]] = None, *,
                 port: Callable[[], int] = free_port, watch_cache: bool = True,
                 etcd_compaction_interval: str = "0", extra_apiserver_args: Sequence[str] = (),
                 users: Sequence[tuple[str, str, str]] = ()):
        self.workdir = workdir
        self.binaries = dict(binaries) if binaries is not None else require(ETCD, APISERVER, "openssl")
        etcd_port, self.peer_port, api_port = port(), port(), port()
        self.host = f"https://127.0.0.1:{api_port}"  # the API server
        self.etcd_url = f"http://127.0.0.1:{etcd_port}"  # etcd's client URL (its v3 HTTP gateway too)
        self.token = secrets.token_hex(16)  # bearer token of a system:masters user
        self.ca_file = str(workdir / "ca.crt")  # the CA that signed the serving certificate
        self.users = list(users)
        self.watch_cache = watch_cache
        self.etcd_compaction_interval = etcd_compaction_interval
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.etcd_log = workdir / "etcd.log"
        self.apiserver_log = workdir / "kube-apiserver.log"
        self.controller_manager_log = workdir / "kube-controller-manager.log"
        self.etcd_proc: Optional[subprocess.Popen] = None
        self.apiserver_proc: Optional[subprocess.Popen] = None
        self.controller_manager_proc: Optional[subprocess.Popen] = None

    # -- starting ---------------------------------------------------------------------------------------------
    def start(self, ready_timeout: float = 90) -> None:
        """The PKI, the token file, etcd, kube-apiserver; returns once /readyz answers 200 (StartFailed
        otherwise: stop() what was started)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        make_pki(self.workdir, self.binaries.get("openssl", "openssl"))
        lines = [f'{self.token},{ADMIN},{ADMIN},"system:masters"']
        lines += [f'{token},{name},{name},"{group}"' for token, name, group in self.users]
        (self.workdir / "tokens.csv").write_text("\n".join(lines) + "\n")
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.etcd_proc = spawn([
            self.binaries[ETCD], "--name=envtest", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=envtest={peer}",
            "--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=1073741824",
        ], self.etcd_log, cwd=self.workdir)
        self.apiserver_proc = spawn(self._apiserver_args(), self.apiserver_log, cwd=self.workdir)
        self._wait_ready(ready_timeout)

    def _apiserver_args(self) -> list[str]:
        w = self.workdir
        return [
            self.binaries[APISERVER],
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.host.rsplit(':', 1)[1]}",
            f"--cert-dir={w / 'certs'}",
            f"--tls-cert-file={w / 'server.crt'}",
            f"--tls-private-key-file={w / 'server.key'}",
            f"--client-ca-file={w / 'ca.crt'}",
            f"--token-auth-file={w / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={w / 'sa.pub'}",
            f"--service-account-signing-key-file={w / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false",
            "--allow-privileged=true",
            "--profiling=false",
            f"--watch-cache={'true' if self.watch_cache else 'false'}",
            f"--etcd-compaction-interval={self.etcd_compaction_interval}",
            "--shutdown-delay-duration=0s",
            *self.extra_apiserver_args,
        ]

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            if self.etcd_proc is not None and self.etcd_proc.poll() is not None:
                raise StartFailed(ETCD, f"exited with {self.etcd_proc.returncode}", self.etcd_log)
            if self.apiserver_proc is not None and self.apiserver_proc.poll() is not None:
                raise StartFailed(APISERVER, f"exited with {self.apiserver_proc.returncode}", self.apiserver_log)
            try:
                status, last = self.request("GET", "/readyz", timeout=2)
                if status == 200:
                    return
            except (OSError, ssl.SSLError) as exc:
                last = exc
            time.sleep(0.1)
        raise StartFailed(APISERVER, f"not ready after {timeout:.0f}s (last: {last!r})", self.apiserver_log)

    def start_controller_manager(self, controllers: Sequence[str] = GC_CONTROLLERS, timeout: float = 60) -> None:
        """kube-controller-manager with these controllers only: no serving port, no leader election, the admin's
        kubeconfig. With the ServiceAccount controller it is ready once the `default` namespace has its
        `default` ServiceAccount; otherwise once it has run for 3 s (no exit: its flags and kubeconfig were
        taken). StartFailed, with its log's tail, when it exits first."""
        binary = self.binaries.get(CONTROLLER_MANAGER) or require(CONTROLLER_MANAGER)[CONTROLLER_MANAGER]
        w = self.workdir
        self.controller_manager_proc = spawn([
            binary, f"--kubeconfig={self.kubeconfig(w / 'controller-manager.kubeconfig')}",
            f"--controllers={','.join(controllers)}",
            "--secure-port=0", "--leader-elect=false", "--use-service-account-credentials=false",
            f"--service-account-private-key-file={w / 'sa.key'}", f"--root-ca-file={w / 'ca.crt'}",
            "--concurrent-gc-syncs=5", "--concurrent-resource-quota-syncs=5",
            "--resource-quota-sync-period=10s", "--v=1",
        ], self.controller_manager_log, cwd=w)
        process = self.controller_manager_proc
        serviceaccounts = "serviceaccount-controller" in controllers
        ready_at = time.monotonic() + (timeout if serviceaccounts else 3)
        while time.monotonic() < ready_at:
            if process.poll() is not None:
                raise StartFailed(CONTROLLER_MANAGER, f"exited with {process.returncode}",
                                  self.controller_manager_log)
            if serviceaccounts and self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default",
                                                timeout=5)[0] == 200:
                return
            time.sleep(0.1)
        if serviceaccounts:
            raise StartFailed(CONTROLLER_MANAGER, f"made no default ServiceAccount within {timeout:.0f}s",
                              self.controller_manager_log)

    # -- using it ---------------------------------------------------------------------------------------------
    def kubeconfig(self, path: Optional[Path] = None, name: str = "envtest") -> Path:
        """Write a kubeconfig for this server as the admin (at `path`, default WORKDIR/kubeconfig; its cluster and
        context called `name`): its path."""
        path = path or self.workdir / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": name, "cluster": {"server": self.host, "certificate-authority": self.ca_file}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": "admin"}}],
        }))
        return path

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                timeout: float = 10, token: Optional[str] = None) -> tuple[int, Any]:
        """(status, decoded JSON or text) of one request to the API server, as the admin (or `token`'s user)."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(self.host + path, data=data, method=method, headers={
            "Authorization": f"Bearer {token or self.token}", "Content-Type": content_type,
            "Accept": "application/json"})
        context = ssl.create_default_context(cafile=self.ca_file)
        try:
            with urllib.request.urlopen(req, context=context, timeout=timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def processes(self) -> dict[str, subprocess.Popen]:
        """The processes started, by name."""
        found = {ETCD: self.etcd_proc, APISERVER: self.apiserver_proc, CONTROLLER_MANAGER: self.controller_manager_proc}
        return {name: process for name, process in found.items() if process is not None}

    def stop(self) -> None:
        """Stop kube-controller-manager, kube-apiserver, then etcd (each reaped)."""
        stop(self.controller_manager_proc)
        stop(self.apiserver_proc)
        stop(self.etcd_proc)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(host={self.host!r}, etcd_url={self.etcd_url!r})"
