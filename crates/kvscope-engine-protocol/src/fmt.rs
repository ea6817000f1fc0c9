//! Numbers as the page prints them, in one place for the engine's sentences and the views'
//! cells alike.

/// "1.2 MiB", "340 KiB", "12 B".
pub fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{v:.0} {}", UNITS[u]) } else { format!("{v:.1} {}", UNITS[u]) }
}

/// "12,345".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// "850 ms", "12.4 s", "3 min 20 s": a span with its unit.
pub fn human_duration_ms(ms: f64) -> String {
    let ms = ms.max(0.0);
    if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else if ms < 60_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        let s = (ms / 1000.0).round() as u64;
        format!("{} min {} s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_carry_units_and_separators() {
        assert_eq!(human_bytes(12.0), "12 B");
        assert_eq!(human_bytes(1536.0 * 1024.0), "1.5 MiB");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(12), "12");
        assert_eq!(human_duration_ms(850.0), "850 ms");
        assert_eq!(human_duration_ms(12_400.0), "12.4 s");
        assert_eq!(human_duration_ms(200_000.0), "3 min 20 s");
    }
}
