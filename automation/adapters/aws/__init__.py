"""AWS: boto3 sessions per account and region (sessions), the audit trail of every pivot (audit), the direct
lookups the service makes (lookups), and the checks before a stack runs built on them (preflight, mesh_cidrs,
mesh_quotas)."""
