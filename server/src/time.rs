//! Wall-clock time as the protocol carries it: nanoseconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in nanoseconds since the Unix epoch (0 if the clock is before 1970).
pub fn unix_nanos() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}
