"""The loop passes unix seconds around; the tables keep timezone-aware datetimes."""

from datetime import UTC, datetime


def utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


def seconds(moment: datetime) -> float:
    # SQLite hands datetimes back naive; they were written as UTC
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
