"""Pictures and sound for the HTML report, as ``data:`` URIs so the page needs nothing
but itself: charts drawn with matplotlib (SVG, text as paths: no fonts needed),
image thumbnails (PNG), audio as a waveform + spectrogram picture (PNG) and a WAV
clip for the page's ``<audio>`` player.

Every output is deterministic (same input, same bytes): SVG ids come from a fixed
salt, and no file carries a creation date or software version.
"""

from __future__ import annotations

import base64
import io
from typing import Dict, List, Sequence, Tuple

import numpy as np

from tfrecord_io.usage_errors import MissingDependencyError

THUMB_SIDE = 128  # px, the longer side of a thumbnail
PLAYER_SECONDS = 10.0  # the inline player gets at most this much of each clip
PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7"]


def data_uri(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def require_matplotlib() -> None:
    """Raise MissingDependencyError now, before a job runs, if the charts cannot be drawn."""
    _pyplot()


def _pyplot():
    try:
        import matplotlib
    except ImportError as err:
        raise MissingDependencyError(
            "tfrecord-io report draws its charts with matplotlib, which is not installed: "
            "pip install 'tfrecord-io[report]'"
        ) from err

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    matplotlib.rcParams.update(
        {
            "svg.hashsalt": "tfrecord-io-report",  # stable element ids: the same report twice is the same file
            "svg.fonttype": "path",
            "font.size": 8,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )
    return plt


def _svg(fig) -> str:
    plt = _pyplot()
    out = io.BytesIO()
    fig.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return data_uri("image/svg+xml", out.getvalue())


def _png(fig, dpi: int = 100, colors: int = 64) -> str:
    """PNG, reduced to a palette of ``colors`` (a spectrogram's noise compresses badly:
    ~3x smaller, and the difference is not visible at this size)."""
    from PIL import Image

    plt = _pyplot()
    raw = io.BytesIO()
    fig.savefig(raw, format="png", dpi=dpi, metadata={"Software": None})
    plt.close(fig)
    raw.seek(0)
    out = io.BytesIO()
    Image.open(raw).convert("RGB").quantize(colors).save(out, "PNG", optimize=True)
    return data_uri("image/png", out.getvalue())


# --------------------------------------------------------------------------- charts


def bar_chart(names: Sequence[str], counts: Sequence[int], title: str, xlabel: str = "records") -> str:
    """Horizontal bars, one per name (in the given order), as an SVG data URI."""
    plt = _pyplot()
    height = 0.6 + 0.22 * max(len(names), 1)
    fig, ax = plt.subplots(figsize=(4.2, min(height, 9.0)))
    ys = np.arange(len(names))
    ax.barh(ys, counts, color=PALETTE[0])
    ax.set_yticks(ys, [str(n) for n in names])
    ax.invert_yaxis()
    total = sum(counts) or 1
    for y, c in zip(ys, counts):
        ax.text(c, y, f" {c:,} ({100 * c / total:.0f}%)", va="center", fontsize=7)
    ax.set_xlim(0, max(counts or [1]) * 1.35)
    ax.set_xlabel(xlabel)
    ax.set_title(title, loc="left", fontsize=9)
    return _svg(fig)


def histogram_chart(hist: Dict, title: str, xlabel: str) -> str:
    """A histogram from ``report_stats.hist_output`` (bins of one width), as SVG."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 1.9))
    lefts = [b[0] for b in hist["bins"]]
    counts = [b[1] for b in hist["bins"]]
    ax.bar(lefts, counts, width=hist["width"], align="edge", color=PALETTE[0], edgecolor="white", linewidth=0.4)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    ax.set_title(title, loc="left", fontsize=9)
    return _svg(fig)


# --------------------------------------------------------------------------- samples


def _display_array(pixels: np.ndarray) -> np.ndarray:
    """A decoded image array (any mode the Image decoder gives) -> uint8 L/RGB/RGBA."""
    arr = np.asarray(pixels)
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.dtype != np.uint8:  # 16-bit, int32 or float: stretch to 0..255 for viewing
        arr = arr.astype(np.float64)
        lo, hi = float(np.nanmin(arr)), float(np.nanmax(arr))
        arr = np.zeros(arr.shape) if hi <= lo else (arr - lo) * (255.0 / (hi - lo))
        arr = np.nan_to_num(arr).clip(0, 255).astype(np.uint8)
    if arr.ndim == 3 and arr.shape[2] == 2:  # LA: grey + alpha
        arr = np.dstack([arr[:, :, 0]] * 3 + [arr[:, :, 1]])
    return arr


def thumbnail(pixels: np.ndarray) -> Tuple[str, int, int]:
    """``(PNG data URI, width, height)``: the image shrunk so its longer side is at
    most THUMB_SIDE (smaller images are kept as they are and scaled by the page)."""
    from PIL import Image

    img = Image.fromarray(_display_array(pixels))
    img.thumbnail((THUMB_SIDE, THUMB_SIDE), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    img.save(out, "PNG", optimize=True)
    return data_uri("image/png", out.getvalue()), img.width, img.height


def audio_picture(samples: np.ndarray, sample_rate: int) -> str:
    """Waveform above spectrogram of the (channel-averaged) clip, as a PNG data URI."""
    plt = _pyplot()
    mono = np.asarray(samples, dtype=np.float32)
    mono = mono.mean(axis=1) if mono.ndim == 2 else mono
    t = np.arange(mono.size) / float(sample_rate)
    fig, (wave, spec) = plt.subplots(
        2, 1, figsize=(2.0, 1.5), sharex=True, gridspec_kw={"height_ratios": [1, 1.4], "hspace": 0.05}
    )
    wave.plot(t, mono, color=PALETTE[0], linewidth=0.5)
    peak = float(np.abs(mono).max()) if mono.size else 0.0
    wave.set_ylim(-max(peak, 1e-3) * 1.05, max(peak, 1e-3) * 1.05)
    wave.axis("off")
    nfft = int(min(512, max(16, 2 ** int(np.log2(max(mono.size // 8, 16))))))
    if mono.size >= nfft:
        power, _, _, image = spec.specgram(mono, NFFT=nfft, Fs=sample_rate, noverlap=nfft // 2, cmap="magma")
        top = 10 * np.log10(max(float(power.max()), 1e-20))
        image.set_clim(top - 80, top)  # the same 80 dB range on every card, so cards compare
    spec.set_xlim(0, max(mono.size / float(sample_rate), 1e-3))
    spec.axis("off")  # time runs left to right, 0 Hz at the bottom to sample_rate / 2 at the top
    fig.subplots_adjust(left=0.02, right=0.98, top=0.98, bottom=0.02)
    return _png(fig)


def wav_clip(samples: np.ndarray, sample_rate: int, seconds: float = PLAYER_SECONDS) -> Tuple[str, bool]:
    """``(WAV data URI, cut)``: 16-bit PCM of the first ``seconds`` (cut: it was longer)."""
    import soundfile as sf

    arr = np.asarray(samples, dtype=np.float32)
    keep = int(seconds * sample_rate)
    cut = arr.shape[0] > keep
    out = io.BytesIO()
    sf.write(out, np.clip(arr[:keep], -1.0, 1.0), int(sample_rate), format="WAV", subtype="PCM_16")
    return data_uri("audio/wav", out.getvalue()), cut


def top_items(counts: Dict[str, int], limit: int) -> Tuple[List[Tuple[str, int]], int]:
    """The ``limit`` largest entries (count desc, then name) and how many were left out."""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return items[:limit], max(0, len(items) - limit)


__all__ = ["audio_picture", "bar_chart", "data_uri", "histogram_chart", "thumbnail", "top_items", "wav_clip"]
