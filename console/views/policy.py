"""Policy pages for ops leads: versions, the editor, the diff, simulation, activation.

A version is activated from the console only after a fresh simulation of it, through a
confirmation page that shows what it would change (automation.recovery.activation).
"""

from __future__ import annotations

import difflib
import functools
import re
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import yaml
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from automation.models import Simulation, State
from automation.recovery.activation import (
    SIMULATION_FRESH_FOR,
    activation_simulation,
    policy_activate_after_simulation,
)
from automation.recovery.simulation import SIMULATE, simulation_start
from console.forms.ops import SimulationForm
from console.forms.policy import PolicyForm, Problem, parse_yaml, place_in_words
from console.refusals import show_refusal
from console.vocabulary import Kind, humanize, label_in, term
from core.errors import ServiceError
from core.http import AuthenticatedHttpRequest
from core.inputs import parse_number
from core.limits import stated
from policy.models import PolicyVersion
from policy.schemas import VERSION_NAME_MAX_LENGTH, PolicyDocument, version_name_problem
from policy.services import (
    MAX_POLICY_CHARS,
    PolicyError,
    PolicyNameTaken,
    policy_version_create,
)
from reports.selectors import policy_impacts

VIEW = "policy.view_policyversion"
ACTIVATE = "policy.activate_policyversion"
NAME_TAKEN = (
    "another version already has this name: versions never change, so give this one a new name"
)


def refused_at(exc: PolicyError) -> tuple[str, ...]:
    """The place in the document a refusal names, as a key path (() for the whole)."""
    return tuple(exc.where.split(".")) if exc.where else ()


def as_yaml(policy: PolicyVersion | None, **changes: str) -> str:
    """The document in the schema's order (the database keeps no key order)."""
    if policy is None:
        return ""
    data = {**policy.parsed.model_dump(mode="json"), **changes}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def next_name(name: str) -> str:
    """policy-1 -> policy-2 (or the next free one); always a usable name, even after one that
    was stored before names were checked."""
    match = re.match(r"^(.*?)(\d+)$", name)
    stem, number = (match.group(1), int(match.group(2))) if match else (f"{name}-", 1)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).lstrip("._-")[: VERSION_NAME_MAX_LENGTH - 12]
    stem = stem or "policy-"
    number = min(number, 10**10)  # a suggestion, not arithmetic on whatever digits were there
    taken = set(PolicyVersion.objects.values_list("name", flat=True))
    candidate = f"{stem}{number + 1}"
    while candidate in taken:
        number += 1
        candidate = f"{stem}{number + 1}"
    return candidate


def policy_url(name: str) -> str | None:
    """The console address of a version; None for a name stored before names were checked
    that no address can carry (`a/b`, `..`): such a version is listed, never linked."""
    if version_name_problem(name) is not None:
        return None
    return reverse("policy:detail", kwargs={"name": name})


def _active() -> PolicyVersion | None:
    return PolicyVersion.objects.filter(is_active=True).first()


# --- what a simulation's changes mean, in words ----------------------------------------------


@dataclass(frozen=True)
class VerdictWords:
    """A decision (policy.evaluation.Verdict) in the vocabulary's words."""

    kind: Kind  # the vocabulary entry that names what the decision does to a run
    code: str
    does: str  # what a version that decides so does to a run
    now: str  # what such runs would do


VERDICTS = {
    "execute": VerdictWords(
        Kind.STATE, State.COMPLETED, "sends straight through", "go straight through"
    ),
    "approve": VerdictWords(
        Kind.STATE, State.APPROVAL_REQUIRED, "sends for approval", "wait for approval"
    ),
    "block": VerdictWords(Kind.STATE, State.BLOCKED, "stops", "be stopped by policy"),
    "low_confidence": VerdictWords(
        Kind.OUTCOME,
        "low_confidence",
        "sends to a person as an unsure reading",
        "go to a person as an unsure reading",
    ),
    "unsupported": VerdictWords(
        Kind.OUTCOME,
        "unsupported_request",
        "refuses as not allowed",
        "be refused as not allowed",
    ),
    "risk_signal": VerdictWords(
        Kind.OUTCOME,
        "risk_signal",
        "holds for a person to read first",
        "be held for a person to read first (a risk signal)",
    ),
}


