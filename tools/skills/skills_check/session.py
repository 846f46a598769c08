"""One check session, shared by the command line (``cli.py check``) and the language server (lsp/server.py):
choose the rules, load the tree, run the rules, apply the suppression stage, and say which rule sets ran.

As flake8 keeps its pipeline in one application object that its short ``main`` calls: the command line turns
its flags into a ``Session`` and prints what it returns; the language server makes one per check from the
settings of the tree it loaded (the editor's buffers over the disk), so both hold a tree to the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .adoption.suppress import ConfigError, Hidden, per_file_ignores
from .adoption.suppress import apply as apply_suppressions
from .caches.parse import ParseCache
from .loader import SetupError, load_config, load_project
from .loader.config import unknown_name
from .loader.prefetch import Prefetched
from .model import Finding, Project
from .rules.registry import HOUSE, PROFILES, Rule
from .runner import (
    Codes,
    ProfileError,
    active_codes,
    chosen_profiles,
    in_profiles,
    load_rules,
    profile_names,
    run_rules,
)

Ignores = list[tuple[str, tuple[str, ...]]]  # [tool.skills-check.per-file-ignores]: (glob, codes) pairs
DEFAULTS_WHY = "the defaults"


@dataclass(frozen=True)
class Session:
    """One check's choices, fixed before anything is loaded: where, which rules, which codes."""

    root: Path
    rules: list[Rule]  # the rules of the chosen profiles
    known: set[str]  # every rule's code, whatever its profile (a ``runner.Codes``)
    why: str = DEFAULTS_WHY  # --profile, [tool.skills-check] profiles, --select, the defaults
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    overrides: Mapping[str, str | None] = field(default_factory=dict)  # --skills/--docs/--launcher/--trainer
    use_cache: bool = True
    jobs: int = 1  # processes that parse and run the rules (--jobs)

    @classmethod
    def choose(
        cls,
        root: Path,
        config: Mapping[str, object] | None,
        *,
        given: list[str] | None = None,
        select: Sequence[str] = (),
        ignore: Sequence[str] = (),
        rules: list[Rule] | None = None,
        located: bool = False,
        overrides: Mapping[str, str | None] | None = None,
        use_cache: bool = True,
        jobs: int = 1,
    ) -> Session:
        """The session whose profiles are ``given`` (--profile), else the tree's (``config``: its settings, as
        ``load_config`` reads them), else the defaults; every profile when codes are named by hand (``select``)
        and neither chooses. ``rules``: the rules already loaded (every rule), else those of the chosen profiles
        are loaded. Raises SetupError, at the setting's line in pyproject.toml when ``located``."""
        for name in given or ():
            if name not in profile_names():
                raise SetupError(f"--profile: {unknown_name('profile', name, profile_names())}")
        configured = (config or {}).get("profiles") if given is None else None
        names = given if given is not None else profile_names() if select and configured is None else None
        try:
            chosen = chosen_profiles(names, configured)
            rules = rules if rules is not None else load_rules(chosen)
            in_use = in_profiles(rules, chosen)
        except ProfileError as exc:
            raise _profile_error(exc, config if located else None) from exc
        why = (
            "--profile"
            if given is not None
            else "[tool.skills-check] profiles"
            if configured is not None
            else "--select"
            if select
            else DEFAULTS_WHY
        )
        known = Codes(r.code for r in rules)
        return cls(root, in_use, known, why, tuple(select), tuple(ignore), overrides or {}, use_cache, jobs)

    @classmethod
    def for_root(
        cls,
        root: Path,
        overrides: Mapping[str, str | None],
        given: list[str] | None,
        select: Sequence[str],
        ignore: Sequence[str],
        rules: list[Rule] | None,
        use_cache: bool,
        jobs: int,
    ) -> Session:
        """``choose`` with the settings of the tree at ``root`` (read only when --profile does not decide)."""
        config = load_config(root.resolve(), dict(overrides)) if given is None and root.is_dir() else None
        return cls.choose(
            root,
            config,
            given=given,
            select=select,
            ignore=ignore,
            rules=rules,
            overrides=overrides,
            use_cache=use_cache,
            jobs=jobs,
        )

    def load(
        self,
        early: Prefetched | None = None,
        *,
        overlay: Mapping[str, str] | None = None,
        cache: ParseCache | None = None,
    ) -> Project:
        """The project under the root; launchers and scripts are read only when a drift rule runs (``early``: a
        worker ``begin_load`` started; ``overlay`` and ``cache``: the language server's buffers and parses)."""
        drift = any(r.profile == "drift" for r in self.rules)
        return load_project(
            self.root,
            dict(self.overrides),
            use_cache=self.use_cache,
            overlay=overlay,
            cache=cache,
            drift=drift,
            jobs=self.jobs,
            early=early,
        )

    def ignores(self, project: Project) -> Ignores:
        """The tree's per-file ignores, validated against every known code. Raises SetupError."""
        try:
            return per_file_ignores(project.config, self.known)
        except ConfigError as exc:
            raise SetupError(str(exc)) from exc

    def run(self, project: Project, ignores: Ignores | None = None) -> tuple[list[Finding], Hidden]:
        """(findings, hidden): the rules, then the suppression stage (per-file ignores, inline suppressions and
        their own findings). Raises SetupError for malformed per-file ignores."""
        ignores = self.ignores(project) if ignores is None else ignores
        select, ignore = list(self.select), list(self.ignore)
        findings = run_rules(project, self.rules, select, ignore, self.jobs)
        active = active_codes(self.rules, select, ignore)
        return apply_suppressions(project, findings, active, self.known, ignores)

    def rule_sets(self, project: Project) -> list[dict[str, object]]:
        """Each profile: whether it ran and why (for drift, the inputs it found)."""
        ran = {r.profile for r in self.rules}
        out: list[dict[str, object]] = []
        for name in PROFILES:
            if name not in ran:
                why = "house conventions, not adopted" if name in HOUSE and self.why == DEFAULTS_WHY else self.why
                out.append({"name": name, "ran": False, "why": why})
                continue
            entry: dict[str, object] = {"name": name, "ran": True, "why": self.why}
            if name == "drift":
                from .rules.found import drift_inputs  # reads the drift rules' module: only when drift ran

                entry["found"] = drift_inputs(project)
            out.append(entry)
        return out


def check_buffers(
    root: Path, rules: list[Rule], overlay: Mapping[str, str], cache: ParseCache | None
) -> tuple[Project, list[Finding]]:
    """The language server's check: the tree with the editor's buffers over the disk, its own settings (as
    edited) choosing the rules among ``rules`` (every rule), then the same run and suppressions as ``check``.
    Raises SetupError, located at the setting's line."""
    project = load_project(root, None, overlay=overlay, cache=cache)
    session = Session.choose(root, project.config, rules=rules, located=True)
    return project, session.run(project)[0]


def _profile_error(exc: ProfileError, config: Mapping[str, object] | None) -> SetupError:
    """``exc`` as a SetupError; with ``config``, at the line of its ``profiles`` setting."""
    if config is None:
        return SetupError(str(exc))
    message = str(exc).removeprefix("pyproject.toml: ")
    lines = config.get("_lines")
    line = lines.get("profiles", 1) if isinstance(lines, dict) else 1
    return SetupError(f"pyproject.toml:{line}: {message} ([tool.skills-check] profiles)")
