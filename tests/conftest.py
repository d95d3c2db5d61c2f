"""Shared pytest setup: fixtures live in their own modules and are registered here."""

pytest_plugins = ["tests.moto_server"]
