"""The runs a cluster starts by itself for a schedule (Argo's CronWorkflow, KFP's recurring run), written
into the schedule's history: one slot per logical time, running while the run goes on, then how it
ended. The scheduler never launches nor reads these slots (their origin says who fired them); only
the mirror that follows the cluster writes them."""

from __future__ import annotations

from collections.abc import Iterable

from cube_jupyter.schedules.store import ScheduleStore, Slot


class FiredRuns:
    """Each fired run is its logical time's slot (the run's name as its `run_id`); a logical time the
    workbench already has a slot for (a catch-up, a backfill) keeps it: one slot per logical time."""

    def __init__(self, store: ScheduleStore) -> None:
        self.store = store
        self._states: dict[str, str] = {}  # by the run's unique key: the state last written

    def unsettled(self, key: str) -> bool:
        """Whether a run may still change its slot (not seen ended yet)."""
        return self._states.get(key) in (None, "running")

    def record(self, fired: Iterable[tuple[str, Slot]]) -> int:
        """Write (key, slot) pairs, the slot as the run is now; the number of slots written."""
        written = 0
        for key, slot in fired:
            if self.store.get(slot.owner, slot.schedule) is None:
                continue
            stored = self.store.slot(slot.owner, slot.schedule, slot.logical)
            if stored is None:
                if self.store.add_slots([slot]):
                    self.store.settle(slot, run_id=slot.run_id)
                    written += 1
            elif (stored.origin, stored.run_id) == (slot.origin, slot.run_id) and stored.state != slot.state:
                self.store.settle(stored, state=slot.state, reason=slot.reason, finished=slot.finished)
                written += 1
            self._states[key] = slot.state
        return written
