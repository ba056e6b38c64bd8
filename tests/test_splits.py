"""TFDS-style split selections: parsing, and how percent boundaries round."""

from __future__ import annotations

import pytest

from tfrecord_io.dataset.splits import SplitRange, parse_split, resolve_split

COUNTS = {"train": 1234, "validation": 5, "small": 99}


def r(spec, counts=COUNTS, rounding=None):
    return [(x.split, x.start, x.stop) for x in resolve_split(spec, counts, rounding)]


def test_whole_splits_and_unions():
    assert r("train") == [("train", 0, 1234)]
    assert r("train+validation") == [("train", 0, 1234), ("validation", 0, 5)]
    assert r(" train [:10] + validation ".replace(" [", "[")) == [("train", 0, 10), ("validation", 0, 5)]


def test_absolute_and_negative_bounds_clip_like_python():
    assert r("validation[:1000]") == [("validation", 0, 5)]
    assert r("train[-10:]") == [("train", 1224, 1234)]
    assert r("train[:-1000]") == [("train", 0, 234)]
    assert r("train[100:200]") == [("train", 100, 200)]


def test_percent_rounds_to_the_closest_record_ties_to_even():
    # 1234 * 90 / 100 = 1110.6 -> 1111;  1234 * 10 / 100 = 123.4 -> 123
    assert r("train[:90%]") == [("train", 0, 1111)]
    assert r("train[10%:]") == [("train", 123, 1234)]
    # exact halves go to the even neighbour: 5 * 50 / 100 = 2.5 -> 2; 5 * 30 / 100 = 1.5 -> 2
    assert r("validation[:50%]") == [("validation", 0, 2)]
    assert r("validation[:30%]") == [("validation", 0, 2)]
    assert r("validation[:70%]") == [("validation", 0, 4)]  # 3.5 -> 4
    assert r("train[:12.5%]") == [("train", 0, 154)]  # 154.25, computed exactly
    assert r("train[-5%:]") == [("train", 1234 - 62, 1234)]  # -61.7 -> -62


@pytest.mark.parametrize("n", [1, 5, 7, 99, 1234, 100001])
@pytest.mark.parametrize("cut", [1, 10, 33, 50, 90, 99])
def test_complementary_percent_slices_tile_the_split(n, cut):
    counts = {"s": n}
    try:
        left = resolve_split(f"s[:{cut}%]", counts)[0]
    except ValueError:
        left = SplitRange("s", 0, 0)
    try:
        right = resolve_split(f"s[{cut}%:]", counts)[0]
    except ValueError:
        right = SplitRange("s", n, n)
    assert left.stop == right.start and left.count + right.count == n


def test_pct1_dropremainder():
    # 1234 // 100 = 12 records per percent; the 34 left over are in no percent slice
    assert r("train[:10%](pct1_dropremainder)") == [("train", 0, 120)]
    assert r("train[10%:20%]", rounding="pct1_dropremainder") == [("train", 120, 240)]
    assert r("train[:100%](pct1_dropremainder)") == [("train", 0, 1200)]
    with pytest.raises(ValueError, match="at least 100"):
        r("small[:10%](pct1_dropremainder)")


@pytest.mark.parametrize(
    "spec,message",
    [
        ("", "non-empty"),
        ("train[:10", "cannot read"),
        ("train[1.5:]", "whole number"),
        ("train[:150%]", "outside"),
        ("test", "not in the dataset"),
        ("train[10:5]", "selects no records"),
        ("validation[:1%]", "selects no records"),
        ("train[:1%](sideways)", "rounding"),
    ],
)
def test_bad_selections_say_what_is_wrong(spec, message):
    with pytest.raises(ValueError, match=message):
        r(spec)


def test_parse_keeps_units_and_rounding():
    (part,) = parse_split("train[-10%:1000](pct1_dropremainder)")
    assert part.split == "train" and part.start.percent and not part.stop.percent
    assert part.rounding == "pct1_dropremainder" and int(part.stop.value) == 1000
