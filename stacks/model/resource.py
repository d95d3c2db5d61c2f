"""What every Kubernetes object hubwright reads shares: ObjectMeta, and Resource, the base of HubConfig
(stacks.model.hub) and Cluster (stacks.model.cluster); and the core/v1 Namespace, read for its owner-account and
default-region annotations."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from stacks.model.fields import NamespaceName
from stacks.names import API_VERSION


class ObjectMeta(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    namespace: NamespaceName | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    finalizers: list[str] = Field(default_factory=list)


class Resource(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)
    api_version: Literal["hubwright.io/v1alpha1"] = API_VERSION
    metadata: ObjectMeta
    status: dict[str, Any] | None = None  # written by the service; see stacks.status


class Namespace(BaseModel):
    """A core/v1 Namespace, for its owner-account and default-region annotations."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    api_version: Literal["v1"] = Field("v1", alias="apiVersion")
    kind: Literal["Namespace"] = "Namespace"
    metadata: ObjectMeta

    @property
    def ref(self) -> str:
        return f"Namespace {self.metadata.name}"
