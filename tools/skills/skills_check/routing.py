"""A lexical stand-in for an agent's choice of skill: Okapi BM25 over each skill's ``name`` and
``description``, scored against a prompt.

Agents pick a skill by reading its description; nothing here understands language. The model turns
text into terms (lower case, split at anything that is not a letter or digit, a compound such as
"multi-GPU" also kept joined, English stop words dropped, a light suffix stemmer: "hangs"/"hanging" ->
"hang"), treats each skill's name and
description as one document, and ranks the skills by BM25 (k1 = 1.2, b = 0.75) with the usual
smoothed inverse document frequency, so words every skill shares weigh little and a word only one
skill uses weighs most. Sentences of a description that exclude cases ("Not for ...", "Do not use
...") are left out of its terms: without it, naming what a skill does not handle would attract exactly
those prompts.

What it catches: a description edit that drops the words its own prompts use, and sibling skills whose
descriptions claim the same prompts. What it cannot see: synonyms and paraphrase ("stalls" is not
"hangs"), negation inside a sentence, emphasis, and everything an agent weighs beyond words. A pass is
no proof an agent will choose well; a failure is a description worth reading again.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

K1 = 1.2
B = 0.75
# A should-not case is a finding when its own skill ranks first with at least this score; below it, the
# prompt matches no skill well enough for an agent to load one. ``routing_threshold`` in
# [tool.skills-check] overrides it.
THRESHOLD = 3.0

_SPLIT = re.compile(r"[^a-z0-9]+")
_WORD = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*")
_EXCLUSION = re.compile(r"(?:^|(?<=[.;]))\s*(?:not for|do not use|don't use|never for)\b[^.;]*[.;]?", re.IGNORECASE)
STOP = frozenset(
    """
a about after all also an and any are as at be been before but by can could do does doing done each
for from had has have how i if in into is it its it's just me more most my no not of on once one only
or other our out over own same should so some such than that the their them then there these they this
those through to too under until up very was we were what when where which while who why will with
would you your use used uses using user users
""".split()
)


def stem(word: str) -> str:
    """A light English suffix stemmer (plural and verb endings only), deterministic and documented."""
    if len(word) <= 3 or word.isdigit():
        return word
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and (word.endswith("ss") or (len(word) > 4 and word.endswith(("us", "is")))):
                return word
            if suffix == "es" and not word.endswith(("ches", "shes", "sses", "xes")):
                continue
            word = word[: len(word) - len(suffix)] + keep
            if suffix in ("ing", "ed") and len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # "stopped" -> "stop"
            return word
    return word


def terms(text: str) -> list[str]:
    """The scored terms of ``text`` in order (stop words dropped, stemmed). A compound written with ``-`` or
    ``_`` gives its parts and their concatenation, so "multi-GPU", "multi_gpu" and "multigpu" meet."""
    out: list[str] = []
    for word in _WORD.findall(text.lower()):
        parts = [p for p in _SPLIT.split(word) if p]
        out += [stem(p) for p in parts if p not in STOP]
        if len(parts) > 1:
            out.append(stem("".join(parts)))
    return out


def without_exclusions(description: str) -> str:
    """``description`` minus its exclusion sentences ("Not for ...", "Do not use ...")."""
    return _EXCLUSION.sub(" ", description)


@dataclass
class Scored:
    name: str
    score: float
    contributions: dict[str, float] = field(default_factory=dict)  # term -> its share of the score

    def deciding(self, n: int = 5) -> list[tuple[str, float]]:
        """The terms that contributed most, largest first."""
        return sorted(self.contributions.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


class Index:
    """BM25 over skills: ``Index({name: description}).rank(prompt)``."""

    def __init__(self, skills: dict[str, str]) -> None:
        self.docs: dict[str, list[str]] = {
            name: terms(name) + terms(without_exclusions(text)) for name, text in skills.items()
        }
        self.tf = {name: _counts(ts) for name, ts in self.docs.items()}
        n = len(self.docs)
        self.avg = (sum(len(ts) for ts in self.docs.values()) / n) if n else 0.0
        df: dict[str, int] = {}
        for counts in self.tf.values():
            for term in counts:
                df[term] = df.get(term, 0) + 1
        self.idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}

    def score(self, name: str, query: list[str]) -> Scored:
        counts, length = self.tf[name], len(self.docs[name])
        out = Scored(name, 0.0)
        for term in dict.fromkeys(query):  # each query term once
            f = counts.get(term, 0)
            if not f:
                continue
            part = self.idf[term] * f * (K1 + 1) / (f + K1 * (1 - B + B * length / (self.avg or 1)))
            out.contributions[term] = part
            out.score += part
        return out

    def rank(self, prompt: str) -> list[Scored]:
        """Every skill scored against ``prompt``, best first (ties by name, so the order is stable)."""
        query = terms(prompt)
        return sorted((self.score(name, query) for name in self.docs), key=lambda s: (-s.score, s.name))


def _counts(ts: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in ts:
        out[t] = out.get(t, 0) + 1
    return out
