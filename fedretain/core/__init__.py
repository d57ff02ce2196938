"""The core every algorithm is built from: the algorithm bundle and its round context
(algorithm.py), local training with penalty and correction hooks (local.py), functional
optimisers (optim.py), the model with its loss through ``functional_call`` (task.py), trees of
tensors (tree.py) and diagonal Fisher information (fisher.py)."""
