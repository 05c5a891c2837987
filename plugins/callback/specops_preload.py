"""Load the filter and test plugins once, in ansible-playbook's own process, before any task runs.

Ansible forks a worker per task and host, and each worker looks its filters up by short name, which loads every
legacy filter file it has not loaded yet: with nothing loaded in the parent, every task of a deploy re-executed
plugins/filter/*.py and the specops modules they import. Loaded here, before the first fork, the workers inherit
them (the plugin loader finds them in sys.modules). Prints nothing, changes no result. Measured on the 2-core lab
machine (a no-change deploy.yml of the SmolLM2 profile, three runs each, alternating): controller CPU 13.1-14.1 s
-> 10.5-11.6 s, wall 16.8-18.1 s -> 15.1-17.6 s."""

from __future__ import annotations

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader

DOCUMENTATION = """
name: specops_preload
type: aggregate
short_description: load the filter and test plugins before the first task forks a worker
description:
  - Loads every filter and test plugin in ansible-playbook's process, so that the forked workers inherit them
    instead of loading them again for every task. No output.
requirements:
  - enabled in ansible.cfg (callbacks_enabled)
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "specops_preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook) -> None:  # type: ignore[no-untyped-def]
        for loader in (filter_loader, test_loader):
            for _plugin in loader.all():
                pass
