"""Pulumi ComponentResources: pure functions from typed args and explicit providers to AWS resources."""
