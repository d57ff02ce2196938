"""fedretain: federated learning that does not forget.

An FL algorithm is a small bundle of pure functions (:class:`fedretain.core.Algorithm`);
engines run that bundle. See ``README.md`` for the command line and the layout.
"""

import os
from importlib.metadata import PackageNotFoundError, version

try:  # one version, pyproject.toml's, read from the installed package's metadata
    __version__ = version("fedretain")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
# a Ray study's tasks run the code its caller shipped them, whose version is the caller's
# (studies/reproduce/nodes.py), not that of a fedretain installed on the node
__version__ = os.environ.get("FEDRETAIN_SHIPPED_VERSION") or __version__
