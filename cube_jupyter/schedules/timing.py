"""When a schedule fires: a 5-field cron in an IANA timezone, or a fixed interval, bounded by an
optional start and end. Pure functions over aware datetimes; every fire time is UTC on the way out.

cronsim (healthchecks.io's) does the cron arithmetic: it steps through daylight-saving changes the way
cron does (a 02:30 job on a spring-forward day runs at 03:00, once on a fall-back day) and explains an
expression in words for the form and the CLI.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

from cube_jupyter.errors import InvalidInput

# The macros Argo and cron accept, as the 5 fields they stand for.
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MIN_INTERVAL_SECONDS = 1
# The years a schedule's times may name: wide enough for any real schedule, far from the calendar's
# ends (and from the local mean times zones kept before 1900).
MIN_YEAR, MAX_YEAR = 1970, 9000
MAX_CRON_LENGTH = 256
# Names the zone database holds that are no place's time: this machine's own, and placeholders.
NOT_A_PLACE = frozenset({"localtime", "Factory", "posixrules", "posix", "right"})
MAX_INTERVAL_SECONDS = 366 * 86400


def cron_fields(value: object, field: str = "cron") -> str:
    """A 5-field cron expression (or a macro such as @daily), normalized to single spaces."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{field} must be a cron expression such as '0 2 * * *'", field=field)
    if len(value) > MAX_CRON_LENGTH:
        raise InvalidInput(
            f"{field} is {len(value)} characters long; the limit is {MAX_CRON_LENGTH}", field=field
        )
    text = MACROS.get(value.strip().lower(), " ".join(value.split()))
    parts = text.split(" ")
    if len(parts) != 5:
        raise InvalidInput(
            f"{field} {value!r} has {len(parts)} field(s); a cron expression has 5: minute hour "
            "day-of-month month day-of-week (e.g. '0 2 * * *' is 02:00 every day)",
            field=field,
        )
    try:
        CronSim(text, datetime(2000, 1, 1))
    except CronSimError as exc:
        raise InvalidInput(f"{field} {value!r} does not parse: {exc}", field=field) from None
    return text


def timezone(value: object, field: str = "timezone") -> str:
    """An IANA timezone name (Europe/Berlin, UTC)."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{field} must be an IANA timezone name such as 'Europe/Berlin'", field=field)
    if value in NOT_A_PLACE or (value not in available_timezones() and value != "UTC"):
        raise InvalidInput(
            f"{field} {value!r} is not an IANA timezone name (e.g. 'UTC', 'Europe/Berlin', "
            "'America/New_York')",
            field=field,
        )
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(f"{field} {value!r} is not a timezone this machine knows", field=field) from None
    return value


def instant(value: object, field: str, zone: str, *, end_of_day: bool = False) -> datetime:
    """An ISO 8601 date or time; one without an offset is read in `zone`. UTC on the way out. A bare
    date that ends a range (`end_of_day`) means the whole day: its last second."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{field} must be an ISO 8601 time such as '2026-12-01T02:00:00Z'", field=field)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        raise InvalidInput(
            f"{field} {value!r} is not an ISO 8601 time (e.g. '2026-12-01' or '2026-12-01T02:00:00+01:00')",
            field=field,
        ) from None
    if not MIN_YEAR <= parsed.year <= MAX_YEAR:
        raise InvalidInput(f"{field} {value!r} must be in the years {MIN_YEAR} to {MAX_YEAR}", field=field)
    if end_of_day and _date_only(value):
        parsed += timedelta(days=1, seconds=-1)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=ZoneInfo(zone))
    return parsed.astimezone(UTC)


def _date_only(value: str) -> bool:
    try:
        date.fromisoformat(value)
    except ValueError:
        return False
    return True


def iso(moment: datetime) -> str:
    """The one text form of a fire time: UTC, seconds, 'Z' (sortable, the run history's key)."""
    utc = moment.astimezone(UTC)
    return f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}Z"


