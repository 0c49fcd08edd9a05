"""The policy console in a real browser: edit a version, read its diff, simulate, activate.

The run the simulation judges again goes through the real pipeline first (a recorded
classifier decision). The simulation the page starts runs inline in the live server (see
tasks_run_inline in conftest.py), so it has finished by the time its page is answered.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from audit.models import AuditEvent
from automation.models import Run, State
from policy.models import PolicyVersion
from policy.services import DEFAULTS_DIR, parse_policy_text, policy_version_create
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.browser.test_ops_browser import forged_post, message
from tests.conftest import Pipeline, decision_for, make_event

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import Page, expect

# Not asserted: pictures of the pages for a person to look at after a run.
DIFF_PNG = "/tmp/policy_diff.png"  # noqa: S108
SIM_PNG = "/tmp/policy_sim.png"  # noqa: S108


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def ops_lead(make_person: Callable[..., Person]) -> Person:
    return make_person("olga", "ops-leads")


@pytest.fixture
def auditor(make_person: Callable[..., Person]) -> Person:
    return make_person("aud", "auditors")


@pytest.fixture
def draft(pipeline: Pipeline) -> PolicyVersion:
    """policy-1 with a confidence threshold of 0.8, saved as the draft policy-2."""
    text = (DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8")
    text = with_confidence_default(text.replace("version: policy-1", "version: policy-2"), "0.8")
    return policy_version_create(document=parse_policy_text(text))[0]


@pytest.fixture
def completed_run(pipeline: Pipeline) -> Run:
    """A support request read with confidence 0.6: policy-1 (no threshold) executes it."""
    event = make_event(event_id="evt-conf-1")
    outcome = decision_for(event)
    outcome["value"]["confidence"] = 0.6
    run = pipeline.run(pipeline.submit(event, [outcome]))
    assert (run.state, run.policy_version) == (State.COMPLETED, "policy-1")
    return run


# --- helpers -------------------------------------------------------------------------------


def with_confidence_default(text: str, value: str) -> str:
    """`text` with the `default:` line of its `confidence:` block (and only that one) set."""
    lines = text.split("\n")
    start = lines.index("confidence:")
    for n in range(start + 1, len(lines)):
        line = lines[n]
        if not line.startswith(" "):  # the block ended without a default
            break
        if re.fullmatch(r"  default: \S+", line):
            lines[n] = f"  default: {value}"
            return "\n".join(lines)
    raise AssertionError(f"no default under confidence: in\n{text}")


def open_new_version(page: Page, person: Person) -> None:
    """Log in, go to Policy through the navigation, and open the editor."""
    log_in(page, person)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Policy").click()
    expect(page).to_have_url(re.compile(r"/policy/$"))
    page.get_by_role("link", name="New version").click()
    expect(page).to_have_url(re.compile(r"/policy/new$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("New policy version")


def set_confidence_default(page: Page, value: str) -> None:
    editor = page.get_by_label("Policy (YAML)")
    expect(editor).to_have_value(re.compile(r"^version: policy-2$", re.MULTILINE))
    text = editor.input_value()
    assert "\n  default: 0.0\n" in text  # policy-1's: no threshold
    editor.fill(with_confidence_default(text, value))


# --- tests ---------------------------------------------------------------------------------


def test_ops_lead_edits_the_threshold_sees_diff_and_simulation_and_activates(
    page: Page, ops_lead: Person, completed_run: Run
) -> None:
    run = completed_run
    open_new_version(page, ops_lead)
    set_confidence_default(page, "0.8")
    page.get_by_role("button", name="Validate and save as draft").click()

    expect(page).to_have_url(re.compile(r"/policy/policy-2/$"))
    expect(message(page)).to_have_text("Saved policy-2 as a draft.")
    expect(page.get_by_role("heading", level=1)).to_have_text("policy-2 Draft")
    diff = page.get_by_test_id("diff")
    expect(diff.locator("span.del")).to_contain_text(["-  default: 0.0"])
    expect(diff.locator("span.add")).to_contain_text(["+  default: 0.8"])
    # Only the confidence default changed: no other `default:` line is touched.
    expect(diff.locator("span.del", has_text="default:")).to_have_count(1)
    expect(diff.locator("span.add", has_text="default:")).to_have_count(1)
    page.screenshot(path=DIFF_PNG, full_page=True)
    draft = PolicyVersion.objects.get(name="policy-2")
    assert not draft.is_active
    assert draft.document["confidence"] == {"default": 0.8, "per_category": {}}
    assert (draft.author, draft.parent.name if draft.parent else None) == (
        ops_lead.user,
        "policy-1",
    )

    page.get_by_role("button", name="Simulate").click()

    expect(page).to_have_url(re.compile(r"/policy/simulations/\d+/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Simulation of policy-2")
    expect(page.get_by_test_id("simulation-status")).to_contain_text("Finished", timeout=15_000)
    expect(page.get_by_test_id("simulation-progress")).to_contain_text("1 / 1")
    expect(page.get_by_test_id("simulation-summary")).to_have_text(
        "1 decision would change from the active version policy-1:"
    )
    expect(page.get_by_test_id("impact-sentences")).to_have_text(
        "1 run that the active version policy-1 sends straight through would now go to a "
        "person as an unsure reading."
    )
    changes = page.get_by_test_id("simulation-changes").locator("tbody tr")
    expect(changes).to_have_count(1)
    expect(changes.locator("td")).to_have_text(
        [
            f"#{run.pk} · {run.event_id}",
            "Done under policy-1",
            "Done",
            "Unsure reading",
            re.compile(r"^Confidence now stops it: .+"),
        ]
    )
    expect(changes.locator("td").nth(4).locator("small.code")).to_have_text(["confidence.support"])
    page.screenshot(path=SIM_PNG, full_page=True)

    page.get_by_role("link", name="← policy-2").click()

    expect(page).to_have_url(re.compile(r"/policy/policy-2/$"))
    expect(page.get_by_test_id("simulations").get_by_role("listitem")).to_contain_text(
        ["1 of 1 run judged, 1 would be decided differently from policy-1 · Finished"]
    )
    page.get_by_role("link", name="Activate policy-2").click()

    expect(page).to_have_url(re.compile(r"/policy/policy-2/activate$"))
    page.get_by_role("button", name="Confirm: activate policy-2").click()

    expect(page).to_have_url(re.compile(r"/policy/policy-2/$"))
    expect(message(page)).to_have_text(
        "policy-2 is now the active policy. Runs decided from now on use it."
    )
    expect(page.get_by_role("heading", level=1).locator(".badge")).to_have_text("Active")
    expect(page.get_by_role("link", name="Activate policy-2")).to_have_count(0)

    assert list(PolicyVersion.objects.filter(is_active=True).values_list("name", flat=True)) == [
        "policy-2"
    ]
    activated = AuditEvent.objects.get(action="policy.activated", data__version="policy-2")
    assert activated.actor == ops_lead.user
    assert activated.data == {"version": "policy-2", "previous": "policy-1"}
    again = Run.objects.get(pk=run.pk)
    assert (again.state, again.policy_version, again.version) == (
        State.COMPLETED,
        "policy-1",
        run.version,
    )


def test_an_invalid_document_shows_the_field(
    page: Page, ops_lead: Person, pipeline: Pipeline
) -> None:
    open_new_version(page, ops_lead)
    set_confidence_default(page, "1.5")
    with page.expect_response(
        lambda r: r.request.method == "POST" and r.url.endswith("/policy/new")
    ) as posted:
        page.get_by_role("button", name="Validate and save as draft").click()

    assert posted.value.status == 400
    expect(page).to_have_url(re.compile(r"/policy/new$"))
    error = page.get_by_test_id("policy-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("Not saved.")
    expect(error).to_contain_text("confidence.default")
    # What was entered is kept, so only the wrong value needs fixing.
    expect(page.get_by_label("Policy (YAML)")).to_have_value(
        re.compile(r"^  default: 1\.5$", re.MULTILINE)
    )
    assert not PolicyVersion.objects.filter(name="policy-2").exists()
    assert PolicyVersion.objects.get(is_active=True).name == "policy-1"


def test_an_auditor_cannot_edit_or_activate(
    page: Page, auditor: Person, draft: PolicyVersion
) -> None:
    log_in(page, auditor)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Policy").click()

    expect(page).to_have_url(re.compile(r"/policy/$"))
    versions = page.get_by_test_id("versions").locator("tbody tr")
    expect(versions).to_have_count(PolicyVersion.objects.count())
    expect(versions.locator("td:nth-child(1), td:nth-child(2)")).to_have_text(
        # Newest first: the draft, the shipped safe default (not active), the reference.
        ["policy-2", "Draft", "default-1", "Draft", "policy-1", "Active"]
    )
    expect(page.get_by_role("link", name="New version")).to_have_count(0)

    versions.get_by_role("link", name="policy-2").click()
    expect(page).to_have_url(re.compile(r"/policy/policy-2/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("policy-2 Draft")
    expect(page.get_by_test_id("diff")).to_contain_text("+  default: 0.8")  # they may read it
    expect(page.get_by_role("button", name=re.compile(r"^Activate"))).to_have_count(0)
    expect(page.get_by_role("link", name=re.compile(r"^Activate"))).to_have_count(0)

    response = page.goto("/policy/new")
    assert response is not None and response.status == 403
    for name in ("policy-1", "policy-2"):
        forged = forged_post(page, f"/policy/{name}/activate", {})
        assert forged.status == 403, name
        assert "CSRF" not in forged.text()  # refused for the permission, not the token

    assert PolicyVersion.objects.get(is_active=True).name == "policy-1"
    assert not AuditEvent.objects.filter(action="policy.activated", actor=auditor.user).exists()


# --- the form ----------------------------------------------------------------------------


def test_ops_lead_changes_a_threshold_with_the_form_simulates_confirms_and_activates(
    page: Page, ops_lead: Person, completed_run: Run
) -> None:
    open_new_version(page, ops_lead)
    common = page.get_by_role("region", name="Common changes")
    expect(common.get_by_label("Version name")).to_have_value("policy-2")
    threshold = common.get_by_label("Every category", exact=True)
    expect(threshold).to_have_value("0.0")
    expect(common.get_by_text("0.8 means 80% sure")).to_be_visible()  # help in plain words
    threshold.fill("0.8")
    common.get_by_label("What changes and why").fill("Unsure readings go to a person.")
    screenshot(page, "policy-editor")
    common.get_by_role("button", name="Save these changes as a draft").click()

    expect(page).to_have_url(re.compile(r"/policy/policy-2/$"))
    expect(message(page)).to_have_text("Saved policy-2 as a draft.")
    expect(page.get_by_test_id("diff").locator("span.add")).to_contain_text(["+  default: 0.8"])
    expect(page.get_by_test_id("in-words")).to_contain_text("Every category: at least 0.8 sure")
    # Not before a simulation: the page says why, and offers no way to activate.
    expect(page.get_by_test_id("activation-needs")).to_have_text(
        "Not yet: activation needs a finished simulation of this version: simulate it first."
    )
    expect(page.get_by_role("link", name="Activate policy-2")).to_have_count(0)
    expect(page.get_by_role("button", name=re.compile("Activate"))).to_have_count(0)

    page.get_by_role("button", name="Simulate").click()

    expect(page).to_have_url(re.compile(r"/policy/simulations/\d+/$"))
    expect(page.get_by_test_id("simulation-status")).to_contain_text("Finished")
    impact = (
        "1 run that the active version policy-1 sends straight through would now go to a person "
        "as an unsure reading."
    )
    expect(page.get_by_test_id("impact-sentences")).to_have_text(impact)
    moves = page.get_by_test_id("moves").locator("tbody tr td")
    expect(moves).to_have_text(["Done", "Unsure reading", "1"])
    page.get_by_role("link", name="← policy-2").click()

    activation = page.get_by_test_id("activation")
    expect(activation).to_contain_text(impact)
    # Below what it is based on: the difference and the simulations.
    diff_box = page.get_by_test_id("diff").bounding_box()
    activation_box = activation.bounding_box()
    assert diff_box is not None and activation_box is not None
    assert activation_box["y"] > diff_box["y"]
    activation.get_by_role("link", name="Activate policy-2").click()

    expect(page).to_have_url(re.compile(r"/policy/policy-2/activate$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Activate policy-2?")
    expect(page.get_by_test_id("impact")).to_contain_text(impact)
    expect(page.get_by_test_id("impact")).to_contain_text("1 run judged again")
    expect(page.get_by_test_id("moves").locator("tbody tr td")).to_have_text(
        ["Done", "Unsure reading", "1"]
    )
    assert PolicyVersion.objects.get(is_active=True).name == "policy-1"  # not before confirming
    screenshot(page, "policy-activate")
    page.get_by_role("button", name="Confirm: activate policy-2").click()

    expect(page).to_have_url(re.compile(r"/policy/policy-2/$"))
    expect(message(page)).to_have_text(
        "policy-2 is now the active policy. Runs decided from now on use it."
    )
    expect(page.get_by_role("heading", level=1).locator(".badge")).to_have_text("Active")
    version = PolicyVersion.objects.get(is_active=True)
    assert (version.name, version.author, version.note) == (
        "policy-2",
        ops_lead.user,
        "Unsure readings go to a person.",
    )
    base = PolicyVersion.objects.get(name="policy-1").document
    assert version.document == {
        **base,
        "version": "policy-2",
        "note": "Unsure readings go to a person.",
        "confidence": {"default": 0.8, "per_category": {}},
    }

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Policy").click()
    expect(page.get_by_test_id("impact").get_by_test_id("impact-none").first).to_contain_text(
        "No runs decided under this version yet"
    )


def test_a_wrong_value_in_the_form_is_explained_next_to_it(
    page: Page, ops_lead: Person, pipeline: Pipeline
) -> None:
    open_new_version(page, ops_lead)
    common = page.get_by_role("region", name="Common changes")
    common.get_by_label("Every category", exact=True).fill("1.5")
    common.get_by_role("button", name="Save these changes as a draft").click()

    expect(page).to_have_url(re.compile(r"/policy/new$"))
    expect(page.get_by_test_id("form-problems")).to_contain_text("Not saved.")
    field = common.locator(".field", has=page.get_by_label("Every category", exact=True))
    expect(field.get_by_test_id("field-error")).to_have_text("Must be at most 1.0.")
    expect(common.get_by_label("Every category", exact=True)).to_have_value("1.5")
    expect(page.locator("main")).not_to_contain_text("Value error")
    expect(page.locator("main")).not_to_contain_text("Input should")
    assert not PolicyVersion.objects.filter(name="policy-2").exists()
