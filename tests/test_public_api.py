"""The public API, written down: ``import tfrecord_io as tfio`` and its names, the names of
``tfrecord_io.transforms`` and ``tfrecord_io.torch``, the module paths the ``tfrecord``
package's users import (this package is a drop-in for it), ``python -m tfrecord_io``, and
every ``tfrecord_io.x.y`` path README.md and docs/*.md name.

Why: the modules behind these names move (issue #32 grouped the root into sub-packages);
a move that drops a public name or leaves a documented path dangling fails here, not in a
user's code.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys

import pytest

import tfrecord_io as tfio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TFIO_NAMES = {
    "BuildDataset", "CorruptRecordError", "CorruptRegion", "DatasetSelection", "ExampleCodecError",
    "IndexFileError", "ReadAllFromTFRecord", "ReadDataset", "ReadFromTFRecord", "RecordIndex",
    "RecordTooLargeError", "RecordWriter", "TFRecordError", "TFRecordWriter", "TruncatedRecordError",
    "UnknownFeatureError", "WriteToTFRecord", "build_example", "build_index", "build_sequence_example",
    "create_index", "encode_frame", "example_loader", "find_index", "infer_description", "iter_dataset",
    "iterator_utils", "load_index", "multi_tfrecord_loader", "open_dataset", "parse_example",
    "parse_examples_batch", "parse_sequence_example", "read_records", "select_dataset", "sequence_loader",
    "serialize_example", "serialize_sequence_example", "tfrecord_iterator", "tfrecord_loader", "to_arrow",
    "to_arrow_batches",
}  # fmt: skip
TRANSFORMS_NAMES = {
    "Array", "Audio", "AudioData", "AudioFrames", "Bytes", "ColumnError", "DecodeError", "DecodeExample",
    "DecodeResult", "DecodeSequenceExample", "EncodeError", "EncodeExample", "EncodeResult",
    "EncodeSequenceExample", "Encoder", "ExampleDecoder", "FeatureSpec", "Float", "FramesData", "Image", "Int",
    "Label", "STAGES", "SequenceEncoder", "Steps", "Text", "ValidateTFRecords", "check_record", "check_spec",
    "decode_example", "decode_image", "decode_sequence_example", "description", "encode_features", "encode_row",
    "encode_sequence_row", "encoder_from_config", "feature_specs", "rejected_row", "spec_config",
    "spec_from_config", "spec_info", "tf_parse_spec", "to_tf_feature_spec", "validate_files",
}  # fmt: skip
TORCH_NAMES = {
    "MultiTFRecordDataset", "PadCollate", "PadTo", "ReadContext", "ReadOptions", "RecordDecoder", "StateError",
    "TFRecordBatchDataset", "TFRecordDataset", "TFRecordIndexedDataset", "batch_tensor", "current_context",
    "distributed_rank", "free_batch_buffers", "from_dataset", "pad_collate", "pad_stack",
}  # fmt: skip

# Module paths kept for the ``tfrecord`` package's users (tfrecord.iterator_utils,
# tfrecord.torch.dataset, tfrecord.tools.tfrecord2idx) and the documented entry modules.
DOCUMENTED_MODULES = [
    "tfrecord_io",
    "tfrecord_io.iterator_utils",
    "tfrecord_io.tools",
    "tfrecord_io.tools.tfrecord2idx",
    "tfrecord_io.transforms",
    "tfrecord_io.pipelines",
    "tfrecord_io.pipelines.cli",
    "tfrecord_io.arrow",
    "tfrecord_io.errors",
]
TORCH_MODULES = ["tfrecord_io.torch", "tfrecord_io.torch.dataset"]

# Dotted words in the docs that are not import paths.
NOT_PATHS = {"tfrecord_io.shape"}  # an Arrow field-metadata key (docs/interop.md)


def test_tfio_names():
    assert set(tfio.__all__) == TFIO_NAMES
    assert len(tfio.__all__) == len(TFIO_NAMES), "a name listed twice in tfrecord_io.__all__"
    for name in sorted(TFIO_NAMES):
        assert getattr(tfio, name) is not None, name


def test_transforms_names():
    import tfrecord_io.transforms as transforms

    assert set(transforms.__all__) == TRANSFORMS_NAMES
    assert len(transforms.__all__) == len(TRANSFORMS_NAMES)
    for name in sorted(TRANSFORMS_NAMES):
        assert getattr(transforms, name) is not None, name


def test_torch_names():
    pytest.importorskip("torch")
    import tfrecord_io.torch as tt

    assert set(tt.__all__) == TORCH_NAMES
    assert len(tt.__all__) == len(TORCH_NAMES)
    for name in sorted(TORCH_NAMES):
        assert getattr(tt, name) is not None, name


@pytest.mark.parametrize("module", DOCUMENTED_MODULES)
def test_documented_modules_import(module):
    importlib.import_module(module)


@pytest.mark.parametrize("module", TORCH_MODULES)
def test_torch_drop_in_modules_import(module):
    pytest.importorskip("torch")
    importlib.import_module(module)


def test_drop_in_names_of_the_tfrecord_package():
    """``tfrecord.reader`` / ``tfrecord.writer`` names are ``tfio`` names; ``iterator_utils``
    is the same module under both paths."""
    import tfrecord_io.iterator_utils

    assert tfio.iterator_utils is tfrecord_io.iterator_utils
    for name in ("tfrecord_iterator", "tfrecord_loader", "example_loader", "sequence_loader",
                 "multi_tfrecord_loader", "TFRecordWriter"):  # fmt: skip
        assert callable(getattr(tfio, name))


def test_python_dash_m_tfrecord_io_is_the_command():
    assert importlib.util.find_spec("tfrecord_io.__main__") is not None
    out = subprocess.run(
        [sys.executable, "-m", "tfrecord_io", "--help"], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert "tfrecord-io" in out.stdout


def _documented_paths():
    paths = set()
    files = [os.path.join(ROOT, "README.md")]
    docs = os.path.join(ROOT, "docs")
    for dirpath, _, names in os.walk(docs):
        files += [os.path.join(dirpath, n) for n in names if n.endswith(".md")]
    for path in files:
        with open(path, encoding="utf-8") as f:
            paths.update(re.findall(r"\btfrecord_io(?:\.[A-Za-z_]\w*)+", f.read()))
    return sorted(paths - NOT_PATHS)


def _resolve(dotted: str) -> object:
    """Import the longest importable prefix of ``dotted``; the rest are attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name and (name == err.name or name.startswith(err.name + ".")):
                continue
            raise
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


