"""The fleet console (docs/console.md): `python -m automation console`."""
