"""Labelled sets uploaded in the console: a .zip holding labels.csv (the columns
`evaluate_classifier` reads) and the .eml files its rows name, stored as one set.

The upload is bounded before anything is expanded: its own size, the number of files in it,
each file's size as it is read (a declared size can lie, so every file is read with a
limit), and the bytes expanded in all (what stops a zip bomb). Paths are the set's own: a
name that is absolute or climbs out of the set (`..`) refuses the upload. Every problem is
named with its line in labels.csv and why; the set and all its examples are written in one
transaction, or nothing is.
"""

from __future__ import annotations

import csv
import hashlib
import io
import posixpath
import tempfile
import zipfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction

from audit.models import AuditAction
from automation.classifiers.models import LabelledExample, LabelledSet
from automation.runs.journal import record_audit
from core.codes import Refusal
from core.errors import ServiceError
from policy.services import policy_business

# Who uploads, removes and measures sets and trains on them: whoever may change a channel's
# readers (ops leads), since what is learned from a set is what a channel may come to read.
MANAGE_READING = "automation.change_intakechannel"

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
MAX_FILES = 2000
MAX_FILE_BYTES = 5 * 1024 * 1024
MAX_EXPANDED_BYTES = 100 * 1024 * 1024
# Problems named at once: a set wrong on every line says so in a readable list.
PROBLEMS_SHOWN = 20

LABELS = "labels.csv"
CUSTOMERS = "customers.csv"
COLUMNS = ("file", "category", "effect", "expected_intake")


class LabelledSetRefused(ServiceError):
    """An upload that cannot be stored: every problem found, each with where it is."""

    def __init__(self, problems: list[str], *, field: str = "upload") -> None:
        shown = problems[:PROBLEMS_SHOWN]
        if len(problems) > PROBLEMS_SHOWN:
            shown.append(f"and {len(problems) - PROBLEMS_SHOWN} more problems")
        super().__init__(Refusal.INVALID_LABELLED_SET, "; ".join(shown))
        self.problems = shown
        self.field = field  # what the person gave that is wrong: the name or the upload


@dataclass
class Upload:
    """What was stored, and the rows of types the active version has not (stored, but left
    out of training and counted)."""

    labelled_set: LabelledSet
    examples: int
    not_a_type: Counter[str] = field(default_factory=Counter)


def _may_manage(user: User) -> None:
    if not user.has_perm(MANAGE_READING):
        raise PermissionDenied("only whoever may change a channel's readers manages labelled sets")


class _Archive:
    """The zip's members by name, read with the bounds above."""

    def __init__(self, raw: bytes) -> None:
        if len(raw) > MAX_UPLOAD_BYTES:
            raise LabelledSetRefused(
                [f"the upload is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB"]
            )
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(raw))
            members = [info for info in self.zip.infolist() if not info.is_dir()]
        except (zipfile.BadZipFile, ValueError, OSError) as exc:
            raise LabelledSetRefused(["the upload is not a readable .zip file"]) from exc
        if len(members) > MAX_FILES:
            raise LabelledSetRefused([f"the zip holds more than {MAX_FILES} files"])
        outside = [info.filename for info in members if not _inside(info.filename)]
        if outside:
            raise LabelledSetRefused([f"{name}: a path outside the set" for name in outside])
        self.members = {info.filename: info for info in members}
        self.expanded = 0

    def read(self, name: str) -> bytes:
        info = self.members[name]
        if info.flag_bits & 0x1:
            raise LabelledSetRefused([f"{name} is encrypted"])
        try:
            with self.zip.open(info) as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
            raise LabelledSetRefused([f"{name} cannot be read from the zip"]) from exc
        if len(data) > MAX_FILE_BYTES:
            raise LabelledSetRefused(
                [f"{name} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB"]
            )
        self.expanded += len(data)
        if self.expanded > MAX_EXPANDED_BYTES:
            raise LabelledSetRefused(
                [f"the zip expands to more than {MAX_EXPANDED_BYTES // (1024 * 1024)} MB"]
            )
        return data

    def labels_name(self) -> str:
        found = [name for name in self.members if posixpath.basename(name) == LABELS]
        if len(found) != 1:
            raise LabelledSetRefused(
                [f"the zip must hold one {LABELS} ({len(found)} found)"]
                if found
                else [f"the zip holds no {LABELS}"]
            )
        return found[0]


def _inside(name: str) -> bool:
    """A relative path that stays within the set."""
    if not name or name.startswith(("/", "\\")) or "\\" in name or ":" in name:
        return False
    return ".." not in name.split("/")


@dataclass
class _Row:
    line: int
    file: str
    category: str
    effect: str
    expected_intake: str
    row: dict[str, str]


def _rows(text: str) -> tuple[list[_Row], list[str]]:
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        return [], [f"{LABELS}: missing columns {', '.join(missing)}"]
    rows: list[_Row] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for values in reader:
        line = reader.line_num
        row = {str(k): (v or "").strip() for k, v in values.items() if k is not None}
        name, intake = row["file"], row["expected_intake"]
        why = _row_problem(row, seen)
        if why:
            problems.append(f"line {line}: {why}")
            continue
        seen[name] = line
        rows.append(_Row(line, name, row["category"], row["effect"], intake, row))
        if len(rows) > MAX_FILES:
            return [], [f"{LABELS} has more than {MAX_FILES} rows"]
    if not rows and not problems:
        problems.append(f"{LABELS} has no rows")
    return rows, problems


