"""Subcommands of ``specops``; one module per command (see :mod:`specops.cli`)."""
