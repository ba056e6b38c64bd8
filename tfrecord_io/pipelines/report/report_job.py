"""``tfrecord-io report``: one self-contained HTML page that shows a built dataset.

    tfrecord-io report ROOT [--split S] [--samples N] [--validation r.json] --output report.html

ROOT is a dataset root (its ``LATEST`` is followed), a version directory (with
``tfrecord_io_info.json``) or TFRecord file patterns, on any Beam filesystem. The page has
no scripts, fonts or links to load: every chart, thumbnail and audio clip is inline, so
it opens offline, from an email or a CI artifact. It shows:

- a summary: name, version, created time, tool version; records, bytes and shards per
  split; rows in, written and rejected; label counts per split;
- per split: label distribution, values per record of every feature, image size /
  mode / format, audio duration / sample rate / channels, text length and numeric
  histograms (statistics from one Beam job: ``tfrecord_io.pipelines.report.stats``);
- a deterministic sample grid per split (per label for labelled data): thumbnails,
  audio as waveform + spectrogram with an inline player, texts and labels;
- the rejected rows grouped by column, stage and reason, with counts;
- the validation result, when ``--validation`` names a ``tfrecord-io validate --report`` file.

The same version gives the same page, byte for byte: samples are chosen by a hash of
where each record is, and nothing on the page depends on the time or the runner.
"""

from __future__ import annotations

import html
import json
import os
import re
import time
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence

from tfrecord_io._version import __version__
from tfrecord_io.dataset import datasets
from tfrecord_io.format.index import INDEX_SUFFIXES
from tfrecord_io.pipelines.report.stats import (
    MAX_IMAGE_SIZES,
    JobResult,
    ReportColumn,
    Shard,
    columns_from_encoders,
    columns_from_record,
    label_column,
)
from tfrecord_io.storage import files
from tfrecord_io.usage_errors import UsageError

REPORT_NAME = "report.html"
DEFAULT_SAMPLES = 6
#: Labels drawn in a label chart; the rest are counted as "N more".
MAX_LABEL_BARS = 40
TEXT_CHARS = 300  # a sample's text is cut here on the page
#: The order columns are shown in, on panels and sample cards.
KIND_ORDER = {"label": 0, "image": 1, "audio": 2, "text": 3, "int": 4, "float": 5, "array": 6, "bytes": 7}


class ReportError(UsageError, ValueError):
    """The input or output of a report is unusable; the message says why (exit 2)."""


class BuildReportError(RuntimeError):
    """A build's ``report: true`` page failed after the version was published: the job
    failed (exit 1), not its usage -- the dataset it built is there and readable."""


class ReportInput(NamedTuple):
    root: str  # what the user named
    version_dir: Optional[str]  # the dataset version, when there is one
    info: Optional[Dict[str, Any]]  # its tfrecord_io_info.json
    shards: List[Shard]
    rejected: List[str]  # dead-letter files of the version


class ReportSummary(NamedTuple):
    output: str
    bytes: int
    splits: Dict[str, int]  # records read per split
    samples: int
    rejected_groups: int
    seconds: float

    def lines(self) -> List[str]:
        parts = ", ".join(f"{split} {n:,}" for split, n in self.splits.items())
        return [
            f"report: {self.output} ({self.bytes / 1024:,.0f} KiB) in {self.seconds:.1f}s: "
            f"records {parts}; {self.samples} samples; {self.rejected_groups} rejection reason(s)"
        ]


# --------------------------------------------------------------------------- input


def split_order(splits) -> List[str]:
    """train, validation, test first (as people read them), then the rest by name."""
    usual = {"train": 0, "validation": 1, "valid": 1, "val": 1, "dev": 1, "test": 2}
    return sorted(splits, key=lambda s: (usual.get(s, 3), s))


def _read_small(path: str) -> Optional[bytes]:
    """A small file's bytes on any filesystem, or None when it does not exist."""
    return files.read_bytes(path) if files.exists(path) else None


def _split_of(path: str) -> str:
    """``name-train.tfrecord-00000-of-00004`` -> ``train`` (TFDS's shard names), else ``all``."""
    match = re.search(r"-([A-Za-z0-9_]+)\.tfrecord", path.rsplit("/", 1)[-1])
    return match.group(1) if match else "all"


