"""Validate Kubernetes objects offline: built-in kinds, custom resources, and cross-object rules.

    report = validate_objects(list_of_dicts, schemas_dir)          # schemas_dir may be None
    report.errors   → [Finding(object_ref, field_path, message), ...]
    report.warnings → [...]
    report.cr_check_skipped → True when no CRD directory was available

Built-in kinds are checked against kubernetes-validate's bundled strict schemas for the cluster's
Kubernetes version; custom resources against their CRD's openAPIV3Schema (jsonschema) and its CEL rules
(x-kubernetes-validations, preview/k8s/cel_rules.py); then the rules the cluster's webhooks and admission
enforce (preview/k8s/rules.py), and what the JobSet webhook and KubeRay's validation code refuse beyond the schema
(preview/k8s/admission.py).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import jsonschema

from preview.k8s import cel_rules
from preview.k8s.admission import check_admission
from preview.k8s import core_schemas as k8s_core_schemas
from preview.k8s.crd_schemas import CrdLibrary
from preview.k8s.findings import Finding, field_path
from preview.k8s.manifests import object_ref
from preview.k8s.rules import TpuPool, check_objects

__all__ = ["Finding", "TpuPool", "ValidationReport", "default_schemas_dir", "validate_objects"]

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]


def default_schemas_dir(repository_root: Path = REPOSITORY_ROOT) -> Path:
    """The shared CRD bundle lives beside the repository: <parent>/shared/schemas (docs/platform-notes.md §7)."""
    return repository_root.parent / "shared" / "schemas"


@dataclass
class ValidationReport:
    errors: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    cr_check_skipped: bool = False
    kubernetes_version: str = ""          # the schema version built-in kinds were checked against
    notes: list[str] = field(default_factory=list)
    checked: int = 0
    # Per custom-resource kind: CEL rule evaluations run, transition rules (updates only) and rules not evaluated
    # offline with the reason (preview/k8s/cel_rules.py).
    cel: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        def rows(findings: list[Finding]) -> list[dict[str, str]]:
            return [{"object": f.object_ref, "path": f.field_path, "message": f.message} for f in findings]
        return {"errors": rows(self.errors), "warnings": rows(self.warnings),
                "cr_check_skipped": self.cr_check_skipped, "kubernetes_version": self.kubernetes_version,
                "notes": list(self.notes), "objects_checked": self.checked,
                "cel": {kind: dict(counts) for kind, counts in sorted(self.cel.items())}}

    def add_cel(self, kind: str, source: str, outcome: cel_rules.CelOutcome) -> None:
        counts = self.cel.setdefault(kind, {"crd": source, "evaluated": 0, "update_only": [], "not_evaluated": {}})
        counts["evaluated"] += outcome.evaluated
        counts["update_only"] = sorted(set(counts["update_only"]) | outcome.update_only)
        counts["not_evaluated"].update(outcome.not_evaluated)

    def cel_notes(self) -> list[str]:
        notes = []
        for kind, counts in sorted(self.cel.items()):
            notes.append(f"{kind}: CEL rules (x-kubernetes-validations) of {counts['crd']}: {counts['evaluated']} "
                         f"evaluation(s) with {cel_rules.EVALUATOR}, {len(counts['update_only'])} rule(s) apply to "
                         f"updates only (oldSelf), {len(counts['not_evaluated'])} not evaluated offline")
            notes += [f"{kind}: CEL rule not evaluated offline: {rule} ({reason})"
                      for rule, reason in sorted(counts["not_evaluated"].items())]
        return notes


def _schema_findings(ref: str, validator: jsonschema.protocols.Validator, obj: Mapping[str, Any]) -> list[Finding]:
    """Every schema error of one object, each at the field it is about."""
    findings = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        if error.context and error.validator in ("anyOf", "oneOf"):
            error = jsonschema.exceptions.best_match(error.context)
        path = list(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            declared = set((error.schema or {}).get("properties") or {})
            for unknown in sorted(set(error.instance) - declared):
                findings.append(Finding(ref, field_path(path + [unknown]), "unknown field"))
            continue
        if error.validator == "required" and isinstance(error.validator_value, list):
            missing = [name for name in error.validator_value if name not in (error.instance or {})]
            for name in missing:
                findings.append(Finding(ref, field_path(path + [name]), "required field is missing"))
            continue
        findings.append(Finding(ref, field_path(path), error.message))
    # One fault can fail several branches of a schema the same way; report it once.
    return list(dict.fromkeys(findings))


@functools.lru_cache(maxsize=8)
def _crd_library(directory: Path) -> CrdLibrary:
    return CrdLibrary(directory)


def _check_custom_resource(obj: Mapping[str, Any], ref: str, library: CrdLibrary | None,
                           report: ValidationReport) -> None:
    if library is None:
        return
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    group = api_version.rsplit("/", 1)[0]
    if not library.has_group(group):
        report.warnings.append(Finding(ref, "", f"no CRD for API group {group!r} under {library.directory}; "
                                                "schema not checked"))
        return
    crd = library.lookup(obj)
    if crd is None:
        served = [v.version for v in library.versions_of(group, kind) if v.served]
        message = (f"{group} serves {kind} in {', '.join(served)}, not {api_version}" if served
                   else f"the {group} CRDs define no kind {kind!r}")
        report.errors.append(Finding(ref, "apiVersion" if served else "kind", message))
        return
    if not crd.served:
        report.errors.append(Finding(ref, "apiVersion", f"{api_version} is not served by the {kind} CRD"))
        return
    defaulted = crd.defaulted(obj)
    report.errors.extend(_schema_findings(ref, crd.validator, defaulted))
    if crd.cel_rule_count:
        outcome = cel_rules.evaluate(defaulted, crd.open_api)
        report.errors.extend(Finding(ref, where, message) for where, message in outcome.failures)
        report.add_cel(kind, crd.source.name, outcome)


def validate_objects(objects: Iterable[Mapping[str, Any]], schemas_dir: Path | str | None,
                     kubernetes_version: str | None = None,
                     tpu_pools: Sequence[TpuPool] | None = None,
                     provided: Sequence[Mapping[str, Any]] = ()) -> ValidationReport:
    """Check every object. `kubernetes_version` is the cluster's (e.g. '1.34' or '1.34.1-gke.1829001');
    None checks against the newest bundled schemas. `schemas_dir` holds CRD YAML files; when it is None
    or missing, custom resources get no schema check and the report says so (`cr_check_skipped`).
    `tpu_pools`, when given, lets TPU pods be matched against the node pools that will exist."""
    objects = list(objects)
    schema_version, version_note = k8s_core_schemas.schema_version_for(kubernetes_version)
    directory = Path(schemas_dir) if schemas_dir is not None else None
    library = _crd_library(directory.resolve()) if directory is not None and directory.is_dir() else None
    report = ValidationReport(kubernetes_version=schema_version, checked=len(objects),
                              cr_check_skipped=library is None)
    if version_note:
        report.notes.append(version_note)
    if library is None:
        report.notes.append(f"custom-resource schema check skipped: no CRD directory "
                            f"({directory if directory is not None else 'none given'})")
    for obj in objects:
        ref = object_ref(obj)
        api_version = str(obj.get("apiVersion", ""))
        if not api_version or not obj.get("kind"):
            report.errors.append(Finding(ref, "apiVersion" if not api_version else "kind", "is required"))
            continue
        if k8s_core_schemas.is_built_in_group(api_version):
            validator = k8s_core_schemas.validator_for(obj, schema_version)
            if validator is None:
                report.errors.append(Finding(ref, "apiVersion", f"Kubernetes {schema_version} serves no "
                                                                f"{obj['kind']} in {api_version}"))
                continue
            report.errors.extend(_schema_findings(ref, validator, obj))
        else:
            _check_custom_resource(obj, ref, library, report)
    report.notes += report.cel_notes()
    rule_errors, rule_warnings = check_objects(objects, tpu_pools, provided)
    report.errors += rule_errors
    report.warnings += rule_warnings
    admission_errors, admission_notes = check_admission(objects)
    report.errors += admission_errors
    report.notes += admission_notes
    return report
