"""Runners: `python -m automation runner`, a pool of pods that execute the HubStackRuns the service creates with
`--executor runners` (docs/service.md, "Runners"; the rules they follow are stacks/runs/)."""
