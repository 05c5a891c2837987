"""Lab equipment for the tests and the demo, kept out of the ``specops`` wheel that deploys install on hosts.

:mod:`specops_lab.labhost` makes throwaway systemd hosts (``scripts/labhost``, ``scripts/demo``,
``tests/labhost_fixture.py``). Importable with ``lab/`` on the path: ``scripts/labhost`` sets ``PYTHONPATH``,
pytest adds it (``pythonpath`` in pyproject.toml). Standard library only, like everything here.
"""
