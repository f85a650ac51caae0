"""The commands of ``python -m verified_queue``, one module each.

Each command module exposes ``add_arguments(parser)`` and ``run(args) -> int``;
``verified_queue/__main__.py`` parses the command line and imports only the module
of the command it runs. Nothing here is imported by the queue, check mode or the
block-pool client.
"""