def _row_problem(row: dict[str, str], seen: dict[str, int]) -> str:
    name = row["file"]
    if not name:
        return "names no file"
    if not _inside(name):
        return f"{name} is a path outside the set"
    if name in seen:
        return f"{name} is named twice (first on line {seen[name]})"
    if not row["expected_intake"]:
        return "says nothing in expected_intake (new, replay, invalid, ...)"
    if row["expected_intake"] == "new" and not row["category"]:
        return f"{name} is a new request without a category"
    return ""


def _text(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LabelledSetRefused([f"{name} is not UTF-8 text"]) from exc


def _read_set(archive: _Archive) -> tuple[list[_Row], dict[str, bytes], bytes]:
    """The rows, the message each names, and customers.csv (empty when there is none)."""
    labels = archive.labels_name()
    root = posixpath.dirname(labels)
    rows, problems = _rows(_text(archive.read(labels), labels))
    messages: dict[str, bytes] = {}
    for row in rows:
        member = posixpath.join(root, row.file) if root else row.file
        if member not in archive.members:
            problems.append(f"line {row.line}: {row.file} is not in the zip")
            continue
        try:
            messages[row.file] = archive.read(member)
        except LabelledSetRefused as refused:
            problems += [f"line {row.line}: {p}" for p in refused.problems]
    if problems:
        raise LabelledSetRefused(problems)
    customers = posixpath.join(root, CUSTOMERS) if root else CUSTOMERS
    return rows, messages, archive.read(customers) if customers in archive.members else b""


def labelled_set_upload(*, name: str, filename: str, raw: bytes, user: User) -> Upload:
    """Store the upload's bytes as a set, then read every row with its message: all the
    examples and the set's status in one transaction. An upload that cannot be read is kept
    as refused, with each problem, and no example; LabelledSetRefused says why."""
    _may_manage(user)
    name = name.strip()
    if not name or len(name) > 100:
        raise LabelledSetRefused(["give the set a name of at most 100 characters"], field="name")
    stored = _received(name, filename, raw, user)
    try:
        rows, messages, customers = _read_set(_Archive(raw))
    except LabelledSetRefused as refused:
        _refuse(stored.pk, refused, user)
        raise
    types = set(policy_business(name=None).request_types)
    new = [r for r in rows if r.expected_intake == "new"]
    not_a_type = Counter(r.category for r in new if r.category not in types)
    with transaction.atomic(durable=True):
        stored = LabelledSet.objects.select_for_update().get(pk=stored.pk)
        LabelledExample.objects.bulk_create(
            LabelledExample(
                labelled_set=stored,
                line=r.line,
                file=r.file,
                category=r.category,
                effect=r.effect,
                expected_intake=r.expected_intake,
                row=r.row,
                message=messages[r.file],
            )
            for r in rows
        )
        stored.read(
            customers=customers,
            left_out=dict(Counter(r.expected_intake for r in rows if r.expected_intake != "new")),
        )
        stored.save(update_fields=["status", "customers", "left_out"])
        record_audit(
            None,
            AuditAction.LABELLED_SET_UPLOADED,
            actor=user,
            labelled_set=stored.pk,
            name=name,
            examples=len(rows),
            not_a_type=dict(not_a_type),
        )
    return Upload(stored, len(rows), not_a_type)


def _received(name: str, filename: str, raw: bytes, user: User) -> LabelledSet:
    """The upload as it came, before a byte of it is read."""
    try:
        with transaction.atomic(durable=True):
            return LabelledSet.objects.create(
                name=name,
                filename=filename[:255],
                raw=raw,
                sha256=hashlib.sha256(raw).hexdigest(),
                uploaded_by=user,
            )
    except IntegrityError as exc:  # the name's unique constraint, also against a race
        raise LabelledSetRefused([f"a set named {name} is stored already"], field="name") from exc


def _refuse(set_id: int, refused: LabelledSetRefused, user: User) -> None:
    with transaction.atomic(durable=True):
        stored = LabelledSet.objects.select_for_update().get(pk=set_id)
        stored.refuse(problems=refused.problems)
        stored.save(update_fields=["status", "problems"])
        record_audit(
            None,
            AuditAction.LABELLED_SET_REFUSED,
            actor=user,
            labelled_set=set_id,
            problems=refused.problems,
        )


def labelled_set_remove(*, set_id: int, user: User) -> str:
    """Remove a set (read or refused), its messages and its evaluations; the models trained
    on it stay."""
    _may_manage(user)
    with transaction.atomic(durable=True):
        stored = LabelledSet.objects.select_for_update().get(pk=set_id)
        name = stored.name
        stored.delete()
        record_audit(None, AuditAction.LABELLED_SET_REMOVED, actor=user, name=name)
    return name


@contextmanager
def labelled_set_folder(*, set_id: int) -> Iterator[Path]:
    """The stored set written out as `evaluate_classifier` reads one: labels.csv beside the
    messages (and customers.csv), in a temporary folder removed afterwards."""
    stored = LabelledSet.objects.get(pk=set_id)
    examples = list(stored.examples.order_by("line"))
    with tempfile.TemporaryDirectory(prefix="labelled-set-") as folder:
        root = Path(folder)
        columns = list(dict.fromkeys(c for e in examples for c in (*COLUMNS, *e.row)))
        with (root / LABELS).open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            for example in examples:
                writer.writerow({**dict.fromkeys(columns, ""), **example.row})
                target = root / example.file
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(bytes(example.message))
        if stored.customers:
            (root / CUSTOMERS).write_bytes(bytes(stored.customers))
        yield root / LABELS
