"""The clusters' controller: one HubCluster key in, an Outcome out (`Reconciler.reconcile(key)`).

    reconciler.py  the entry (reconcile, triage), the up path, recovering a killed run, and `fail`: where an
                   error reaches a Cluster (the rule itself: automation/service/outcomes.py)
    delete.py      what happens on delete: the finalizer, the destroy, the agent's revocation, the orphan check
    drift.py       when a stack is checked for drift next, and the check
    status.py      what the Cluster's status says in each case (no I/O)
    context.py     the options, the guards' type, and the reconciler as delete.py and drift.py see it
    client.py      ClusterClient: everything it does to the API server, over the controller kit's object port
Engine runs go through automation/service/runs.py.
"""
from automation.service.clusters.client import ClusterClient, ProgressReport, cluster_writer
from automation.service.clusters.context import Audit, Guard, ReconcileOptions
from automation.service.clusters.reconciler import Reconciler
from automation.service.runs import Metrics

__all__ = ["Audit", "ClusterClient", "Guard", "Metrics", "ProgressReport", "ReconcileOptions", "Reconciler",
           "cluster_writer"]
