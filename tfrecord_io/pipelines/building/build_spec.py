"""The build's settings as the pipeline's stages need them, made once from a validated
config: one small picklable object every stage gets, instead of the whole config being
re-read in each."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from tfrecord_io.pipelines.building import placement
from tfrecord_io.pipelines.building.build_config import BuildConfig
from tfrecord_io.pipelines.building.encoders_config import make_encoders
from tfrecord_io.storage import files


@dataclass
class BuildSpec:
    """Everything the stages of :class:`~tfrecord_io.pipelines.building.transform.BuildDataset`
    read: where the version goes, how rows are placed, how columns are encoded.

    ``config`` is the validated :class:`BuildConfig` (frozen: every stage sees the same);
    ``version`` and ``run_id`` are filled in once the launcher has claimed a version."""

    config: BuildConfig
    out_dir: str
    version: str
    run_id: str
    base_dir: Optional[str] = None
    name: str = field(init=False)
    sources: Dict[str, str] = field(init=False)  # feature column -> input column
    media_sources: List[str] = field(init=False)  # input columns holding media
    vocab_sources: Dict[str, str] = field(init=False)  # `vocabulary: auto` column -> input column
    cutoffs: List[Tuple[str, float]] = field(init=False)
    compression: str = field(init=False)

    def __post_init__(self) -> None:
        cfg = self.config
        self.out_dir = self.out_dir.rstrip("/") or "/"
        self.name = cfg.name
        self.sources = {name: col.column or name for name, col in cfg.columns.items()}
        self.media_sources = [self.sources[c] for c in cfg.media_columns]
        self.vocab_sources = {
            name: self.sources[name] for name, col in cfg.columns.items() if col.params.get("vocabulary") == "auto"
        }
        self.cutoffs = placement.split_cutoffs(cfg.splits.active())
        self.compression = files.normalize_compression(cfg.output.compression or None)

    @property
    def version_dir(self) -> str:
        return files.join(self.out_dir, self.version)

    @property
    def key_column(self) -> Optional[str]:
        return self.config.key

    @property
    def seed(self) -> int:
        return int(self.config.seed)

    @property
    def shuffle(self) -> bool:
        return bool(self.config.shuffle)

    @property
    def dedup(self) -> str:
        """What a key seen twice does: ``error`` (the default) or ``key``
        (``pipelines.building.dedup``)."""
        return str(self.config.dedup or "error")

    @property
    def write_index(self) -> bool:
        return bool(self.config.output.write_index) and not self.compression

    def columns(self, vocab: Optional[Dict[str, List[str]]] = None) -> Dict[str, Dict[str, Any]]:
        """The config's columns (mapping form) with ``vocabulary: auto`` replaced by the
        values found (the sorted distinct values of the column: the same ids on every
        rerun)."""
        columns = self.config.column_settings()
        for name in self.vocab_sources:
            columns[name]["vocabulary"] = list((vocab or {}).get(name, []))
        return columns

    def encoders(self, vocab: Optional[Dict[str, List[str]]] = None) -> Dict[str, Any]:
        return make_encoders(self.columns(vocab))

    def feature_spec(self, vocab: Optional[Dict[str, List[str]]] = None) -> Dict[str, Any]:
        from tfrecord_io.transforms.rows import check_spec

        return {s.key: s.to_dict() for s in check_spec(self.encoders(vocab))}

    def config_dict(self) -> Dict[str, Any]:
        """The config in mapping form (``tfrecord_io_info.json``'s ``config``)."""
        return self.config.to_dict()

    def fingerprint_settings(self) -> Dict[str, Any]:
        """The config without where it is written and which runner runs it."""
        settings = copy.deepcopy(self.config_dict())
        settings.pop("runner", None)
        settings.get("output", {}).pop("version", None)
        settings.get("output", {}).pop("dir", None)
        return settings
