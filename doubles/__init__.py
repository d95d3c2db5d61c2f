"""Test doubles behind the same interfaces as the real things, for tests/ and bench/ (never production code:
.importlinter forbids it).

- doubles.engine.RecordingEngine: the Engine protocol in memory (automation.adapters.engine).
- doubles.kube.MockKubeAPI, CuttableProxy: a Kubernetes API over real HTTP, and a proxy a test can cut.
"""
from doubles.engine import RecordingEngine, fake_outputs
from doubles.kube import CuttableProxy, MockKubeAPI

__all__ = ["CuttableProxy", "MockKubeAPI", "RecordingEngine", "fake_outputs"]
