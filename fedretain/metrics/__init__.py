"""What a run is measured by: accuracy and rounds to a target, R_a (accuracy.py), forgetting
(forgetting.py), the continual measures of an accuracy matrix (continual.py) and the seeds'
spread behind every verdict (spread.py)."""
