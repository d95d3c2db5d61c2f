"""The role-map ConfigMap: account ID → IAM role ARN, one data key per account.

    apiVersion: v1
    kind: ConfigMap
    metadata: {name: hubwright-role-account-map, namespace: <the service's namespace>}
    data:
      "222222222222": arn:aws:iam::222222222222:role/hubwright
      "333333333333": arn:aws:iam::333333333333:role/hubwright

Its entries overlay the HubConfig's spec.roleAccountMap (the ConfigMap wins;
stacks.accounts.merged_role_map). The service watches it; a change re-resolves the
fleet, and only the clusters whose StackInputs it changes run (automation/service/mapper.py).

An entry with a bad value is kept (as written) for its account, so the clusters
of that account report InvalidRoleARN instead of silently falling back to the
HubConfig's role; a bad key can match no cluster and is only reported.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from stacks.errors import FieldError
from stacks.names import ROLE_ARN, ROLE_MAP_CONFIGMAP

DEFAULT_NAME = ROLE_MAP_CONFIGMAP
_ACCOUNT_DIGITS = 12


@dataclass(frozen=True)
class RoleMap:
    """A parsed role-map ConfigMap."""

    ref: str  # "ConfigMap <namespace>/<name>"
    entries: Mapping[str, str] = field(default_factory=dict)  # account ID → role ARN (bad ARNs kept, see module doc)
    errors: tuple[FieldError, ...] = ()  # for an Event on the ConfigMap and the log


def _field(key: str) -> str:
    return f"data[{key}]"


def parse_role_map(data: Mapping[str, Any] | None, *, namespace: str, name: str = DEFAULT_NAME) -> RoleMap:
    """Validate the ConfigMap's data; every problem names the ConfigMap, the key and the reason."""
    ref = f"ConfigMap {namespace}/{name}"
    entries: dict[str, str] = {}
    errors: list[FieldError] = []
    for key, raw in sorted((data or {}).items()):
        value = raw.strip() if isinstance(raw, str) else raw
        if not (len(key) == _ACCOUNT_DIGITS and key.isdigit() and key.isascii()):
            errors.append(FieldError(ref, _field(key), f"{key!r} is not a 12-digit AWS account ID; each key is "
                                                       "an account ID, each value the role ARN to assume there"))
            continue
        if not isinstance(value, str) or not ROLE_ARN.fullmatch(value):
            errors.append(FieldError(ref, _field(key), f"{value!r} is not an IAM role ARN "
                                                       "(arn:<partition>:iam::<account>:role/<name>)"))
        elif value.split(":")[4] != key:
            errors.append(FieldError(ref, _field(key), f"role {value} is in account {value.split(':')[4]}, "
                                                       f"not in {key}"))
        entries[key] = value if isinstance(value, str) else repr(value)
    return RoleMap(ref, entries, tuple(errors))


def from_configmap(obj: Any, *, namespace: str | None = None, name: str = DEFAULT_NAME) -> RoleMap:
    """Parse a ConfigMap given as a dict (JSON/YAML) or as a kubernetes-client V1ConfigMap."""
    if isinstance(obj, Mapping):
        meta, data = obj.get("metadata") or {}, obj.get("data")
        ns, nm = meta.get("namespace"), meta.get("name")
    else:
        meta, data = obj.metadata, obj.data
        ns, nm = (meta.namespace, meta.name) if meta is not None else (None, None)
    return parse_role_map(data, namespace=ns or namespace or "default", name=nm or name)
