"""``import bitnet``: the public API of bitnet-core under the short name."""

from bitnet_core import *  # noqa: F403
from bitnet_core import __all__, __version__  # noqa: F401
