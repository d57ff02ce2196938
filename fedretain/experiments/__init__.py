"""Running experiments and reporting them: one run and its results folder (run.py) with its
observers (observers.py, diagnostics, tracking, the continual recorder, its terminal progress in
progress.py), checkpoints,
``fedretain compare`` (report.py, plots.py), privacy studies (privacy.py) and the papers'
presets with ``fedretain reproduce`` (presets/, reproduce/, tuning.py)."""
