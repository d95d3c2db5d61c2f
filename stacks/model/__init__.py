"""The Kubernetes-style resources hubwright reads: HubConfig and Cluster.

Field names (camelCase aliases) are the API contract; Python attributes are snake_case. Every check that needs only
one object lives in this package; checks that need several objects (role map, inventory, mesh) live in
`stacks.resolve`. Each name is imported from the module that defines it (this file re-exports nothing):

  fields    the field types (account IDs, regions, CIDR blocks, ARNs, host:port, ...) and Spec, the base of every
            spec part; REGION_PATTERN, region_error, partition_of
  resource  ObjectMeta, Resource (the base of HubConfig and Cluster), and the core/v1 Namespace
  hub       HubConfig and its spec: credentials, endpoint VPCs, mesh groups and quotas, shared ingress, tenancy,
            registry limits
  cluster   Cluster (kind HubCluster) and its spec: the AWS part (AwsPart), network, PrivateLink, shared ingress
  loading   parse() (one document, errors naming object, field and reason) and resolved_part()
"""
