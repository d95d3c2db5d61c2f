"""boto3 sessions per AwsTarget: the service's direct AWS calls pivot like the stacks' providers do.

`AwsSessions.client(target, "ec2", operation=...)` gives a client in the target's
account and region. A target with a role is reached with STS AssumeRole from the
service's own (ambient) credentials, with the target's session name, external ID
and duration, exactly as components.providers configures `aws.Provider`; a target
without a role uses the ambient credentials, after checking they are in the
target's account (like the providers' allowedAccountIds).

Assumed credentials are cached per (role, session name, external ID, duration)
and refreshed before they expire (botocore RefreshableCredentials: an advisory
refresh window of min(15 min, lifetime/4), a blocking one of min(10 min,
lifetime/6)). Sessions and clients are cached per (credentials, region).
Every `session()`/`client()` call logs one audit line (automation.adapters.aws.audit).

Credentials never reach a log: this module logs role ARNs, session names and
expiry times only, and by default caps the `botocore`/`boto3` loggers at INFO,
because botocore's DEBUG output contains the AssumeRole response body and the
signed request headers (`guard_logs=False` leaves them alone).

The endpoint is overridable for moto or a VPC endpoint: `endpoint_url=` (`serve --aws-endpoint-url`, or the
environment variable HUBWRIGHT_AWS_ENDPOINT_URL: stacks/options.py; botocore also honours AWS_ENDPOINT_URL by
itself).
"""
from __future__ import annotations

import logging
import os
import threading
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

import boto3
import botocore.loaders
import botocore.session
from botocore.credentials import CredentialProvider, CredentialResolver, Credentials, RefreshableCredentials
from botocore.exceptions import (BotoCoreError, ClientError, NoCredentialsError, NoRegionError,
                                 ParamValidationError, PartialCredentialsError)

from automation.adapters.aws import audit
from stacks.errors import Failure, NeedsAttention
from stacks.inputs import AwsTarget
from stacks.model.fields import partition_of
from stacks.options import SERVE, option

ENDPOINT = option("aws-endpoint-url")  # --aws-endpoint-url, env HUBWRIGHT_AWS_ENDPOINT_URL
LOG = logging.getLogger("hubwright.aws")
_ADVISORY_MAX, _MANDATORY_MAX = 15 * 60, 10 * 60  # botocore's defaults, for long-lived credentials
# One loader for every session: each cluster has its own session (its own session name), and a session with its
# own loader parses the service models again (~25 MB per cluster for ec2 and elbv2; ~2 MB shared).
_LOADER = botocore.loaders.create_loader()


class AwsError(Failure):
    """A direct AWS call of the service failed and may pass later (throttled, unreachable, 5xx, expired
    credentials): retried with backoff. `reason` becomes the cluster's condition reason."""

    reason = "AwsCallFailed"


class AccountAccessDenied(AwsError, NeedsAttention):
    """The service may not act in an account: AssumeRole refused, the wrong account, no credentials.

    No stack runs: the cluster is Stalled with the reason and looked at again every --stalled-recheck, and at
    once when its inputs change (a role-map edit, for one). A network failure on the way is not this: it is
    an AwsError (transient).
    """

    reason = "AssumeRoleFailed"

    def __init__(self, message: str, *, target: AwsTarget, reason: str | None = None):
        super().__init__(message, reason=reason)
        self.target = target


class NoServiceCredentials(AccountAccessDenied):
    """The service has no AWS credentials of its own: none in its environment or files, a web identity token
    (IRSA) it cannot read, no instance role answering. Nothing it does in AWS can work, whatever a cluster says:
    the service's identity is what to fix, never a tenant's field (automation.adapters.aws.preflight names none)."""

    reason = "NoCredentials"


def service_identity() -> str:
    """Where the service's own credentials come from, as botocore's default chain will look (no secret in it)."""
    token = os.environ.get("AWS_WEB_IDENTITY_TOKEN_FILE")
    if token:
        return f"web identity (IRSA): role {os.environ.get('AWS_ROLE_ARN') or '(AWS_ROLE_ARN unset)'}, token file {token}"
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return "the environment (AWS_ACCESS_KEY_ID)"
    if os.environ.get("AWS_PROFILE"):
        return f"profile {os.environ['AWS_PROFILE']}"
    return ("botocore's default chain: environment, shared files, web identity (IRSA), container and instance "
            "metadata")


def _no_credentials(target: AwsTarget, doing: str, cause: BaseException | None = None) -> NoServiceCredentials:
    said = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
    return NoServiceCredentials(
        f"the service has no AWS credentials of its own{said}, so it cannot {doing}; looked in "
        f"{service_identity()}. Give the service an AWS identity: IRSA (the eks.amazonaws.com/role-arn annotation on "
        "its ServiceAccount), an instance role, or AWS_* environment variables (docs/iam.md)", target=target)


