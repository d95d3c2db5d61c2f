"""The CRDs are generated from the models: structural, and in step with every field.

(The real API server accepting them, and refusing bad Clusters, is in test_service_envtest.py.)
"""
from __future__ import annotations

import inspect
import json
import re

import pytest
from pydantic import BaseModel

from stacks.crds import crd_manifests, schema_of
from stacks.errors import InvalidSpec
from stacks.model.cluster import ClusterSpec
from stacks.model.hub import HubConfigSpec
from stacks.model.loading import parse
from stacks.status import ClusterStatus
from doubles.factories import cluster_doc, hub_doc

FORBIDDEN = ("$ref", "anyOf", "oneOf", "allOf", "const", "patternProperties", "propertyNames", "$defs")


def _walk(node, path="$"):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}[{i}]")


def _crd(kind: str) -> dict:
    return next(c for c in crd_manifests() if c["spec"]["names"]["kind"] == kind)


def _schema(kind: str) -> dict:
    return _crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_names_scope_and_subresources():
    cluster, hub = _crd("HubCluster"), _crd("HubConfig")
    assert cluster["metadata"]["name"] == "hubclusters.hubwright.io"
    assert cluster["spec"]["scope"] == "Namespaced"
    assert cluster["spec"]["versions"][0]["subresources"] == {"status": {}}
    assert hub["metadata"]["name"] == "hubconfigs.hubwright.io"
    assert hub["spec"]["scope"] == "Cluster"
    columns = [c["name"] for c in cluster["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns[:4] == ["Account", "Region", "Ready", "Reason"] and columns[-1] == "Age"


def test_schemas_are_structural():
    for kind in ("HubCluster", "HubConfig"):
        for path, node in _walk(_schema(kind)):
            bad = [k for k in FORBIDDEN if k in node and not path.endswith(".properties")]
            assert not bad, f"{kind} {path} has {bad}"
            if node.get("additionalProperties") is False:
                raise AssertionError(f"{kind} {path}: additionalProperties false is not structural")
            if "properties" in node and not path.endswith(".properties"):
                assert node.get("type") == "object", f"{kind} {path} has properties but type {node.get('type')}"
                assert "additionalProperties" not in node, f"{kind} {path}: properties and additionalProperties"


def _aliases(model: type[BaseModel]) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


def test_every_model_field_is_in_the_schema():
    cluster = _schema("HubCluster")["properties"]
    assert set(cluster["spec"]["properties"]) == _aliases(ClusterSpec)
    assert set(cluster["status"]["properties"]) == _aliases(ClusterStatus)
    assert set(_schema("HubConfig")["properties"]["spec"]["properties"]) == _aliases(HubConfigSpec)


def test_validator_rules_become_patterns_and_enums():
    spec = _schema("HubCluster")["properties"]["spec"]["properties"]
    assert re.search(spec["accountID"]["pattern"], "222222222222")
    assert not re.search(spec["accountID"]["pattern"], "2222")
    assert _accepts(spec["region"], "us-east-1") and not _accepts(spec["region"], "mars-north-1")
    assert not re.search(spec["network"]["properties"]["vpcID"]["pattern"], "subnet-1")
    roles = _schema("HubConfig")["properties"]["spec"]["properties"]["roleAccountMap"]
    assert re.search(roles["additionalProperties"]["pattern"], "arn:aws:iam::222222222222:role/x")


def test_defaults_satisfy_their_own_rules():
    """The API server refuses a CRD whose defaults fail its own schema."""
    for kind in ("HubCluster", "HubConfig"):
        for path, node in _walk(_schema(kind)):
            if "default" not in node:
                continue
            value = node["default"]
            if "pattern" in node:
                assert re.search(node["pattern"], value), f"{kind} {path}: default {value!r}"
            if "enum" in node:
                assert value in node["enum"], f"{kind} {path}: default {value!r}"
            if "minimum" in node:
                assert node["minimum"] <= value <= node.get("maximum", value), f"{kind} {path}"


def _accepts(schema: dict, value) -> bool:
    """A small structural-schema checker, enough for the example documents."""
    if value is None:
        return bool(schema.get("nullable"))
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict) or any(k not in value for k in schema.get("required", [])):
            return False
        props = schema.get("properties")
        if props is not None:
            return all(k in props and _accepts(props[k], v) for k, v in value.items())
        extra = schema.get("additionalProperties")
        return extra is None or all(_accepts(extra, v) for v in value.values())
    if kind == "array":
        return isinstance(value, list) and all(_accepts(schema["items"], v) for v in value)
    if kind == "string":
        matches = [re.fullmatch(r'self\.matches\((".*")\)', rule["rule"])
                   for rule in schema.get("x-kubernetes-validations", [])]
        return (isinstance(value, str) and (not schema.get("pattern") or re.search(schema["pattern"], value))
                and all(re.search(json.loads(found.group(1)), value) for found in matches if found)
                and (not schema.get("enum") or value in schema["enum"]))
    if kind == "integer":
        return isinstance(value, int) and schema.get("minimum", value) <= value <= schema.get("maximum", value)
    if kind == "boolean":
        return isinstance(value, bool)
    return True


def test_valid_documents_pass_and_bad_ones_fail():
    cluster = _schema("HubCluster")["properties"]["spec"]
    hub = _schema("HubConfig")["properties"]["spec"]
    assert _accepts(cluster, cluster_doc()["spec"])
    assert _accepts(hub, json.loads(json.dumps(hub_doc()["spec"])))
    assert not _accepts(cluster, cluster_doc(accountID="12")["spec"])
    assert not _accepts(cluster, cluster_doc(region="moon-1")["spec"])
    # The AWS part is all or none: the schema's CEL rule (tests/test_registry_envtest.py) and the model say so.
    half = {k: v for k, v in cluster_doc()["spec"].items() if k != "network"}
    assert any("together" in rule["message"] for rule in cluster["x-kubernetes-validations"])
    with pytest.raises(InvalidSpec, match="network missing"):
        parse({**cluster_doc(), "spec": half})
    registered_only = {"displayName": "Payments EU", "facts": {"cloud": "aws"}}
    assert _accepts(cluster, registered_only) and not parse({**cluster_doc(), "spec": registered_only}).spec.provisioned


def test_status_written_by_the_service_fits_the_schema():
    status = ClusterStatus.model_validate({
        "observedGeneration": 3, "stack": "acme.prod-1", "inputsHash": "ab" * 16,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "ok",
                        "lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": 3}],
        "lastUpdate": {"operation": "up", "result": "Succeeded", "startTime": "2025-01-01T00:00:00Z",
                       "changes": {"create": 3}},
        "outputs": {"endpoint": "vpce-1.example", "endpointVPC": "vpc-0hub1",
                    "peerings": [{"name": "acme.a+acme.b", "id": "pcx-1", "state": "active"}]},
        "meshJoin": {"group": "payments", "order": 2},
    })
    written = status.model_dump(by_alias=True, exclude_none=True)
    assert _accepts(schema_of(ClusterStatus), written)
    assert written["outputs"]["endpointVPC"] == "vpc-0hub1"


