"""A CRD's CEL validation rules (`x-kubernetes-validations`), evaluated offline as the API server does on create.

Kubernetes docs, "Validation rules" (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/
custom-resource-definitions/#validation-rules): a rule sits on a schema node and is evaluated with `self` bound to
the value at that node, for every value the object has there (after defaulting); a rule that is false, or that
fails to evaluate (e.g. "no such key"), rejects the request with the rule's `message` (else the rule) at the
node's path plus the rule's `fieldPath`. A rule that reads `oldSelf` is a transition rule: it runs on updates
only, unless `optionalOldSelf: true`.

The evaluator is the `cel` module of the PyPI package common-expression-language (pinned in requirements.txt):
standard CEL with its macros (has, all, exists, exists_one, map, filter). Kubernetes adds libraries of its own
(lists: isSorted/sum/indexOf, strings: lowerAscii/split/..., regex find, url, ip/cidr, quantity, format, authz,
optionals) that the package lacks. A rule that calls anything outside STANDARD_FUNCTIONS is not evaluated: it is
counted and named in the report ("not evaluated"), never passed silently; the same for rules that do not compile
and for `optionalOldSelf` rules (they need CEL optionals).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import cel

from preview.k8s.findings import field_path

# Operators and standard functions the evaluator implements (as cel.Program.functions() names them);
# tests/preview/test_cel_rules.py runs one expression per name to hold the package to this list.
STANDARD_OPERATORS = frozenset({
    "!_", "-_", "_&&_", "_||_", "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "_+_", "_-_", "_*_", "_/_", "_%_",
    "_?_:_", "_[_]", "@in", "@not_strictly_false",
})
STANDARD_FUNCTIONS = frozenset({
    "size", "matches", "contains", "startsWith", "endsWith", "int", "uint", "double", "string", "bytes", "type",
    "dyn", "duration", "timestamp",
})
EVALUATOR = "common-expression-language"


@dataclass(frozen=True)
class Rule:
    rule: str
    message: str | None
    field_path: str | None
    optional_old_self: bool

    @classmethod
    def from_schema(cls, entry: Mapping[str, Any]) -> "Rule":
        return cls(rule=str(entry["rule"]), message=entry.get("message"), field_path=entry.get("fieldPath"),
                   optional_old_self=bool(entry.get("optionalOldSelf")))


@dataclass(frozen=True)
class Verdict:
    """How a rule can be treated offline: 'evaluate', 'update-only' (a transition rule: not run on create) or
    'not-evaluated' (with the reason)."""
    kind: str
    reason: str = ""
    program: Any = None


@functools.lru_cache(maxsize=None)
def verdict(rule: str, optional_old_self: bool) -> Verdict:
    try:
        program = cel.compile(rule)
    except Exception as error:     # the package raises ValueError/RuntimeError subclasses for parse errors
        return Verdict("not-evaluated", f"does not compile in {EVALUATOR}: {str(error).splitlines()[0]}")
    variables = set(program.variables())
    if "oldSelf" in variables:
        if optional_old_self:
            return Verdict("not-evaluated", "optionalOldSelf needs CEL optionals, which the evaluator lacks")
        return Verdict("update-only")
    unknown = sorted(set(program.functions()) - STANDARD_OPERATORS - STANDARD_FUNCTIONS)
    if unknown:
        return Verdict("not-evaluated", f"uses {', '.join(unknown)}: Kubernetes CEL library function(s) "
                                        f"{EVALUATOR} lacks")
    return Verdict("evaluate", program=program)


@dataclass
class CelOutcome:
    """What the rules of one object did: failures as (path, message), and counts for the report."""
    failures: list[tuple[str, str]] = field(default_factory=list)
    evaluated: int = 0
    update_only: set[str] = field(default_factory=set)
    not_evaluated: dict[str, str] = field(default_factory=dict)     # rule -> reason


def _values(instance: Any, schema: Mapping[str, Any], path: list[str | int]
            ) -> Iterator[tuple[list[str | int], Any, Mapping[str, Any]]]:
    """(path, value, schema node) for every value of the instance that sits on a schema node with rules."""
    if schema.get("x-kubernetes-validations"):
        yield path, instance, schema
    if isinstance(instance, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, value in instance.items():
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if isinstance(sub, dict):
                yield from _values(value, sub, path + [key])
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        for index, value in enumerate(instance):
            yield from _values(value, schema["items"], path + [index])


def evaluate(instance: Mapping[str, Any], open_api: Mapping[str, Any]) -> CelOutcome:
    """Run every rule of `open_api` (a CRD version's openAPIV3Schema) that applies to `instance` (defaulted)."""
    outcome = CelOutcome()
    for path, value, node in _values(instance, open_api, []):
        for entry in node["x-kubernetes-validations"]:
            rule = Rule.from_schema(entry)
            judged = verdict(rule.rule, rule.optional_old_self)
            if judged.kind == "update-only":
                outcome.update_only.add(rule.rule)
                continue
            if judged.kind == "not-evaluated":
                outcome.not_evaluated[rule.rule] = judged.reason
                continue
            outcome.evaluated += 1
            where = (field_path(path) + (rule.field_path or "")).lstrip(".")
            try:
                result = judged.program.execute({"self": value})
            except Exception as error:   # Kubernetes rejects a request whose rule fails to evaluate
                outcome.failures.append((where, f"CEL rule {rule.rule!r} could not be evaluated: {error}"))
                continue
            if result is not True:
                outcome.failures.append((where, rule.message or f"failed rule: {rule.rule}"))
    return outcome
