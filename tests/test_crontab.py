"""Cron expressions and intervals: next times in a zone, across DST, anchored."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from django_rivet.crontab import next_cron_time, next_every_time
from tests.support.clock import START

PARIS = ZoneInfo("Europe/Paris")


def paris(*args):
    return datetime(*args, tzinfo=PARIS)


# -- the timing rules ---------------------------------------------------------------
def times(expression, tz, start, count):
    found, after = [], start
    for _ in range(count):
        after = next_cron_time(expression, tz, after)
        found.append(after.astimezone(ZoneInfo(tz)).strftime("%m-%d %H:%M%z"))
    return found


def test_cron_time_inside_the_skipped_hour_runs_right_after_spring_forward():
    assert times("30 2 * * *", "Europe/Paris", paris(2026, 3, 28, 12), 3) == [
        "03-29 03:00+0200",  # 02:30 does not exist that night
        "03-30 02:30+0200",
        "03-31 02:30+0200",
    ]


def test_cron_time_repeated_by_fall_back_runs_once():
    assert times("30 2 * * *", "Europe/Paris", paris(2026, 10, 24, 12), 3) == [
        "10-25 02:30+0200",  # not again at 02:30+0100
        "10-26 02:30+0100",
        "10-27 02:30+0100",
    ]


def test_hourly_cron_keeps_every_real_hour_across_both_changes():
    assert times("0 * * * *", "Europe/Paris", paris(2026, 10, 25, 0, 30), 4) == [
        "10-25 01:00+0200",
        "10-25 02:00+0200",
        "10-25 02:00+0100",
        "10-25 03:00+0100",
    ]
    assert times("@hourly", "Europe/Paris", paris(2026, 3, 29, 0, 30), 3) == [
        "03-29 01:00+0100",
        "03-29 03:00+0200",
        "03-29 04:00+0200",
    ]


def test_weekday_cron_skips_the_weekend_in_its_zone():
    friday = datetime(2026, 6, 5, 14, tzinfo=UTC)  # Friday 10:00 in New York
    assert times("0 9 * * 1-5", "America/New_York", friday, 2) == [
        "06-08 09:00-0400",
        "06-09 09:00-0400",
    ]


def test_every_next_time_is_anchored_on_the_previous_scheduled_time():
    first = START + timedelta(seconds=60)
    late_fire = first + timedelta(seconds=7)
    assert next_every_time(first, 60, late_fire) == START + timedelta(seconds=120)
    much_later = first + timedelta(seconds=601)
    assert next_every_time(first, 60, much_later) == START + timedelta(seconds=720)
