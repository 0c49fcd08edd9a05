"""What a person may do to a run now: read from the run's state machine, never listed by hand.

Every action that moves a run is a django-fsm transition whose `custom["action"]` names it
(automation.models.Run). An action is offered when django-fsm says the transition is
available now (its source state and conditions) and the person has its permission; the pages
show exactly these, and the console refuses any other before a service is called. Taking a
queue item (claim, release) changes who works a run, not its state: it is offered by the
run's queue and owner.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User

from automation.runs.models import Run

# Actions shown with a preview of what they would do first (automation.recovery.preview).
PREVIEWED = frozenset({"replay", "retry", "retry_effect", "reconsider"})
# Actions that record what a person did outside Gatehouse, so they ask for evidence.
NEEDS_EVIDENCE = frozenset({"resolve", "abandon"})
# The order buttons appear in: the usual next step first, giving up last.
ORDER = (
    "correct",
    "correct_rejected",
    "retry",
    "retry_effect",
    "resume",
    "reconsider",
    "replay",
    "resolve",
    "abandon",
)


@dataclass(frozen=True)
class RunAction:
    name: str  # the console address's last part (recover/<name>), and RecoveryKind's value
    label: str
    help: str
    transition: str
    danger: bool = False

    @property
    def previewed(self) -> bool:
        return self.name in PREVIEWED

    @property
    def needs_evidence(self) -> bool:
        return self.name in NEEDS_EVIDENCE


def run_actions(run: Run, user: User) -> list[RunAction]:
    """The transitions this person may start on this run now, as actions, in ORDER."""
    found = {}
    for t in run.get_available_user_state_transitions(user):  # type: ignore[attr-defined]
        name = t.custom.get("action")
        if name:
            found[name] = RunAction(
                name=name,
                label=t.custom.get("label", name),
                help=t.custom.get("help_text", ""),
                transition=t.name,
                danger=bool(t.custom.get("danger")),
            )
    return [found[name] for name in ORDER if name in found]


def run_action(run: Run, user: User, name: str) -> RunAction | None:
    """The action of that name if it is offered now, else None."""
    return next((a for a in run_actions(run, user) if a.name == name), None)


@dataclass(frozen=True)
class QueueAction:
    name: str
    label: str
    help: str


CLAIM = QueueAction("claim", "Claim", "Take this run: others see that you work on it.")
RELEASE = QueueAction("release", "Release", "Put the run back in its queue for anyone to take.")
ASSIGN = QueueAction("assign", "Assign", "Give the run to someone to work on.")


def queue_actions(run: Run, user: User) -> list[QueueAction]:
    """Claim, release and assign, for a run in an exception queue and a person who works it."""
    if not run.queue or not user.has_perm("automation.work_queue"):
        return []
    # Someone else's item is not claimed over their head: it is released or assigned.
    offered = [CLAIM] if run.owner_id is None else [RELEASE]
    offered.append(ASSIGN)
    return offered


def queue_action(run: Run, user: User, name: str) -> QueueAction | None:
    return next((a for a in queue_actions(run, user) if a.name == name), None)
