"""Helpers for the Beam IO tests: run a real pipeline and get its outputs and metrics back.

Outputs are collected by a DoFn that pickles each bundle's elements into a file, so
the same helper works in-process and with ``multi_processing`` workers (where a
Python list in the test process would stay empty).
"""

from __future__ import annotations

import os
import pickle
import uuid
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

MULTI = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


class _Collect(beam.DoFn):
    def __init__(self, directory: str):
        self._dir = directory

    def start_bundle(self):
        self._items: List[Any] = []

    def process(self, element):
        self._items.append(element)

    def finish_bundle(self):
        if self._items:
            with open(os.path.join(self._dir, uuid.uuid4().hex + ".pkl"), "wb") as f:
                pickle.dump(self._items, f)
            self._items = []


def run_pipeline(
    build: Callable[[beam.Pipeline], Dict[str, Any]],
    workdir: str,
    multi: bool = False,
    flags: Optional[List[str]] = None,
) -> Tuple[Dict[str, List[Any]], Dict[Tuple[str, str], int]]:
    """Build with ``build(p) -> {name: pcollection}``, run on the DirectRunner (with
    ``flags``, else two processes when ``multi``), and return
    ``({name: [elements]}, {(namespace, metric): committed value})``."""
    p = beam.Pipeline("DirectRunner", options=PipelineOptions(flags if flags is not None else MULTI if multi else []))
    outputs = build(p)
    dirs = {}
    for name, pcoll in outputs.items():
        d = os.path.join(workdir, f"collect-{name}-{uuid.uuid4().hex}")
        os.makedirs(d)
        dirs[name] = d
        pcoll | f"Collect_{name}" >> beam.ParDo(_Collect(d))
    result = p.run()
    result.wait_until_finish()
    collected: Dict[str, List[Any]] = {}
    for name, d in dirs.items():
        items: List[Any] = []
        for fn in sorted(os.listdir(d)):
            with open(os.path.join(d, fn), "rb") as f:
                items.extend(pickle.load(f))
        collected[name] = items
    metrics: Dict[Tuple[str, str], int] = Counter()
    for c in result.metrics().query()["counters"]:
        metrics[(c.key.metric.namespace, c.key.metric.name)] += c.committed or 0
    return collected, metrics


def multiset(items) -> Counter:
    return Counter(bytes(x) for x in items)
