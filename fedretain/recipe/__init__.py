"""The recipe: a configuration (:mod:`.config`) and the federation built from it
(:mod:`.federation`): data, partition, task, algorithm, participation, local plan, device.
No engine is built here; the run (:mod:`fedretain.experiments`) and Flower sit on top."""

from fedretain.recipe.config import Config, load_config, make_config, resolved
from fedretain.recipe.federation import Federation, build_federation

__all__ = ["Config", "Federation", "build_federation", "load_config", "make_config", "resolved"]
