"""The helper that finds codes shown as primary text (tests/visible_text.py)."""

from __future__ import annotations

from tests.visible_text import codes_shown, visible_text

PAGE = """<html><head><title>Queue</title><style>.needs_review { color: red }</style></head>
<body><h1 title="risk_signal">Needs a person</h1>
<p>Route <span class="term" title="The support team.">Service desk</span>
<small class="code">service_desk</small>, effect <code>create_follow_up</code>.</p>
<input value="low_confidence"><br>
<svg><g><title>Security review: 2</title><rect/></g></svg>
<script>const queue = "approval_required";</script>
<td data-testid="stage-decide">Decide</td></body></html>"""


def test_secondary_text_attributes_scripts_and_styles_are_not_visible() -> None:
    assert visible_text(PAGE) == (
        "Queue Needs a person Route Service desk , effect . Security review: 2 Decide"
    )
    codes = ["needs_review", "risk_signal", "service_desk", "create_follow_up",
             "low_confidence", "approval_required", "decide"]  # fmt: skip
    assert codes_shown(PAGE, codes) == []


def test_a_code_shown_as_primary_text_is_found_in_the_order_asked() -> None:
    html = "<td>service_desk</td><td><small>risk_signal</small></td><p>low_confidence_x</p>"
    assert codes_shown(html, ["risk_signal", "service_desk", "low_confidence"]) == [
        "risk_signal",
        "service_desk",
    ]


def test_text_after_a_stray_end_tag_or_a_nested_code_is_still_read() -> None:
    html = "</span><small class='code'><b>needs_review</b></small><p>needs_review</p>"
    assert visible_text(html) == "needs_review"