def _unbounded(node: dict, path: str) -> list[str]:
    """Every string without maxLength (or an enum), list without maxItems, map without maxProperties."""
    kind, found = node.get("type"), []
    if kind == "string" and "maxLength" not in node and "enum" not in node:
        found.append(path)
    if kind == "array" and "maxItems" not in node:
        found.append(path)
    if kind == "object" and isinstance(node.get("additionalProperties"), dict) and "maxProperties" not in node:
        found.append(path)
    for key, child in (node.get("properties") or {}).items():
        found += _unbounded(child, f"{path}.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            found += _unbounded(node[key], f"{path}[]")
    return found


@pytest.mark.parametrize("crd", crd_manifests(), ids=lambda crd: crd["metadata"]["name"])
def test_every_field_has_a_bound_the_api_server_enforces(crd):
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    assert _unbounded(schema["spec"], "spec") == []
    assert _unbounded(schema.get("status", {}), "status") == []
    spec_ints = [node for _, node in _walk(schema["spec"]) if node.get("type") == "integer"]
    assert all(node.get("maximum", 2**32) <= 2**31 - 1 for node in spec_ints)  # int32, as Kubernetes stores


def test_a_cluster_name_too_long_for_its_stack_is_refused_by_the_schema():
    cluster = crd_manifests()[0]
    name = cluster["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"]["properties"]["name"]
    assert name == {"type": "string", "maxLength": 98}  # namespace (1+) + "." + name <= 100, Pulumi's limit


def _undescribed(node: dict, path: str) -> list[str]:
    """Every property (at every depth: objects, list items, map values) without a description."""
    missing = []
    for key, value in (node.get("properties") or {}).items():
        if path.count(".") == 0 and key == "metadata":  # the API server's ObjectMeta, described by the server
            continue
        if not (value.get("description") or "").strip():
            missing.append(f"{path}.{key}")
        missing += _undescribed(value, f"{path}.{key}")
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        sub = node.get(key)
        if isinstance(sub, dict):
            if "properties" in sub and not (sub.get("description") or "").strip():
                missing.append(path + suffix)
            missing += _undescribed(sub, path + suffix)
    return missing


@pytest.mark.parametrize("kind", ["HubCluster", "HubConfig", "HubTenant"])
def test_every_field_of_every_crd_has_a_description_for_kubectl_explain(kind):
    schema = _schema(kind)
    assert _undescribed(schema, kind) == []
    assert schema["properties"]["spec"]["description"] and schema["properties"]["status"]["description"]


def test_descriptions_come_from_the_models_so_they_cannot_drift():
    from stacks.model.cluster import Network

    spec = _schema("HubCluster")["properties"]["spec"]
    assert spec["description"] == inspect.cleandoc(ClusterSpec.__doc__)
    assert spec["properties"]["accountID"]["description"] == ClusterSpec.model_fields["account_id"].description
    assert spec["properties"]["network"]["properties"]["routeTableIDs"]["description"] == \
        Network.model_fields["route_table_ids"].description
    assert _schema("HubCluster")["properties"]["status"]["description"] == inspect.cleandoc(ClusterStatus.__doc__)
