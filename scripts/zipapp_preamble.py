"""The zipapp's preamble (scripts/zipapp.sh passes it to shiv --preamble): our code and our pinned packages, never
the user's, whatever their environment holds.

shiv's bootstrap runs this after it has extracted the zipapp's site-packages (into $SHIV_ROOT, default ~/.shiv) and
added it to sys.path, and before the entry point (automation.cli:main). shiv puts that folder just before the first
site-packages on sys.path, which leaves PYTHONPATH's folders ahead of it: a user's own top-level package named
`stacks` or `automation` (or their own `pydantic`) there would be imported instead of ours. So sys.path becomes ours
first, then the standard library, and nothing else: no PYTHONPATH, no user site, no site-packages of the interpreter
or of a venv it runs in. A module of one of our top-level names that was imported before this ran (a user's
sitecustomize can import anything) is dropped from sys.modules, so the next import reads ours.

Nothing is written anywhere but $SHIV_ROOT: the user's environment is read by nothing and changed by nothing.
shiv gives this script the globals `site_packages` (the extracted folder), `archive` and `env`.
"""
import os
import sys
import sysconfig
from pathlib import Path

OURS = Path(site_packages).resolve()  # type: ignore[name-defined]  # noqa: F821 (given by shiv's bootstrap)


def _inside(path: str, folder: Path) -> bool:
    try:
        Path(path).resolve().relative_to(folder)
    except (OSError, ValueError):
        return False
    return True


def _standard_library(path: str) -> bool:
    """The interpreter's own modules: the stdlib folders (lib-dynload is inside) and its zip, no site folder."""
    parts = Path(path).parts
    if "site-packages" in parts or "dist-packages" in parts:
        return False
    if Path(path).name == f"python{sys.version_info[0]}{sys.version_info[1]}.zip":
        return True
    roots = {Path(sysconfig.get_path(name)).resolve() for name in ("stdlib", "platstdlib")}
    return any(_inside(path, root) for root in roots)


ours = [p for p in sys.path if _inside(p, OURS)]  # the folder and what its .pth files added
sys.path[:] = ours + [p for p in sys.path if p not in ours and _standard_library(p)]

names = {entry.name.split(".")[0] for entry in OURS.iterdir()
         if entry.suffix in ("", ".py", ".so") and entry.name.split(".")[0].isidentifier()
         and not entry.name.startswith("__")}  # __main__.py (the Pulumi program) is not the running __main__
for name, module in list(sys.modules.items()):
    where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", None) or ()), None)
    if name.partition(".")[0] in names and where is not None and not _inside(os.fspath(where), OURS):
        del sys.modules[name]
