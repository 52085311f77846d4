"""The training loop's own state (``Progress``): what a checkpoint restores besides the objects."""
from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class Progress:
    """The training loop's own state: what a checkpoint restores besides the objects."""

    summary: dict
    next_eval: int
    next_checkpoint: int | None
    seconds_before: float = 0.0  # wall-clock spent by earlier sessions of a resumed run
    phase_seconds: dict[str, float] = field(default_factory=dict)  # of that, each phase's (collect, train, eval)

    @classmethod
    def start(cls, *, env_id: str, solved_return: float | None, eval_every_frames: int,
              checkpoint_every_frames: int | None) -> "Progress":
        """A run's progress before its first batch."""
        return cls(summary={"frames": 0, "seconds": 0.0, "env_id": env_id, "solved_return": solved_return,
                            "frames_to_solve": None,
                            "seconds_to_solve": None, "final_eval_return": None, "best_eval_return": None},
                   next_eval=eval_every_frames, next_checkpoint=checkpoint_every_frames)

    def checkpoint_every(self, frames: int, every_frames: int | None) -> None:
        """A resumed run at ``frames`` checkpointing every ``every_frames`` frames now (None:
        not by frames): its next frame checkpoint is the one its checkpoint scheduled, or
        the new cadence's, whichever comes first (a resume may change the cadence)."""
        if every_frames is None:
            self.next_checkpoint = None
        elif self.next_checkpoint is None or frames + every_frames < self.next_checkpoint:
            self.next_checkpoint = frames + every_frames

    def state_dict(self) -> dict:
        return {"summary": json.dumps(self.summary), "next_eval": self.next_eval,
                "next_checkpoint": -1 if self.next_checkpoint is None else self.next_checkpoint,
                "seconds_before": self.seconds_before, "phase_seconds": dict(self.phase_seconds)}

    @classmethod
    def from_state_dict(cls, state: dict) -> "Progress":
        """The progress a checkpoint saved, for the run to go on from: without the error that
        ended its earlier part (a run that failed after this checkpoint was written, and is
        resumed, is not failed; its summary.json says so again if it fails again)."""
        next_checkpoint = int(state["next_checkpoint"])
        summary = json.loads(state["summary"])
        summary.pop("error", None)
        return cls(summary, int(state["next_eval"]),
                   None if next_checkpoint < 0 else next_checkpoint, float(state["seconds_before"]),
                   {phase: float(seconds) for phase, seconds in state.get("phase_seconds", {}).items()})
