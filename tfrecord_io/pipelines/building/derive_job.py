"""``tfrecord-io build CONFIG --append`` and ``--remove KEYS_FILE``: the launcher's part
(``derive.py`` has the pipeline and the layout). Like a full build it checks, claims and
submits, and reads ``tfrecord_io_info.json`` back for its summary; it also claims the
base version (one append or remove at a time onto a version) and refuses a config that
changes what decides the records (``derive.check_compatible``)."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Mapping, Optional, Union

import apache_beam as beam

from tfrecord_io.dataset import dataset_writer
from tfrecord_io.pipelines.building import derive, manifest
from tfrecord_io.pipelines.building.build_config import BuildConfig, as_build_config
from tfrecord_io.pipelines.building.build_job import BuildSummary, claim_version, left_after_failure
from tfrecord_io.pipelines.building.build_spec import BuildSpec
from tfrecord_io.pipelines.runtime.progress import ProgressPrinter
from tfrecord_io.storage import files, storage_retry


def run_derive(
    cfg: Union[BuildConfig, Mapping[str, Any]],
    options,
    *,
    append: bool = False,
    remove: Optional[str] = None,
    on_existing: str = "error",
    progress: bool = True,
    log=print,
    on_version: Optional[Callable[[str], None]] = None,
    workers=None,
) -> BuildSummary:
    """Append the config's input to, or remove the keys of ``remove`` from, the version
    ``LATEST`` names, as a new version; its summary (``changes`` lines included)."""
    from apache_beam.io.filesystems import FileSystems

    if append == bool(remove):
        raise dataset_writer.DatasetDirError("give one of --append or --remove KEYS_FILE")
    if on_existing not in derive.ON_EXISTING:
        raise dataset_writer.DatasetDirError(
            f"on_existing: {on_existing!r} is not one of {', '.join(derive.ON_EXISTING)}"
        )
    started = time.monotonic()
    cfg = as_build_config(cfg)
    FileSystems.set_options(options)
    out_dir = cfg.output.dir.rstrip("/") or "/"
    dataset_writer.check_reachable(out_dir)
    base_name, base = derive.base_version(out_dir)
    operation = "append" if append else "remove"
    if remove and not files.exists(remove):
        raise dataset_writer.DatasetDirError(f"--remove {remove}: no such keys file")
    extra: Dict[str, Any] = {"on_existing": on_existing} if append else {"keys": remove}
    spec = BuildSpec(derive.derived_config(cfg, base, operation, extra), out_dir, version="", run_id="")
    if append:
        changes = derive.check_compatible(BuildSpec(cfg, out_dir, version="", run_id=""), base)
        if changes:
            raise derive.IncompatibleAppend(
                f"cannot append to version {base_name}: the config changes what decides the records "
                f"({'; '.join(changes)}); run a full build (without --append) for that"
            )
        spec.base_dir = manifest.input_base_dir(cfg.input)
        manifest.check_input(cfg.input, sorted(set(spec.sources.values())), cfg.key)
    base_claim = derive.claim_base(out_dir, base_name)
    claim: Optional[dataset_writer.BuildClaim] = None
    claimed: Dict[str, Any] = {}
    try:
        claimed, claim = claim_version(out_dir, cfg.output.version, log)
        if claim is None:
            raise dataset_writer.DatasetDirError(
                f"version {claimed['version']} of {out_dir} is already published: choose another --version"
            )
        version = claimed["version"]
        if on_version is not None:
            on_version(version)
        log(f"{operation} onto {base_name} -> {files.join(out_dir, version)}")
        spec.version, spec.run_id = version, claim.run_id
        runner, run_options = (None, options) if workers is None else workers.pipeline_runner(options)
        bar = ProgressPrinter("build", enabled=progress, rate_stage="encoded", options=options, output_dir=out_dir)
        with bar:
            with beam.Pipeline(runner=runner, options=run_options) as p:
                rows = p | "ReadInput" >> manifest.input_source(cfg.input) if append else None
                keys = p | "ReadKeys" >> derive.keys_lines(remove) if remove else None
                _ = p | operation.capitalize() >> derive.DeriveVersion(
                    spec, base_name, base, on_existing, bar.dir, rows=rows, key_lines=keys
                )
    except BaseException as err:
        with storage_retry.after_failure(err):  # a store that kept failing: not a second timeout each
            if claim is not None:
                claim.release()
                log(
                    f"{operation} failed ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
                    f"{left_after_failure(out_dir, claimed['version'], claim.run_id)}; "
                    f"LATEST names {dataset_writer.read_latest(out_dir) or 'nothing'}"
                )
            base_claim.release()
        if workers is not None:
            workers.close(kill=True)
        raise
    base_claim.release()
    claim.release()
    version_dir = files.join(out_dir, version)
    info = dataset_writer.load_info(version_dir)
    if info is None:
        raise RuntimeError(f"the {operation} pipeline finished but {version_dir} has no {dataset_writer.INFO_NAME}")
    if cfg.report:
        from tfrecord_io.pipelines.report.report_job import write_build_report

        log("\n".join(write_build_report(version_dir, options, progress=progress).lines()))
    summary = BuildSummary.from_info(version_dir, info, time.monotonic() - started, reused=False)
    # the rows this run wrote (the version's records are the base's plus these, less removed
    # ones): so that rows in = written + rejected + duplicates (+ skipped) in the summary too
    summary.written = int((info.get("changes") or {}).get("written", summary.written))
    summary.changes = derive.summary_lines(info)
    return summary
