"""The wheel built from this checkout holds one top-level package, ``tfrecord_io``, and all of it.

Top-level names besides ``tfrecord_io`` (the old ``pipelines`` and ``transforms``) collide
with other projects and with users' own folders; a module left out of the wheel (a
sub-package without ``__init__.py`` that the package finder skips, say) works from a
checkout and fails only once installed. ``test_install`` installs the wheel beside the
newest Beam and TensorFlow (heavy); this test only builds it and reads it.
"""

from __future__ import annotations

import configparser
import glob
import os
import subprocess
import sys
import zipfile
from typing import List

from tfio_testutil import REPO

PACKAGE = "tfrecord_io"


def checkout_modules() -> List[str]:
    """Every ``.py`` file of the package in this checkout, as a path inside the wheel."""
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(REPO, PACKAGE)):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        out += [
            os.path.relpath(os.path.join(dirpath, f), REPO).replace(os.sep, "/") for f in filenames if f.endswith(".py")
        ]
    return sorted(out)


def wheel_problems(wheel: str) -> List[str]:
    """What is wrong with the wheel's contents ([] when nothing is)."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
        entry_points = configparser.ConfigParser()
        entry_points.read_string(z.read(f"{dist_info}/entry_points.txt").decode("utf-8"))
        top_level = z.read(f"{dist_info}/top_level.txt").decode("utf-8").split()
    problems = []
    tops = sorted({n.split("/")[0] for n in names})
    if tops != sorted([PACKAGE, dist_info]):
        problems.append(f"top-level entries {tops}, expected only {PACKAGE}/ and {dist_info}/")
    if top_level != [PACKAGE]:
        problems.append(f"top_level.txt names {top_level}")
    in_wheel = sorted(n for n in names if n.endswith(".py"))
    missing = sorted(set(checkout_modules()) - set(in_wheel))
    if missing:
        problems.append(f"modules of the checkout missing from the wheel: {missing}")
    extra = sorted(set(in_wheel) - set(checkout_modules()))
    if extra:
        problems.append(f"modules in the wheel that the checkout does not have: {extra}")
    if not any(n.startswith(f"{PACKAGE}/_speedups.") and n.endswith((".so", ".pyd")) for n in names):
        problems.append("no compiled C core (tfrecord_io/_speedups)")
    for name, target in entry_points["console_scripts"].items():
        module = target.split(":")[0].replace(".", "/")
        if f"{module}.py" not in names:
            problems.append(f"console script {name} = {target}: {module}.py is not in the wheel")
    if "tfrecord-io" not in entry_points["console_scripts"]:
        problems.append("no tfrecord-io console script")
    return problems


def build_wheel(out_dir: str, env=None) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", out_dir, REPO],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=out_dir,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    (wheel,) = glob.glob(os.path.join(out_dir, f"{PACKAGE}-*.whl"))
    return wheel


def test_the_wheel_holds_only_tfrecord_io_and_all_of_it(tmp_path):
    wheel = build_wheel(str(tmp_path))
    assert wheel_problems(wheel) == []


def test_the_check_finds_a_stray_top_level_package_and_a_missing_module(tmp_path):
    """The checker itself, on a hand-made wheel: a wrong wheel must not pass."""
    wheel = tmp_path / "tfrecord_io-0-py3-none-any.whl"
    dist = "tfrecord_io-0.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        for module in checkout_modules():
            if not module.endswith("pipelines/cli.py"):
                z.writestr(module, "")
        z.writestr("tfrecord_io/_speedups.cpython-311-x86_64-linux-gnu.so", b"")
        z.writestr("pipelines/__init__.py", "")
        z.writestr(f"{dist}/entry_points.txt", "[console_scripts]\ntfrecord-io = tfrecord_io.pipelines.cli:main\n")
        z.writestr(f"{dist}/top_level.txt", "pipelines\ntfrecord_io\n")
    problems = "\n".join(wheel_problems(str(wheel)))
    assert "top-level entries ['pipelines'" in problems
    assert "top_level.txt names ['pipelines', 'tfrecord_io']" in problems
    assert "missing from the wheel: ['tfrecord_io/pipelines/cli.py']" in problems
    assert "console script tfrecord-io" in problems
