"""``python -m fedretain``: the command line (:mod:`fedretain.cli`)."""

import sys

from fedretain.cli import main

sys.exit(main())