def resolve_input(paths: Sequence[str], splits: Optional[Sequence[str]] = None) -> ReportInput:
    """Find the shards (and dead-letter files) a report covers."""
    try:
        for path in paths:
            files.check_filesystem(path)
    except ValueError as err:
        raise ReportError(str(err)) from None
    paths = [p if files.is_remote(p) else os.path.abspath(p) for p in paths]
    version_dir = info = None
    if len(paths) == 1 and not any(ch in paths[0] for ch in "*?["):
        root = paths[0].rstrip("/")
        try:
            version_dir = datasets.resolve_version_dir(root)
            info = datasets.load_info(version_dir)
        except datasets.DatasetLayoutError as err:
            if datasets.read_latest(root) or files.exists(files.join(root, datasets.INFO_NAME)):
                raise ReportError(str(err)) from None  # a dataset, but not a whole one
            version_dir = None  # a directory of TFRecord files
    if version_dir is not None and info is not None:
        shards = [
            Shard(split, files.join(version_dir, s["path"]), s["path"])
            for split, entry in sorted(info.get("splits", {}).items())
            for s in entry.get("shards", [])
        ]
        rejected = files.glob(files.join(version_dir, "rejected-*.jsonl"))
    else:
        found: List[str] = []
        for pattern in paths:
            if not files.is_remote(pattern) and os.path.isdir(pattern):
                pattern = os.path.join(pattern, "**", "*.tfrecord*")
                import glob as _glob

                found += sorted(_glob.glob(pattern, recursive=True))
            else:
                found += files.glob(pattern)
        found = sorted({p for p in found if not p.endswith((*INDEX_SUFFIXES, ".json", ".jsonl"))})
        if not found:
            raise ReportError(f"no TFRecord files match {' '.join(paths)}")
        shards = [Shard(_split_of(p), p, p.rsplit("/", 1)[-1]) for p in found]
        rejected = []
    if splits:
        known = sorted({s.split for s in shards})
        unknown = [s for s in splits if s not in known]
        if unknown:
            raise ReportError(f"--split {', '.join(unknown)}: not in this dataset (its splits: {', '.join(known)})")
        shards = [s for s in shards if s.split in splits]
    return ReportInput(paths[0] if len(paths) == 1 else " ".join(paths), version_dir, info, shards, rejected)


def _columns(inp: ReportInput) -> List[ReportColumn]:
    """The columns to describe, in the order the page shows them."""
    columns: List[ReportColumn] = []
    if inp.info is not None and inp.info.get("encoders"):
        columns = columns_from_encoders(inp.info["encoders"])
    else:
        from tfrecord_io.format.reader import tfrecord_iterator

        for shard in inp.shards:
            record = next(iter(tfrecord_iterator(shard.path)), None)
            if record is not None:
                columns = columns_from_record(bytes(record))
                break
    return sorted(columns, key=lambda c: (KIND_ORDER[c.kind], c.name))


def load_validation(path: str) -> Dict[str, Any]:
    raw = _read_small(path)
    if raw is None:
        raise ReportError(f"--validation {path}: no such file")
    try:
        report = json.loads(raw.decode("utf-8"))
    except ValueError as err:
        raise ReportError(f"--validation {path}: not a JSON validation report ({err})") from None
    if not isinstance(report, dict) or "ok" not in report or "problems" not in report:
        raise ReportError(f"--validation {path}: not a report written by tfrecord-io validate --report")
    return report


