"""The install's values: one model for both doors, validated at the edge. Pure.

`python -m automation install --render DIR [--values FILE] [--set key=value ...]` (plain manifests and a
kustomization.yaml) and `pulumi up` of deploy/ (its stack config `hubwright-deploy:values`) read the same
`InstallValues` and build the same components (components/install.py). docs/install.md has the table of every
key; tests/test_install_render.py checks that the table names each one.

Keys are camelCase, as in a Kubernetes manifest. An unknown key is an error (a typo must not pass silently as a
default), and so is a value out of range; each names its key:

    install values (values.yaml): serviceAccount.roleArn: not an IAM role ARN (arn:aws:iam::<12 digits>:role/...)
"""
from __future__ import annotations

import re
from typing import Any, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, ValidationInfo
from pydantic.alias_generators import to_camel

from stacks.agent_admission import API_AUDIENCES, AUDIENCE
from stacks.errors import FieldError, InvalidSpec
from stacks.names import ROLE_ARN
from stacks.release import default_image, image_problem

IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"  # EKS's pod identity webhook reads it on the ServiceAccount
# What the service reads from the backend Secret (envFrom): nothing else may be put in it through the values.
BACKEND_SECRET_KEYS = {
    "PULUMI_CONFIG_PASSPHRASE": "the passphrase secrets provider of a file:// or s3:// backend",
    "PULUMI_ACCESS_TOKEN": "Pulumi Cloud (backend.url https://api.pulumi.com)",
    "AWS_ACCESS_KEY_ID": "an s3:// backend without IRSA (with IRSA: leave the AWS keys out)",
    "AWS_SECRET_ACCESS_KEY": "with AWS_ACCESS_KEY_ID",
    "AWS_SESSION_TOKEN": "with AWS_ACCESS_KEY_ID, for temporary credentials",
    "AWS_REGION": "the s3:// backend bucket's region, when it is not in the URL (?region=)",
}
# The backend Secret's keys a reader of the run history (the registry API, the console) may have: the bucket's, never
# the stacks' passphrase or a Cloud token.
HISTORY_KEYS = tuple(key for key in BACKEND_SECRET_KEYS if key.startswith("AWS_"))
# Without a Secret on the file:// backend, the passphrase is made once on the state volume, beside the state
# it protects, by the pod's init container (components/controlplane.py), and read from this file.
PASSPHRASE_FILE = ".pulumi-passphrase"
QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|Pi|M|G|T|P|E|Ei)?")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
BACKEND_SCHEMES = ("s3://", "gs://", "azblob://", "https://", "http://", "postgres://")


class Values(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


def _matching(pattern: re.Pattern[str], value: str, what: str) -> str:
    if not pattern.fullmatch(value):
        raise ValueError(f"{value!r} is not {what}")
    return value


def _quantity(value: str) -> str:
    if not QUANTITY.fullmatch(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 250m, 512Mi, 10Gi)")
    return value


class Resources(Values):
    """A container's requests and limits: cpu and memory only."""
    requests: dict[str, str] = Field(description="cpu and memory the scheduler reserves")
    limits: dict[str, str] = Field(description="cpu and memory the container may not exceed")

    @field_validator("requests", "limits")
    @classmethod
    def _known(cls, value: dict[str, str]) -> dict[str, str]:
        for key, amount in value.items():
            if key not in ("cpu", "memory"):
                raise ValueError(f"{key!r}: only cpu and memory")
            _quantity(str(amount))
        return {k: str(v) for k, v in value.items()}


class ServiceAccountValues(Values):
    role_arn: str | None = Field(None, description=f"the service's own AWS identity, from which it assumes each "
                                                    f"account's role (IRSA: the {IRSA_ANNOTATION} annotation on "
                                                    f"its ServiceAccount)")
    annotations: dict[str, str] = Field(default_factory=dict, description="more annotations on its ServiceAccount")

    @field_validator("role_arn")
    @classmethod
    def _arn(cls, value: str | None) -> str | None:
        if value is not None and not ROLE_ARN.fullmatch(value):
            raise ValueError(f"{value!r} is not an IAM role ARN (arn:aws:iam::<12 digits>:role/<name>)")
        return value

    def all_annotations(self) -> dict[str, str]:
        return {**self.annotations, **({IRSA_ANNOTATION: self.role_arn} if self.role_arn else {})}


class BackendSecret(Values):
    name: str = Field("hubwright-pulumi", description="the Secret the service reads its backend's keys from "
                                                      "(envFrom), in the install's namespace")
    data: dict[str, str] | None = Field(None, description="create the Secret with these keys (one of "
                                                          + ", ".join(BACKEND_SECRET_KEYS) + "); unset: the "
                                                          "Secret is made by you, or not at all on file://")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _matching(DNS_NAME, value, "a Secret name (lower case letters, digits, '-' and '.')")

    @field_validator("data")
    @classmethod
    def _keys(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        unknown = sorted(set(value or {}) - set(BACKEND_SECRET_KEYS))
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(unknown)}: the service reads only "
                             f"{', '.join(BACKEND_SECRET_KEYS)}")
        return value


