import numpy as np
import pytest

from fedretain.engines.schedule import Participation, sample_clients


def test_uniform_is_the_seeded_s_of_n_draw():
    p = Participation("uniform", 50, 7, seed=3)
    for rnd in range(5):
        assert np.array_equal(p.clients(rnd), sample_clients(50, 7, 3, rnd))


def test_bernoulli_availability_follows_each_clients_probability():
    p = Participation("bernoulli", 200, 10, seed=1, p_min=0.02, p_max=0.5)
    assert p.probs.min() >= 0.02 and p.probs.max() <= 0.5
    counts = np.zeros(200)
    sizes = []
    for rnd in range(400):
        c = p.clients(rnd)
        assert np.all(np.diff(c) > 0)
        counts[c] += 1
        sizes.append(len(c))
    assert len(set(sizes)) > 5  # the number of participants varies
    rate = counts / 400
    assert np.corrcoef(rate, p.probs)[0, 1] > 0.9
    # a rarely reachable client is absent for stretches of rounds
    rare = int(np.argmin(p.probs))
    seen = [rnd for rnd in range(400) if rare in p.clients(rnd)]
    assert max(np.diff([0, *seen, 400])) >= 20
    again = Participation("bernoulli", 200, 10, seed=1, p_min=0.02, p_max=0.5)
    assert np.array_equal(again.clients(17), p.clients(17))


def test_bad_probabilities_are_refused():
    with pytest.raises(ValueError, match="p_min"):
        Participation("bernoulli", 10, 1, 0, p_min=0.6, p_max=0.5)


def test_bernoulli_run_records_participants(tmp_path):
    from fedretain.experiments.run import run_experiment
    from fedretain.files import read_jsonl
    from fedretain.recipe.config import make_config

    cfg = make_config(
        {
            "dataset": "digits",
            "model": "mlp",
            "model.hidden": [16],
            "clients": 20,
            "rounds": 6,
            "batch_size": 20,
            "participation": "bernoulli",
            "participation.p_min": 0.05,
            "participation.p_max": 0.3,
            "algorithm": "mifa",
        }
    )
    summary = run_experiment(cfg, tmp_path, progress=False)
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert len({r["participants"] for r in rows[1:]}) > 1
    assert summary["server_state_bytes"]["G"] > 0