def _check_output(output: str) -> None:
    """Refuse an output the report could not be written to, before the job runs."""
    try:
        files.check_filesystem(output)
    except ValueError as err:
        raise ReportError(f"--output {err}") from None
    if files.is_remote(output):
        return
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise ReportError(f"--output {output}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ReportError(f"--output {output}: directory {parent} is not writable")
    if os.path.isdir(output):
        raise ReportError(f"--output {output}: is a directory")


# --------------------------------------------------------------------------- run


def run_report(
    paths: Sequence[str],
    options,
    output: str,
    splits: Optional[Sequence[str]] = None,
    samples: int = DEFAULT_SAMPLES,
    validation: Optional[str] = None,
    progress: bool = True,
    workers=None,
) -> ReportSummary:
    """Resolve the input, run the statistics job, write the page."""
    FileSystems = files.beam_filesystems()

    from tfrecord_io.pipelines.report.previews import require_matplotlib
    from tfrecord_io.pipelines.report.stats import run_stats_job

    started = time.monotonic()
    FileSystems.set_options(
        options
    )  # the launcher reads LATEST, tfrecord_io_info.json ... with the job's flags (--s3_*)
    if samples < 0:
        raise ReportError(f"--samples {samples}: must be 0 or more")
    _check_output(output)
    require_matplotlib()  # a missing extra is a usage error, found before the job runs
    inp = resolve_input(paths, splits)
    validation_report = load_validation(validation) if validation else None
    columns = _columns(inp)
    config = (inp.info or {}).get("config")
    key_column = config.get("key") if isinstance(config, dict) else None  # names rejected rows
    result = run_stats_job(
        inp.shards,
        columns,
        options,
        samples=max(samples, 1),
        rejected_paths=inp.rejected,
        key_column=key_column,
        progress=progress,
        output=output if files.is_remote(output) else None,  # a local page is the launcher's, not shared
        workers=workers,
    )
    if samples == 0:
        result = result._replace(samples={})
    page = render_page(inp, columns, result, validation_report)
    files.write_bytes(output, page.encode("utf-8"))  # whole or nothing, on any filesystem
    return ReportSummary(
        output=output,
        bytes=len(page.encode("utf-8")),
        splits={split: result.splits[split]["records"] for split in split_order(result.splits)},
        samples=sum(len(items) for groups in result.samples.values() for items in groups.values()),
        rejected_groups=len(result.rejected),
        seconds=time.monotonic() - started,
    )


def write_build_report(version_dir: str, options, progress: bool = True) -> ReportSummary:
    """``report: true`` in a build config: ``<version>/report.html``, written after the
    version is published (the page is a by-product: a failure here says so and leaves
    the published version as it is)."""
    try:
        return run_report([version_dir], options, files.join(version_dir, REPORT_NAME), progress=progress)
    except Exception as err:  # broad: reported with what state the build left
        raise BuildReportError(
            f"version {version_dir} is built and published, but writing its report failed: {type(err).__name__}: {err}"
        ) from err


# --------------------------------------------------------------------------- the page


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.{digits}g}" if abs(value) < 1000 else f"{value:,.1f}"
    return f"{int(value):,}"


def _mb(n: int) -> str:
    return f"{n / 1e6:,.2f} MB"


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    """Cells are escaped unless they are already markup (``_Markup``)."""

    def cell(v: Any) -> str:
        return v.html if isinstance(v, _Markup) else _e(v)

    out = [f'<table class="{cls}">' if cls else "<table>", "<thead><tr>"]
    out += [f"<th>{_e(h)}</th>" for h in head]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


class _Markup(NamedTuple):
    html: str


def _label_name(column: Optional[ReportColumn], label_id: Any) -> str:
    if column is None or label_id is None:
        return "(all)"
    i = int(label_id)
    if column.names and 0 <= i < len(column.names):
        return column.names[i]
    return str(i)


