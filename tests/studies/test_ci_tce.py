"""`fedretain reproduce` at scale=ci: TCE's presets."""

from __future__ import annotations

import pytest

from tests.studies.presets_at_ci import check_at_ci, ci, presets_of

__all__ = ["ci"]  # the module's fixture


@pytest.mark.parametrize("name", presets_of("TCE"))
def test_every_tce_preset_runs_at_ci_and_reports_every_claim(ci, name):
    text = check_at_ci(ci, name)
    assert "### α=0.1" in text  # every column at the paper's α, its learning rates a sweep
