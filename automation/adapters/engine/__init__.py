"""The Pulumi engine: what the reconciler asks of Pulumi (the Engine protocol, re-exported here), the service's
implementation (pool: worker processes running pulumi_engine), and the offline plan under Pulumi's mock runtime
(plan, plan_pool, standins, policy)."""
from automation.adapters.engine.protocol import (Engine, EngineError, OnProgress, Operation, PolicyViolation,
                                                 RunCancelled, RunLimits, RunResult, StackLocked)
from automation.adapters.engine.plan import StackPlan, record

__all__ = ["Engine", "EngineError", "OnProgress", "Operation", "PolicyViolation", "RunCancelled", "RunLimits",
           "RunResult", "StackLocked", "StackPlan", "record"]