def _summary(inp: ReportInput, result: JobResult, columns: List[ReportColumn]) -> str:
    info = inp.info or {}
    facts = [
        ("name", info.get("name", "-")),
        ("version", info.get("version", "-")),
        ("created", info.get("created_utc", "-")),
        ("built by", f"{info.get('tool', 'tfrecord-io')} {info.get('tool_version', '')}".strip() if info else "-"),
        ("source", inp.version_dir or inp.root),
    ]
    if info.get("description"):
        facts.insert(1, ("description", info["description"]))
    out = ['<section id="summary"><h2>Summary</h2><dl class="facts">']
    out += [f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts]
    out.append("</dl>")
    rows = []
    info_splits = info.get("splits", {})
    shard_count: Dict[str, int] = {}
    for s in inp.shards:
        shard_count[s.split] = shard_count.get(s.split, 0) + 1
    total = [0, 0, 0]
    for split in split_order(set(result.splits) | set(shard_count)):
        read = result.splits.get(split, {}).get("records", 0)
        listed = info_splits.get(split, {}).get("records")
        size = info_splits.get(split, {}).get("bytes")
        if size is None:
            size = sum(files.file_size(s.path) for s in inp.shards if s.split == split)
        flag = "" if listed is None or listed == read else f" (tfrecord_io_info.json lists {listed:,})"
        rows.append([split, f"{read:,}{flag}", shard_count.get(split, 0), _mb(size)])
        total[0] += read
        total[1] += shard_count.get(split, 0)
        total[2] += size
    rows.append([_Markup("<b>total</b>"), f"{total[0]:,}", total[1], _mb(total[2])])
    out.append(_table(["split", "records", "shards", "size"], rows, "split-table"))
    if info:
        out.append(
            f'<p class="counts">rows in: <b>{_num(info.get("rows_in"))}</b> &middot; written: '
            f"<b>{_num(info.get('records'))}</b> &middot; rejected: <b>{_num(info.get('rejected'))}</b>"
            + (
                f" &middot; duplicates dropped: <b>{_num(info.get('duplicates'))}</b> (dedup: {_e(str(info.get('dedup')))})"
                if info.get("duplicates")
                else ""
            )
            + "</p>"
        )
        out.extend(_changes(info))
    label = label_column(columns)
    if label is not None and result.splits:
        splits = split_order(result.splits)
        counts = {s: result.splits[s]["columns"].get(label.name, {}).get("ids", {}) for s in splits}
        ids = sorted({int(i) for c in counts.values() for i in c})
        if len(ids) <= MAX_LABEL_BARS:
            head = [f"{label.name}"] + [f"{s}" for s in splits]
            table_rows = []
            for i in ids:
                cells: List[Any] = [_label_name(label, i)]
                for split in splits:
                    n = counts[split].get(str(i), 0)
                    share = 100.0 * n / max(sum(counts[split].values()), 1)
                    cells.append(f"{n:,} ({share:.0f}%)")
                table_rows.append(cells)
            out.append("<h3>Labels per split</h3>" + _table(head, table_rows, "label-table"))
    out.append("</section>")
    return "".join(out)


def _img(uri: str, alt: str, cls: str = "chart", width: Optional[int] = None, height: Optional[int] = None) -> str:
    size = f' width="{width}" height="{height}"' if width and height else ""
    return f'<img class="{cls}" src="{uri}" alt="{_e(alt)}"{size}>'


def _spread(h: Dict[str, Any], title: str, unit: str, what: str = "") -> str:
    """A distribution: its range and mean, and a histogram unless every value is the same."""
    from tfrecord_io.pipelines.report.previews import histogram_chart

    unit_text = f" {_e(unit)}" if unit else ""
    nonfinite = f"; {h['nonfinite']:,} NaN/inf" if h["nonfinite"] else ""
    if not h["n"]:
        return f"<p>{_e(what)} no finite values{nonfinite}</p>"
    if h["min"] == h["max"]:
        return f"<p>{_e(what)} all {_num(h['min'])}{unit_text}{nonfinite}</p>"
    return (
        f"<p>{_e(what)} {_num(h['min'])} .. {_num(h['max'])}{unit_text}, mean {_num(h['mean'])}{nonfinite}</p>"
        + _img(histogram_chart(h, title, unit), title)
    )


