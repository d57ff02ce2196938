"""Datasets and their split over clients: the in-memory ``Dataset`` (base.py), the dataset
registry (datasets.py), one loader per file format (idx, cifar, leaf, folders; digits and the
Synthetic(α, β) generator need no files) and the partitions (partition.py)."""
