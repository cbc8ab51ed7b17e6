"""bitnet-template: a bitnet backend package (provider ``template``).

Installed next to bitnet-core, it registers ``TemplateProvider`` under the
``bitnet.providers`` entry point; ``bitnet devices`` lists it and
``--device template`` selects it.
"""

from ._version import __version__
from .provider import TemplateProvider

__all__ = ["TemplateProvider", "__version__"]
