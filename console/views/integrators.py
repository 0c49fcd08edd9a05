"""The API reference for integrators: the OpenAPI document, rendered for people.

Everything on the page is read from `automation.openapi.openapi_document()`, the document
/api/v1/openapi.json serves: operations, the token scheme, the request fields with their
types and limits (resolved from the schemas the contracts generate), the answers with every
code they carry, the examples, and a curl command built from each example. Nothing here is
written twice, so the page cannot say something the API does not do.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET

from automation.openapi import openapi_document
from policy.services import policy_business

Schema = dict[str, Any]
# The shell reads the token from its environment: the page never holds one.
SHELL_VARIABLE = "$GATEHOUSE_TOKEN"


def prose(text: str) -> SafeString:
    """A description as HTML: escaped, with `code` spans as <code>."""
    return mark_safe(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(text))))  # noqa: S308


@dataclass(frozen=True)
class Code:
    code: str
    meaning: SafeString


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    required: bool
    description: SafeString
    constraints: SafeString
    codes: list[Code] = field(default_factory=list)
    shape: str = ""  # the object schema its type names, described further down the page


@dataclass(frozen=True)
class Example:
    summary: SafeString
    text: str


@dataclass(frozen=True)
class Body:
    content_type: str
    description: SafeString
    fields: list[Field]
    examples: list[Example]
    curl: str


@dataclass(frozen=True)
class Answer:
    status: str
    meaning: SafeString
    shape: str  # the answer's schema name, a section further down the page
    codes: list[Code]
    examples: list[Example]


@dataclass(frozen=True)
class Operation:
    anchor: str
    method: str
    path: str
    summary: str
    description: SafeString
    parameters: list[Field]
    bodies: list[Body]
    answers: list[Answer]
    curl: str  # for an operation without a body


@dataclass(frozen=True)
class Shape:
    name: str
    description: SafeString
    fields: list[Field]


class Reader:
    """Reads one OpenAPI document: follows its references, words its schemas."""

    def __init__(self, document: Schema, server: str) -> None:
        self.document = document
        self.server = server

    def resolve(self, schema: Schema) -> Schema:
        ref = schema.get("$ref")
        if ref is None:
            return schema
        node: Any = self.document
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]
        return {**node, **{k: v for k, v in schema.items() if k != "$ref"}}

    def type_of(self, schema: Schema) -> str:
        if "$ref" in schema:
            target = self.resolve(schema)
            return "string" if "enum" in target else schema["$ref"].rsplit("/", 1)[-1]
        if "anyOf" in schema:
            return " or ".join(self.type_of(option) for option in schema["anyOf"])
        kind = schema.get("type", "any")
        if kind == "array":
            return f"list of {self.type_of(schema.get('items', {}))}"
        return " or ".join(kind) if isinstance(kind, list) else str(kind)

    def shape_of(self, schema: Schema) -> str:
        """The object schema a field's type names (directly, in a list, or nullable)."""
        for ref in re.findall(r'"\$ref": "([^"]+)"', json.dumps(schema)):
            if "properties" in self.resolve({"$ref": ref}):
                return str(ref.rsplit("/", 1)[-1])
        return ""

    @staticmethod
    def constraints(schema: Schema) -> SafeString:
        found = []
        low, high = schema.get("minLength"), schema.get("maxLength")
        if low is not None and high is not None:
            found.append(f"{low:,} to {high:,} characters")
        elif high is not None:
            found.append(f"at most {high:,} characters")
        if "enum" in schema:
            found.append("one of " + ", ".join(f"`{value}`" for value in schema["enum"]))
        if "pattern" in schema:
            found.append(f"matches `{schema['pattern']}`")
        if "format" in schema:
            found.append(f"format {schema['format']}")
        if "oneOf" in schema:
            found.append("one of the codes listed")
        return prose("; ".join(found))

    @staticmethod
    def codes(schema: Schema) -> list[Code]:
        return [
            Code(option["const"], prose(option.get("description", "")))
            for option in schema.get("oneOf", [])
            if "const" in option
        ]

    def fields(self, schema: Schema) -> list[Field]:
        target = self.resolve(schema)
        required = set(target.get("required", []))
        rows = []
        for name, declared in target.get("properties", {}).items():
            resolved = self.resolve(declared)
            rows.append(
                Field(
                    name=name,
                    type=self.type_of(declared),
                    required=name in required,
                    description=prose(resolved.get("description", "")),
                    constraints=self.constraints(resolved),
                    codes=self.codes(resolved),
                    shape=self.shape_of(declared),
                )
            )
        return rows

    @staticmethod
    def examples(media: Schema) -> list[Example]:
        return [
            Example(
                summary=prose(example.get("summary", name)),
                text=example["value"]
                if isinstance(example["value"], str)
                else json.dumps(example["value"], indent=2, ensure_ascii=False),
            )
            for name, example in media.get("examples", {}).items()
        ]

    def curl(self, method: str, path: str, content_type: str = "", data: str = "") -> str:
        """A command that sends the example: the token is read from the environment."""
        lines = [
            f"curl -X {method} {shlex.quote(self.server + path)}",
            f'  -H "Authorization: Bearer {SHELL_VARIABLE}"',
        ]
        if content_type == "application/json":
            lines += [
                f"  -H 'Content-Type: {content_type}'",
                f"  --data-binary {shlex.quote(data)}",
            ]
        elif content_type:
            # Raw text (an e-mail) as a here-document: sent exactly as written, quotes and all.
            lines += [f"  -H 'Content-Type: {content_type}'", "  --data-binary @- <<'MESSAGE'"]
            return " \\\n".join(lines) + "\n" + data.replace("\r\n", "\n") + "MESSAGE"
        return " \\\n".join(lines)

    def body(self, method: str, path: str, content_type: str, media: Schema) -> Body:
        schema = self.resolve(media["schema"])
        examples = self.examples(media)
        values = [example["value"] for example in media.get("examples", {}).values()]
        first = values[0] if values else ""
        data = first if isinstance(first, str) else json.dumps(first, indent=2)
        return Body(
            content_type=content_type,
            description=prose(schema.get("description", "")),
            fields=self.fields(schema) if schema.get("type") == "object" else [],
            examples=examples,
            curl=self.curl(method.upper(), path, content_type, data),
        )

    def answer(self, status: str, response: Schema) -> Answer:
        media = response.get("content", {}).get("application/json", {})
        shape = media.get("schema", {}).get("$ref", "").rsplit("/", 1)[-1]
        words = {code.code: code for row in self.fields(media["schema"]) for code in row.codes}
        said = []
        for example in media.get("examples", {}).values():
            value = example["value"]
            code = value.get("outcome") if "intake_id" in value else value.get("error")
            if code in words and words[code] not in said:
                said.append(words[code])
        return Answer(status, prose(response["description"]), shape, said, self.examples(media))

    def operation(self, path: str, method: str, spec: Schema) -> Operation:
        parameters = [
            Field(
                name=p["name"],
                type=self.type_of(p["schema"]),
                required=p.get("required", False),
                description=prose(p.get("description", "")),
                constraints=prose(f"in the {p['in']}"),
            )
            for p in spec.get("parameters", [])
        ]
        example_path = path
        for p in spec.get("parameters", []):
            if "example" in p:
                example_path = example_path.replace("{" + p["name"] + "}", str(p["example"]))
        content = spec.get("requestBody", {}).get("content", {})
        return Operation(
            anchor=spec["operationId"],
            method=method.upper(),
            path=path,
            summary=spec.get("summary", ""),
            description=prose(spec.get("description", "")),
            parameters=parameters,
            bodies=[self.body(method, path, kind, media) for kind, media in content.items()],
            answers=[self.answer(status, r) for status, r in sorted(spec["responses"].items())],
            curl="" if content else self.curl(method.upper(), example_path),
        )

    def shapes(self, names: list[str]) -> list[Shape]:
        """The answers' schemas, and every object schema they name, each once."""
        schemas = self.document["components"]["schemas"]
        seen: list[str] = []
        pending = list(names)
        while pending:
            name = pending.pop(0)
            if name in seen or name not in schemas or "properties" not in schemas[name]:
                continue
            seen.append(name)
            pending += [row.shape for row in self.fields(schemas[name]) if row.shape]
        return [
            Shape(name, prose(schemas[name].get("description", "")), self.fields(schemas[name]))
            for name in seen
        ]


@require_GET
def api_reference(request: HttpRequest) -> HttpResponse:
    """Public, like /api/v1/openapi.json: it shows nothing that document does not say, and the
    developers who integrate hold a token, not a console account."""
    document = openapi_document(policy_business(name=None))
    reader = Reader(document, server=request.build_absolute_uri("/").rstrip("/"))
    operations = [
        reader.operation(path, method, spec)
        for path, methods in document["paths"].items()
        for method, spec in methods.items()
    ]
    answer_shapes = [answer.shape for op in operations for answer in op.answers if answer.shape]
    scheme = document["components"]["securitySchemes"]["bearer"]
    context = {
        "info": document["info"],
        "description": prose(document["info"]["description"]),
        "auth": {"scheme": scheme["scheme"], "description": prose(scheme["description"])},
        "operations": operations,
        "shapes": reader.shapes(list(dict.fromkeys(answer_shapes))),
        "openapi_url": request.build_absolute_uri(reverse("api:openapi")),
    }
    return render(request, "integrators/api_reference.html", context)
