"""The unknown-key warning (stacks.keys_policy) in the real kube-apiserver, read as a user meets it: what `kubectl
apply` prints. For the same object it says what stacks.keys says to the plan and the service, in the same words, and
it never refuses.

The trial: `hubwright.io/mesh-enable: "true"` dropped a cluster out of its mesh, and nothing said so at apply.
"""
from __future__ import annotations

import json
import random
import subprocess
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from doubles.factories import cluster_doc
from doubles.service_env import wait_until
from stacks.keys import KNOWN_KEYS, unknown_key_messages
from stacks.keys_policy import KEYS_POLICY, keys_policy_manifests, near_misses
from stacks.names import MESH_ENABLED_ANNOTATION, MESH_LABEL
from tests.envtest import kube_apiserver  # noqa: F401 - the fixture
from doubles.kubectl import Kubectl

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def kubectl(kube_apiserver, tmp_path_factory):  # noqa: F811 - the fixture
    admin = kube_apiserver.api_client()
    admission = client.AdmissionregistrationV1Api(admin)
    policy, binding = keys_policy_manifests()
    for create in (admission.create_validating_admission_policy, admission.create_validating_admission_policy_binding):
        try:
            create(policy if create == admission.create_validating_admission_policy else binding)
        except ApiException as exc:
            if exc.status != 409:
                raise
    kubectl = Kubectl(kube_apiserver.kubeconfig(), tmp_path_factory.mktemp("kubectl-cache"))
    ns = f"keys-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": ns}})

    def apply(doc: dict) -> subprocess.CompletedProcess:
        doc = {**doc, "metadata": {**doc["metadata"], "namespace": ns}}
        return kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(doc), check=False)

    # The API server loads a new policy through its own informer: applies before that pass unjudged.
    probe = cluster_doc("probe", annotations={"hubwright.io/probe": "x"})
    wait_until(lambda: "Warning:" in apply(probe).stderr, 60, what="the API server to enforce the new policy")
    yield apply
    admission.delete_validating_admission_policy_binding(KEYS_POLICY)
    admission.delete_validating_admission_policy(KEYS_POLICY)
    admin.close()


def warning(done: subprocess.CompletedProcess) -> str | None:
    assert done.returncode == 0, done.stderr  # a warning never refuses
    # The API server puts its own words first: "Validation failed for ValidatingAdmissionPolicy 'P' with binding 'B': "
    head = f"Warning: Validation failed for ValidatingAdmissionPolicy '{KEYS_POLICY}' with binding '{KEYS_POLICY}': "
    lines = [line.removeprefix(head) for line in done.stderr.splitlines() if line.startswith("Warning: ")]
    assert len(lines) <= 1 and all(not line.startswith("Warning") for line in lines), done.stderr
    return lines[0] if lines else None


def expected(doc: dict) -> str | None:
    """What the plan and the service say of the same object (stacks.keys), as the policy words it."""
    meta = doc["metadata"]
    lines = unknown_key_messages(meta.get("labels") or {}, meta.get("annotations") or {})
    return f"HubCluster {doc['metadata']['namespace']}/{meta['name']}: {'; '.join(lines)}" if lines else None


def test_the_trials_misspelling_is_warned_at_apply_with_the_key_it_meant(kubectl):
    doc = cluster_doc("c1", labels={MESH_LABEL: "payments"}, annotations={"hubwright.io/mesh-enable": "true"})
    done = kubectl(doc)
    said = warning(done)
    assert said is not None and said.endswith(
        "metadata.annotations[hubwright.io/mesh-enable]: not a key hubwright reads, so it is ignored; "
        f"did you mean {MESH_ENABLED_ANNOTATION}?"), done.stderr
    assert said == expected({**doc, "metadata": {**doc["metadata"], "namespace": said.split()[1].split("/")[0]}})


def test_known_keys_and_other_prefixes_say_nothing(kubectl):
    doc = cluster_doc("c2", labels={MESH_LABEL: "payments", "team": "x", "example.com/mesh-enable": "y"},
                      annotations={MESH_ENABLED_ANNOTATION: "true"})
    assert warning(kubectl(doc)) is None


def test_the_policy_and_python_agree_on_near_misses_and_on_keys_far_from_any(kubectl):
    typos = random.Random(7).sample(sorted(near_misses()), 12) + ["hubwright.io/entirely-unrelated-words"]
    for i, typo in enumerate(typos):
        doc = cluster_doc(f"k{i}", labels={typo: "x"} if i % 2 else {}, annotations={} if i % 2 else {typo: "x"})
        said = warning(kubectl(doc))
        assert said is not None, typo
        namespace = said.split()[1].split("/")[0]
        assert said == expected({**doc, "metadata": {**doc["metadata"], "namespace": namespace}}), typo
    assert all(key not in near_misses() for key in KNOWN_KEYS)