def parse_iso(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


@dataclass(frozen=True)
class Timing:
    """Exactly one of `cron` (in `timezone`) and `interval_seconds` (counted from `start`, or from
    `anchor`: when the schedule was made); fire times in [start, end]."""

    cron: str | None
    interval_seconds: int | None
    timezone: str
    start: datetime | None
    end: datetime | None
    anchor: datetime

    def fire_times(self, after: datetime) -> Iterator[datetime]:
        """Fire times strictly after `after`, in order, up to `end` (forever without one)."""
        if self.start is not None and after < self.start:
            after = self.start - timedelta(microseconds=1)
        for moment in self._unbounded(after):
            if self.end is not None and moment > self.end:
                return
            yield moment

    def between(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        """Fire times in (after, until], at most `limit` (the newest are dropped past it)."""
        times: list[datetime] = []
        for moment in self.fire_times(after):
            if moment > until or len(times) >= limit:
                break
            times.append(moment)
        return times

    def latest(self, after: datetime, until: datetime, count: int) -> list[datetime]:
        """The newest `count` fire times in (after, until], in order: what a catch-up after a long
        downtime needs, without walking an interval's every fire time since."""
        if self.interval_seconds is not None:
            first = self.start or self.anchor
            span = (until - max(after, first - timedelta(microseconds=1))).total_seconds()
            skip = max(0, int(span // self.interval_seconds) - count - 1)
            after = max(after, first - timedelta(microseconds=1)) + timedelta(
                seconds=skip * self.interval_seconds
            )
        if self.cron is not None:  # backwards from `until`: a long downtime costs `count` steps
            return self._cron_latest(after, until, count)
        newest: deque[datetime] = deque(maxlen=count)
        for moment in self.fire_times(after):
            if moment > until:
                break
            newest.append(moment)
        return list(newest)

    def _cron_latest(self, after: datetime, until: datetime, count: int) -> list[datetime]:
        assert self.cron is not None
        zone = ZoneInfo(self.timezone)
        if self.end is not None:
            until = min(until, self.end)
        if self.start is not None:
            after = max(after, self.start - timedelta(microseconds=1))
        # cronsim steps backwards from just after `until` (whole seconds) and yields times before it.
        start = (until + timedelta(seconds=1)).astimezone(zone).replace(microsecond=0)
        newest: list[datetime] = []
        for moment in CronSim(self.cron, start, reverse=True):
            moment = moment.astimezone(UTC)
            if moment <= after or len(newest) >= count:
                break
            if moment <= until:
                newest.append(moment)
        return newest[::-1]

    def next_after(self, after: datetime) -> datetime | None:
        return next(self.fire_times(after), None)

    def describe(self) -> str:
        """The schedule in words: cronsim's explanation of the cron, or the interval."""
        if self.cron is not None:
            words = CronSim(self.cron, datetime(2000, 1, 1)).explain()
            return f"{words} ({self.timezone})"
        assert self.interval_seconds is not None
        return f"Every {_duration(self.interval_seconds)}"

    def _unbounded(self, after: datetime) -> Iterator[datetime]:
        if self.cron is not None:
            zone = ZoneInfo(self.timezone)
            # cronsim steps in the zone's wall-clock time and yields times strictly after its start.
            for moment in CronSim(self.cron, after.astimezone(zone).replace(microsecond=0)):
                if moment > after:
                    yield moment.astimezone(UTC)
            return
        assert self.interval_seconds is not None
        origin = self.start or self.anchor
        step = self.interval_seconds
        passed = (after - origin).total_seconds()
        count = 0 if passed < 0 else int(passed // step) + 1
        while True:
            yield origin + timedelta(seconds=count * step)
            count += 1


def _duration(seconds: int) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            amount = seconds // size
            return f"{amount} {unit}s" if amount != 1 else unit
    return f"{seconds} seconds" if seconds != 1 else "second"
