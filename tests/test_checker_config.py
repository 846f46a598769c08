"""Strict ``[tool.skills-check]`` (issue 39 item 4): an unknown key, section or profile and a value of the wrong
type are one error line naming the key and the nearest valid name (exit 2); a per-file-ignores glob matching
nothing is a warning (SU004); SU002 honours per-file ignores like every other code. The real CLI, in-process."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from mgpu_testing.checker import SKILL, TROUBLE, append, check
from skills_check import cli
from skills_check.loader import config
from skills_check.loader.config import PROFILE_NAMES, load_config, locate
from skills_check.model import ConfigError, SetupError
from skills_check.rules.registry import PROFILES


def _run(root: Path, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["check", "--root", str(root), "--no-cache", *extra])
    return rc, out.getvalue(), err.getvalue()


def _config(root: Path, toml: str) -> None:
    """Add ``toml`` to the tree's pyproject.toml: lines under ``[tool.skills-check]`` go into the section it has,
    replacing the fixture's line of the same key."""
    path = root / "pyproject.toml"
    text = path.read_text(encoding="utf-8")
    head = "[tool.skills-check]\n"
    assert head in text
    if toml.startswith(head):
        for line in toml.split("\n")[1:]:
            key = line.split("=")[0].strip()
            text = "\n".join(old for old in text.split("\n") if old.split("=")[0].strip() != key)
        path.write_text(text.replace(head, toml + "\n", 1), encoding="utf-8")
    else:
        path.write_text(text + f"\n{toml}\n", encoding="utf-8")


def _line(root: Path, needle: str) -> int:
    lines = (root / "pyproject.toml").read_text(encoding="utf-8").split("\n")
    return next(i for i, line in enumerate(lines, start=1) if needle in line)


def test_profile_names_are_the_registry_s() -> None:
    assert list(PROFILE_NAMES) == list(PROFILES)


@pytest.mark.parametrize(
    ("toml", "needle", "named", "nearest"),
    [
        ('[tool.skills-check]\nper_file_ignores = { "*.md" = ["SK1"] }', "per_file_ignores", "per_file_ignores",
         "per-file-ignores"),
        ('[tool.skills-check.per_file_ignores]\n"*.md" = ["SK1"]', "per_file_ignores", "per_file_ignores",
         "per-file-ignores"),
        ('[tool.skills-check]\nprofile = ["spec"]', "profile =", "profile", "profiles"),
        ('[tool.skills-check]\nprofiles = ["spec", "drfit"]', "profiles =", "drfit", "drift"),
        ('[tool.skills-check]\nadopt = ["options_table"]', "adopt =", "options_table", "options-table"),
        ('[tool.skills-check]\ntools."x y" = { scrpt = "x.py" }', 'tools."x y"', "scrpt", "script"),
        ("[tool.skill-check]\nprofiles = []", "[tool.skill-check]", "[tool.skill-check]", "[tool.skills-check]"),
        ("[tool.skills_check]\nprofiles = []", "[tool.skills_check]", "[tool.skills_check]", "[tool.skills-check]"),
    ],
)  # fmt: skip
def test_an_unknown_name_is_one_line_naming_it_and_the_nearest(
    tree: Path, toml: str, needle: str, named: str, nearest: str
) -> None:
    _config(tree, toml)
    rc, out, err = _run(tree)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: pyproject.toml:{_line(tree, needle)}: "), err
    assert named in err and f"did you mean `{nearest}`" in err.replace("[tool.", "`[tool.").replace("]?", "]`?")


@pytest.mark.parametrize(
    ("toml", "key", "what"),
    [
        ("docs = 3", "docs", "a string path"),
        ('profiles = "spec"', "profiles", "a list of profile names"),
        ("routing_threshold = true", "routing_threshold", "a number"),
        ('per-file-ignores = "SK1"', "per-file-ignores", "a table"),
        ("skills = []", "skills", "a folder or glob"),
    ],
)
def test_a_wrong_type_is_one_line_naming_the_key(tree: Path, toml: str, key: str, what: str) -> None:
    _config(tree, f"[tool.skills-check]\n{toml}")
    rc, _, err = _run(tree)
    assert rc == 2 and err.count("\n") == 1
    assert f"pyproject.toml:{_line(tree, toml)}: [tool.skills-check] {key} must be {what}" in err


def test_the_error_is_one_typed_exception_with_file_line_and_key(tree: Path) -> None:
    """What the language server turns into a diagnostic on pyproject.toml."""
    append(tree, "pyproject.toml", '\n[tool.skills-check.per_file_ignores]\n"*.md" = ["SK1"]\n')
    with pytest.raises(ConfigError) as caught:
        load_config(tree)
    exc = caught.value
    assert isinstance(exc, SetupError)
    assert (exc.path, exc.line, exc.key) == ("pyproject.toml", _line(tree, "per_file_ignores"), "per_file_ignores")
    assert str(exc) == f"pyproject.toml:{exc.line}: {exc.message}"


