"""The product's packages, as one place names them: import-linter's `root_packages` in
pyproject.toml. Every test that walks the product's source takes its list from here, so a new
package is checked by all of them the day it is added to the contracts, and a package listed
there whose folder is gone fails here rather than being walked as an empty folder.

`devtools` is listed in the contracts (so that nothing in the product may import it) but is
not the product: the demo and the generators live there, and they name the sample business.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Listed in the contracts, walked by no product rule, and why.
NOT_THE_PRODUCT = {"devtools": "the demo and the generators of development data"}


def root_packages(pyproject: Path = REPO / "pyproject.toml") -> tuple[str, ...]:
    """Every package import-linter's contracts cover; each must be a folder with a package."""
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    names = tuple(config["tool"]["importlinter"]["root_packages"])
    missing = [name for name in names if not (pyproject.parent / name / "__init__.py").is_file()]
    if missing:
        raise AssertionError(f"root_packages lists packages with no folder: {', '.join(missing)}")
    return names


@cache
def product_packages() -> tuple[str, ...]:
    return tuple(name for name in root_packages() if name not in NOT_THE_PRODUCT)


def automation_concerns() -> tuple[str, ...]:
    """automation's concerns: each sub-package with models, services or selectors."""
    return tuple(
        sorted(
            path.parent.name
            for path in (REPO / "automation").glob("*/__init__.py")
            if path.parent.name not in {"migrations", "management", "prompts"}
        )
    )


def product_sources(suffix: str = ".py") -> Iterator[Path]:
    """Every product file with the suffix, migrations left out (they are history)."""
    for package in product_packages():
        for path in sorted((REPO / package).rglob(f"*{suffix}")):
            if "migrations" not in path.parts:
                yield path