class Backend(Values):
    url: str | None = Field(None, description="the Pulumi backend of the per-cluster stacks (s3://bucket/prefix, "
                                              "https://api.pulumi.com); unset: file:// on the state volume, one "
                                              "replica")
    secret: BackendSecret = Field(default_factory=BackendSecret, description="its credentials")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith(BACKEND_SCHEMES) or any(c.isspace() for c in value)):
            raise ValueError(f"{value!r}: expected {', '.join(s + '...' for s in BACKEND_SCHEMES)} "
                             "(file:// is the default: leave it unset)")
        return value


class Volumes(Values):
    state: str = Field("10Gi", description="the state PersistentVolumeClaim (file:// backend) or emptyDir limit "
                                           "(other backends): per-stack workspaces, the file backend's state")
    pulumi_home: str = Field("2Gi", description="PULUMI_HOME's emptyDir limit: the CLI's plugins")
    tmp: str = Field("1Gi", description="/tmp's emptyDir limit, in both pods")
    facts: str = Field("1Gi", description="the registry's SQLite facts history PersistentVolumeClaim")

    @field_validator("state", "pulumi_home", "tmp", "facts")
    @classmethod
    def _size(cls, value: str) -> str:
        return _quantity(value)


class ServiceValues(Values):
    workers: int = Field(4, ge=1, le=64, description="stacks updated in parallel (serve --workers)")
    metrics_port: int = Field(8080, ge=1024, le=65535, description="/healthz, /readyz and /metrics")
    policy: str = Field("mandatory", pattern="^(mandatory|advisory|off)$",
                        description="the policy pack on every update (HUBWRIGHT_POLICY)")
    executor: str = Field("local", pattern="^(local|runners)$",
                          description="where Pulumi runs (serve --executor): local, in the service's own worker "
                                      "processes; runners, in the runner Deployment (needs backend.url)")
    resources: Resources = Field(
        default_factory=lambda: Resources(requests={"cpu": "250m", "memory": "512Mi"}, limits={"memory": "2Gi"}),
        description="the service container's requests and limits")


class RunnerValues(Values):
    """The runner Deployment (`python -m automation runner`), rendered when service.executor is runners."""
    replicas: int = Field(2, ge=1, le=500,
                          description="runner pods (or let an HPA or KEDA scale them: docs/service.md)")
    workers: int = Field(1, ge=1, le=16, description="runs each runner pod executes at once (runner --workers)")
    claim_ttl: int = Field(30, ge=5, le=600, description="seconds a runner's claim on a run lasts unless renewed "
                                                        "(--claim-ttl, the service's and the runners')")
    keep_runs: int = Field(10, ge=1, le=1000, description="finished HubStackRuns kept per stack (serve --keep-runs)")
    # Measured (bench/run_cost.py, docs/engine.md): one run peaks at ~310 MB RSS with one provider plugin, +70 MB per
    # more provider; the examples' largest stack (6 providers) at ~660 MB. 1Gi is that + 50 % for one run at once:
    # raise it by as much per run with more workers (the real aws plugin's size replaces the 70 MB where it runs).
    resources: Resources = Field(
        default_factory=lambda: Resources(requests={"cpu": "500m", "memory": "512Mi"}, limits={"memory": "1Gi"}),
        description="a runner container's requests and limits")


class RegistryValues(Values):
    enabled: bool = Field(True, description="run the registry API (docs/registry.md) as its own Deployment")
    public_url: str | None = Field(None, description="where agents reach the registry API; unset: its in-cluster "
                                                     "Service")
    facts_db_secret: str | None = Field(None, description="a Secret whose key `url` is a postgresql:// URL (two "
                                                          "replicas); unset: SQLite on a volume (one replica)")
    resources: Resources = Field(
        default_factory=lambda: Resources(requests={"cpu": "100m", "memory": "128Mi"}, limits={"memory": "512Mi"}),
        description="the registry API container's requests and limits")
    token_audiences: list[str] = Field(
        default_factory=lambda: list(API_AUDIENCES), min_length=1, max_length=16,
        description="the hub API server's own audiences (its --api-audiences, by default its "
                    "--service-account-issuer): the only audiences the registry may mint its agents' tokens for")

    @field_validator("token_audiences")
    @classmethod
    def _audiences(cls, value: list[str]) -> list[str]:
        for audience in value:
            _matching(AUDIENCE, audience, "an audience (letters, digits and URL punctuation)")
        return value


class ConsoleValues(Values):
    enabled: bool = Field(False, description="run the web console (python -m automation console) as its own "
                                             "Deployment and Service")
    secure_cookies: bool = Field(False, description="mark its sign-in cookies Secure (console --secure-cookies): "
                                                    "set it when an Ingress or a proxy serves it over HTTPS")
    resources: Resources = Field(
        default_factory=lambda: Resources(requests={"cpu": "50m", "memory": "128Mi"}, limits={"memory": "512Mi"}),
        description="the console container's requests and limits")


