"""One run and its results folder: the loop (run.py), the folder's contract (outputs.py), the
run's observers (observers.py, diagnostics, generator quality, tracking, the continual
recorder, terminal progress in progress.py), checkpoints and resuming (checkpoint.py) and the
curves' plots. The studies that run many of these (presets, ``fedretain reproduce``, sweeps,
tuning, the privacy study, ``fedretain compare``) are :mod:`fedretain.studies`."""
