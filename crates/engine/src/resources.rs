//! What one stage instance asks of the machine that runs it: CPUs, memory, GPUs and a time
//! limit, from its stage's `resources:` in the pipeline file and its kind's defaults.
//!
//! Resources never join the cache key: the same stage on more memory computes the same bytes.
//! The local executor honours `cpus` (the thread slots the stage holds) and `gpus` (devices it
//! gets to itself); `mem` and `time` are requests a cluster scheduler enforces.

use serde::{Deserialize, Serialize};

/// The resources of one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Resources {
    /// CPUs; `None` takes the kind's thread claim.
    pub cpus: Option<u32>,
    /// Memory in MiB; `None` takes the cluster's default.
    pub mem_mib: Option<u64>,
    /// GPUs the stage gets to itself (a `train` or `evaluate` stage on `device: cuda` asks
    /// for one unless its `resources:` says otherwise).
    pub gpus: u32,
    /// Wall-clock limit in minutes; `None` takes the cluster's default.
    pub time_min: Option<u64>,
}

/// Resources as a stage's `resources:` writes them, before its kind's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResourceRequest {
    /// `cpus:`.
    pub cpus: Option<u32>,
    /// `mem:`, in MiB.
    pub mem_mib: Option<u64>,
    /// `gpus:`.
    pub gpus: Option<u32>,
    /// `time:`, in minutes.
    pub time_min: Option<u64>,
}

impl ResourceRequest {
    /// The resources of an instance whose kind asks for `kind_gpus` GPUs by default.
    pub fn resolve(self, kind_gpus: u32) -> Resources {
        Resources {
            cpus: self.cpus,
            mem_mib: self.mem_mib,
            gpus: self.gpus.unwrap_or(kind_gpus),
            time_min: self.time_min,
        }
    }
}

/// Memory as written in a pipeline file: a number of MiB, or a number with a `K`, `M`, `G`
/// or `T` suffix (binary units, an optional trailing `B` or `iB`), as Slurm's `--mem` takes.
///
/// # Errors
/// A message saying what was expected.
pub fn parse_mem(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let bad = || format!("memory `{text}` is not a size such as 512M, 16G or 2048 (MiB)");
    let upper = t.to_ascii_uppercase();
    let body = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .unwrap_or(&upper);
    let (digits, factor_kib) = match body.char_indices().last() {
        Some((i, 'K')) => (&body[..i], 1u64),
        Some((i, 'M')) => (&body[..i], 1 << 10),
        Some((i, 'G')) => (&body[..i], 1 << 20),
        Some((i, 'T')) => (&body[..i], 1 << 30),
        Some(_) => (body, 1 << 10),
        None => return Err(bad()),
    };
    let n: u64 = digits.trim().parse().map_err(|_| bad())?;
    let kib = n.checked_mul(factor_kib).ok_or_else(bad)?;
    let mib = kib.div_ceil(1 << 10);
    if mib == 0 {
        return Err(format!("memory `{text}` is zero"));
    }
    Ok(mib)
}

/// A time limit as written in a pipeline file, in whole minutes (rounded up): minutes as a
/// number, a number with an `s`, `m`, `h` or `d` suffix, or Slurm's `[D-]HH:MM[:SS]` /
/// `MM:SS` forms (`4-00:00:00`, `2:30:00`).
///
/// # Errors
/// A message saying what was expected.
pub fn parse_time(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let bad =
        || format!("time `{text}` is not a limit such as 90 (minutes), 30m, 12h, 4d or 4-00:00:00");
    let seconds = if t.contains(':') || t.contains('-') {
        slurm_time_seconds(t).ok_or_else(bad)?
    } else {
        let (digits, unit) = match t.char_indices().last() {
            Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c),
            Some(_) => (t, 'm'),
            None => return Err(bad()),
        };
        let per = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        let n: u64 = digits.trim().parse().map_err(|_| bad())?;
        n.checked_mul(per).ok_or_else(bad)?
    };
    if seconds == 0 {
        return Err(format!("time `{text}` is zero"));
    }
    Ok(seconds.div_ceil(60))
}

