"""fedretain: federated learning that does not forget.

An FL algorithm is a small bundle of pure functions (:class:`fedretain.core.Algorithm`);
engines run that bundle. See ``README.md`` for the command line and the layout.
"""

from importlib.metadata import PackageNotFoundError, version

try:  # one version, pyproject.toml's, read from the installed package's metadata
    __version__ = version("fedretain")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
