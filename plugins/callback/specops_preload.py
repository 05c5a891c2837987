"""Load once, in ansible-playbook's own process before any task runs, what every task's worker would otherwise load
again: the filter and test plugins, the specops modules the filters import on use, and the module payloads kept
from earlier deploys.

Ansible forks a worker per task and host, and each worker looks its filters up by short name, which loads every
legacy filter file it has not loaded yet: with nothing loaded in the parent, every task of a deploy re-executed
plugins/filter/*.py and the specops modules they import. Loaded here, before the first fork, the workers inherit
them (the plugin loader finds them in sys.modules). Measured on the 2-core lab machine (a no-change deploy.yml of
the SmolLM2 profile, three runs each, alternating): controller CPU 13.1-14.1 s -> 10.5-11.6 s, wall 16.8-18.1 s ->
15.1-17.6 s. The modules the filters import on use (the model catalog with httpx, the speed gate, the probe, the
upgrade guard, the tune's record) and the catalog itself: 26.2 and 27.0 -> 25.0 and 25.2 CPU-s on the demo host's
no-op deploy (two runs each, alternated).

The module payloads (:mod:`specops.payloads`): Ansible zips each module with the ``module_utils`` it imports once a
run, parsing them to find which; they are kept under ``$SPECOPS_CACHE/ansiballz`` (default ~/.cache/specops) for
ansible-core's own modules and put back into the next run's cache. Prints nothing, changes no result; a cache it
cannot read or write is only said at -vv."""

from __future__ import annotations

from pathlib import Path

import ansible
from ansible import constants as C
from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader
from ansible.release import __version__ as ansible_version

DOCUMENTATION = """
name: specops_preload
type: aggregate
short_description: load the plugins, the modules they use and the kept module payloads before the first task
description:
  - Loads every filter and test plugin and the specops modules the filters import on use in ansible-playbook's
    process, so that the forked workers inherit them instead of loading them again for every task.
  - Puts the module payloads (AnsiballZ zips) of ansible-core's own modules kept from earlier runs into this run's
    cache, and keeps this run's new ones, under $SPECOPS_CACHE/ansiballz (default ~/.cache/specops). No output.
requirements:
  - enabled in ansible.cfg (callbacks_enabled)
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "specops_preload"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._kept: Path | None = None
        self._root = Path(ansible.__file__).parent

    def v2_playbook_on_start(self, playbook) -> None:  # type: ignore[no-untyped-def]
        for loader in (filter_loader, test_loader):
            for _plugin in loader.all():
                pass
        from specops import fetch, probe, speedgate, upgradeguard  # noqa: F401  (imported for the workers)
        from specops.tune import record  # noqa: F401

        fetch.catalog()
        self._payloads("restore")

    def v2_playbook_on_stats(self, stats) -> None:  # type: ignore[no-untyped-def]
        self._payloads("keep")

    def _payloads(self, step: str) -> None:
        from specops import payloads
        from specops.paths import cache_dir

        try:
            if self._kept is None:
                self._kept = cache_dir() / "ansiballz" / payloads.key(self._root, ansible_version)
            run_cache = Path(C.DEFAULT_LOCAL_TMP) / payloads.CACHE_DIR
            if step == "restore":
                n = payloads.restore(self._kept, run_cache, self._root)
            else:
                n = payloads.keep(run_cache, self._kept, self._root)
        except OSError as exc:
            self._display.vv(f"specops_preload: the kept module payloads: {step} failed ({exc})")
            return
        self._display.vvv(f"specops_preload: the kept module payloads: {step}: {n} ({self._kept})")