def _column_panels(split: str, stats: Dict[str, Any], columns: List[ReportColumn]) -> str:
    from tfrecord_io.pipelines.report.previews import bar_chart, top_items

    panels: List[str] = []
    for c in columns:
        col = stats["columns"].get(c.name)
        if not col or not col.get("present"):
            continue
        title = _e(c.name) + (f" <small>{_e(c.kind)}</small>" if c.kind != c.name else "")
        body: List[str] = []
        if c.kind == "label":
            counts = {_label_name(c, i): n for i, n in col["ids"].items()}
            ordered = sorted(col["ids"].items(), key=lambda kv: int(kv[0]))
            shown, more = (ordered, 0) if len(ordered) <= MAX_LABEL_BARS else top_items(col["ids"], MAX_LABEL_BARS)
            names = [_label_name(c, i) for i, _ in shown]
            body.append(
                _img(bar_chart(names, [n for _, n in shown], f"{split}: {c.name}"), f"{c.name} distribution in {split}")
            )
            if more:
                body.append(f"<p>{more} more labels not drawn ({len(counts)} in all)</p>")
        elif c.kind == "image":
            sizes = col["sizes"]
            if sizes is None:
                body.append(f"<p>more than {MAX_IMAGE_SIZES} distinct sizes</p>")
            else:
                top, more = top_items(sizes, 10)
                body.append(
                    _table(
                        ["size (w x h)", "images"],
                        [[k, f"{n:,}"] for k, n in top] + ([[f"{more} more sizes", ""]] if more else []),
                        "small",
                    )
                )
            body.append(_table(["mode", "images"], [[k, f"{n:,}"] for k, n in col["modes"].items()], "small"))
            body.append(_table(["format", "images"], [[k, f"{n:,}"] for k, n in col["formats"].items()], "small"))
            if sizes is None or len(sizes) > 1:
                body.append(_spread(col["width"], f"{split}: {c.name} width", "pixels", "width"))
                body.append(_spread(col["height"], f"{split}: {c.name} height", "pixels", "height"))
            body.append(_spread(col["bytes"], f"{split}: {c.name} encoded size", "bytes", "encoded"))
        elif c.kind == "audio":
            d = col["seconds"]
            body.append(_spread(d, f"{split}: {c.name} duration", "seconds", "duration"))
            if d["n"]:
                body.append(f"<p>total {_num(d['mean'] * d['n'])} seconds</p>")
            body.append(
                _table(["sample rate (Hz)", "clips"], [[k, f"{n:,}"] for k, n in col["rates"].items()], "small")
            )
            body.append(_table(["channels", "clips"], [[k, f"{n:,}"] for k, n in col["channels"].items()], "small"))
        elif c.kind == "text":
            body.append(_spread(col["chars"], f"{split}: {c.name} length", "characters", "length"))
            if col["invalid"]:
                body.append(f'<p class="error">{col["invalid"]:,} not UTF-8</p>')
        else:  # int, float, array (numbers, or bytes) and bytes
            if col["bytes"]["n"]:
                body.append(_spread(col["bytes"], f"{split}: {c.name} size", "bytes", "size"))
            if col["values"]["n"] or col["values"]["nonfinite"]:
                body.append(_spread(col["values"], f"{split}: {c.name}", "", "values"))
        panels.append(f'<div class="panel"><h4>{title}</h4>{"".join(body)}</div>')
    return f'<div class="panels">{"".join(panels)}</div>' if panels else ""


def _features_table(stats: Dict[str, Any]) -> str:
    rows = []
    for key, f in stats["features"].items():
        kinds = "/".join(sorted(f["types"]))
        rows.append([key, kinds, f"{f['present']:,}", f"{f['min_len']:,} .. {f['max_len']:,}", f"{f['mean_len']:.2f}"])
    return (
        "<details><summary>Features: values per record</summary>"
        + _table(["key", "type", "records with it", "values per record", "mean"], rows, "features")
        + "</details>"
    )


def _sample_card(
    record: bytes, relpath: str, offset: int, columns: List[ReportColumn], decoders: Dict[str, Any]
) -> str:
    from tfrecord_io.pipelines.report.previews import audio_picture, thumbnail, wav_clip
    from tfrecord_io.transforms import decode_example

    media: List[str] = []
    notes: List[str] = []
    for c in columns:
        enc = decoders.get(c.name)
        if enc is None:
            continue
        try:
            value = decode_example(record, {c.name: enc})[c.name]
        except Exception as err:  # noqa: BLE001 - shown on the card: the record does not decode
            notes.append(f'<span class="error">{_e(c.name)}: {_e(getattr(err, "reason", err))}</span>')
            continue
        if value is None:
            continue
        if c.kind == "image":
            uri, w, h = thumbnail(value)
            scale = 128 / max(w, h)
            media.append(_img(uri, f"{c.name} of {relpath} @ {offset}", "thumb", round(w * scale), round(h * scale)))
        elif c.kind == "audio":
            samples, rate = value.samples, value.sample_rate
            wav, cut = wav_clip(samples, rate)
            seconds = samples.shape[0] / rate
            media.append(_img(audio_picture(samples, rate), f"{c.name} waveform and spectrogram", "audio-pic"))
            media.append(f'<audio controls preload="metadata" src="{wav}"></audio>')
            notes.append(f"{_e(c.name)}: {seconds:.2f} s at {rate:,} Hz" + (" (player: first 10 s)" if cut else ""))
        elif c.kind == "label":
            notes.append(f"{_e(c.name)}: <b>{_e(_label_name(c, value))}</b>")
        elif c.kind == "text":
            text = value if isinstance(value, str) else repr(value)
            shown = text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS] + "..."
            notes.append(f"{_e(c.name)}: <q>{_e(shown)}</q>")
        else:
            notes.append(f"{_e(c.name)}: {_e(value)}")
    notes.append(f'<span class="where">{_e(relpath)} @ {offset:,}</span>')
    return f'<figure class="card">{"".join(media)}<figcaption>{"<br>".join(notes)}</figcaption></figure>'


