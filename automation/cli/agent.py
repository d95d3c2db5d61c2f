"""`python -m automation agent`: the small facts agent a cluster runs after its install (stacks.install).

Every --interval seconds it reads a few facts from its own cluster's API (in-cluster ServiceAccount):
the Kubernetes version (/version) and the node count, and POSTs them to the registry:

    POST {api}/tenants/{tenant}/clusters/{cluster}/facts   Authorization: Bearer <its hub token>

Its hub token (a ServiceAccount token of the hub, stacks.install.agent_rules) expires. Once less than a third
of its lifetime is left, the agent asks the registry for a new one, with the current one:

    POST {api}/tenants/{tenant}/clusters/{cluster}/agent-token   Authorization: Bearer <its hub token>

(automation.api.agents: the registry chooses the lifetime, capped by the hub administrator, and the audience;
the agent holds no right to ask the hub's Kubernetes API for tokens), and writes it back into its Secret
(--secret) so a restarted pod starts with a live token. Tokens are never logged.

Its catalog key (--key-secret, --install-id: stacks.install): when the guest Secret holds no key pair made for this
install (the annotation hubwright.io/install-id), the agent makes an ed25519 pair (automation.adapters.sshkeys),
writes it there (identity, identity.pub, known_hosts: what Flux's GitRepository and Argo CD take) and gives the
public key to the registry, once, retried each round until the registry took it (the annotation
hubwright.io/key-pushed records the fingerprint it took):

    PUT {api}/tenants/{tenant}/clusters/{cluster}/deploy-key   {"publicKey": "ssh-ed25519 ..."}

A new install (a reset bootstrap token) brings another install ID, so a new key pair. The private key never
leaves the cluster and is never logged.
"""
from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import httpx
from kubernetes import client, config

from automation.adapters.kube.calls import error_text
from automation.adapters.sshkeys import new_key_pair
from stacks.gitrepos import keys
from stacks.install import INSTALL_ID_ANNOTATION, KEY_PUSHED_ANNOTATION
from stacks.jwt import claims
from stacks.names import AGENT_DEPLOY_KEY
from stacks.options import AGENT, add_options

LOG = logging.getLogger("hubwright.agent")
RENEW_AT = 1 / 3  # renew once less than this share of the token's lifetime is left


class AgentError(Exception):
    """A push or renewal the agent could not make (its message never holds a token)."""


def gather(guest: client.ApiClient) -> dict[str, str]:
    """The facts the agent reports about its own cluster."""
    version = client.VersionApi(guest).get_code()
    nodes = client.CoreV1Api(guest).list_node(_preload_content=False)
    count = len(json.loads(nodes.data).get("items") or [])
    return {"kubernetesVersion": version.git_version, "platform": version.platform, "nodes": str(count)}


def token_times(token: str) -> tuple[int, int] | None:
    """(issued at, expires at) in epoch seconds, read from the token's JWT claims (not verified: the hub does
    that), or None when it carries none."""
    found = claims(token)
    try:
        return (int(found["iat"]), int(found["exp"])) if found is not None else None
    except (KeyError, TypeError, ValueError):
        return None


def renewal_due(token: str, now: float) -> bool:
    times = token_times(token)
    if times is None:
        return False
    issued, expires = times
    return expires - now < (expires - issued) * RENEW_AT


