"""``tfrecord-io build``: read the manifest or folder in the pipeline | ``BuildDataset``.

What the launcher does, and why only that: it validates the config, checks cheaply
what would make the job meaningless before anything is written (output reachable and
holding no other dataset, input there, CSV header columns: ``manifest.check_input``),
claims the version, submits the pipeline, and at the end reads ``tfrecord_io_info.json``
back for its summary. Nothing it holds grows with the rows: reading the rows,
stat'ing media, fingerprinting, placing, ordering, encoding, writing and publishing
are stages of the pipeline (``transform.py``), which run on the workers.

Why the launcher still claims the version before submitting (the pipeline claims it
again, with the same run id, once the fingerprint is known): a second run with the
same ``--version`` is refused at once, not after its planning stages; and the
launcher is the one process that lives as long as the job, so its heartbeat keeps the
claim fresh, and if it is killed the claim goes stale and the next run cleans up.
When the pipeline fails, the launcher removes the version unless the pipeline's
finalize stage already published it (a pipeline cannot run a stage after its own
failure; a failure reported after the finalize - the runner's shutdown, a signal -
leaves a whole, published version, which is kept: ``left_after_failure``).

Determinism (why a rerun is byte-identical): split, shard and order are hashes of the
row's key and the seed; the key is taken from the row as the input gives it (paths
relative to the input root or the manifest's folder); encoders are deterministic;
Examples are serialised with sorted keys; frames are TensorFlow's. Nothing depends on
input order, worker count, runner, location or time; only ``tfrecord_io_info.json``
records when the build ran.

``target_shard_bytes``: the shard count of a split comes from an estimate - the stored
size of each row's media files plus the length of its other values, summed over the
split by a combiner before anything is encoded. With ``reencode``/``resize`` the
shards come out smaller or larger than the target by the codec's ratio; the estimate
is deterministic, so reruns give the same shards.

Scheduled retries: the input fingerprint (config + rows + each media file's size and
modification time, summed order-independently) is stored in ``tfrecord_io_info.json``. A
rerun with the same ``--version``: after a failed/killed attempt removes it and builds
again; after a successful one with the same fingerprint verifies the shards' SHA-256
and exits 0 without rewriting; with another fingerprint it is refused (exit 2).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import apache_beam as beam

from tfrecord_io._version import __version__
from tfrecord_io.dataset import dataset_writer
from tfrecord_io.pipelines.building import manifest
from tfrecord_io.pipelines.building.build_config import BuildConfig, as_build_config
from tfrecord_io.pipelines.building.build_spec import BuildSpec
from tfrecord_io.pipelines.building.commit import REJECTED_NAME
from tfrecord_io.pipelines.building.transform import BuildDataset
from tfrecord_io.pipelines.building.write import dataset_shard_name  # noqa: F401 - re-exported for the jobs
from tfrecord_io.pipelines.runtime import worker_core
from tfrecord_io.pipelines.runtime.progress import ProgressPrinter
from tfrecord_io.storage import files, storage_retry

TOOL_VERSION = __version__


@dataclass
class BuildSummary:
    version: str
    version_dir: str
    rows_in: int
    written: int
    rejected: int
    shards: List[Dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    rejected_path: Optional[str] = None
    reused: bool = False
    duplicates: int = 0
    dedup: str = "error"
    changes: List[str] = field(default_factory=list)  # what an append or remove changed (build/derive.py)

    def lines(self) -> List[str]:
        per_split: Dict[str, List[int]] = {}
        for s in self.shards:
            acc = per_split.setdefault(s["split"], [0, 0, 0])
            acc[0] += s["records"]
            acc[1] += s["bytes"]
            acc[2] += 1
        if self.reused:
            head = (
                f"version {self.version} at {self.version_dir} was already built from the same config and inputs: "
                f"verified {len(self.shards)} shards, nothing rewritten ({self.seconds:.1f}s)"
            )
        else:
            head = f"build finished in {self.seconds:.1f}s: version {self.version} at {self.version_dir}"
        counts = f"rows in: {self.rows_in}   written: {self.written}   rejected: {self.rejected}"
        if self.duplicates:
            counts += f"   duplicates dropped: {self.duplicates} (dedup: {self.dedup})"
        out = [head, counts]
        for split, (records, size, count) in per_split.items():
            out.append(f"  {split:<12} {records:>8} records  {count:>4} shards  {size / 1e6:10.2f} MB")
        if self.rejected:
            out.append(f"rejected rows and reasons: {self.rejected_path}")
        return out + self.changes

    @classmethod
    def from_info(cls, version_dir: str, info: Dict[str, Any], seconds: float, reused: bool) -> BuildSummary:
        shards = [{**s, "split": split} for split, e in sorted(info["splits"].items()) for s in e["shards"]]
        return cls(
            version=info["version"],
            version_dir=version_dir,
            rows_in=info["rows_in"],
            written=info["records"],
            rejected=info["rejected"],
            shards=shards,
            seconds=seconds,
            rejected_path=files.join(version_dir, REJECTED_NAME) if info["rejected"] else None,
            reused=reused,
            duplicates=int(info.get("duplicates") or 0),
            dedup=str(info.get("dedup") or "error"),
        )


def check_build(cfg: BuildConfig) -> BuildSpec:
    """Everything checked before anything is written: output reachable and holding no
    other dataset, encoders, the input there (cheap checks only, see ``manifest``).
    Returns the spec with a placeholder version (the claim decides it)."""
    out_dir = cfg.output.dir.rstrip("/") or "/"
    dataset_writer.check_reachable(out_dir)
    spec = BuildSpec(cfg, out_dir, version="", run_id="", base_dir=manifest.input_base_dir(cfg.input))
    manifest.check_input(cfg.input, sorted(set(spec.sources.values())), cfg.key)
    dataset_writer.check_output_dir(out_dir, spec.name, spec.feature_spec())
    return spec


def claim_version(out_dir: str, requested: str, log) -> Tuple[Dict[str, Any], Optional[dataset_writer.BuildClaim]]:
    """The version this run builds and, unless it holds a finished build (the pipeline
    then compares fingerprints), this run's claim on it."""
    auto = requested in ("", "auto", None)
    version = dataset_writer.new_version_name(requested)
    for _ in range(5):
        plan = dataset_writer.prepare_version(out_dir, version, auto, log=log)
        if plan["state"] == "published":
            return plan, None
        claim = dataset_writer.BuildClaim(files.join(out_dir, plan["version"]))
        try:
            claim.acquire()
        except dataset_writer.VersionTaken:
            if auto:
                continue  # another run took the name between our look and our claim
            raise
        return plan, claim
    raise dataset_writer.DatasetDirError(f"could not claim a version under {out_dir}: other runs keep taking the names")


