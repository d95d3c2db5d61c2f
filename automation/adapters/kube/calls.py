"""Small helpers around one Kubernetes call, and what a caller above the adapters holds of the client: an ApiClient
to hand on, the errors to catch, and the one text of a failed call (error_text)."""
from __future__ import annotations

from typing import Callable, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException

from automation.adapters.kube.objects import ApiError, error_text

__all__ = ["API_ERRORS", "ApiClient", "error_text", "or_none", "user_of"]

T = TypeVar("T")
TIMEOUT = (5, 30)  # (connect, read) seconds


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


def user_of(api_client: ApiClient) -> str:
    """The user name the API server knows this client as (a SelfSubjectReview: what `kubectl auth whoami` asks),
    e.g. system:serviceaccount:hubwright-system:hubwright. Raises API_ERRORS when it cannot be asked."""
    review = client.AuthenticationV1Api(api_client).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, _request_timeout=TIMEOUT)
    info = review.status.user_info if review.status is not None else None
    return str(info.username or "") if info is not None else ""
