"""An SSH key pair for the facts agent's catalog repository: ed25519, both halves in OpenSSH format.

The private key is what `ssh` and Flux's GitRepository (`identity`) read; the public key is one
`authorized_keys`-style line that stacks.gitrepos.keys accepts (the registry parses it the same way). The private
key is returned to the caller only, which writes it into the guest cluster's Secret: it is never logged.
"""
from __future__ import annotations

from typing import NamedTuple

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from stacks.gitrepos import keys


class KeyPair(NamedTuple):
    private: str  # -----BEGIN OPENSSH PRIVATE KEY----- ... (no passphrase: the Secret is its protection)
    public: str  # ssh-ed25519 AAAA... <comment>
    fingerprint: str  # SHA256:..., as `ssh-keygen -lf` prints it

    def __repr__(self) -> str:  # never the private key, should a pair end up in a log or a traceback
        return f"KeyPair(public={self.public!r}, fingerprint={self.fingerprint!r})"


def new_key_pair(comment: str) -> KeyPair:
    """A fresh ed25519 key pair; `comment` (keys.COMMENT's characters) ends the public key's line."""
    if not keys.COMMENT.fullmatch(comment):
        raise ValueError(f"{comment!r}: a key's comment holds only letters, digits and @._+:=- (at most 100)")
    private = Ed25519PrivateKey.generate()
    text = private.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()).decode()
    public = keys.parse(f"{private.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()} "
                        f"{comment}")
    return KeyPair(text, public.canonical, public.fingerprint)
