"""Studies: many runs planned, run and reported together. The papers' presets (presets/) and
``fedretain reproduce`` (reproduce/), ``fedretain sweep`` (sweep.py), tuning on a validation
split (tuning.py), the privacy study (privacy.py) and ``fedretain compare`` (compare.py). Each
run is :func:`fedretain.experiments.run.run_experiment`'s; a study only plans, gathers and
reports."""
