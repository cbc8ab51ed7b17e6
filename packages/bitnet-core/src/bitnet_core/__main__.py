"""``python -m bitnet_core``: the ``bitnet`` command, where its script is not on PATH
(a package installed with ``pip --target``, an interpreter without its ``bin``)."""

import sys

from bitnet_core.cli.main import main

sys.exit(main())
