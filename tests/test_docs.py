"""The documentation site (docs/, mkdocs.yml): it builds in strict mode, and its examples run.

- ``mkdocs build --strict`` into a temporary folder: a broken link, anchor or API reference
  fails it. Skipped only where MkDocs is not installed (the ``docs`` extra), and a failure
  in CI (``CI`` set), where the pinned lane installs it.
- Every fenced code block of every page is run, or says why not: per page, in a fresh
  temporary folder, the ``python`` blocks in one namespace and the ``bash`` blocks in a
  shell, in page order. A block preceded by ``<!-- not run: REASON -->`` is skipped (it
  needs a server, a cluster, a cloud account...); ``text``, ``yaml`` and ``cron`` blocks
  are shown data, not code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from typing import List, NamedTuple, Optional

import pytest

from tfio_testutil import REPO

DOCS = os.path.join(REPO, "docs")
RUN = {"python", "bash"}
SHOWN = {"text", "yaml", "cron"}
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")


class Block(NamedTuple):
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    not_run: Optional[str]  # the reason, if marked


def pages() -> List[str]:
    found = []
    for root, _, files in os.walk(DOCS):
        found += [os.path.relpath(os.path.join(root, f), DOCS) for f in files if f.endswith(".md")]
    return sorted(found)


def blocks(page: str) -> List[Block]:
    with open(os.path.join(DOCS, page), encoding="utf-8") as f:
        lines = f.read().split("\n")
    found: List[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        start = i
        i += 1
        body = []
        while not re.match(rf"^{indent}```\s*$", lines[i]):
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1
        before = [line for line in lines[:start] if line.strip()]
        marker = NOT_RUN.search(before[-1]) if before else None
        found.append(Block(page, start + 1, lang, "\n".join(body) + "\n", marker.group(1) if marker else None))
    return found


def runnable_pages() -> List[str]:
    return [p for p in pages() if any(b.lang in RUN and b.not_run is None for b in blocks(p))]


def test_every_code_block_runs_or_says_why_not():
    problems = []
    for page in pages():
        for b in blocks(page):
            where = f"docs/{page}:{b.line}"
            if b.lang not in RUN | SHOWN:
                problems.append(f"{where}: a ```{b.lang or '(no language)'} block (use python, bash, text, yaml, cron)")
            elif b.not_run is not None and not b.not_run:
                problems.append(f"{where}: a 'not run' marker without its reason")
            elif b.not_run is not None and b.lang in SHOWN:
                problems.append(f"{where}: a 'not run' marker on a ```{b.lang} block, which is never run")
    assert problems == [], "\n".join(problems)
    ran = sum(b.lang in RUN and b.not_run is None for p in pages() for b in blocks(p))
    assert ran >= 20, f"only {ran} blocks of the docs run"


def run_bash(block: Block, cwd: str, env: dict) -> None:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (
        f"docs/{block.page}:{block.line}: the bash block exited with {done.returncode}\n"
        f"{block.code}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    )


@pytest.mark.parametrize("page", runnable_pages())
def test_the_examples_of_a_page_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    # The page's namespace is a module Python can import, as a script's __main__ is: Beam's
    # pickler (dill) then pickles the functions' globals as a reference to that module, not by
    # value (which would copy every object of the page, open writers included).
    module = types.ModuleType("docs_example_" + re.sub(r"\W", "_", page[: -len(".md")]))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    for block in blocks(page):
        if block.not_run is not None or block.lang not in RUN:
            continue
        if block.lang == "bash":
            run_bash(block, str(tmp_path), env)
            continue
        code = compile(block.code, f"docs/{page}:{block.line}", "exec")
        try:
            exec(code, namespace)
        except Exception as err:
            raise AssertionError(f"docs/{page}:{block.line}: the python block failed: {err!r}\n{block.code}") from err


def mkdocs_available() -> bool:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("MkDocs is not installed, and CI must build the docs (pip install -e '.[docs]')")
        return False
    return True


def test_the_site_builds_in_strict_mode(tmp_path):
    if not mkdocs_available():
        pytest.skip("MkDocs is not installed (pip install -e '.[docs]')")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env["PYTHONPATH"] = os.pathsep.join([REPO, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for command in ("build", "validate", "convert", "lookup", "diff"):
        assert f"usage: tfrecord-io {command}" in cli, command
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("ReadFromTFRecord", "BuildDataset", "TFRecordDataset", "EncodeExample"):
        assert f"{name}" in api, name


def test_the_readme_is_short_and_its_doc_links_exist():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    assert len(text.splitlines()) < 200
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", text)
    assert links, "the README links to no docs page"
    missing = [link for link in links if not os.path.exists(os.path.join(REPO, link))]
    assert missing == [], missing
