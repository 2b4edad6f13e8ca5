"""Whether a Jetson is throttling: the junction sensor's software-throttling trip point and the
over-current event counters, read from sysfs.

Why: ``tegrastats`` shows temperatures and power, but not that the module has started cutting its
clocks. On an Orin two things do that: the junction temperature (``tj``) reaching the passive trip
point of its thermal zone, and the power monitor's over-current alarms (``oc*_event_cnt`` under
the INA3221 hwmon device count each time the module throttled to stay in its power budget). A
kiosk in a closed enclosure hits either long before it fails, and its tokens/s fall without an
error. Read only on a Jetson (where ``tegrastats`` exists); absent files read as ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

JUNCTION_ZONE_TYPES = ("tj-thermal", "tj")


@dataclass(frozen=True)
class ThrottleReading:
    """One look at sysfs: over-current events so far, and the junction's throttling point."""

    overcurrent_events: int | None
    tj_throttle_c: float | None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.lstrip("-").isdigit() else None


def overcurrent_events(sysfs: Path) -> int | None:
    """The sum of every ``oc*_event_cnt`` counter, or None when the board has none."""
    counts = [_read_int(f) for f in sorted(sysfs.glob("class/hwmon/hwmon*/oc*_event_cnt"))]
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


def tj_throttle_c(sysfs: Path) -> float | None:
    """The lowest passive trip point of the junction thermal zone, in °C."""
    lowest: int | None = None
    for zone in sorted(sysfs.glob("class/thermal/thermal_zone*")):
        try:
            kind = (zone / "type").read_text().strip().lower()
        except OSError:
            continue
        if kind not in JUNCTION_ZONE_TYPES:
            continue
        for trip_type in zone.glob("trip_point_*_type"):
            try:
                if trip_type.read_text().strip() != "passive":
                    continue
            except OSError:
                continue
            temp = _read_int(trip_type.with_name(trip_type.name.replace("_type", "_temp")))
            if temp is not None and (lowest is None or temp < lowest):
                lowest = temp
    return lowest / 1000.0 if lowest is not None else None


def read_throttle(sysfs: Path) -> ThrottleReading:
    return ThrottleReading(overcurrent_events(sysfs), tj_throttle_c(sysfs))
