"""What `make demo` prints last: nothing that goes stale while the demo runs.

The banner said "two requests wait there" while seven waited: a count printed before the
worker starts is wrong a minute later. It names who decides what, and where, instead.
"""

from __future__ import annotations

import re
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "bin" / "demo"
NUMBER = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
COUNTED = re.compile(rf"\b{NUMBER}\s+(?:\w+\s+)?(?:requests?|runs?|mails?|items?)\s+wait", re.I)


def banner() -> str:
    text = DEMO.read_text(encoding="utf-8")
    return text[text.index("cat <<TXT") : text.index("\nTXT", text.index("cat <<TXT"))]


def test_the_banner_states_no_count_of_waiting_work() -> None:
    assert COUNTED.search("as approver: two requests wait there")  # what it used to say
    assert not COUNTED.search(banner())


def test_the_banner_names_each_approver_and_what_they_decide() -> None:
    text = banner()
    assert 'as "approver": account reviews' in text
    assert 'as "finance": amounts over a limit' in text
