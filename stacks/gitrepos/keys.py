"""The SSH public keys a repository's deploy keys may be: one key, nothing else.

A deploy key ends up on the forge, which writes it into an `authorized_keys` file (Gitea's and GitLab's SSH servers
read one). A line there may carry options before the key (`command="..."`, `no-pty`, `from=`), and a second line is
a second key, so whoever writes the key could run commands on the forge, or add a key of their choosing. The key is
therefore parsed, not passed on: `<type> <base64 blob>` and an optional plain comment; the blob must decode and name
the same type inside; the type must be one of a short list (RSA only from 3072 bits). What goes to the forge is
`canonical(key)`, rebuilt from the parts.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from typing import NamedTuple

TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
         "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com", "ssh-rsa")
RSA_MIN_BITS = 3072
KEY_MAX = 16384  # characters: an RSA-16384 key is about 2,800
COMMENT = re.compile(r"[A-Za-z0-9@._+:=-]{1,100}")  # no spaces, quotes or commas: nothing an options parser reads
_BLOB = re.compile(r"[A-Za-z0-9+/]+={0,2}")


class PublicKey(NamedTuple):
    type: str
    blob: str  # base64, as written
    comment: str | None

    @property
    def canonical(self) -> str:
        """The key as it goes to the forge: type, blob and comment, rebuilt."""
        return " ".join(part for part in (self.type, self.blob, self.comment) if part)

    @property
    def fingerprint(self) -> str:
        """`SHA256:<base64, no padding>`, as `ssh-keygen -lf` prints it (and as the forges show it)."""
        digest = hashlib.sha256(base64.b64decode(self.blob)).digest()
        return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def parse(text: str) -> PublicKey:
    """The key in `text`, or ValueError saying why it is not one acceptable key."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("no public key given")
    if len(text) > KEY_MAX:
        raise ValueError(f"a public key is at most {KEY_MAX} characters")
    if any(ch in text for ch in "\r\n\0"):
        raise ValueError("a public key is one line")
    parts = text.strip().split()
    if len(parts) not in (2, 3):
        raise ValueError("a public key is '<type> <base64>' and an optional comment (no options, no spaces in the "
                         "comment)")
    kind, blob = parts[0], parts[1]
    comment = parts[2] if len(parts) == 3 else None
    if kind not in TYPES:
        raise ValueError(f"key type {kind[:40]!r} is not accepted (one of {', '.join(TYPES)})")
    if comment is not None and not COMMENT.fullmatch(comment):
        raise ValueError("the key's comment may hold only letters, digits and @._+:=- (at most 100)")
    if not _BLOB.fullmatch(blob):
        raise ValueError("the key's data is not base64")
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the key's data is not base64") from None
    fields = _fields(raw)
    if not fields or fields[0] != kind.encode():
        raise ValueError(f"the key's data is not a {kind} key")
    if kind == "ssh-rsa":
        if len(fields) != 3:
            raise ValueError("the key's data is not an ssh-rsa key")
        modulus = fields[2].lstrip(b"\0")
        if len(modulus) * 8 < RSA_MIN_BITS:
            raise ValueError(f"an RSA key has at least {RSA_MIN_BITS} bits (this one {len(modulus) * 8})")
    elif kind == "ssh-ed25519" and (len(fields) != 2 or len(fields[1]) != 32):
        raise ValueError("the key's data is not an ssh-ed25519 key")
    return PublicKey(kind, blob, comment)


def _fields(raw: bytes) -> list[bytes]:
    """The length-prefixed strings of an SSH key blob (RFC 4253 6.6); [] when it is not made of them."""
    out, at = [], 0
    while at < len(raw):
        if at + 4 > len(raw):
            return []
        (size,) = struct.unpack(">I", raw[at:at + 4])
        at += 4
        if size > len(raw) - at:
            return []
        out.append(raw[at:at + size])
        at += size
    return out
