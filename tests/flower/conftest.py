"""The Flower tests run with one torch thread (``threads=1``); the rest of the suite gets back
the count it had."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _restore_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
