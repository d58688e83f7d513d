"""Exactly the files a Docker build context admits, and a tag derived from them.

Why exactly: pulumi-docker-build rebuilds an Image whenever its context hash changes, and that hash covers the
Dockerfile's text and every file the context's ignore-file admits, with its path and file mode
(pulumi/pulumi-docker-build provider/internal/context.go, hashBuildContext/hashFile; the ignore-file is
<Dockerfile>.dockerignore when present, else the context's .dockerignore: getIgnorePatterns). The rebuilt image is
pushed under the stack's tag, and a repository with immutable tags refuses a new digest under an existing tag. So
the tag must change whenever that hash can: it hashes the same things.

The ignore rules are moby/patternmatcher's, which BuildKit and the provider use: ignorefile/ignorefile.go
(ReadAll: '#' lines are comments, blanks are skipped, a leading '!' re-includes, patterns are filepath.Clean'ed and
a leading '/' dropped) and patternmatcher.go (Pattern.compile/match: '*' and '?' never cross '/', '**' crosses any
number of directories; MatchesOrParentMatches: a path is excluded when it or one of its parent directories matches,
and the last pattern that matches decides).
"""
from __future__ import annotations

import hashlib
import os
import posixpath
import re
import stat
from dataclasses import dataclass
from pathlib import Path

_ESCAPED = set(".+()|{}$")


def read_ignore_file(text: str) -> list[str]:
    """The patterns of a .dockerignore, as ignorefile.ReadAll gives them."""
    patterns = []
    for number, line in enumerate(text.splitlines()):
        if number == 0:
            line = line.removeprefix("\ufeff")
        if line.startswith("#"):
            continue
        line = line.strip()
        if not line:
            continue
        invert = line.startswith("!")
        if invert:
            line = line[1:].strip()
        if line:
            line = posixpath.normpath(line)
            if line.startswith("//"):      # Go's Clean folds leading slashes; posixpath keeps two
                line = "/" + line.lstrip("/")
            if len(line) > 1 and line.startswith("/"):
                line = line[1:]
        patterns.append(("!" if invert else "") + line)
    return patterns


@dataclass(frozen=True)
class _Pattern:
    text: str
    exclusion: bool     # a '!' pattern: re-includes what it matches
    kind: str           # exact | prefix | suffix | regexp (patternmatcher's matchType)
    regexp: re.Pattern | None

    @classmethod
    def parse(cls, raw: str) -> "_Pattern":
        exclusion = raw.startswith("!")
        text = raw[1:] if exclusion else raw
        kind, regex, i = "exact", "^", 0
        while i < len(text):
            ch = text[i]
            if ch == "*":
                if text[i + 1:i + 2] == "*":
                    start = i
                    i += 1
                    if text[i + 1:i + 2] == "/":
                        i += 1
                    if i + 1 == len(text):
                        if kind == "exact":
                            kind = "prefix"
                        else:
                            regex += ".*"
                            kind = "regexp"
                    else:
                        regex += "(.*/)?"
                        kind = "regexp"
                    if start == 0:
                        kind = "suffix"
                else:
                    regex += "[^/]*"
                    kind = "regexp"
            elif ch == "?":
                regex += "[^/]"
                kind = "regexp"
            elif ch in _ESCAPED:
                regex += "\\" + ch
            elif ch == "\\":
                if i + 1 < len(text):
                    i += 1
                    regex += "\\" + text[i]
                    kind = "regexp"
                else:
                    regex += "\\\\"
            elif ch in "[]":
                regex += ch
                kind = "regexp"
            else:
                regex += ch
            i += 1
        compiled = re.compile(regex + "$") if kind == "regexp" else None
        return cls(text=text, exclusion=exclusion, kind=kind, regexp=compiled)

    def match(self, path: str) -> bool:
        if self.kind == "exact":
            return path == self.text
        if self.kind == "prefix":
            return path.startswith(self.text[:-2])
        if self.kind == "suffix":
            suffix = self.text[2:]
            return path.endswith(suffix) or (suffix.startswith("/") and path == suffix[1:])
        return bool(self.regexp.match(path))

    def could_match_under(self, directory: str) -> bool:
        """Whether a path inside `directory` might match (lets the walk skip excluded trees no '!' reopens)."""
        literal = []
        for part in self.text.split("/"):
            if any(c in part for c in "*?[\\"):
                return True
            literal.append(part)
        prefix = "/".join(literal)
        return prefix.startswith(directory + "/") or directory.startswith(prefix + "/") or prefix == directory


class IgnoreRules:
    def __init__(self, patterns: list[str]):
        self.patterns = [_Pattern.parse(p) for p in patterns]

    def excluded(self, path: str) -> bool:
        """patternmatcher MatchesOrParentMatches for a slash-separated path relative to the context."""
        matched = False
        parents = posixpath.dirname(path).split("/") if "/" in path else []
        for pattern in self.patterns:
            if pattern.exclusion != matched:
                continue
            hit = pattern.match(path)
            if not hit:
                hit = any(pattern.match("/".join(parents[:i + 1])) for i in range(len(parents)))
            if hit:
                matched = not pattern.exclusion
        return matched

    def prunable(self, directory: str) -> bool:
        """An excluded directory nothing below can be re-included from."""
        return self.excluded(directory) and not any(
            p.exclusion and p.could_match_under(directory) for p in self.patterns)


def ignore_rules(root: Path, dockerfile: str) -> IgnoreRules:
    """<Dockerfile>.dockerignore if present, else the context's .dockerignore, else nothing (getIgnorePatterns)."""
    for candidate in (root / (dockerfile + ".dockerignore"), root / ".dockerignore"):
        if candidate.is_file():
            return IgnoreRules(read_ignore_file(candidate.read_text()))
    return IgnoreRules([])


def context_files(root: Path, dockerfile: str) -> list[str]:
    """Every regular file (or symlink to one) the context admits, relative to `root`, sorted. Symlinks to
    directories are not followed (fsutil's walk does not, and the provider skips them)."""
    rules = ignore_rules(root, dockerfile)
    admitted = []
    for current, dirs, files in os.walk(root):
        relative_dir = Path(current).relative_to(root).as_posix()
        base = "" if relative_dir == "." else relative_dir + "/"
        dirs[:] = sorted(d for d in dirs if not (root / base / d).is_symlink() and not rules.prunable(base + d))
        for name in sorted(files):
            path = base + name
            if not rules.excluded(path) and (root / path).is_file():
                admitted.append(path)
    return sorted(admitted)


def context_tag(root: Path, dockerfile: str, length: int = 16) -> str:
    """`length` hex characters of the Dockerfile's text and every admitted file's path, mode and bytes: changes
    whenever the provider's context hash can."""
    hasher = hashlib.sha256()
    hasher.update(b"dockerfile\0" + (root / dockerfile).read_bytes() + b"\0")
    for path in context_files(root, dockerfile):
        mode = stat.S_IMODE((root / path).lstat().st_mode) if not (root / path).is_symlink() else 0o777
        kind = b"l" if (root / path).is_symlink() else b"f"
        hasher.update(path.encode() + b"\0" + kind + oct(mode).encode() + b"\0")
        hasher.update((root / path).read_bytes() + b"\0")
    return hasher.hexdigest()[:length]
