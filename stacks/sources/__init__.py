"""Cluster sources: the cluster objects a hub already has (Cluster API, Hive) read as HubClusters. Pure.

A platform with a Cluster API `Cluster` or a Hive `ClusterDeployment` per cluster opts one in with annotations on
the object itself, as in the clustermesh seed; the service and the offline plan both call derive.derive(), which
says what HubCluster to keep for it, or why none (docs/sources.md). Each name is imported from the module that
defines it:

  kinds    the kinds read, recognised by apiVersion (never by kind alone); SourceRef, how a source object is named
  outcome  what derive() returns: Derived (the HubCluster document, its digest and merge patch), Refused, Pending
  optin    whether a source object is taken (its annotations, HubConfig spec.sources.namespaces), its mesh group
           and PrivateLink ask, and when a hand-written HubCluster wins over a source
  capi     a Cluster API Cluster with its CAPA AWSCluster or EKS AWSManagedControlPlane
  hive     a Hive ClusterDeployment
  derive   derive(): the one entry point
  hold     what our finalizer on a source not taken any more waits for (its own part, the admitted members of its
           mesh group as the mesh plan keys it) and when it stops waiting (HubConfig spec.sources.releaseAfter)
"""