# Error codes that say "try again": throttling, a busy or failing service, credentials that expired on the way.
_TRANSIENT_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled", "RequestThrottledException",
    "RequestLimitExceeded", "TooManyRequestsException", "SlowDown", "PriorRequestNotComplete",
    "BandwidthLimitExceeded", "EC2ThrottledException", "ProvisionedThroughputExceededException",
    "InternalError", "InternalFailure", "InternalServerError", "ServiceUnavailable", "ServiceUnavailableException",
    "Unavailable", "RequestTimeout", "RequestTimeoutException", "IDPCommunicationError",
    "ExpiredToken", "ExpiredTokenException", "RequestExpired",
})
# botocore errors that are about what the service was given, not about the network.
_CONFIGURATION_ERRORS = (NoCredentialsError, PartialCredentialsError, NoRegionError, ParamValidationError)


def transient(exc: BaseException) -> bool:
    """The one rule for a failed AWS call: True when trying again later may succeed by itself (throttled,
    unreachable, timed out, a 5xx, credentials that expired), False when a person has to act (denied, unknown
    role, wrong input). Unknown 4xx codes count as needing a person: retrying them only hides them."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {}) or {}
        status = (exc.response.get("ResponseMetadata", {}) or {}).get("HTTPStatusCode") or 0
        return error.get("Code") in _TRANSIENT_CODES or int(status) >= 500 or int(status) == 429
    if isinstance(exc, BotoCoreError):
        return not isinstance(exc, _CONFIGURATION_ERRORS)  # connection, timeout, proxy, read errors
    return False


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def guard_botocore_logs(level: int = logging.INFO) -> None:
    """Keep botocore/boto3 from logging below `level` (their DEBUG lines carry credentials)."""
    for name in ("botocore", "boto3"):
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET or logger.level < level:
            logger.setLevel(level)


class _Fixed(CredentialProvider):
    """A credential provider that hands botocore one credentials object (refreshable or not)."""

    METHOD = "hubwright"

    def __init__(self, credentials: Credentials):
        super().__init__()
        self._credentials = credentials

    def load(self) -> Credentials:
        return self._credentials


class AwsSessions:
    """Cached, refreshed boto3 sessions and clients per AwsTarget; safe to share between threads."""

    def __init__(
        self,
        *,
        base: boto3.Session | None = None,
        endpoint_url: str | None = None,
        clock: Callable[[], datetime] = _utcnow,
        guard_logs: bool = True,
    ):
        """`base`: the service's own credentials (default: boto3's default chain, e.g. IRSA)."""
        self._base = base or boto3.Session()
        self.endpoint_url = endpoint_url
        self._clock = clock
        self._lock = threading.Lock()
        self._key_locks: dict[tuple, threading.Lock] = {}
        self._credentials: dict[tuple, Credentials] = {}
        self._sessions: dict[tuple, boto3.Session] = {}
        self._clients: dict[tuple, Any] = {}
        self._sts: dict[str, Any] = {}
        self.assume_role_calls = 0  # every AssumeRole, first fetch and refreshes
        if guard_logs:
            guard_botocore_logs()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> "AwsSessions":
        """For a caller without `serve`'s command line: the endpoint from the environment, as --help says."""
        environ = os.environ if environ is None else environ
        return cls(endpoint_url=ENDPOINT.from_environment(SERVE, environ) or None, **kwargs)

    # -- public ---------------------------------------------------------------
    def session(self, target: AwsTarget, *, operation: str, cluster: str | None = None,
                namespace: str | None = None) -> boto3.Session:
        """A boto3 session in the target's account and region; logs the pivot.

        Build clients with `client()` (or pass `endpoint_url=self.endpoint_url`).
        Raises AccountAccessDenied when the account cannot be reached.
        """
        session = self._session(target)
        audit.log_pivot(target, operation=operation, cluster=cluster, namespace=namespace)
        return session

    def client(self, target: AwsTarget, service: str, *, operation: str, cluster: str | None = None,
               namespace: str | None = None) -> Any:
        """A cached boto3 client for `service` in the target's account and region; logs the pivot."""
        session = self.session(target, operation=operation, cluster=cluster, namespace=namespace)
        key = (_credential_key(target), target.region, service)
        with self._lock:
            made = self._clients.get(key)
            if made is None:
                made = self._clients[key] = session.client(service, region_name=target.region,
                                                           endpoint_url=self.endpoint_url)
        return made

    # -- sessions and credentials ---------------------------------------------
    def _session(self, target: AwsTarget) -> boto3.Session:
        key = (_credential_key(target), target.region)
        with self._lock:
            cached = self._sessions.get(key)
        if cached is not None:
            return cached
        credentials = self._credentials_for(target)
        core = botocore.session.Session()
        core.register_component("data_loader", _LOADER)
        core.register_component("credential_provider", CredentialResolver([_Fixed(credentials)]))
        made = boto3.Session(botocore_session=core, region_name=target.region)
        with self._lock:
            return self._sessions.setdefault(key, made)

    def _credentials_for(self, target: AwsTarget) -> Credentials:
        key = _credential_key(target)
        with self._lock:
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:  # one AssumeRole per key, even with many threads asking at once
            with self._lock:
                cached = self._credentials.get(key)
            if cached is not None:
                return cached
            made = self._assumed(target) if target.role_arn else self._ambient(target)
            with self._lock:
                self._credentials[key] = made
            return made

    def _assumed(self, target: AwsTarget) -> RefreshableCredentials:
        def fetch() -> dict[str, str]:
            return self._assume_role(target)

        first = fetch()
        expiry = datetime.fromisoformat(first["expiry_time"])
        lifetime = max((expiry - self._clock()).total_seconds(), 0.0)
        return RefreshableCredentials(
            access_key=first["access_key"],
            secret_key=first["secret_key"],
            token=first["token"],
            expiry_time=expiry,
            refresh_using=fetch,
            method="hubwright-assume-role",
            time_fetcher=self._clock,
            advisory_timeout=min(_ADVISORY_MAX, lifetime / 4),
            mandatory_timeout=min(_MANDATORY_MAX, lifetime / 6),
        )

    def _assume_role(self, target: AwsTarget) -> dict[str, str]:
        params: dict[str, Any] = {"RoleArn": target.role_arn, "RoleSessionName": target.session_name}
        if target.external_id:
            params["ExternalId"] = target.external_id
        if target.session_duration_seconds:
            params["DurationSeconds"] = target.session_duration_seconds
        where = f"role {target.role_arn} (account {target.account_id}, session {target.session_name})"
        try:
            with self._lock:
                self.assume_role_calls += 1
            response = self._sts_client(target.region).assume_role(**params)
        except (NoCredentialsError, PartialCredentialsError, OSError) as exc:  # OSError: a token file unread
            raise _no_credentials(target, f"assume {where}", exc if not isinstance(exc, NoCredentialsError)
                                  else None) from None
        except ClientError as exc:
            error = exc.response.get("Error", {})
            said = f"{error.get('Code', '?')}: {error.get('Message', exc)}"
            if transient(exc):
                raise AwsError(f"AssumeRole of {where} failed: {said}; retrying",
                               reason="AssumeRoleUnavailable") from None
            raise AccountAccessDenied(
                f"AssumeRole of {where} was refused: {said}; check the role's trust policy (docs/iam.md) and the "
                "role map", target=target,
            ) from None
        except BotoCoreError as exc:
            if transient(exc):
                raise AwsError(f"AssumeRole of {where} failed: {exc}; retrying", reason="AssumeRoleUnavailable") \
                    from None
            raise AccountAccessDenied(f"AssumeRole of {where} failed: {exc}", target=target) from None
        assumed_account = response["AssumedRoleUser"]["Arn"].split(":")[4]
        if assumed_account != target.account_id:
            raise AccountAccessDenied(
                f"AssumeRole of {where} returned a session in account {assumed_account}",
                target=target, reason="WrongAccount",
            )
        creds = response["Credentials"]
        expiry = creds["Expiration"]
        if isinstance(expiry, str):
            expiry = datetime.fromisoformat(expiry.replace("Z", "+00:00"))
        LOG.info("assumed %s; credentials expire at %s", where, expiry.isoformat())
        return {
            "access_key": creds["AccessKeyId"],
            "secret_key": creds["SecretAccessKey"],
            "token": creds["SessionToken"],
            "expiry_time": expiry.isoformat(),
        }

    def _ambient(self, target: AwsTarget) -> Credentials:
        """The service's own credentials, checked once to be in the target's account."""
        doing = f"act in account {target.account_id} (no role is configured for it)"
        credentials = self._base.get_credentials()
        if credentials is None:
            raise _no_credentials(target, doing)
        try:
            identity = self._sts_client(target.region).get_caller_identity()
        except (NoCredentialsError, PartialCredentialsError, OSError) as exc:
            raise _no_credentials(target, doing, exc if not isinstance(exc, NoCredentialsError) else None) from None
        except (ClientError, BotoCoreError) as exc:
            if transient(exc):
                raise AwsError(f"GetCallerIdentity with the service's credentials failed: {exc}; retrying",
                               reason="AwsUnreachable") from None
            raise AccountAccessDenied(f"GetCallerIdentity with the service's credentials failed: {exc}",
                                      target=target) from None
        if identity["Account"] != target.account_id:
            raise AccountAccessDenied(
                f"the service's own credentials ({identity['Arn']}) are in account {identity['Account']}, "
                f"not {target.account_id}; set HubConfig spec.credentials.roleARN or map the account to a role",
                target=target, reason="WrongAccount")
        return credentials

    def _sts_client(self, region: str) -> Any:
        with self._lock:
            made = self._sts.get(region)
            if made is None:
                made = self._sts[region] = self._base.client("sts", region_name=region,
                                                             endpoint_url=self.endpoint_url)
        return made


def _credential_key(target: AwsTarget) -> tuple:
    if target.role_arn is None:
        return ("ambient", target.account_id, partition_of(target.region))
    return (target.role_arn, target.session_name, target.external_id, target.session_duration_seconds,
            partition_of(target.region))
