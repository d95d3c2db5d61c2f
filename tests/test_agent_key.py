"""The facts agent's catalog key: the pair it makes (what ssh-keygen reads), when it makes a new one (one per
install), and its PUT through the real API app against the real kube-apiserver (the test server plays hub and
guest cluster; the install answer's objects are applied in a namespace of the test's own).

Proven: the private key is OpenSSH ed25519 and the public key its own half; the agent writes the pair once per
install ID into the Secret the install made (Flux's and Argo CD's keys: identity, identity.pub, known_hosts), gives
the public key to the registry once, and a restart keeps both; a new install makes a new pair that replaces the key
in status.agentKey; the private key never reaches a log, the registry or the hub; the agent's guest Role reaches
that one Secret and its own, nothing else (no create, no list).
"""
from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
from typing import Any

import pytest

from kubernetes import client

from automation.adapters.sshkeys import new_key_pair
from automation.cli.agent import Agent
from stacks.gitrepos import keys
from stacks.install import AGENT, AGENT_NAMESPACE, INSTALL_ID_ANNOTATION, KEY_PUSHED_ANNOTATION, KEY_SECRET
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from tests.registry_rbac import service_account_token
from tests.test_registry_gitrepo import HOST_KEY, Hub, admin, http, hub, item, own, retry  # noqa: F401 - fixtures

pytestmark = pytest.mark.live  # starts processes (tests/tiers.py)

RBAC = "rbac.authorization.k8s.io"


def test_the_key_pair_is_an_openssh_ed25519_pair_ssh_keygen_reads(tmp_path):
    pair = new_key_pair("hubwright-agent@c1")
    private, public = tmp_path / "identity", tmp_path / "identity.pub"
    private.write_text(pair.private)
    private.chmod(0o600)
    public.write_text(f"{pair.public}\n")
    listed = subprocess.run(["ssh-keygen", "-l", "-f", str(public)], capture_output=True, text=True, check=True)
    assert listed.stdout.split() == ["256", pair.fingerprint, "hubwright-agent@c1", "(ED25519)"]
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(private)], capture_output=True, text=True, check=True)
    assert derived.stdout.split()[:2] == pair.public.split()[:2]  # the public key is the private key's own half
    assert pair.private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    assert keys.parse(pair.public).canonical == pair.public  # what the registry accepts, as it would store it
    assert new_key_pair("hubwright-agent@c1").fingerprint != pair.fingerprint
    assert pair.private not in repr(pair) and pair.private not in str(pair)  # never in a log or a traceback


def _guest_secret(hub: Hub, namespace: str) -> None:
    """The key Secret as the install makes it (empty), in the test's own namespace."""
    body = hub.install(namespace, hub.cluster(namespace))  # an install answer of another cluster: its manifest
    secret = item(body, "Secret", KEY_SECRET)
    assert "data" not in secret and "stringData" not in secret
    client.CoreV1Api(hub.admin).create_namespaced_secret(namespace, {**secret, "metadata": {
        **secret["metadata"], "namespace": namespace}})


def _agent(hub: Hub, tenant: str, cluster: str, body: dict[str, Any], known_hosts: str) -> Agent:
    stored = item(body, "Secret", AGENT)["stringData"]
    return Agent(api_url="http://testserver", tenant=tenant, namespace=tenant, cluster=cluster,
                 token=stored["token"], guest=hub.admin, http=hub.http, key_secret=(tenant, KEY_SECRET),
                 install_id=stored["installID"], known_hosts_file=known_hosts)


def _stored(hub: Hub, namespace: str) -> tuple[dict[str, str], dict[str, str]]:
    found = client.CoreV1Api(hub.admin).read_namespaced_secret(KEY_SECRET, namespace)
    return ({key: base64.b64decode(value).decode() for key, value in (found.data or {}).items()},
            dict(found.metadata.annotations or {}))