@dataclass
class Agent:
    api_url: str
    tenant: str
    namespace: str  # the cluster's namespace on the hub (its ServiceAccount's)
    cluster: str
    token: str
    guest: client.ApiClient  # the cluster's own API
    http: httpx.Client
    secret: tuple[str, str] | None = None  # (namespace, name) of the guest Secret holding the token
    clock: Callable[[], float] = time.time
    key_secret: tuple[str, str] | None = None  # (namespace, name) of the guest Secret of the catalog key pair
    install_id: str | None = None  # this install's (a new one: a new key pair)
    known_hosts_file: str | None = None  # the catalog's known_hosts (the install's ConfigMap), when there is one
    key_pushed: bool = False  # the registry took this install's key: nothing left to do

    def _path(self, tail: str) -> str:
        return f"{self.api_url.rstrip('/')}/tenants/{self.tenant}/clusters/{self.cluster}/{tail}"

    def push(self, facts: dict[str, str]) -> dict[str, Any]:
        response = self.http.post(self._path("facts"), json={"facts": facts},
                                  headers={"Authorization": f"Bearer {self.token}"})
        if response.status_code != 201:
            raise AgentError(f"the registry refused the facts of {self.namespace}/{self.cluster}: "
                             f"{response.status_code} {_detail(response)}")
        return response.json()

    def renew(self) -> str:
        """A new hub token from the registry (its lifetime is the registry's to choose); kept in the guest
        Secret when there is one."""
        response = self.http.post(self._path("agent-token"), headers={"Authorization": f"Bearer {self.token}"})
        if response.status_code != 201:
            raise AgentError(f"the registry refused to rotate the token of {self.namespace}/{self.cluster}: "
                             f"{response.status_code} {_detail(response)}")
        body = response.json()
        self.token, expiry = body["token"], body["expiresAt"]
        if self.secret is not None:
            namespace, name = self.secret
            client.CoreV1Api(self.guest).patch_namespaced_secret(name, namespace, {"stringData": {"token": self.token}},
                                                                 _preload_content=False)  # its body: the token
        LOG.info("renewed the hub token of %s/%s: valid until %s", self.namespace, self.cluster, expiry)
        return self.token

    def _known_hosts(self) -> str:
        if not self.known_hosts_file:
            return ""
        try:
            with open(self.known_hosts_file, encoding="utf-8") as fh:
                return fh.read()
        except FileNotFoundError:  # the cluster was installed before its catalog repository had an SSH URL
            return ""

    def ensure_key(self) -> str | None:
        """The catalog key of this install: made and written into the key Secret unless it holds one for this
        install, then given to the registry unless it took it already. Its fingerprint (None: no key Secret)."""
        if self.key_secret is None or not self.install_id:
            return None
        namespace, name = self.key_secret
        core = client.CoreV1Api(self.guest)
        found = core.read_namespaced_secret(name, namespace)  # its data: never logged, never in an error
        annotations = dict(found.metadata.annotations or {})
        data = found.data or {}
        public = _parsed(data.get("identity.pub")) if "identity" in data else None
        known_hosts = self._known_hosts()
        if annotations.get(INSTALL_ID_ANNOTATION) != self.install_id or public is None:
            pair = new_key_pair(f"{AGENT_DEPLOY_KEY}@{self.cluster}"[:100])
            core.patch_namespaced_secret(name, namespace, {
                "metadata": {"annotations": {INSTALL_ID_ANNOTATION: self.install_id, KEY_PUSHED_ANNOTATION: None}},
                "stringData": {"identity": pair.private, "identity.pub": f"{pair.public}\n",
                               "known_hosts": known_hosts}}, _preload_content=False)  # its body: the private key
            LOG.info("made a new catalog key for %s/%s: %s", self.namespace, self.cluster, pair.fingerprint)
            public, pushed = keys.parse(pair.public), None
        else:
            pushed = annotations.get(KEY_PUSHED_ANNOTATION)
            if known_hosts and _text(data.get("known_hosts")) != known_hosts:
                core.patch_namespaced_secret(name, namespace, {"stringData": {"known_hosts": known_hosts}},
                                             _preload_content=False)
        fingerprint = public.fingerprint
        if pushed != fingerprint:
            response = self.http.put(self._path("deploy-key"), json={"publicKey": public.canonical},
                                     headers={"Authorization": f"Bearer {self.token}"})
            if response.status_code != 200:
                raise AgentError(f"the registry refused the catalog key of {self.namespace}/{self.cluster}: "
                                 f"{response.status_code} {_detail(response)}")
            core.patch_namespaced_secret(name, namespace, {"metadata": {"annotations": {
                KEY_PUSHED_ANNOTATION: fingerprint}}}, _preload_content=False)
            LOG.info("the registry took the catalog key of %s/%s: %s", self.namespace, self.cluster, fingerprint)
        self.key_pushed = True
        return fingerprint

    def step(self) -> dict[str, Any]:
        """One round: renew the token when due, push the facts, then make and push the catalog key until the
        registry took it."""
        if renewal_due(self.token, self.clock()):
            self.renew()
        pushed = self.push(gather(self.guest))
        if not self.key_pushed:
            self.ensure_key()
        return pushed


