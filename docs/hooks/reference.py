"""MkDocs hook: the reference pages are generated when the site is built, never copied by hand.

- ``reference/cli.md``: the marker ``<!-- cli-help -->`` becomes the ``--help`` text of
  ``tfrecord-io`` and of each of its subcommands, rendered from the argparse parser the
  command itself uses (``tfrecord_io.pipelines.cli.build_parser``).
- ``reference/api.md``: each marker ``<!-- api: MODULE -->`` becomes one mkdocstrings
  directive (``::: path``) per name in ``MODULE.__all__``, at the module where the object is
  defined (the package's Beam names are imported lazily, so mkdocstrings' static analysis
  alone would not find them).

Registered in mkdocs.yml under ``hooks:``.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
from typing import List, Tuple

API_MARKER = re.compile(r"<!-- api: ([\w.]+) -->")
CLI_MARKER = "<!-- cli-help -->"
HELP_COLUMNS = "100"  # argparse wraps to $COLUMNS; fixed, so the page is the same on every machine


def subcommands() -> List[Tuple[str, object]]:
    """``(name, parser)`` of ``tfrecord-io`` and of each subcommand, in the parser's order."""
    from tfrecord_io.pipelines.cli import build_parser

    parser = build_parser()
    found = [("tfrecord-io", parser)]
    for action in parser._actions:  # argparse has no public accessor for subparsers
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            found += [(f"tfrecord-io {name}", sub) for name, sub in choices.items()]
    return found


def cli_markdown() -> str:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        parts = []
        for name, parser in subcommands():
            parts.append(f"## `{name}`\n\n```text\n{parser.format_help().rstrip()}\n```\n")
        return "\n".join(parts)
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def api_paths(module_name: str) -> List[Tuple[str, str]]:
    """``(name, identifier for mkdocstrings)`` for each public name of a module."""
    module = importlib.import_module(module_name)
    paths = []
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.ismodule(obj):
            paths.append((name, obj.__name__))
        elif (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__name__ == name:
            paths.append((name, f"{obj.__module__}.{obj.__qualname__}"))
        else:  # an instance or constant: where the module's __all__ names it
            paths.append((name, f"{module_name}.{name}"))
    return sorted(paths, key=lambda p: p[0].lower())


def api_markdown(module_name: str) -> str:
    return "\n".join(f"::: {path}\n" for _, path in api_paths(module_name))


def on_page_markdown(markdown: str, page, config, files) -> str:
    src = page.file.src_uri
    if src == "reference/cli.md":
        if CLI_MARKER not in markdown:
            raise ValueError(f"{src}: the marker {CLI_MARKER} is missing")
        return markdown.replace(CLI_MARKER, cli_markdown())
    if src == "reference/api.md":
        return API_MARKER.sub(lambda m: api_markdown(m.group(1)), markdown)
    return markdown
