"""One reading of a data glob for the look-up before `pulumi up` and for MaxText on the cluster.

The two read a gs://BUCKET/PATTERN differently:
- the look-up (infra/data_lookups.py) asks Cloud Storage's objects.list with matchGlob, where `**` crosses '/',
  `{a,b}` picks alternatives, '\\' escapes and `*` also matches names that start with '.'
  (https://cloud.google.com/storage/docs/json_api/v1/objects/list#list-objects-and-prefixes-using-glob);
- MaxText 0.2.5 reads the FUSE mount with `glob.glob(pattern)` (input_pipeline/grain_data_processing.py
  find_data_files): not recursive, so `**` is a plain `*` within one folder; braces and backslashes are literal
  characters; a wildcard component that does not itself start with '.' skips names that start with '.'
  (Python's glob._ishidden); brackets follow fnmatch (`[!a]` negates, `^` and a leading `]` are literal).

So a pattern is refused where the two cannot agree (glob_problem: `**`, braces, backslashes, bracket forms the
two parse differently), and for every other pattern the look-up keeps, from the names matchGlob lists, exactly
those MaxText's glob would read (maxtext_reads). For those patterns matchGlob lists every such name: its `*`, `?`
and `[...]` match at least what fnmatch does within one '/'-separated component.
"""
from __future__ import annotations

import fnmatch
import re

_MAGIC = re.compile(r"[*?[]")


def _bracket_problem(component: str) -> str | None:
    """Why a component's [...] classes are read differently, or None. Python's fnmatch and matchGlob agree on
    [abc], [a-z] and [!abc]; they differ on a class that starts with '^' or ']' (literal in fnmatch), on an
    unclosed '[' (a literal in fnmatch) and on an empty class."""
    index = 0
    while (start := component.find("[", index)) != -1:
        end = component.find("]", start + 1)
        if end == -1:
            return "an unclosed '[' (a literal character to Python's glob, a class to Cloud Storage)"
        body = component[start + 1:end]
        if body.startswith("!"):
            body = body[1:]
        if body == "" or body.startswith("^"):
            return ("a class that is empty or starts with '^' or ']' (read differently by Python's glob and "
                    "Cloud Storage)")
        index = end + 1
    return None


def glob_problem(pattern: str) -> str | None:
    """What makes the look-up and MaxText read `pattern` (the object path after gs://BUCKET/) differently, or
    None; the words follow "uses ..." in a config refusal."""
    if "**" in pattern:
        return ("'**', which Cloud Storage matches across folders and MaxText's glob (not recursive) reads as '*' "
                "within one folder; write one '*' per folder level, e.g. c4/*/train-*.array_record")
    if "{" in pattern or "}" in pattern:
        return ("braces, which Cloud Storage reads as alternatives and MaxText's glob as literal characters; "
                "write one pattern that matches the files, e.g. with [ab] or *")
    if "\\" in pattern:
        return ("a backslash, an escape to Cloud Storage and a literal character to MaxText's glob; match a "
                "special character with a class instead, e.g. [*]")
    for component in pattern.split("/"):
        problem = _bracket_problem(component)
        if problem is not None:
            return problem
    return None


def maxtext_reads(pattern: str, name: str) -> bool:
    """Whether MaxText's glob.glob on the mount would return the object `name` for `pattern` (both paths inside
    the bucket): one pattern component per name component, each matched as fnmatch does (case-sensitive, as on
    Linux), and a name component that starts with '.' only under a wildcard component that starts with '.' too
    (or a literal one). Empty components ('a//b', a trailing '/') are not files on the mount."""
    parts, names = pattern.split("/"), name.split("/")
    if len(parts) != len(names) or "" in names:
        return False
    for part, component in zip(parts, names):
        if not _MAGIC.search(part):
            if part != component:
                return False
            continue
        if component.startswith(".") and not part.startswith("."):
            return False
        if not fnmatch.fnmatchcase(component, part):
            return False
    return True


def literal_folder(pattern: str) -> str:
    """The folders before the first component with a wildcard (no trailing '/'): the part of the bucket every
    match lies under, e.g. 'c4/en' for 'c4/en/train-*.array_record'; '' when the first component has one."""
    folders = pattern.split("/")[:-1]
    literal = []
    for folder in folders:
        if _MAGIC.search(folder):
            break
        literal.append(folder)
    return "/".join(literal)