def _samples(split: str, groups: Mapping[Any, list], columns: List[ReportColumn]) -> str:
    from tfrecord_io.transforms import spec_from_config

    decoders = {}
    for c in columns:
        if c.config and c.kind in ("image", "audio", "text", "label", "int", "float"):
            decoders[c.name] = spec_from_config({c.name: c.config})[c.name]
    label = label_column(columns)
    out = ["<h3>Samples</h3>"]
    for group in sorted(groups, key=lambda g: (g is None, g if g is not None else 0)):
        items = groups[group]
        if group is not None and label is not None:
            title = f"{_e(label.name)}: {_e(_label_name(label, group))}"
            out.append(f'<h4 class="group">{title} <small>({len(items)} shown)</small></h4>')
        cards = [_sample_card(rec, rel, off, columns, decoders) for rel, off, rec in items]
        out.append(f'<div class="grid" data-split="{_e(split)}">{"".join(cards)}</div>')
    return "".join(out)


def _split_section(split: str, stats: Dict[str, Any], groups: Mapping[Any, list], columns: List[ReportColumn]) -> str:
    out = [
        f'<section class="split" id="split-{_e(split)}"><h2>Split: {_e(split)} '
        f"<small>{stats['records']:,} records</small></h2>"
    ]
    if stats.get("not_examples"):
        out.append(f'<p class="error">{stats["not_examples"]:,} records are not tf.train.Examples</p>')
    out.append(_column_panels(split, stats, columns))
    out.append(_features_table(stats))
    if groups:
        out.append(_samples(split, groups, columns))
    out.append("</section>")
    return "".join(out)


def _changes(info: Dict[str, Any]) -> List[str]:
    """What an append or a remove changed since the version before (``info["changes"]``,
    from the key indexes: ``tfrecord_io.pipelines.diff_job``)."""
    changes = info.get("changes")
    if not changes:
        return []
    rows = []
    for split, c in sorted((changes.get("splits") or {}).items()):
        rows.append([split, f"{c['added']:,}", f"{c['removed']:,}", f"{c['changed']:,}", f"{c.get('carried', 0):,}"])
    head = (
        f'<p class="counts">{_e(str(changes.get("operation")))} on version <b>{_e(str(changes.get("base")))}</b>: '
        f"{_num(changes.get('shards_carried'))} shards carried unchanged, {_num(changes.get('shards_written'))} written</p>"
    )
    return [head, _table(["split", "added", "removed", "changed", "unchanged"], rows, "changes")]


def _rejected(inp: ReportInput, result: JobResult) -> str:
    out = ['<section id="rejected"><h2>Rejected rows</h2>']
    if inp.info is None:
        out.append("<p>Not a built dataset: no dead-letter file to show.</p></section>")
        return "".join(out)
    total = sum(r["count"] for r in result.rejected)
    if not total:
        out.append("<p>No row was rejected.</p></section>")
        return "".join(out)
    out.append(
        f"<p>{total:,} rows rejected, for {len(result.rejected)} reason(s) "
        f"(from {', '.join(_e(p.rsplit('/', 1)[-1]) for p in inp.rejected)}).</p>"
    )
    rows = []
    for r in result.rejected:
        examples = "".join(f"<li><code>{_e(x['row'])}</code>: {_e(x['reason'])}</li>" for x in r["examples"])
        more = r["count"] - len(r["examples"])
        if more > 0:
            examples += f"<li>... and {more:,} more</li>"
        rows.append(
            [
                f"{r['count']:,}",
                r["column"] if r["column"] is not None else "-",
                r["stage"] or "-",
                r["reason"],
                _Markup(f"<ul>{examples}</ul>"),
            ]
        )
    out.append(_table(["rows", "column", "stage", "reason", "examples"], rows, "rejected"))
    out.append("</section>")
    return "".join(out)