@dataclass(frozen=True)
class Said:
    """A code as people read it: the label, its explanation, the code as secondary text."""

    label: str
    explanation: str
    code: str


def verdict_said(code: str) -> Said:
    words = VERDICTS.get(code)
    if words is None:
        return Said(humanize(code), "", code)
    entry = term(words.kind, words.code)
    return Said(entry.label, entry.explanation, code)


@dataclass(frozen=True)
class Move:
    """How many runs of a simulation the baseline decides one way and the simulated version
    another."""

    old: Said
    new: Said
    runs: int
    baseline: str  # who decides them now, as a sentence's subject

    @property
    def sentence(self) -> str:
        runs = f"{self.runs} run{'' if self.runs == 1 else 's'}"
        was, now = VERDICTS.get(self.old.code), VERDICTS.get(self.new.code)
        if was is None or now is None:
            return f"{runs}: {self.old.label} would now be {self.new.label}."
        did = f"{self.baseline} {was.does}"
        if self.old.code == self.new.code:
            return f"{runs} that {did} would still {now.now}, with another effect."
        return f"{runs} that {did} would now {now.now}."


def baseline_of(simulation: Simulation) -> str:
    """What a simulation's changes are measured against, as a sentence's subject."""
    if simulation.baseline_version:
        return f"the active version {simulation.baseline_version}"
    return "the version that first decided them"


def moves_of(simulation: Simulation) -> list[Move]:
    """The simulation's changes counted by (baseline decides, would be), the largest first."""
    counted = Counter((change["old"], change["new"]) for change in simulation.changes)
    baseline = baseline_of(simulation)
    return [
        Move(verdict_said(old), verdict_said(new), runs, baseline)
        for (old, new), runs in sorted(counted.items(), key=lambda item: (-item[1], item[0]))
    ]


# --- what a version says, in words ----------------------------------------------------------


# What a signal's hit does to a run (policy.schemas.SignalAction).
ACTIONS = [
    ("hold", "held for a person"),
    ("approval", "waits for an approver"),
    ("block", "stopped"),
]


def hours(value: int) -> str:
    return f"{value} hour{'' if value == 1 else 's'}"


def policy_in_words(document: PolicyDocument) -> list[tuple[str, list[str]]]:
    """The parts of a document an ops lead changes most, as sentences (the YAML has the rest)."""
    # Its request types, routes, effects and tiers in its own catalogue's words.
    said = functools.partial(label_in, document.business)
    approvals = [
        f"{said(Kind.EFFECT, effect)}: {rule.approvers} of {rule.group} approve; expires after "
        f"{hours(rule.expires_after_hours)}"
        + (
            f", goes to {rule.escalate_to} after {hours(rule.escalate_after_hours)}"
            if rule.escalate_to
            else ""
        )
        for effect, rule in document.approvals.items()
    ]
    confidence = [f"Every category: at least {document.confidence.default:g} sure"] + [
        f"{said(Kind.CATEGORY, category)}: at least {share:g} sure"
        for category, share in document.confidence.per_category.items()
    ]
    unit = f" {document.money.base_currency}" if document.money else ""
    limits = [
        f"{said(Kind.TIER, tier)}: approval above "
        f"{f'{limit.approval_above}{unit}' if limit.approval_above is not None else 'no limit'}, "
        f"stopped above "
        f"{f'{limit.block_above}{unit}' if limit.block_above is not None else 'no limit'}"
        + (
            f", for {', '.join(said(Kind.EFFECT, e) for e in limit.effects)} only"
            if limit.effects is not None
            else ""
        )
        for tier, limit in document.amount_limits.items()
    ]
    signals = [
        f"{humanize(name)}: {dict(ACTIONS)[signal.action.value]}, "
        f"{sum(len(found) for found in signal.phrases.values())} phrases"
        for name, signal in document.signals.items()
    ]
    return [
        (
            "Routes",
            [
                f"{said(Kind.CATEGORY, c)} goes to {said(Kind.ROUTE, r)}"
                for c, r in document.routes.items()
            ],
        ),
        ("Allowed effects", [said(Kind.EFFECT, effect) for effect in document.allowed_effects]),
        ("Approvals", approvals or ["No effect needs an approval"]),
        ("Confidence thresholds", confidence),
        ("Money", money_in_words(document)),
        ("Amount limits", limits or ["No amount limits"]),
        ("Risk signals", signals or ["No risk signals"]),
    ]