/// A duration in whole seconds: a number of seconds, or a number with an `s`, `m` or `h`
/// suffix (`10s`, `5m`).
///
/// # Errors
/// A message saying what was expected.
pub fn parse_seconds(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let bad = || format!("duration `{text}` is not such as 10 (seconds), 10s, 5m or 1h");
    let (digits, per) = match t.char_indices().last() {
        Some((i, 's')) => (&t[..i], 1),
        Some((i, 'm')) => (&t[..i], 60),
        Some((i, 'h')) => (&t[..i], 3600),
        Some(_) => (t, 1),
        None => return Err(bad()),
    };
    let n: u64 = digits.trim().parse().map_err(|_| bad())?;
    n.checked_mul(per).ok_or_else(bad)
}

/// Seconds of `[D-]HH[:MM[:SS]]` (hours need the day part) or `MM:SS`.
fn slurm_time_seconds(t: &str) -> Option<u64> {
    let (days, rest) = match t.split_once('-') {
        Some((d, rest)) => (Some(d.parse::<u64>().ok()?), rest),
        None => (None, t),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    let (h, m, s) = match (days.is_some(), parts.as_slice()) {
        (true, [h]) => (*h, 0, 0),
        (true, [h, m]) => (*h, *m, 0),
        (false, [m, s]) if *s < 60 => return Some(m * 60 + s),
        (_, [h, m, s]) => (*h, *m, *s),
        _ => return None,
    };
    (m < 60 && s < 60).then(|| days.unwrap_or(0) * 86_400 + h * 3600 + m * 60 + s)
}

/// `minutes` as Slurm's `--time` writes it: `D-HH:MM:00`.
pub fn slurm_time(minutes: u64) -> String {
    let (days, rest) = (minutes / 1440, minutes % 1440);
    format!("{days}-{:02}:{:02}:00", rest / 60, rest % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_are_mib_rounded_up() {
        assert_eq!(parse_mem("2048"), Ok(2048));
        assert_eq!(parse_mem("512M"), Ok(512));
        assert_eq!(parse_mem("16G"), Ok(16 * 1024));
        assert_eq!(parse_mem("16GiB"), Ok(16 * 1024));
        assert_eq!(parse_mem("1t"), Ok(1024 * 1024));
        assert_eq!(parse_mem("1500K"), Ok(2));
        for bad in ["", "G", "12X", "-3G", "0", "1.5G", "99999999999999999T"] {
            assert!(parse_mem(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn time_limits_are_minutes_rounded_up() {
        assert_eq!(parse_time("90"), Ok(90));
        assert_eq!(parse_time("30m"), Ok(30));
        assert_eq!(parse_time("12h"), Ok(720));
        assert_eq!(parse_time("4d"), Ok(4 * 1440));
        assert_eq!(parse_time("61s"), Ok(2));
        assert_eq!(parse_time("4-00:00:00"), Ok(4 * 1440));
        assert_eq!(parse_time("1-12"), Ok(1440 + 720));
        assert_eq!(parse_time("1-02:30"), Ok(1440 + 150));
        assert_eq!(parse_time("2:30:00"), Ok(150));
        assert_eq!(parse_time("5:30"), Ok(6));
        for bad in ["", "0", "h", "3w", "1:60:00", "1:99", "a-1:00", "1:2:3:4"] {
            assert!(parse_time(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn durations_are_seconds() {
        assert_eq!(parse_seconds("10"), Ok(10));
        assert_eq!(parse_seconds("10s"), Ok(10));
        assert_eq!(parse_seconds("5m"), Ok(300));
        assert_eq!(parse_seconds("1h"), Ok(3600));
        assert_eq!(parse_seconds("0"), Ok(0));
        for bad in ["", "s", "3d", "-1", "1.5m"] {
            assert!(parse_seconds(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_request_takes_the_kinds_gpus_unless_it_sets_them() {
        let none = ResourceRequest::default();
        assert_eq!(none.resolve(1).gpus, 1);
        let zero = ResourceRequest {
            gpus: Some(0),
            ..ResourceRequest::default()
        };
        assert_eq!(zero.resolve(1).gpus, 0);
    }

    #[test]
    fn slurm_time_round_trips() {
        for minutes in [1, 59, 60, 1439, 1440, 5761] {
            assert_eq!(parse_time(&slurm_time(minutes)), Ok(minutes));
        }
        assert_eq!(slurm_time(4 * 1440 + 61), "4-01:01:00");
    }
}
