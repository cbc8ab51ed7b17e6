"""The ``bitnet`` command line."""
