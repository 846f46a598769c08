"""Hostile trees: each becomes findings with a location (or a one-line exit 2), never a traceback, a
hang, a read outside the root, a fetch or code execution. Every check runs in a child process under
kernel-enforced memory and CPU limits (``check_bounded``: RLIMIT_AS, RLIMIT_CPU) and a wall timeout."""

from __future__ import annotations

import json
import os
import pickle
import socket
from pathlib import Path

import pytest

# every check here runs in a child under kernel memory and CPU limits: the process is what is tested
pytestmark = pytest.mark.e2e

from mgpu_testing.checker import (
    DEMO,
    EVALS_JSON,
    HELPER,
    REF,
    SKILL,
    assert_finding,
    check_bounded,
    edit,
)

SECRET = "OUTSIDE-SECRET-7f3a"


@pytest.fixture()
def outside(tmp_path: Path) -> Path:
    """A folder beside the checked root holding a secret file the checker must never read."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.md").write_text(f"---\nname: x\n---\n# {SECRET}\n", encoding="utf-8")
    (folder / "secret.py").write_text(f"import argparse\np = argparse.ArgumentParser()\np.add_argument('--{SECRET}')\n")
    return folder


def bounded(root: Path, *extra: str, **kw) -> tuple[int, list[dict], str]:
    res = check_bounded(root, *extra, **kw)
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    assert res.returncode in (0, 1), (res.returncode, res.stderr[-2000:])
    assert SECRET not in res.stdout + res.stderr
    return res.returncode, json.loads(res.stdout)["findings"], res.stderr


def test_links_and_config_paths_leaving_the_root_are_never_read(tree: Path, outside: Path) -> None:
    os.unlink(tree / REF)
    os.symlink(outside / "secret.md", tree / REF)  # a skill file linked outside
    os.symlink(outside / "secret.md", tree / "docs/source/leak.rst")  # an RST page linked outside
    os.symlink(outside, tree / "skills/user/leaky")  # a whole skill folder linked outside
    text = (tree / "pyproject.toml").read_text(encoding="utf-8")
    trainer = next(line for line in text.splitlines() if line.startswith("trainer"))
    edit(tree, "pyproject.toml", trainer, 'trainer = "../outside/secret.py"')
    rc, findings, _ = bounded(tree)
    assert rc == 1
    assert_finding(findings, "IN006", REF)
    assert_finding(findings, "IN006", "docs/source/leak.rst")
    assert_finding(findings, "IN006", "skills/user/leaky")
    hit = assert_finding(findings, "IN006", "pyproject.toml")
    assert "trainer" in hit["message"] and hit["line"] > 1
    rc, findings, _ = bounded(tree, "--launcher", str(outside / "secret.py"))  # absolute, by flag
    assert any(f["code"] == "IN006" and "launcher" in f["message"] for f in findings)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_markdown_linked_to_a_device(tree: Path, device: str) -> None:
    os.symlink(device, tree / DEMO / "endless.md")
    _, findings, _ = bounded(tree, mem_mb=512, cpu_s=20)
    assert_finding(findings, "IN006", f"{DEMO}/endless.md")


def test_fifos_are_not_read(tree: Path) -> None:
    os.mkfifo(tree / DEMO / "pipe.md")
    os.mkfifo(tree / "trainer.fifo")
    _, findings, _ = bounded(tree, "--trainer", "trainer.fifo", cpu_s=20, wall_s=60)
    assert_finding(findings, "IN007", f"{DEMO}/pipe.md")
    assert_finding(findings, "IN007", "trainer.fifo")


def test_symlink_loop_binary_non_utf8_and_huge_files(tree: Path) -> None:
    os.symlink("loop.md", tree / DEMO / "loop.md")
    (tree / DEMO / "nul.md").write_bytes(b"# ok\n\x00\x01")
    (tree / DEMO / "latin.md").write_bytes(b"# caf\xe9\n")
    with open(tree / DEMO / "huge.md", "wb") as fh:
        fh.truncate(50 * 1024 * 1024)  # 50 MB (sparse): refused by size before any byte is read
    _, findings, _ = bounded(tree, mem_mb=512)
    assert_finding(findings, "IN005", f"{DEMO}/loop.md")
    assert_finding(findings, "IN002", f"{DEMO}/nul.md", 2)
    assert_finding(findings, "IN003", f"{DEMO}/latin.md", 1)
    assert_finding(findings, "IN004", f"{DEMO}/huge.md")


@pytest.mark.parametrize("levels,code", [(3000, "IN004"), (1000, "IN021")])
def test_deeply_nested_rst_is_refused_not_parsed(tree: Path, levels: int, code: str) -> None:
    """3,000 nested block quotes (4.5 MB) are past the size cap; 1,000 (0.5 MB) past the nesting bound."""
    quotes = "".join(" " * i + "quote\n\n" for i in range(levels))
    (tree / "docs/source/deep.rst").write_text("Deep\n====\n\n" + quotes, encoding="utf-8")
    _, findings, _ = bounded(tree, mem_mb=768)
    assert_finding(findings, code, "docs/source/deep.rst")


def test_evals_json_huge_integer_and_too_many_entries(tree: Path) -> None:
    (tree / EVALS_JSON).write_text('[{"id": ' + "9" * 10_000 + "}]", encoding="utf-8")
    _, findings, _ = bounded(tree)
    assert "10000 digits" in assert_finding(findings, "IN040", EVALS_JSON, 1)["message"]
    (tree / EVALS_JSON).write_text(json.dumps([{}] * 100_000), encoding="utf-8")  # 100,000 entries, 0.4 MB
    _, findings, _ = bounded(tree, cpu_s=60)
    assert "100000 entries" in assert_finding(findings, "IN041", EVALS_JSON)["message"]
    sk310 = [f for f in findings if f["code"] == "SK310"]
    assert len(sk310) == 51  # at most 50 per file and code, then one line counting the rest
    counted = [f for f in sk310 if "more SK310 finding(s)" in f["message"]]
    # only the first 1,000 entries are checked (IN041), each empty one missing the same 4 fields: 50 findings
    # shown, one counting the other 3,950 (100,000 entries would have made it 399,950)
    assert len(counted) == 1 and counted[0]["message"].startswith("3950 more SK310 finding(s)"), counted


def test_bad_config_and_empty_root_exit_2_in_one_line(tree: Path) -> None:
    (tree / "pyproject.toml").write_text("tool = 5\n", encoding="utf-8")
    res = check_bounded(tree)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().count("\n") == 0 and "pyproject.toml:1" in res.stderr
    res = check_bounded("", cpu_s=20)
    assert res.returncode == 2 and "--root is empty" in res.stderr and "Traceback" not in res.stderr


def test_yaml_alias_loop_and_bomb(tree: Path) -> None:
    edit(tree, SKILL, "---\nname:", "---\nloop: &l {self: *l}\nname:")
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(9)
    )
    edit(tree, HELPER, "---\nname:", "---\n" + bomb + "name:")
    _, findings, _ = bounded(tree, mem_mb=512, cpu_s=20)
    assert_finding(findings, "IN013", SKILL, 2)
    assert_finding(findings, "IN013", HELPER, 2)
    # one finding per unreadable frontmatter: no SK1xx "missing" cascade, no unknown-name findings
    assert not [f for f in findings if f["code"].startswith(("SK1", "SK210", "SK311", "DR40"))], findings


@pytest.mark.parametrize("unit", ["*a _b ", "["])
def test_pathological_markdown_inline_is_bounded(tree: Path, unit: str) -> None:
    big = unit * (int(4.9 * 1024 * 1024) // len(unit))
    (tree / DEMO / "big.md").write_text(big, encoding="utf-8")
    _, findings, _ = bounded(tree, mem_mb=768, cpu_s=30)
    assert_finding(findings, "IN004", f"{DEMO}/big.md")
    at_cap = unit * ((256 * 1024 - 16) // len(unit))  # just under the markdown cap: parsed, within bounds
    (tree / DEMO / "big.md").write_text(at_cap, encoding="utf-8")
    _, findings, _ = bounded(tree, mem_mb=768, cpu_s=30)
    assert not [f for f in findings if f["path"] == f"{DEMO}/big.md" and f["code"].startswith("IN")]


def test_rst_directives_read_fetch_and_pass_through_nothing(tree: Path, outside: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    url = f"http://127.0.0.1:{server.getsockname()[1]}/x.csv"
    secret = outside / "secret.md"
    (tree / "docs/source/hostile.rst").write_text(
        "Hostile\n=======\n\n"
        f".. include:: {secret}\n\n"
        f".. raw:: html\n   :file: {secret}\n\n"
        f".. raw:: html\n   :url: {url}\n\n"
        f".. csv-table:: t\n   :file: {secret}\n\n"
        f".. csv-table:: t\n   :url: {url}\n\n"
        f".. raw:: html\n\n   <script>{SECRET}</script>\n",
        encoding="utf-8",
    )
    try:
        bounded(tree, cpu_s=30)
        with pytest.raises(BlockingIOError):
            server.accept()  # a fetch would have left a connection in the backlog
    finally:
        server.close()


def test_a_planted_cache_cannot_run_code(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = dict(os.environ, SKILLS_CHECK_CACHE_DIR=str(cache))
    marker = tmp_path / "PWNED"
    bounded(tree, env=env)
    bounded(tree, env=env)  # the second check of a settled tree keeps its report too
    files = sorted(cache.glob("*.json"))
    assert [f.name.endswith(".results.json") for f in files] == [False, True]  # the parse cache, the results

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    planted = pickle.dumps(Payload())
    for f in files:
        f.write_bytes(planted)
    files[0].with_suffix(".pickle").write_bytes(planted)  # the old cache name too
    _, findings, _ = bounded(tree, env=env)
    assert findings == [] and not marker.exists()
    files[0].write_text(json.dumps({"stamp": "x", "entries": [["md", SKILL, "0", {"$": "os.system", "v": {}}]]}))
    files[1].write_text(json.dumps({"root": "x", "entries": {"k": {"$": "os.system", "stdout": 1}}}))
    _, findings, _ = bounded(tree, env=env)
    assert findings == [] and not marker.exists()


def test_literalinclude_never_opens_outside_the_root_or_special_files(tree: Path, outside: Path) -> None:
    """Each include that leaves the root, is a link leaving it, is not a regular file or is too big is a
    finding at its directive; the file is never opened (a FIFO would block, /dev/zero never ends)."""
    docs = tree / "docs"
    os.mkfifo(docs / "pipe.sh")
    os.symlink(outside / "secret.md", docs / "leak.sh")
    os.symlink("/dev/zero", docs / "zero.sh")
    with open(docs / "huge.sh", "wb") as fh:
        fh.truncate(50 * 1024 * 1024)  # sparse: refused by size before any byte is read
    cases = [
        ("../../etc/passwd", "IN006"),
        ("../../outside/secret.md", "IN006"),
        ("leak.sh", "IN006"),
        ("zero.sh", "IN006"),
        ("pipe.sh", "IN007"),
        ("huge.sh", "IN004"),
    ]
    page = "Hostile\n=======\n\n" + "".join(
        f".. literalinclude:: {target}\n   :language: bash\n\n" for target, _ in cases
    )
    (docs / "hostile.rst").write_text(page, encoding="utf-8")
    rc, findings, _ = bounded(tree, mem_mb=512, cpu_s=20, wall_s=60)
    assert rc == 1
    for i, (target, code) in enumerate(cases):
        hit = assert_finding(findings, code, "docs/hostile.rst", 4 + 3 * i)
        assert hit["message"].startswith(f"literalinclude {target}: ") and hit["col"] == 1
    assert {f["path"] for f in findings} == {"docs/hostile.rst"}, findings
    assert "root:x:0" not in json.dumps(findings)


def test_literalinclude_work_is_bounded(tree: Path) -> None:
    """A page with 150 includes reads the first 100; one showing a 1 MB file again and again stops at
    1 MB of included code (all of it would take minutes of rules' work). One finding each."""
    (tree / "docs/b").write_text(("echo x\n" * 150_000)[: 1024 * 1024 - 1], encoding="utf-8")
    (tree / "docs/many.rst").write_text(
        "Many\n====\n\n" + "".join(f".. literalinclude:: b\n   :lines: {i + 1}\n\n" for i in range(150)),
        encoding="utf-8",
    )
    (tree / "docs/again.rst").write_text(
        "Again\n=====\n\n" + "".join(f".. literalinclude:: b\n   :lines: {i + 1}-\n\n" for i in range(150)),
        encoding="utf-8",
    )
    _, findings, _ = bounded(tree, mem_mb=768, cpu_s=30)
    hit = assert_finding(findings, "IN022", "docs/many.rst", 4 + 3 * 100)
    assert "more than 100 literalinclude" in hit["message"]
    hit = assert_finding(findings, "IN022", "docs/again.rst", 4 + 3 * 1)
    assert "included code passes 1024 KB" in hit["message"]
    assert sorted((f["path"], f["line"]) for f in findings) == [
        ("docs/again.rst", 7),
        ("docs/again.rst", 304),
        ("docs/many.rst", 304),
    ], findings