@pytest.mark.parametrize("dotted", _documented_paths())
def test_every_path_the_docs_name_resolves(dotted):
    if dotted.startswith("tfrecord_io.torch"):
        pytest.importorskip("torch")
    if dotted.startswith("tfrecord_io._speedups") and importlib.util.find_spec("tfrecord_io._speedups") is None:
        pytest.skip("the C core is not built here")
    _resolve(dotted)


OLD_PATHS = sorted(__import__("tfrecord_io._moved", fromlist=["MOVED"]).MOVED)


@pytest.mark.parametrize("old", OLD_PATHS)
def test_a_module_path_of_0_2_imports_the_moved_module_with_a_warning(old):
    """Each module path of 0.2 (named in its README and docs) still imports, as the very
    module at its new place (one copy: same classes, same state), with a
    DeprecationWarning naming the new path; in a fresh process, so nothing is cached."""
    new = tfio._moved.new_name(old)
    code = (
        "import importlib, sys, warnings\n"
        "warnings.filterwarnings('error', message='.* moved to ', category=DeprecationWarning)\n"
        f"new = importlib.import_module({new!r})\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        "mine = [str(w.message) for w in caught if w.category is DeprecationWarning and 'moved to' in str(w.message)]\n"
        f"copies = [k for k, m in sys.modules.items() if getattr(m, '__name__', None) == {new!r}]\n"
        f"ours = [m for m in mine if m.startswith({old + ' moved to ' + new!r})]\n"
        "print(old is new, len(ours), len({id(sys.modules[k]) for k in copies}), ours[0] if ours else '')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    same, warned, objects, message = proc.stdout.strip().split(" ", 3)
    # the same object under both names; one warning for the module itself (a moved
    # package's own warning may come first), naming where it is now
    assert (same, warned, objects) == ("True", "1", "1"), proc.stdout
    assert "deprecated" in message, proc.stdout


def test_a_submodule_of_a_moved_package_is_not_loaded_twice():
    """``tfrecord_io.pipelines.build.commit`` (a package moved whole) is the module of
    ``pipelines.building``, not a second copy found on the old package's path."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("tfrecord_io.pipelines.build.commit")
    assert old is importlib.import_module("tfrecord_io.pipelines.building.commit")
    assert old.__spec__.name == "tfrecord_io.pipelines.building.commit"


def _imported_modules(path: str, module: str):
    """Every module an ``import`` or ``from ... import`` in ``path`` names (relative ones
    resolved from ``module``), each ``from X import y`` also as ``X.y``."""
    import ast

    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            yield base
            for alias in node.names:
                yield f"{base}.{alias.name}"


def test_nothing_in_the_package_imports_a_path_of_0_2():
    """The package's own imports (also those inside functions) name modules where they
    are now: an old path would warn in every user's process."""
    pkg = os.path.join(ROOT, "tfrecord_io")
    found = []
    for folder, _, names in os.walk(pkg):
        for name in names:
            if not name.endswith(".py") or name == "_moved.py":
                continue
            path = os.path.join(folder, name)
            module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
            for imported in _imported_modules(path, module):
                if imported.startswith("tfrecord_io.") and tfio._moved.new_name(imported):
                    found.append(f"{os.path.relpath(path, ROOT)}: {imported}")
    assert found == []
