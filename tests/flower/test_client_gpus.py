"""``engine.client_gpus``: Flower's simulation engine gives each ClientApp a share of a GPU.

Checked without a GPU and without starting Ray: the options' validation, Ray's backend
configuration, the refusal before Ray starts where the machine has no (or too few) GPUs, and
where the clients train (CUDA with ``client_gpus > 0``, while the server half stays on the
run's device). The default, 0, leaves everything as it was.
"""

from types import SimpleNamespace

import pytest

pytest.importorskip("flwr", reason="needs Flower (flwr is not installed)")
import tomli_w
import torch

from fedretain.errors import ConfigError
from fedretain.flower import client
from fedretain.flower.options import check_gpus, client_device
from fedretain.flower.simulation import FlowerSimulation
from fedretain.recipe.config import component_params, resolved
from tests.flower.helpers import build, config, inline_federation

# the backend configuration before engine.client_gpus existed, byte for byte
OLD_BACKEND = {
    "init_args": {
        "num_cpus": 3,
        "address": "local",
        "logging_level": "ERROR",
        "log_to_driver": False,
    },
    "client_resources": {"num_cpus": 1.0, "num_gpus": 0.0},
}


@pytest.fixture
def gpus(monkeypatch):
    """A machine whose torch sees ``n`` CUDA GPUs (``gpus(n)``)."""

    def see(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)

    return see


def test_the_default_changes_nothing():
    cfg = config(engine="flower")
    assert component_params(cfg, "engine")["client_gpus"] == 0.0
    assert client_device(cfg) == "cpu"
    assert FlowerSimulation(4, total_cpus=3).backend_config() == OLD_BACKEND


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"engine__client_gpus": -0.5},
            r"engine\.client_gpus must be >= 0 \(0: clients on the CPU\)",
        ),
        ({"engine__client_gpus": 1.5}, r"engine\.client_gpus above 1 must be a whole number"),
        ({"device": "cuda"}, r"unless the clients train on GPUs too \(engine\.client_gpus=1"),
    ],
)
def test_bad_values_are_one_line_errors_at_validation(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        config(engine="flower", **overrides)
    assert "\n" not in str(err.value)


def test_clients_on_gpus_train_on_cuda_and_the_server_stays_on_the_runs_device():
    """Validation does not look for GPUs (a config may be checked anywhere); the clients'
    device is CUDA whatever the run's, which may be ``cuda`` too."""
    cfg = config(engine="flower", engine__client_gpus=0.5)
    assert cfg.device == "cpu" and client_device(cfg) == "cuda"
    on_gpu = config(engine="flower", engine__client_gpus=2, device="cuda")
    assert component_params(on_gpu, "engine")["client_gpus"] == 2.0
    assert client_device(on_gpu) == "cuda"
    assert client_device(config(engine="sequential")) == "cpu"


def test_the_clientapp_builds_its_federation_on_cuda(monkeypatch):
    built = []
    monkeypatch.setattr(client, "_FEDERATIONS", {})
    monkeypatch.setattr(
        "fedretain.recipe.federation.build_federation",
        lambda cfg, data_dir=None: built.append(cfg) or SimpleNamespace(),
    )
    context = SimpleNamespace(node_config={})
    for gpus in (0.0, 0.5):
        text = tomli_w.dumps(resolved(config(engine="flower", engine__client_gpus=gpus)))
        client.federation_of(text, context)
    assert [c.device for c in built] == ["cpu", "cuda"]


def test_ray_gets_the_gpus_and_each_client_its_share(gpus):
    gpus(2)
    sim = FlowerSimulation(4, total_cpus=3, client_gpus=0.5)
    backend = sim.backend_config()
    assert backend["client_resources"] == {"num_cpus": 1.0, "num_gpus": 0.5}
    assert backend["init_args"] == {**OLD_BACKEND["init_args"], "num_gpus": 2}


def test_gpus_the_machine_lacks_are_refused_before_ray_starts(gpus):
    gpus(0)
    with pytest.raises(
        ConfigError, match=r"torch finds no CUDA GPU; set engine\.client_gpus=0"
    ) as e:
        build(config(engine="flower", engine__client_gpus=0.5))
    assert "\n" not in str(e.value)
    assert FlowerSimulation._running is None  # Ray never started
    with pytest.raises(ConfigError, match="no CUDA GPU"):
        FlowerSimulation(4, client_gpus=1)
    gpus(1)
    with pytest.raises(ConfigError, match=r"more GPUs per client than torch finds \(1\)"):
        check_gpus(2)
    check_gpus(1)
    check_gpus(0.25)


def test_a_given_federation_needs_no_local_gpus(gpus):
    """On SuperNodes (here an in-process Grid) Ray plays no part: the engine is built without
    looking for GPUs, and carries the share for a simulation it would start."""
    gpus(0)
    federation, _ = inline_federation(4)
    _, rounds = build(config(engine="flower", engine__client_gpus=0.5), federation)
    assert rounds.engine.client_gpus == 0.5 and rounds.engine.simulation is None