class MonitoringValues(Values):
    enabled: bool = Field(False, description="render a ServiceMonitor, a PrometheusRule with the service's alerts and "
                                             "a Grafana dashboard ConfigMap (needs the Prometheus Operator's CRDs)")
    labels: dict[str, str] = Field(default_factory=dict, description="labels on all three, e.g. the `release` "
                                                                     "label a Prometheus selects them by")


class InstallValues(Values):
    image: str = Field(default_factory=default_image, description="the image of the service, the registry API "
                                                                 "and the facts agents: <repository>:<tag> or "
                                                                 "<repository>@sha256:<digest>")
    namespace: str = Field("hubwright-system", description="where the service and the registry API run")
    service_account: ServiceAccountValues = Field(default_factory=ServiceAccountValues,
                                                  description="the service's ServiceAccount")
    backend: Backend = Field(default_factory=Backend, description="the per-cluster stacks' Pulumi backend")
    volumes: Volumes = Field(default_factory=Volumes, description="volume sizes")
    service: ServiceValues = Field(default_factory=ServiceValues, description="the service")
    runners: RunnerValues = Field(default_factory=RunnerValues, description="the runners (service.executor runners)")
    registry: RegistryValues = Field(default_factory=RegistryValues, description="the registry API")
    console: ConsoleValues = Field(default_factory=ConsoleValues, description="the web console (off by default)")
    monitoring: MonitoringValues = Field(default_factory=MonitoringValues,
                                         description="Prometheus Operator and Grafana objects (docs/service.md)")

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        problem = image_problem(value)  # the one rule for an image we are told to run (the API's --agent-image too)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return _matching(DNS_LABEL, value, "a namespace name (a DNS label)")

    @field_validator("service")
    @classmethod
    def _shared_backend(cls, value: ServiceValues, info: ValidationInfo) -> ServiceValues:
        backend = info.data.get("backend")
        if value.executor == "runners" and isinstance(backend, Backend) and backend.url is None:
            raise ValueError("executor runners needs a shared backend (backend.url s3://... or "
                             "https://api.pulumi.com): runner pods cannot share the file backend's volume "
                             "(docs/service.md, Runners)")
        return value

    @property
    def secret_required(self) -> bool:
        """The pod may start without the backend Secret only on the file:// backend: only its state volume can
        keep a generated passphrase. A remote backend's credentials come from the Secret, which it then needs."""
        return self.backend.url is not None


def history_args(backend_url: str | None, backend_secret: str | None, env: list[dict[str, Any]]) -> list[str]:
    """The flags of a pod that reads the run history from the backend's store (the registry API, the console),
    adding the bucket's keys (HISTORY_KEYS, optional: with IRSA there are none) from the backend Secret to `env`. On
    the file backend the history is on the service's own volume: off."""
    if backend_url is None:
        return ["--history-store", "off"]
    if backend_secret is not None:
        env.extend({"name": key, "valueFrom": {"secretKeyRef": {"name": backend_secret, "key": key,
                                                                "optional": True}}} for key in HISTORY_KEYS)
    return ["--backend", backend_url]


def value_keys(model: type[BaseModel] = InstallValues, prefix: str = "") -> dict[str, str]:
    """Every leaf key (dotted, camelCase) and its description: what docs/install.md's table lists."""
    keys: dict[str, str] = {}
    for name, info in model.model_fields.items():
        key = prefix + (info.alias or name)
        sub = info.annotation
        if isinstance(sub, type) and issubclass(sub, Values) and sub is not Resources:
            keys.update(value_keys(sub, key + "."))
        else:
            keys[key] = info.description or ""
    return keys


def set_value(doc: dict[str, Any], assignment: str, *, source: str = "--set") -> None:
    """Apply `key.sub=value` (Helm's --set, one key): the value is read as a YAML scalar (true, 4, a string)."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise InvalidSpec.one(f"install values ({source})", key or assignment, "expected key=value, e.g. "
                              "serviceAccount.roleArn=arn:aws:iam::123456789012:role/hubwright")
    try:
        put(doc, key, yaml.safe_load(raw) if raw else "")
    except ValueError as exc:
        raise InvalidSpec.one(f"install values ({source})", key, str(exc)) from None


def put(doc: dict[str, Any], key: str, value: Any) -> None:
    """Set the dotted `key` of the values document `doc` to `value`, making the maps on its way (--set, and the
    chart's marked values: stacks.chart); ValueError when a part on the way is not a map."""
    *path, last = key.split(".")
    node = doc
    for part in path:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(f"{part} is not a map")
    node[last] = value


def load_values(doc: Mapping[str, Any] | None, *, source: str = "values") -> InstallValues:
    """Validate the values; InvalidSpec names each key that is wrong and why."""
    if doc is not None and not isinstance(doc, Mapping):
        raise InvalidSpec.one(f"install values ({source})", "values", "expected a map of keys")
    try:
        return InstallValues.model_validate(dict(doc or {}))
    except ValidationError as exc:
        raise InvalidSpec([FieldError(f"install values ({source})",
                                      ".".join(str(p) for p in err["loc"]) or "values",
                                      "unknown key" if err["type"] == "extra_forbidden"
                                      else err["msg"].removeprefix("Value error, ")) for err in exc.errors()]) from None
