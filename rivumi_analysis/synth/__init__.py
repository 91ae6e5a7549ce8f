"""Test-data generation (writers, scenarios, crash cuts); imported only by tests and python -m."""
