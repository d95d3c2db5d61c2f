"""The Pulumi engine: what the reconciler asks of Pulumi (the Engine protocol, re-exported here), the service's
implementation (pool: worker processes running pulumi_engine), and the offline plan under Pulumi's mock runtime
(plan, plan_pool, standins, policy).

record is loaded on first use: it imports Pulumi (about 35 MB and 0.4 s), which a plan whose stacks all come from
its cache, and most of the service's modules, never need."""
import importlib
from typing import Any

from automation.adapters.engine.plan_model import StackPlan
from automation.adapters.engine.protocol import (Engine, EngineError, OnProgress, Operation, PolicyViolation,
                                                 RunCancelled, RunLimits, RunResult, StackLocked, Trace)


def __getattr__(name: str) -> Any:
    """`record`, from automation.adapters.engine.plan, loaded (with Pulumi) on first use."""
    if name == "record":
        return importlib.import_module("automation.adapters.engine.plan").record
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["Engine", "EngineError", "OnProgress", "Operation", "PolicyViolation", "RunCancelled", "RunLimits",
           "RunResult", "StackLocked", "StackPlan", "Trace", "record"]