def money_in_words(document: PolicyDocument) -> list[str]:
    money = document.money
    if money is None:
        return ["No base currency: amounts are compared as numbers, whatever their currency"]
    return [
        f"Base currency {money.base_currency}; rates as of {money.rates_as_of.isoformat()}",
        *(
            f"1 {currency} = {rate} {money.base_currency}"
            for currency, rate in sorted(money.rates.items())
        ),
        "An amount in any other currency, or in none, waits for a person",
    ]


# --- the pages -------------------------------------------------------------------------------


@require_GET
@login_required
@permission_required(VIEW, raise_exception=True)
def policy_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    versions = PolicyVersion.objects.select_related("author", "parent")[:100]
    context = {
        "versions": [(version, policy_url(version.name)) for version in versions],
        "impacts": policy_impacts(now=timezone.now()),
    }
    return render(request, "policy/list.html", context)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("policy.add_policyversion", raise_exception=True)
def policy_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The form for the common changes, and the whole document as YAML for the rest."""
    source = request.POST.get("base") or request.GET.get("from")
    base = get_object_or_404(PolicyVersion, name=source) if source else _active()
    if request.method == "POST" and "document" in request.POST:
        return _save_yaml(request, base)
    form = _policy_form(base, request.POST if request.method == "POST" else None)
    if form is not None and form.is_bound and form.is_valid():
        document = form.document()
        saved = _save(request, form, document) if document is not None else None
        if saved is not None:
            return saved
    return _editor(request, base, form, text=_suggested_yaml(base), problems=[])


def _policy_form(base: PolicyVersion | None, data: QueryDict | None) -> PolicyForm | None:
    """The form on `base` (bound to `data` when given); None when there is no version to
    start from: only the YAML can make the first one."""
    if base is None:
        return None
    return PolicyForm(data, base=base, initial={"version": next_name(base.name)})


def _suggested_yaml(base: PolicyVersion | None) -> str:
    return as_yaml(base, version=next_name(base.name), note="") if base else ""


def _save(
    request: AuthenticatedHttpRequest, form: PolicyForm, document: PolicyDocument
) -> HttpResponse | None:
    try:
        version, _ = policy_version_create(document=document, author=request.user)
    except PolicyNameTaken:
        form.add_problem(("version",), NAME_TAKEN)
        return None
    except PolicyError as exc:  # the schema passed it: what storing it found (a group)
        form.add_problem(refused_at(exc), exc.problem)
        return None
    messages.success(request, f"Saved {version.name} as a draft.")
    return redirect("policy:detail", name=version.name)


def _save_yaml(request: AuthenticatedHttpRequest, base: PolicyVersion | None) -> HttpResponse:
    text = request.POST.get("document", "")
    document, problems = parse_yaml(text)
    if document is not None:
        try:
            version, _ = policy_version_create(document=document, author=request.user)
        except PolicyNameTaken:
            problems = [Problem("Version", "version", NAME_TAKEN)]
        except PolicyError as exc:  # the schema passed it: what storing it found (a group)
            where = refused_at(exc)
            problems = [Problem(place_in_words(where), exc.where, exc.problem)]
        else:
            messages.success(request, f"Saved {version.name} as a draft.")
            return redirect("policy:detail", name=version.name)
    return _editor(request, base, _policy_form(base, None), text=text, problems=problems)


def _editor(
    request: AuthenticatedHttpRequest,
    base: PolicyVersion | None,
    form: PolicyForm | None,
    *,
    text: str,
    problems: list[Problem],
) -> HttpResponse:
    refused = bool(problems) or (form is not None and form.is_bound and bool(form.errors))
    context: dict[str, Any] = {
        "base": base,
        "active": _active(),
        "form": form,
        "text": text,
        "problems": problems,
        "document_limit": MAX_POLICY_CHARS,
        "document_limit_said": stated(MAX_POLICY_CHARS),
    }
    return render(request, "policy/edit.html", context, status=400 if refused else 200)


def _detail_context(version: PolicyVersion, simulation_form: SimulationForm) -> dict[str, Any]:
    active = _active()
    diff = list(
        difflib.unified_diff(
            as_yaml(active).splitlines(),
            as_yaml(version).splitlines(),
            fromfile=active.name if active else "(none)",
            tofile=version.name,
            lineterm="",
        )
    )
    now = timezone.now()
    fresh, not_fresh = activation_simulation(name=version.name)
    return {
        "version": version,
        "active": active,
        "text": as_yaml(version),
        "said": policy_in_words(version.parsed),
        "diff": diff,
        "simulations": Simulation.objects.filter(policy_version=version.name).order_by(
            "-created_at"
        )[:5],
        "simulation_form": simulation_form,
        "since": now - timedelta(days=30),
        "until": now + timedelta(minutes=1),
        "fresh": fresh,
        "fresh_moves": moves_of(fresh) if fresh else [],
        "not_fresh": not_fresh,
        "fresh_hours": int(SIMULATION_FRESH_FOR.total_seconds() // 3600),
    }


@require_GET
@login_required
@permission_required(VIEW, raise_exception=True)
def policy_detail(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    version = get_object_or_404(PolicyVersion.objects.select_related("author", "parent"), name=name)
    return render(request, "policy/detail.html", _detail_context(version, SimulationForm()))


@require_POST
@login_required
@permission_required(SIMULATE, raise_exception=True)
def policy_simulate(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    version = get_object_or_404(PolicyVersion.objects.select_related("author", "parent"), name=name)
    form = SimulationForm(request.POST)
    if not form.is_valid():  # the page again, the window's problems shown at the form
        context = _detail_context(version, form)
        return render(request, "policy/detail.html", context, status=400)
    since = form.cleaned_data["since"] or timezone.now() - timedelta(days=30)
    until = form.cleaned_data["until"] or timezone.now()
    simulation = simulation_start(version=version.name, since=since, until=until, user=request.user)
    return redirect("policy:simulation", simulation_id=simulation.pk)


@require_http_methods(["GET", "POST"])
@login_required
# Checked before the version is looked up (the service checks again): someone who may not
# activate learns nothing about which version names exist.
@permission_required(ACTIVATE, raise_exception=True)
def policy_activate(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """GET: what activating would change, and the confirmation. POST: activate, when the
    simulation confirmed is still fresh (the service checks it again under its lock)."""
    version = get_object_or_404(PolicyVersion, name=name)
    if request.method == "GET":
        return _confirmation(request, version)
    simulation_id = parse_number(request.POST.get("simulation"))
    try:
        policy_version = policy_activate_after_simulation(
            name=name, user=request.user, simulation_id=simulation_id
        )
    except ServiceError as exc:
        show_refusal(request, exc, prefix="Not activated. ")
        return redirect("policy:detail", name=name)
    messages.success(
        request,
        f"{policy_version.name} is now the active policy. Runs decided from now on use it.",
    )
    return redirect("policy:detail", name=name)


def _confirmation(request: AuthenticatedHttpRequest, version: PolicyVersion) -> HttpResponse:
    fresh, not_fresh = activation_simulation(name=version.name)
    context = {
        "version": version,
        "active": _active(),
        "simulation": fresh,
        "moves": moves_of(fresh) if fresh else [],
        "not_fresh": not_fresh,
        "fresh_hours": int(SIMULATION_FRESH_FOR.total_seconds() // 3600),
    }
    return render(request, "policy/activate.html", context)


@require_GET
@login_required
@permission_required(VIEW, raise_exception=True)
def simulation(request: AuthenticatedHttpRequest, simulation_id: int) -> HttpResponse:
    item = get_object_or_404(Simulation, pk=simulation_id)
    changes = [
        {
            **change,
            "old_said": verdict_said(change["old"]),
            "new_said": verdict_said(change["new"]),
            # Kept since the baseline is the active version; before, old was the first.
            "first_said": verdict_said(change.get("first", change["old"])),
        }
        for change in item.changes[:200]
    ]
    context = {
        "simulation": item,
        "policy_url": policy_url(item.policy_version),
        "baseline": baseline_of(item),
        "moves": moves_of(item),
        "changes": changes,
    }
    return render(request, "policy/simulation.html", context)
