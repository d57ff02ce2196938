"""A Flower simulation whose Ray backend cannot start fails in one line naming Ray's reason,
at once, instead of waiting out the reply deadline for SuperNodes that will never answer."""

import pytest

pytest.importorskip("flwr", reason="needs Flower (flwr is not installed)")

from fedretain.errors import FedRetainError
from fedretain.flower.federation import connected
from fedretain.flower.simulation import FlowerSimulation
from tests.flower.helpers import build, config


class RayThatCannotStart(FlowerSimulation):
    """ray.init refuses an unknown option before it starts a process: the runtime stops as it
    does when Ray's node times out during start-up on an overloaded machine."""

    def backend_config(self) -> dict:
        cfg = super().backend_config()
        cfg["init_args"]["no_such_option"] = 1
        return cfg


def test_a_simulation_whose_ray_cannot_start_is_one_error_naming_the_cause():
    sim = RayThatCannotStart(4, client_cpus=1)
    try:
        with pytest.raises(
            FedRetainError,
            match=r"simulation engine (stopped|did not start): .*no_such_option",
        ):
            federation = sim.start()  # the Grid may come up before Ray fails
            with connected(federation):
                build(config(engine="flower", engine__reply_timeout=600.0))
    finally:
        sim.close()
    assert FlowerSimulation._running is None
