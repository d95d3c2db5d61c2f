"""Benchmarks: each prints numbers (JSON); none is a timed test."""