def _text(value: str | None) -> str:
    """A Secret's value (base64) as text; "" when absent or not UTF-8."""
    try:
        return base64.b64decode(value or "").decode()
    except (ValueError, UnicodeDecodeError):
        return ""


def _parsed(value: str | None) -> keys.PublicKey | None:
    """The public key a Secret's identity.pub holds, None when it holds none acceptable (then a new pair is made)."""
    try:
        return keys.parse(_text(value).strip())
    except ValueError:
        return None


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail"))[:500]
    except ValueError:
        return response.text[:500]


def add_agent_command(subparsers: Any) -> None:
    agent = subparsers.add_parser("agent", help="the facts agent a cluster runs (from its install manifests)",
                                  formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_options(agent, AGENT, os.environ)  # --api (env HUBWRIGHT_API_URL): the table's (stacks/options.py)
    agent.add_argument("--token-file", required=True, help="the hub token (the install's Secret, key token)")
    agent.add_argument("--tenant", required=True)
    agent.add_argument("--namespace", required=True, help="the cluster's namespace on the hub")
    agent.add_argument("--cluster", required=True)
    agent.add_argument("--interval", type=float, default=300, help="seconds between two pushes")
    # Install manifests of earlier versions pass these (renewal at the hub's Kubernetes API): accepted, ignored.
    agent.add_argument("--hub-url", default=None, help=argparse.SUPPRESS)
    agent.add_argument("--hub-ca-file", default=None, help=argparse.SUPPRESS)
    agent.add_argument("--secret", default=None, help="namespace/name of the Secret to keep the renewed token in")
    agent.add_argument("--key-secret", default=None,
                       help="namespace/name of the Secret to keep the catalog repository's SSH key pair in")
    agent.add_argument("--install-id", default=None, help="this install's ID (another: a new key pair)")
    agent.add_argument("--known-hosts-file", default=None, help="the catalog repository's known_hosts")
    agent.add_argument("--kubeconfig", default=None, help="the cluster's own API (default: in-cluster)")
    agent.add_argument("--once", action="store_true", help="push once and exit")
    agent.set_defaults(func=agent_command)


def agent_command(args: argparse.Namespace) -> int:
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.kubeconfig:
        config.load_kube_config(args.kubeconfig)
    else:
        config.load_incluster_config()
    with open(args.token_file, encoding="utf-8") as fh:
        token = fh.read().strip()
    secret = tuple(args.secret.split("/", 1)) if args.secret and "/" in args.secret else None
    key_secret = tuple(args.key_secret.split("/", 1)) if args.key_secret and "/" in args.key_secret else None
    with httpx.Client(timeout=30) as http, client.ApiClient() as guest:
        agent = Agent(api_url=args.api, tenant=args.tenant, namespace=args.namespace, cluster=args.cluster,
                      token=token, guest=guest, http=http, secret=secret, key_secret=key_secret,
                      install_id=args.install_id, known_hosts_file=args.known_hosts_file)
        while True:
            try:
                pushed = agent.step()
                LOG.info("pushed facts of %s/%s: version %s", args.namespace, args.cluster, pushed.get("version"))
            except (AgentError, httpx.HTTPError, client.ApiException) as exc:
                if args.once:
                    LOG.error("%s", _safe(exc))
                    return 1
                LOG.warning("%s; trying again in %.0f s", _safe(exc), args.interval)
            if args.once:
                return 0
            time.sleep(args.interval)


def _safe(exc: Exception) -> str:
    """An error's summary without headers (a Kubernetes error carries the request's headers): the API server's
    own words (automation.adapters.kube.calls.error_text)."""
    if isinstance(exc, client.ApiException):
        return f"Kubernetes refused a request: {error_text(exc)}"
    return str(exc)
