"""Compare the document model built through markdown-it-pyrs with the one built through markdown-it-py on every
markdown file under the folders given (a corpus of real repositories, e.g. ``../shared/corpora/skills-six.tar.xz``
extracted outside the repository), and time both. Prints the files that differ; exits 1 when any does.

    uv run --frozen python benchmarks/markdown_rs_equal.py DIR [DIR ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from skills_check.inputs import decode
from skills_check.parsers import markdown, markdown_rs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path, help="folders whose markdown files are compared")
    args = ap.parse_args()
    if not markdown_rs.available():
        print("markdown-it-pyrs is not installed (uv sync)")
        return 2
    texts = []
    for folder in args.folders:
        for path in sorted(folder.rglob("*.md")):
            if path.is_file() and not path.is_symlink():
                text, _ = decode(path.name, path.read_bytes())
                if text is not None:
                    texts.append((path, text))
    markdown.quick_read = lambda _text: None  # every document through a markdown-it port
    rust_tree = markdown_rs.tree
    t0 = time.process_time()
    fast = [markdown.parse_markdown("doc.md", text) for _, text in texts]
    t1 = time.process_time()
    markdown_rs.tree = lambda _text: None
    full = [markdown.parse_markdown("doc.md", text) for _, text in texts]
    t2 = time.process_time()
    markdown_rs.tree = rust_tree
    differ = [path for (path, _), a, b in zip(texts, fast, full, strict=True) if a != b]
    for path in differ:
        print(f"differs: {path}")
    used = sum(rust_tree(text) is not None for _, text in texts)
    print(
        f"{len(texts)} markdown files, {len(differ)} read differently; the Rust port read {used} "
        f"(the rest went to markdown-it-py); cpu: markdown-it-pyrs {t1 - t0:.2f} s, markdown-it-py {t2 - t1:.2f} s "
        f"({(t2 - t1) / max(t1 - t0, 1e-9):.1f}x)"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