def build_pipeline(
    p: beam.Pipeline,
    cfg: Union[BuildConfig, BuildSpec],
    version: str,
    run_id: str,
    progress_dir: Optional[str] = None,
) -> Tuple[BuildDataset, Any]:
    """``read the input | BuildDataset`` on ``p``: the ``tfrecord-io build`` job. Given the
    spec ``check_build`` made, the encoders are not made again."""
    if isinstance(cfg, BuildSpec):
        spec = dataclasses.replace(cfg, version=dataset_writer.new_version_name(version), run_id=run_id)
        build = BuildDataset.from_spec(spec, batched=True, progress_dir=progress_dir)
    else:
        build = BuildDataset(
            cfg,
            manifest.input_base_dir(cfg.input),
            version=version,
            batched=True,
            run_id=run_id,
            progress_dir=progress_dir,
        )
    config = build.spec.config
    return build, p | "ReadInput" >> manifest.input_source(config.input) | "BuildDataset" >> build


def run_build(
    cfg: Union[BuildConfig, Mapping[str, Any]],
    options,
    progress: bool = True,
    log=print,
    on_version: Optional[Callable[[str], None]] = None,
    workers=None,
) -> BuildSummary:
    """Check, claim a version, run ``read | BuildDataset``, report; on failure the
    version is removed unless this run's finalize stage had published it.

    ``on_version`` is told the version's name as soon as this run owns it, so a caller
    can say what a failure left there (the CLI's failure block). ``workers``: local
    workers forked before planning (``local_workers.ForkedWorkers``, the CLI's), else
    the runner starts its own. ``cfg``: what ``load_config`` returns (a mapping is
    validated first, for callers that build the config in code)."""
    from apache_beam.io.filesystems import FileSystems

    started = time.monotonic()
    cfg = as_build_config(cfg)
    FileSystems.set_options(options)  # the launcher checks and claims remote paths too
    spec = check_build(cfg)
    out_dir = spec.out_dir
    claimed: Dict[str, Any] = {}
    claim: Optional[dataset_writer.BuildClaim] = None
    try:
        # The claim is inside the ``try``: a signal that lands between the claim and the
        # pipeline (SIGTERM unwinds the launcher with ``Terminated``) still removes it. A
        # claim cut short takes itself back (``BuildClaim.acquire``).
        claimed, claim = claim_version(out_dir, cfg.output.version, log)
        version = claimed["version"]
        if on_version is not None and claim is not None:
            on_version(version)
        version_dir = files.join(out_dir, version)
        if claim is None:
            log(f"version {version} already exists: checking that it was built from the same config and inputs")
        else:
            log(f"building {spec.name!r} -> {version_dir}")
        run_id = claim.run_id if claim is not None else dataset_writer.new_run_id()
        _run_pipeline(spec, version, run_id, options, progress, workers)
    except BaseException as err:
        if claim is None:
            # no claim: it failed (nothing of this run's is left), or the version is a
            # published one, never removed; a fingerprint conflict is a usage error
            text = str(err)
            if claimed and dataset_writer.FINGERPRINT_CONFLICT in text:
                raise dataset_writer.DatasetDirError(
                    f"version {files.join(out_dir, claimed['version'])} {dataset_writer.FINGERPRINT_CONFLICT}; "
                    "choose another --version"
                ) from None
            raise
        with storage_retry.after_failure(err):  # a store that kept failing: not a second timeout each
            claim.release()  # first: a finalize still running elsewhere then refuses to publish (commit.check_claim)
            log(
                f"build failed ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
                f"{left_after_failure(out_dir, claimed['version'], claim.run_id)}; "
                f"LATEST names {dataset_writer.read_latest(out_dir) or 'nothing'}"
            )
        raise
    was_published = claim is None
    if claim is not None:
        claim.release()
    info = dataset_writer.load_info(version_dir)
    if info is None:
        raise RuntimeError(f"the build pipeline finished but {version_dir} has no {dataset_writer.INFO_NAME}")
    if cfg.report and not was_published:
        # the dataset is published; the page is a by-product (tfrecord_io/pipelines/report/report_job.py)
        from tfrecord_io.pipelines.report.report_job import write_build_report

        log("\n".join(write_build_report(version_dir, options, progress=progress).lines()))
    return BuildSummary.from_info(version_dir, info, time.monotonic() - started, reused=was_published)


