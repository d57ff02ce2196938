"""fedretain: federated learning that does not forget.

An FL algorithm is a small bundle of pure functions (:class:`fedretain.core.Algorithm`);
engines run that bundle. See ``README.md`` for the command line and the layout.
"""

__version__ = "0.1.0"