def test_the_agent_makes_one_key_per_install_and_the_registry_takes_it(hub, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    tenant = hub.tenant()
    cluster = hub.cluster(tenant)
    hub.catalog(tenant, cluster)
    _guest_secret(hub, tenant)
    first = hub.install(tenant, cluster)
    known_hosts = tmp_path / "known_hosts"  # the install's ConfigMap, as the pod mounts it
    known_hosts.write_text(item(first, "ConfigMap", "hubwright-catalog")["data"]["known_hosts"])

    agent = _agent(hub, tenant, cluster, first, str(known_hosts))
    fingerprint = retry(lambda: agent.ensure_key())  # RBAC takes a moment to see the agent's new Role
    data, annotations = _stored(hub, tenant)
    assert set(data) == {"identity", "identity.pub", "known_hosts"} and data["known_hosts"] == f"{HOST_KEY}\n"
    assert keys.parse(data["identity.pub"].strip()).fingerprint == fingerprint
    assert annotations[INSTALL_ID_ANNOTATION] == item(first, "Secret", AGENT)["stringData"]["installID"]
    assert annotations[KEY_PUSHED_ANNOTATION] == fingerprint
    held = hub.read(tenant, cluster)
    assert held["status"]["agentKey"]["publicKey"] == data["identity.pub"].strip()
    assert held["status"]["agentKey"]["fingerprint"] == fingerprint
    private = data["identity"]
    assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")

    # a restarted pod of the same install: the same pair, and nothing sent again
    restarted = _agent(hub, tenant, cluster, first, str(known_hosts))
    restarted.http = None  # type: ignore[assignment] - a call to the registry would fail
    assert restarted.ensure_key() == fingerprint and _stored(hub, tenant)[0]["identity"] == private
    assert hub.read(tenant, cluster)["metadata"]["resourceVersion"] == held["metadata"]["resourceVersion"]

    # a reset and a new install: a new pair, and the registry holds the new key only
    second = hub.install(tenant, cluster)
    assert "agentKey" not in hub.read(tenant, cluster)["status"]  # the reset took the old one away
    fresh = retry(lambda: _agent(hub, tenant, cluster, second, str(known_hosts)).ensure_key())
    data, annotations = _stored(hub, tenant)
    assert fresh != fingerprint and data["identity"] != private
    assert annotations[INSTALL_ID_ANNOTATION] == item(second, "Secret", AGENT)["stringData"]["installID"]
    assert hub.read(tenant, cluster)["status"]["agentKey"]["fingerprint"] == fresh

    # the private keys stayed in the guest's Secret: not in the hub's objects, not in any log line
    on_hub = json.dumps(hub.read(tenant, cluster))
    logged = [record.getMessage() for record in caplog.records]
    assert logged and fresh in "\n".join(logged)
    for secret in (private, data["identity"]):
        body = secret.split("\n")[1]  # the first line of the key's base64
        assert body not in on_hub and not any(body in line for line in logged)


def test_the_agents_guest_role_reaches_its_two_secrets_and_nothing_else(hub):
    """The install's Role, applied (in a namespace of the test's own) and asked through SelfSubjectAccessReviews as
    the agent's ServiceAccount: get and patch its own Secret and the key's; no create (Kubernetes cannot limit
    create to one name, so the install makes the Secret), no list, no other Secret."""
    tenant = hub.tenant()
    body = hub.install(tenant, hub.cluster(tenant))
    role, binding = item(body, "Role", AGENT), item(body, "RoleBinding", AGENT)
    rbac = client.RbacAuthorizationV1Api(hub.admin)
    rbac.create_namespaced_role(tenant, {**role, "metadata": {"name": AGENT}})
    rbac.create_namespaced_role_binding(tenant, {**binding, "metadata": {"name": AGENT}, "subjects": [
        {**binding["subjects"][0], "namespace": tenant}]})
    assert binding["subjects"][0]["namespace"] == AGENT_NAMESPACE
    hub.users.append((tenant, AGENT))
    agent = hub.env.api_client(service_account_token(hub.admin, tenant, AGENT))

    def may(verb: str, name: str | None) -> bool:
        attributes = {"resource": "secrets", "verb": verb, "namespace": tenant, **({"name": name} if name else {})}
        return bool(client.AuthorizationV1Api(agent).create_self_subject_access_review(
            {"spec": {"resourceAttributes": attributes}}).status.allowed)

    try:
        retry(lambda: _check(may("get", KEY_SECRET)))
        assert {(verb, name) for verb in ("get", "patch", "update", "delete", "create", "list", "watch")
                for name in (KEY_SECRET, AGENT, "other", None) if may(verb, name)} == {
            ("get", KEY_SECRET), ("patch", KEY_SECRET), ("get", AGENT), ("patch", AGENT)}
    finally:
        agent.close()
        rbac.delete_namespaced_role(AGENT, tenant)


def _check(allowed: bool) -> None:
    assert allowed


def test_the_install_makes_the_key_secret_before_the_agent_and_gives_the_agent_its_install(hub):
    tenant = hub.tenant()
    body = hub.install(tenant, hub.cluster(tenant))
    kinds = [(m["kind"], m["metadata"]["name"]) for m in body["items"]]
    assert kinds.index(("Secret", KEY_SECRET)) < kinds.index(("Deployment", AGENT))
    pod = item(body, "Deployment", AGENT)["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[args.index("--key-secret") + 1] == f"{AGENT_NAMESPACE}/{KEY_SECRET}"
    assert args[args.index("--install-id") + 1] == "$(HUBWRIGHT_INSTALL_ID)"
    env = {var["name"]: var for var in pod["containers"][0]["env"]}
    assert env["HUBWRIGHT_INSTALL_ID"]["valueFrom"]["secretKeyRef"] == {"name": AGENT, "key": "installID"}
    catalog = next(volume for volume in pod["volumes"] if volume["name"] == "catalog")
    assert catalog["configMap"] == {"name": "hubwright-catalog", "optional": True}  # none before the repository
    assert os.path.dirname(args[args.index("--known-hosts-file") + 1]) == next(
        mount["mountPath"] for mount in pod["containers"][0]["volumeMounts"] if mount["name"] == "catalog")
