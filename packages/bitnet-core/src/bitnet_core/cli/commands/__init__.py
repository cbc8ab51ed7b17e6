"""One module per ``bitnet`` subcommand; each defines ``register(subparsers)``."""