def left_after_failure(out_dir: str, version: str, run_id: str) -> str:
    """After this run's pipeline failed: remove its version unless the version holds a
    ``tfrecord_io_info.json`` (then the finalize stage ran, and the failure came later -
    the runner's shutdown, a signal); say what is left.

    A version with that file is whole (it is written only once every shard is there and
    the counts add up) and may be what ``LATEST`` names: removing it would leave readers
    a ``LATEST`` pointing at nothing. Only an unpublished version is removed."""
    version_dir = files.join(out_dir, version)
    try:
        info = dataset_writer.load_info(version_dir)
    except Exception as err:  # noqa: BLE001 - unreadable: never delete what may be published
        return f"could not read {version_dir}'s {dataset_writer.INFO_NAME} ({err}); left as it is"
    if info is not None:
        by = "this run" if info.get("run_id") == run_id else "another run"
        if dataset_writer.read_latest(out_dir) == version:
            return (
                f"version {version_dir} was published by {by} before the failure "
                f"({dataset_writer.INFO_NAME} written, LATEST moved to it): kept, whole"
            )
        return (
            f"version {version_dir} is complete ({dataset_writer.INFO_NAME} written by {by}) but LATEST was not "
            "moved to it: kept (a rerun with the same --version verifies it and moves LATEST)"
        )
    try:
        dataset_writer.remove_version(version_dir)
        return f"removed the unfinished version {version_dir}"
    except Exception as cleanup_err:  # noqa: BLE001 - the failure is reported with the state left, cleanup must not mask it
        return (
            f"could not remove the unfinished version {version_dir} ({cleanup_err}); "
            f"readers ignore it (no {dataset_writer.INFO_NAME})"
        )


def _run_pipeline(spec: BuildSpec, version: str, run_id: str, options, progress: bool, workers=None) -> None:
    runner, run_options = None, options
    if workers is not None:
        runner, run_options = workers.pipeline_runner(options)
    try:
        # progress where the job's workers write it: locally for local workers, else under
        # --temp_location or hidden in the output directory (runtime/progress.py)
        bar = ProgressPrinter(
            "build", enabled=progress, rate_stage="encoded", options=options, output_dir=spec.config.output.dir
        )
        with bar:
            noted = worker_core.workers_install_the_package(run_options)
            with beam.Pipeline(runner=runner, options=run_options) as p:
                build_pipeline(p, spec, version, run_id, bar.dir)
                if noted:
                    _ = p | "WorkerCore" >> worker_core.NoteWorkerCore()
        line = worker_core.core_line(p.result) if noted else None
        if line:
            print(line, file=sys.stderr)
    except BaseException:
        if workers is not None:
            workers.close(kill=True)  # gone before run_build removes the version
        raise
