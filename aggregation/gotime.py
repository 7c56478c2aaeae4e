"""Go's `time.Time` as propeller uses it for error timestamps: ordering that never fails, and printing.

The earliest reader compares `errorDoc.GetError().GetTimestamp().AsTime()` values with `After`
(flyteplugins v1.16.8 `remote_file_output_reader.go` `earliestFileErrorReader.ReadError`). `AsTime` is
`time.Unix(seconds, nanos).UTC()` (google.golang.org/protobuf `types/known/timestamppb`), and Go's `time`
package (`time.go` `Unix`, `unixTime`, `Time.After`) holds it as int64 seconds since year 1 plus
nanoseconds in [0, 1e9): `Unix` moves whole seconds out of `nanos` (floor), then adds 62,135,596,800 s, in
int64 arithmetic that wraps silently. `After` compares those seconds, then the nanoseconds. So every int64
`seconds` and int32 `nanos` orders without error, and a value past year 292,277,026,596 wraps around to a
very early time: that wrapped value is what decides "earliest", here as in propeller.
"""

from __future__ import annotations

import datetime
from functools import lru_cache
from typing import Optional

from aggregation.gonumbers import wrap

NANOS = 1_000_000_000
UNIX_TO_INTERNAL = (1969 * 365 + 1969 // 4 - 1969 // 100 + 1969 // 400) * 86400  # Go's unixToInternal
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def order_key(timestamp_ns: Optional[int]) -> tuple[int, int]:
    """What `Time.After` compares for `AsTime()` of a stamp of `timestamp_ns` (seconds * 1e9 + nanos, exact);
    a missing stamp is the epoch (`GetTimestamp()` of nil is 0 s, 0 ns)."""
    seconds, nanos = divmod(timestamp_ns or 0, NANOS)  # floor, as Unix normalises nanos outside [0, 1e9)
    return wrap(seconds + UNIX_TO_INTERNAL, 64), nanos  # int64 arithmetic, wrapping


def after(a: Optional[int], b: Optional[int]) -> bool:
    """Go's `AsTime(a).After(AsTime(b))`."""
    return order_key(a) > order_key(b)


def rfc3339_nanos(timestamp_ns: Optional[int]) -> Optional[str]:
    """RFC 3339 with nanoseconds where the stamp is between years 1 and 9999, else a plain raw form.

    Never fails: a stamp of any int64 seconds (milliseconds written as seconds, say) is printed, not raised.
    """
    if timestamp_ns is None:
        return None
    seconds, nanos = divmod(timestamp_ns, NANOS)
    whole = _whole_seconds(seconds)
    if whole is None:
        return f"{seconds} s + {nanos} ns since 1970-01-01 (outside RFC 3339's years 1-9999)"
    return f"{whole}.{nanos:09d}Z"


@lru_cache(maxsize=4096)  # error files of one job share their seconds: `explain` prints 10,000 stamps
def _whole_seconds(seconds: int) -> Optional[str]:
    """`YYYY-MM-DDTHH:MM:SS` of whole seconds since the epoch, or None outside years 1-9999."""
    try:
        t = _EPOCH + datetime.timedelta(seconds=seconds)
    except OverflowError:
        return None
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
