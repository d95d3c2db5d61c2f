"""Kubernetes clients that are bounded and that act as someone: a client whose every call has a timeout
(TimedApiClient), and one client per caller's bearer token (ClientCache). The registry API and the console act as
their callers with these."""
from __future__ import annotations

import copy
import hashlib
import threading
from collections import OrderedDict
from typing import Any

from kubernetes import client


class TimedApiClient(client.ApiClient):
    """A Kubernetes client whose every request has a (connect, read) timeout, unless the call gives its own, and is
    made once (no urllib3 retries, which would multiply the wait): the one place the API's calls are bounded."""

    def __init__(self, configuration: client.Configuration, timeout: tuple[float, float]):
        configuration.retries = False
        super().__init__(configuration)
        self.timeout = timeout

    def request(self, method, url, *args: Any, _request_timeout: Any = None, **kwargs: Any):  # noqa: ANN001
        return super().request(method, url, *args, _request_timeout=_request_timeout or self.timeout, **kwargs)


def timed(api: client.ApiClient, timeout: tuple[float, float]) -> TimedApiClient:
    """`api` itself when it is already timed, else a timed client with a copy of its configuration."""
    if isinstance(api, TimedApiClient):
        api.timeout = timeout
        return api
    return TimedApiClient(copy.deepcopy(api.configuration), timeout)


class ClientCache:
    """A bounded LRU of Kubernetes clients, one per bearer token, keyed by the token's SHA-256."""

    def __init__(self, template: client.Configuration, size: int,
                 timeout: tuple[float, float] = (5.0, 30.0)):
        self._template, self._size, self.timeout = template, size, timeout
        self._clients: OrderedDict[str, client.ApiClient] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, token: str) -> client.ApiClient:
        key = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            found = self._clients.get(key)
            if found is not None:
                self._clients.move_to_end(key)
                return found
        configuration = client.Configuration()
        for name, value in vars(self._template).items():  # host, TLS and proxy settings; never a credential
            if name not in ("api_key", "api_key_prefix", "username", "password", "refresh_api_key_hook",
                            "cert_file", "key_file"):
                setattr(configuration, name, value)
        configuration.api_key = {"BearerToken": f"Bearer {token}", "authorization": f"Bearer {token}"}
        made = TimedApiClient(configuration, self.timeout)
        with self._lock:
            made = self._clients.setdefault(key, made)
            self._clients.move_to_end(key)
            while len(self._clients) > self._size:
                self._clients.popitem(last=False)  # in-flight requests keep their reference
        return made
