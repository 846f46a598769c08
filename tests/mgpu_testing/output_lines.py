"""Output lines that the skills and docs quote, as one template each: the tests match real output against the
strict form and every quoted line in the documents against the quoted form (numbers may be written as a
capital-letter placeholder there, such as ``K`` or ``M``), so a quote cannot drift from what the command prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Template:
    """A line the code prints: ``{N}`` a number, ``{P}`` a token without spaces (a path, a name)."""

    text: str
    marker: str  # a literal piece that only quotes of this line contain

    def _regex(self, number: str) -> re.Pattern[str]:
        pieces = re.split(r"(\{N\}|\{P\})", self.text)
        body = "".join(number if p == "{N}" else r"(\S+)" if p == "{P}" else re.escape(p) for p in pieces)
        return re.compile(body)

    @property
    def real(self) -> re.Pattern[str]:
        """Matches the line as printed (use ``.search``/``.findall`` with re.M-free full lines, or fullmatch)."""
        return self._regex(r"(-?\d+(?:\.\d+)?)")

    @property
    def quoted(self) -> re.Pattern[str]:
        return self._regex(r"(-?\d+(?:\.\d+)?|[A-Z])")


ALL_RANKS = Template(
    "[INFO] iteration {N}: all-ranks episode return {N} (mean of {N} episodes over {N} rank(s))",
    ": all-ranks episode return ",
)
PLAY_HEADER = Template(
    "[INFO] play: {P} policy from {P} (iteration {N}) on {P}: {N} envs, device {P}, seed {N}", "[INFO] play: "
)
PLAY_SUMMARY = Template("[INFO] return over {N} episodes: mean {N}, std {N}, min {N}, max {N}", "[INFO] return over ")
NOTHING_LEFT = Template(
    "mgpu-lab train_multigpu: error: --checkpoint {P}: already at iteration {N} and --max_iterations {N} counts from "
    "iteration 0: nothing left to train (--max_iterations is the run's total, not a count added to the resumed "
    "iteration as in Isaac Lab's own train.py: give --max_iterations {N} for {N} more)",
    "nothing left to train (",
)
TEMPLATES = (ALL_RANKS, PLAY_HEADER, PLAY_SUMMARY, NOTHING_LEFT)


def lines_matching(template: Template, text: str) -> list[tuple[str, ...]]:
    """The groups of every line of ``text`` that ends with ``template`` as printed (another rank's unterminated
    output may precede a line in a shared pipe)."""
    return [
        m.groups()
        for line in text.splitlines()
        if (m := template.real.search(line.rstrip())) and m.end() == len(line.rstrip())
    ]
