//! Receive times as people read them: the protocol carries nanoseconds since the Unix epoch;
//! the page, `check` and the logs print them in UTC with one formatter, so one event reads the
//! same time everywhere.

/// `2026-12-01 12:01:03.120 UTC` for nanoseconds since the Unix epoch.
pub fn utc(unix_nanos: u64) -> String {
    let (date, time) = utc_parts(unix_nanos);
    format!("{date} {time} UTC")
}

/// `12:01:03.120`: the time of day, for axes whose date is said once.
pub fn utc_time_of_day(unix_nanos: u64) -> String {
    utc_parts(unix_nanos).1
}

fn utc_parts(unix_nanos: u64) -> (String, String) {
    let secs = unix_nanos / 1_000_000_000;
    let millis = (unix_nanos / 1_000_000) % 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    (format!("{y:04}-{m:02}-{d:02}"), format!("{:02}:{:02}:{:02}.{millis:03}", rem / 3600, rem % 3600 / 60, rem % 60))
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000 UTC");
        // 2026-12-01 12:01:03.120 UTC
        assert_eq!(utc(1_796_126_463_120_000_000), "2026-12-01 12:01:03.120 UTC");
        // A leap day, and the last millisecond of a day.
        assert_eq!(utc(951_782_399_999_000_000), "2000-02-28 23:59:59.999 UTC");
        assert_eq!(utc(951_782_400_000_000_000), "2000-02-29 00:00:00.000 UTC");
        assert_eq!(utc_time_of_day(1_796_126_463_120_999_999), "12:01:03.120");
    }
}
