"""Is llama-server meant to speculate? ``on``, ``off`` or ``unknown``: its command line first, ``/slots`` second.

The command line decides when it names speculation (``--spec-type``, a draft model, ``--spec-default``).
Otherwise the last valid ``/slots`` answer of the current server process does: it is remembered through
failed reads (a server's speculation settings do not change while it runs) and forgotten on a restart.
Without either, the state is ``unknown``, and is exported as such, never as ``off``.
"""

from __future__ import annotations

from dataclasses import dataclass

from specops.exporter.process import LaunchSettings
from specops.exporter.slots import SlotsSummary

ON, OFF, UNKNOWN = "on", "off", "unknown"


@dataclass(frozen=True)
class Speculation:
    state: str = UNKNOWN  # on | off | unknown
    spec_type: str = UNKNOWN  # e.g. "draft-simple", "none"

    @property
    def known(self) -> bool:
        return self.state != UNKNOWN


def from_launch(launch: LaunchSettings) -> str | None:
    if launch.spec_type or launch.draft_model or launch.spec_default:
        return ON if launch.speculation_expected else OFF
    return None  # the command line does not say (environment variables, presets, defaults)


def from_slots(slots: SlotsSummary) -> str | None:
    if slots.spec_types:
        return OFF if slots.spec_types == "none" else ON
    if slots.speculative:
        return ON
    return OFF if slots.spec_reported else None


class SpeculationTracker:
    def __init__(self) -> None:
        self._slots: SlotsSummary | None = None

    def update(self, launch: LaunchSettings, slots: SlotsSummary | None, restarted: bool) -> Speculation:
        """``slots``: this pass's valid answer or None; ``restarted``: the server restarted in this pass."""
        if restarted:
            self._slots = None
        if slots is not None:
            self._slots = slots
        state = from_launch(launch) or (from_slots(self._slots) if self._slots else None) or UNKNOWN
        return Speculation(state, self._spec_type(launch))

    def _spec_type(self, launch: LaunchSettings) -> str:
        if launch.spec_type:
            return launch.spec_type
        if self._slots is not None and self._slots.spec_types:
            return self._slots.spec_types
        return "draft-simple" if launch.draft_model else UNKNOWN
