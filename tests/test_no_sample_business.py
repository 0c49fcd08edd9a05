"""No product module names the reference business: its request types, routes and effects are
catalogue data (policy/defaults/catalogues/reference-1.yaml), read like any company's.

A name counts when code holds it as a whole string (`"billing"`, `'create_follow_up'`, in a
template too) or reaches for the old enums of those names. Words in prose ("a security
team") are not names. The tests, the shipped catalogue and policy files, the migrations
(history as it was written) and the demo's invented history are not product code.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import yaml

from tests.packages import product_sources

REPO = Path(__file__).resolve().parents[1]
# A string that is a reference name for another reason, and why.
NOT_THE_BUSINESS = {
    ("automation/openapi.py", "security"): "OpenAPI's own key for how a call authenticates",
    ("console/admin/intake.py", "security"): "the Mailbox field: how IMAP is secured",
}
OLD_ENUMS = {"RequestType", "Route", "EffectName"}


@cache
def reference_names() -> frozenset[str]:
    path = REPO / "policy" / "defaults" / "catalogues" / "reference-1.yaml"
    catalogue = yaml.safe_load(path.read_text(encoding="utf-8"))
    return frozenset({*catalogue["request_types"], *catalogue["routes"], *catalogue["effects"]})


def product_files(suffix: str) -> list[Path]:
    return list(product_sources(suffix))


def named_in_python(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = str(path.relative_to(REPO))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in reference_names() and (where, node.value) not in NOT_THE_BUSINESS:
                found.append(f"{where}:{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Name | ast.alias):
            name = node.id if isinstance(node, ast.Name) else node.name
            if name in OLD_ENUMS:
                found.append(f"{where}:{node.lineno}: {name}")
    return found


def named_in_text(path: Path) -> list[str]:
    quoted = re.compile(
        r"""["'](%s)["']""" % "|".join(map(re.escape, sorted(reference_names())))  # noqa: UP031
    )
    where = str(path.relative_to(REPO))
    return [
        f"{where}:{number}: {match.group(1)!r}"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for match in quoted.finditer(line)
    ]


def test_the_checks_find_a_name_where_there_is_one(tmp_path: Path) -> None:
    probe = REPO / "automation" / "_probe_for_the_check.py"
    probe.write_text('ROUTE = "finance"\nfrom automation.schemas import EffectName\n')
    template = REPO / "console" / "templates" / "_probe_for_the_check.html"
    template.write_text("{% if run.category == 'billing' %}x{% endif %}\n")
    try:
        assert len(named_in_python(probe)) == 2
        assert len(named_in_text(template)) == 1
    finally:
        probe.unlink()
        template.unlink()


def test_no_product_module_names_a_type_route_or_effect_of_the_reference_business() -> None:
    found = [hit for path in product_files(".py") for hit in named_in_python(path)]
    found += [
        hit
        for suffix in (".html", ".txt", ".js")
        for path in product_files(suffix)
        for hit in named_in_text(path)
    ]
    assert found == []
