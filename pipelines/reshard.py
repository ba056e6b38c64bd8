"""``tfrecord-io reshard``: N files -> M shards, optionally changing compression and
keeping only records whose feature has a given value; every new shard indexed.

The read is the splitting read (one big input file keeps every worker busy); the
write is ``tfrecord_io.WriteToTFRecord``: shards appear under their final names only
when all of them are complete.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import apache_beam as beam

from tfrecord_io import files
from tfrecord_io.codec import Example

from .collect import ResultDir
from .inputs import resolve_inputs
from .progress import CountProgress, ProgressPrinter


def parse_where(text: Optional[str]) -> Optional[Tuple[str, str]]:
    if not text:
        return None
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--where {text!r}: expected FEATURE=VALUE, e.g. --where label=3")
    return key, value


def matches(data: bytes, where: Tuple[str, str]) -> bool:
    """True when the Example's feature ``key`` holds ``value`` (compared as text for
    bytes, as a number for int/float lists; any element of a list may match)."""
    key, value = where
    example = Example()
    example.ParseFromString(data)
    fmap = example.features.feature
    if key not in fmap:
        return False
    feature = fmap[key]
    kind = feature.WhichOneof("kind")
    if kind == "bytes_list":
        return any(v == value.encode("utf-8") for v in feature.bytes_list.value)
    try:
        number = float(value)
    except ValueError:
        return False
    values = (
        feature.int64_list.value if kind == "int64_list" else feature.float_list.value if kind == "float_list" else []
    )
    return any(float(v) == number for v in values)


def run_reshard(
    paths: List[str],
    output: str,
    options,
    num_shards: int = 0,
    compression: str = "",
    where: Optional[Tuple[str, str]] = None,
    write_index: bool = True,
    progress: bool = True,
) -> Dict[str, Any]:
    import tfrecord_io

    from . import dataset_dir

    dataset_dir.use_filesystems(options, [*paths, output])
    inputs = resolve_inputs(paths)
    if not inputs:
        raise FileNotFoundError(f"no TFRecord files match {' '.join(paths)}")
    suffix = ".tfrecord" + files.compression_suffix(compression)
    with ProgressPrinter("reshard", enabled=progress, rate_stage="read") as bar:
        with ResultDir() as results:
            with beam.Pipeline(options=options) as p:
                records = (
                    p
                    | "Files" >> beam.Create(inputs)
                    | "Read" >> tfrecord_io.ReadAllFromTFRecord()
                    | "CountRead" >> beam.ParDo(CountProgress(bar.dir, "read"))
                )
                if where is not None:
                    records = records | "Filter" >> beam.Filter(matches, where)
                (
                    records
                    | "Write"
                    >> tfrecord_io.WriteToTFRecord(
                        output,
                        file_name_suffix=suffix,
                        num_shards=num_shards,
                        compression_type=compression or "uncompressed",
                        write_index=write_index and not compression,
                    )
                    | "Collect" >> results.sink()
                )
            shards = sorted(results.read(), key=lambda s: s["path"])
    return {"inputs": inputs, "shards": shards, "records": sum(s["records"] for s in shards), "seconds": bar.elapsed}