def test_locate_finds_keys_in_tables_dotted_keys_and_headers() -> None:
    text = '[tool]\nx = 1\n\n[tool.skills-check]\ndocs = "d"\ntools."a b" = "s.py"\n\n[tool.skills-check.per-file-ignores]\n"*.md" = ["SK1"]\n'
    assert locate(text, "tool", "skills-check", "docs") == 5
    assert locate(text, "tool", "skills-check", "tools", "a b") == 6
    assert locate(text, "tool", "skills-check", "per-file-ignores") == 8
    assert locate(text, "tool", "skills-check", "per-file-ignores", "*.md") == 9
    assert locate(text, "tool", "skills-check", "absent") == 4  # the section, when the key is not written


def test_a_known_section_of_another_tool_is_left_alone(tree: Path) -> None:
    append(tree, "pyproject.toml", '\n[tool.skills-ref]\nx = 1\n\n[tool.skill-creator]\ny = "z"\n')
    rc, _, err = _run(tree)
    assert rc == 0, err


def test_a_profile_flag_with_a_typo_names_the_nearest(tree: Path) -> None:
    rc, _, err = _run(tree, "--profile", "spec,claud")
    assert rc == 2 and err.count("\n") == 1 and "`claud`" in err and "did you mean `claude`" in err


def _ignores(root: Path, table: str) -> None:
    append(root, "pyproject.toml", f"\n[tool.skills-check.per-file-ignores]\n{table}\n")


def test_a_glob_matching_no_file_is_a_warning_at_its_line(tree: Path) -> None:
    _ignores(tree, '"skills/**/SKILL.md" = ["SK20"]\n"doc/*.rst" = ["SK204"]')
    rc, findings = check(tree, "--no-cache")
    assert rc == 0  # a warning
    warned = [f for f in findings if f["code"] == "SU004"]
    assert [(f["path"], f["line"], f["severity"]) for f in warned] == [
        ("pyproject.toml", _line(tree, '"doc/*.rst"'), "warning")
    ]
    assert "'doc/*.rst'" in warned[0]["message"]
    assert check(tree, "--no-cache", "--strict")[0] == 1


def test_su002_honours_per_file_ignores(tree: Path) -> None:
    """An unused suppression in an RST page is SU002; a per-file ignore of SU002 for docs/ hides it, as it hides
    SU001 and SU003 (and says so in the count)."""
    append(tree, TROUBLE, "\n.. skills-check: disable-next-line SK204 -- nothing to hide\n\nPlain text.\n")
    append(tree, SKILL, "\n<!-- skills-check: disable-next-line SK203 -- nothing either -->\nPlain text.\n")
    assert sorted((f["code"], f["path"]) for f in check(tree, "--no-cache")[1]) == [
        ("SU002", TROUBLE),
        ("SU002", SKILL),
    ]
    _ignores(tree, '"docs/**/*.rst" = ["SU002"]')
    rc, findings = check(tree, "--no-cache")
    assert rc == 1 and [(f["code"], f["path"]) for f in findings] == [("SU002", SKILL)]
    err = _run(tree)[2]
    assert "1 by per-file-ignores" in err


def test_an_unknown_code_in_per_file_ignores_is_reported_at_its_glob(tree: Path) -> None:
    _ignores(tree, '"skills/**/SKILL.md" = ["SK20"]\n"docs/*.rst" = ["SK9203"]')
    rc, _, err = _run(tree)
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith(f"error: pyproject.toml:{_line(tree, 'SK9203')}: ") and "did you mean SK203?" in err


def _scan_locate(text: str, *path: str) -> int:
    """``locate`` as a scan of the lines for each question, reading keys with the module's own patterns (what
    its index of first lines must answer alike)."""
    best, best_len, table = 1, 0, ()
    for i, line in enumerate(text.split("\n"), start=1):
        header = config._HEADER.match(line)
        if header:
            table = full = config._segments(header.group(1))
        elif key := config._KEYLINE.match(line):
            full = table + config._segments(key.group(1))
        else:
            continue
        common = 0
        while common < min(len(full), len(path)) and full[common] == path[common]:
            common += 1
        if common == len(path):
            return i
        if common > best_len:
            best, best_len = i, common
    return best


def test_locate_answers_every_key_of_a_pyproject_like_a_scan_of_its_lines() -> None:
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    text += '\n[tool.skills-check.per-file-ignores]\n"docs/*.rst" = ["SK101"]\n\n[tool."quoted.name"]\nx = 1\n'
    keys = {
        tuple(k)
        for k in (
            ("tool", "skills-check", "docs"),
            ("tool", "skills-check", "per-file-ignores", "docs/*.rst"),
            ("tool", "skills-check", "nothing"),
            ("tool", "quoted.name", "x"),
            ("tool", "ruff", "line-length"),
            ("project", "name"),
            ("project",),
            ("absent", "key"),
            ("tool", "importlinter", "contracts"),
        )
    }
    for path in sorted(keys):
        assert locate(text, *path) == _scan_locate(text, *path), path