def _validation(inp: ReportInput, report: Optional[Dict[str, Any]]) -> str:
    out = ['<section id="validation"><h2>Validation</h2>']
    if report is None:
        out.append(
            "<p>No validation result given (<code>tfrecord-io validate ROOT --report r.json</code>, then "
            "<code>tfrecord-io report ROOT --validation r.json</code>).</p></section>"
        )
        return "".join(out)
    same = (
        not inp.version_dir
        or not report.get("dataset")
        or os.path.normpath(str(report["dataset"])) == os.path.normpath(inp.version_dir)
    )
    if not same:
        out.append(
            f'<p class="error">This validation report is for {_e(report["dataset"])}, '
            f"not for {_e(inp.version_dir)}.</p>"
        )
    verdict = (
        '<b class="ok">OK</b>'
        if report["ok"]
        else f'<b class="error">FAILED: {len(report["problems"]):,} problem(s)</b>'
    )
    out.append(
        f"<p>{verdict}: {_num(report.get('files'))} files, {_num(report.get('records'))} records, "
        f"{_mb(report.get('bytes') or 0)} read; "
        f"checksums {'checked' if report.get('checksums_checked') else 'not checked'}.</p>"
    )
    if report["problems"]:
        rows = [
            [p.get("path"), _num(p.get("offset")), p.get("kind", "-"), p.get("reason", "")]
            for p in report["problems"][:200]
        ]
        out.append(_table(["file", "byte offset", "kind", "reason"], rows, "problems"))
        if len(report["problems"]) > 200:
            out.append(f"<p>... and {len(report['problems']) - 200:,} more in the JSON report.</p>")
    out.append("</section>")
    return "".join(out)


STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0 auto;max-width:1280px;
padding:1em 2em;color:#222;background:#fff;font-size:14px}
h1{margin:.2em 0}h2{border-bottom:2px solid #4e79a7;padding-bottom:.2em;margin-top:2em}h2 small,h4 small{color:#666;font-weight:normal}
nav a{margin-right:1em}table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f8}table.small{font-size:12px;display:inline-table;margin-right:1em}
dl.facts{display:grid;grid-template-columns:max-content auto;gap:2px 1em}dt{font-weight:bold}dd{margin:0}
.panels{display:flex;flex-wrap:wrap;gap:1em}.panel{border:1px solid #e3e3e3;border-radius:6px;padding:.5em 1em;max-width:560px}
.panel h4{margin:.3em 0}img.chart{display:block;max-width:520px;height:auto}
.grid{display:flex;flex-wrap:wrap;gap:10px}figure.card{margin:0;width:200px;border:1px solid #ddd;border-radius:6px;padding:6px;
background:#fafafa}img.thumb{display:block;margin:0 auto 4px;image-rendering:auto;background:#eee}
img.audio-pic{display:block;width:200px;height:auto}audio{width:200px;height:32px;margin:4px 0}
figcaption{font-size:12px;line-height:1.4;word-wrap:break-word}.where{color:#777;font-size:11px}
.error{color:#b00020}.ok{color:#1b7f3b}code{font-size:12px}ul{margin:0;padding-left:1.2em}
"""


def render_page(
    inp: ReportInput, columns: List[ReportColumn], result: JobResult, validation: Optional[Dict[str, Any]] = None
) -> str:
    """The whole page as one string (no external resources)."""
    info = inp.info or {}
    title = f"{info.get('name', 'TFRecord files')} {info.get('version', '')}".strip()
    splits = split_order(result.splits)
    nav = (
        ['<a href="#summary">summary</a>']
        + [f'<a href="#split-{_e(s)}">{_e(s)}</a>' for s in splits]
        + ['<a href="#rejected">rejected</a>', '<a href="#validation">validation</a>']
    )
    body = [
        f"<header><h1>{_e(title)}</h1><nav>{''.join(nav)}</nav></header>",
        _summary(inp, result, columns),
        *[_split_section(s, result.splits[s], result.samples.get(s, {}), columns) for s in splits],
        _rejected(inp, result),
        _validation(inp, validation),
        f'<footer><p class="where">tfrecord-io {__version__} report</p></footer>',
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        # Belt and braces for "no network": the page may load nothing but its own data: URIs.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
        "media-src data:; style-src 'unsafe-inline'\">"
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(title)} - report</title>'
        f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n"
    )
