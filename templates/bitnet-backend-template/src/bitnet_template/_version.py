"""The version of bitnet-template, in step with every distribution (tools/set_version.py).

tools/new-backend writes the current bitnet-core version here.
"""

__version__ = "0.1.0"
