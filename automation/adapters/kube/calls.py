"""Small helpers around one Kubernetes call, and what a caller above the adapters holds of the client: an ApiClient
to hand on, the errors to catch."""
from __future__ import annotations

from typing import Callable, TypeVar

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException

from automation.adapters.kube.objects import ApiError

__all__ = ["API_ERRORS", "ApiClient", "or_none"]

T = TypeVar("T")


def or_none(call: Callable[[], T]) -> T | None:
    """`call()`, or None when what it reads or deletes is not there (404); any other error is raised."""
    try:
        return call()
    except ApiException as exc:
        if exc.status != 404:
            raise
        return None


# What a call to an API server that is away or refuses may raise, through the client or the object port
# (automation/adapters/kube/objects.py): a caller that only logs and tries again later catches these, without naming
# the client's classes itself.
API_ERRORS: tuple[type[BaseException], ...] = (ApiException, ApiError, urllib3.exceptions.HTTPError, OSError)
