"""Test-wide settings: property-based tests are derandomised in CI (the same examples every run)."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
