"""The run history's store in an S3 bucket (the S3 backend's, `<prefix>/.hubwright/history`, or one named by
--history-store), through boto3's S3 client: the same keys as on a directory (automation.adapters.history.files).

An S3 PUT replaces an object whole, so the index needs no temporary object; a failed call is a HistoryError naming
the object, and only a missing index or detail is not a failure (no records; a detail "not in the store").
"""
from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from automation.adapters.history import HistoryError
from automation.adapters.history.files import Keyed

MISSING = frozenset({"NoSuchKey", "404", "NotFound"})


class S3History(Keyed):
    """The history under `prefix` ("" for the bucket's top) in `bucket`, on `client` (boto3's S3 client)."""

    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.location = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _failed(self, key: str, exc: Exception) -> HistoryError:
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {}) or {}
            said = f"{error.get('Code', '?')}: {error.get('Message', '')}".rstrip(": ")
        else:
            said = str(exc)
        return HistoryError(f"run history s3://{self.bucket}/{self._key(key)}: {said}")

    def _read(self, key: str) -> bytes | None:
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            return bytes(answer["Body"].read())
        except ClientError as exc:
            if (exc.response.get("Error", {}) or {}).get("Code") in MISSING:
                return None
            raise self._failed(key, exc) from None
        except BotoCoreError as exc:
            raise self._failed(key, exc) from None

    def _write(self, key: str, body: bytes, kind: str) -> None:
        # No Content-Encoding: gzip on a detail: a client that honours it would unpack the bytes its record hashes.
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=body, ContentType=kind)
        except (ClientError, BotoCoreError) as exc:
            raise self._failed(key, exc) from None

    def _remove(self, key: str) -> None:
        try:  # S3 answers a DELETE of no object with success
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except (ClientError, BotoCoreError) as exc:
            raise self._failed(key, exc) from None
