"""`fedretain reproduce` at scale=ci: GradMA's presets, and a folder that refuses other settings."""

from __future__ import annotations

import pytest

from fedretain.errors import ConfigError
from fedretain.studies.reproduce import reproduce
from tests.studies.presets_at_ci import check_at_ci, ci, presets_of

__all__ = ["ci"]  # the module's fixture


@pytest.mark.parametrize("name", presets_of("GradMA"))
def test_every_gradma_preset_runs_at_ci_and_reports_every_claim(ci, name):
    check_at_ci(ci, name)


def test_other_settings_in_the_same_folder_are_refused(ci):
    out = ci("gradma-table2")
    with pytest.raises(ConfigError, match=r"holds a run with other settings \(lr\)"):
        reproduce(["gradma-table2"], out, scale="ci", extra=["lr=0.2"], echo=lambda s: None)
