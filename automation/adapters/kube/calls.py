"""Small helpers around one Kubernetes call."""
from __future__ import annotations

from typing import Callable, TypeVar

from kubernetes.client.rest import ApiException

T = TypeVar("T")


def or_none(call: Callable[[], T]) -> T | None:
    """`call()`, or None when what it reads or deletes is not there (404); any other error is raised."""
    try:
        return call()
    except ApiException as exc:
        if exc.status != 404:
            raise
        return None
