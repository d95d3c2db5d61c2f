"""Test doubles behind the same interfaces as the real things, for tests/ and bench/ (never production code:
pyproject.toml's [tool.importlinter] forbids it).

- doubles.engine.RecordingEngine: the Engine protocol in memory (automation.adapters.engine).
- doubles.kube.MockKubeAPI, CuttableProxy: a Kubernetes API over real HTTP, and a proxy a test can cut.
- doubles.envtest: the real thing, not a double: etcd + kube-apiserver (+ kube-controller-manager) on loopback,
  the harness tests/ (its fixtures: tests/envtest.py) and bench/ share; doubles.agent_orphans: the scenario
  of an agent whose Cluster went while no service ran.
- Harnesses tests/ and bench/ both use (bench/ never imports tests/: the "bench-doubles-not-tests" contract in
  pyproject.toml): doubles.factories (model documents and fleets), doubles.service_env (a Service on kmock's
  emulator or a shared envtest), doubles.stall_proxy (a TCP proxy that stalls), doubles.failover (the stalled-leader
  scenario), doubles.pulumi_programs (dynamic-resource stack programs for the real pulumi CLI), doubles.plans (what
  tests ask of an offline plan beyond what production reads: the destroy order), doubles.providers (the live
  programs' dynamic providers).

This file imports nothing: a dynamic provider process imports the package before doubles.providers, once per run.
"""
