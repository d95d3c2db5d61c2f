"""A real PostgreSQL server for the tests, from the distribution's packages (Debian: postgresql-15).

Fixture:

* ``postgres_url`` (session): runs ``initdb`` and ``pg_ctl start`` in a temporary directory, yields
  ``postgresql://postgres@127.0.0.1:PORT/postgres`` and stops the server (``pg_ctl stop -m fast``) and
  removes the directory at the end. Import it into a test module:
  ``from tests.postgres import postgres_url  # noqa: F401``.

The server listens on 127.0.0.1 only, on a free port, with its unix socket in the temporary directory
and trust authentication (nothing but this machine's loopback reaches it). PostgreSQL refuses to run as
root, so as root the data directory is given to `nobody` and both commands run as that user (runuser).
No fsync: the data is thrown away. Without the binaries the tests skip, naming them; CI installs them,
and there a skip fails the run.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
from doubles.ports import free_port as _free_port

BINARIES = ("initdb", "pg_ctl")
PACKAGE_BIN = Path("/usr/lib/postgresql/15/bin")  # Debian's postgresql-15 keeps them off PATH
SERVER_USER = "nobody"


def find_binaries() -> dict[str, str] | None:
    """initdb and pg_ctl from PATH, else from Debian's postgresql-15 directory; None if either is missing."""
    found = {}
    for name in BINARIES:
        path = shutil.which(name) or (str(PACKAGE_BIN / name) if (PACKAGE_BIN / name).is_file() else None)
        if path is None:
            return None
        found[name] = path
    return found



def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", SERVER_USER, "--", *command] if os.geteuid() == 0 else command


def _run(command: list[str], log: Path | None = None) -> None:
    done = subprocess.run(_as_server_user(command), capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        server_log = log.read_text() if log is not None and log.exists() else ""
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
                           f"{server_log}")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    binaries = find_binaries()
    if binaries is None:
        pytest.skip(f"PostgreSQL server binaries {' and '.join(BINARIES)} not found on PATH or in {PACKAGE_BIN} "
                    f"(install postgresql-15)")
    base = Path(tempfile.mkdtemp(prefix="hubwright-pg-"))
    data, log, port = base / "data", base / "server.log", _free_port()
    if os.geteuid() == 0:
        shutil.chown(base, user=SERVER_USER)
    try:
        _run([binaries["initdb"], "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync",
              "--encoding=UTF8", "--locale=C"])
        options = (f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={base} "
                   f"-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        try:
            _run([binaries["pg_ctl"], "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start"],
                 log)
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            if (data / "postmaster.pid").exists():  # also after a start that timed out
                _run([binaries["pg_ctl"], "-D", str(data), "-m", "fast", "-w", "stop"], log)
    finally:
        shutil.rmtree(base, ignore_errors=True)
