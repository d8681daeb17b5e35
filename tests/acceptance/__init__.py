"""Acceptance tests: real engine, real processes, no mocks."""
