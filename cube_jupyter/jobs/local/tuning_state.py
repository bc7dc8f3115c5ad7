"""A local tuning experiment's record, kept as every local job's is (`cube_jupyter.local.records`):
the driver process writes it while the experiment runs and `LocalTuner` reads it (and fails an
experiment whose driver died)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cube_jupyter.local import records

DRIVER = "driver.json"  # the driver's pid and create time (a recycled pid is not it), by LocalTuner
DRIVER_LOG = "experiment.log"
TRIALS_DIR = "trials"


@dataclass
class TrialRecord:
    """One trial as the driver saw it last."""

    number: int
    name: str
    parameters: dict[str, Any]
    state: str = "Pending"  # Pending | Running | Succeeded | Failed | Pruned
    metrics: dict[str, float] = field(default_factory=dict)
    objective: float | None = None
    intermediate: list[tuple[int, float]] = field(default_factory=list)
    started: float | None = None
    finished: float | None = None
    pid: int | None = None
    exit_code: int | None = None
    message: str | None = None

    @property
    def replica(self) -> str:
        """The trial's log stream: `trial-3`."""
        return f"trial-{self.number}"


@dataclass
class ExperimentState:
    user: str
    name: str
    created: float
    spec: dict[str, Any]
    phase: str = "Created"
    conditions: list[dict[str, Any]] = field(default_factory=list)
    message: str | None = None
    trials: list[TrialRecord] = field(default_factory=list)
    best_trial: str | None = None
    completed: float | None = None
    code_dir: str | None = None
    package_uri: str | None = None  # the shipped trial notebook
    package_target: str | None = None
    # The machine's queue (`local.admission`), as a training job's: what its parallel trials take at
    # once (GPUs, CPU slots); a waiting experiment has no driver and holds nothing, its place and
    # reason the last admission pass's; an admitted one holds `gpu_ids` until it finishes.
    gpus: int = 0
    slots: int = 0
    waiting: bool = False
    enqueued: float | None = None
    queue_position: int | None = None
    queue_reason: str | None = None
    gpu_ids: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def active(self) -> bool:
        """Admitted and unfinished: it holds its GPUs and CPU slots."""
        return not self.waiting and not self.finished

    def add_condition(self, kind: str, reason: str, message: str, now: float) -> None:
        """Katib-style: the new condition True, earlier ones of the other phases False."""
        for condition in self.conditions:
            if condition["type"] != kind and condition["type"] != "Created":
                condition["status"] = "False"
        self.conditions = [c for c in self.conditions if c["type"] != kind]
        self.conditions.append(
            {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": message,
                "last_transition_time": now,
            }
        )
        if kind != "Created":
            self.phase = kind
        self.message = message if kind == "Failed" else self.message

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> ExperimentState:
        raw = json.loads(text)
        trials = []
        for item in raw.pop("trials", []):
            item["intermediate"] = [(int(s), float(v)) for s, v in item.get("intermediate", [])]
            trials.append(TrialRecord(**item))
        return cls(**raw, trials=trials)


def read_state(directory: Path) -> ExperimentState | None:
    text = records.read_record(directory)
    return ExperimentState.from_json(text) if text is not None else None


def write_state(directory: Path, state: ExperimentState) -> bool:
    """False when the experiment was deleted meanwhile."""
    return records.write_record(directory, state.to_json())


def trial_log(directory: Path, trial: TrialRecord | int) -> Path:
    number = trial if isinstance(trial, int) else trial.number
    return directory / TRIALS_DIR / f"trial-{number}.log"
