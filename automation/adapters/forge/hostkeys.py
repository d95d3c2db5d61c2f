"""A forge's SSH host keys, read from its SSH server with ssh-keyscan: the known_hosts lines an agent pins.

`endpoint(ssh_url)` finds host and port in either form a forge gives (ssh://git@host:port/owner/name.git or
git@host:owner/name.git); `scan(host, port)` asks that server, with a timeout. A port other than 22 is written
`[host]:port`, as ssh looks it up."""
from __future__ import annotations

import re
import shutil
import subprocess
from urllib.parse import urlsplit

from automation.adapters.forge.base import ForgeError, ForgeUnavailable

KEY_TYPES = "ed25519,ecdsa,rsa"


def endpoint(ssh_url: str) -> tuple[str, int]:
    if "://" in ssh_url:
        parts = urlsplit(ssh_url)
        try:
            port = 22 if parts.port is None else parts.port
        except ValueError:
            port = 0
        if parts.scheme != "ssh" or not parts.hostname:
            raise ForgeError(f"SSH URL {ssh_url!r}: not ssh://[user@]host[:port]/path")
        return _checked(ssh_url, parts.hostname, port)
    user_host, sep, _ = ssh_url.partition(":")
    host = user_host.rpartition("@")[2]
    if not sep or not host:
        raise ForgeError(f"SSH URL {ssh_url!r}: not [user@]host:path")
    return _checked(ssh_url, host, 22)


_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\]|[0-9A-Fa-f:]{2,45}")


def _checked(ssh_url: str, host: str, port: int) -> tuple[str, int]:
    """A host name or address, never something ssh-keyscan would read as an option ("-o...")."""
    if not _HOST.fullmatch(host) or not 0 < port < 65536:
        raise ForgeError(f"SSH URL {ssh_url!r}: {host!r} port {port} is not a host name or address and a port")
    return host.strip("[]"), port


def known_host(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def scan(host: str, port: int, *, timeout: float = 10.0) -> list[str]:
    """The server's host keys as sorted known_hosts lines ("<host> <type> <base64>")."""
    binary = shutil.which("ssh-keyscan")
    if binary is None:
        raise ForgeError("ssh-keyscan is not installed (openssh-client): cannot read the forge's host keys")
    wait = max(1, int(timeout))
    try:
        done = subprocess.run([binary, "-T", str(wait), "-t", KEY_TYPES, "-p", str(port), "--", host],
                              capture_output=True, text=True, timeout=timeout + 5)
    except subprocess.TimeoutExpired:
        raise ForgeUnavailable(f"ssh-keyscan {known_host(host, port)}: no answer within {timeout:g}s") from None
    name = known_host(host, port)
    lines = set()
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not line.startswith("#"):
            lines.add(f"{name} {fields[1]} {fields[2]}")
    if not lines:
        raise ForgeUnavailable(f"ssh-keyscan {name}: no host key read ({done.stderr.strip()[-200:]})")
    return sorted(lines)
