"""Shared pytest setup: fixtures live in their own modules and are registered here."""
