//! The `fleet` scenario's cast: which simulated workers misbehave, and how.
//!
//! Most workers are healthy vLLM GPU engines; a few are not, in the ways real fleets are not
//! (docs/rules.md, "At fleet scale"): behind a CPU-offload connector at another block size, an
//! engine that restarts, one that loses frames its replay buffer no longer holds, and one on an
//! older vLLM release. The overview must make exactly these obvious; the positions are fixed so
//! a test (and an operator comparing two runs) knows where they are.

use super::payload::Release;

/// What one simulated worker does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// GPU stores and evictions at the fleet's block size.
    Healthy,
    /// Also LMCache chunk stores on medium `cpu` at block size 256: fatal under `legacy`,
    /// skipped under `fixed`.
    Offload,
    /// Restarts every [`Role::RESTART_EVERY_S`] seconds (first after 4 s): its seq starts again
    /// from 0 and its replay buffer is empty.
    Restarts,
    /// Every [`Role::LOSS_EVERY_S`] seconds (first after 2 s), [`Role::LOST_FRAMES`] seqs are
    /// never published nor kept for replay: a gap replay cannot fill. Their batches' blocks
    /// are cached all the same, so the stores after a gap chain below blocks no reader saw.
    LosesFrames,
    /// Publishes vLLM 0.23.0's array layout (and its replay framing without a topic).
    OlderRelease,
}

/// Where the odd workers sit in a 64-worker fleet; other sizes scale the positions.
const AT_64: [(u32, Role); 7] = [
    (5, Role::Offload),
    (13, Role::Restarts),
    (21, Role::Offload),
    (29, Role::LosesFrames),
    (37, Role::Offload),
    (46, Role::OlderRelease),
    (53, Role::Offload),
];

impl Role {
    pub const RESTART_EVERY_S: f64 = 20.0;
    pub const LOSS_EVERY_S: f64 = 10.0;
    pub const LOST_FRAMES: u64 = 3;

    /// The role of worker `worker` in a fleet of `workers` (below 16, workers 1 to 4 take one
    /// fault each).
    pub fn of(worker: u32, workers: u32) -> Role {
        if workers < 16 {
            return match worker {
                1 => Role::Offload,
                2 => Role::Restarts,
                3 => Role::LosesFrames,
                4 => Role::OlderRelease,
                _ => Role::Healthy,
            };
        }
        let at = |pos: u32| (u64::from(pos) * u64::from(workers) / 64) as u32;
        AT_64.iter().find(|(pos, _)| at(*pos) == worker).map_or(Role::Healthy, |(_, role)| *role)
    }

    /// The release whose bytes this worker publishes, given the fleet's.
    pub fn release(self, fleet: Release) -> Release {
        if self == Role::OlderRelease { Release::Vllm023 } else { fleet }
    }

    /// Whether this role misbehaves before batch `sent` at `rate` batches/s: first soon after
    /// start (so the overview shows it within seconds), then every [`Role::RESTART_EVERY_S`] or
    /// [`Role::LOSS_EVERY_S`]. As fast as possible (`rate` 0), counted in batches instead.
    pub fn misbehaves_at(self, sent: u64, rate: f64) -> bool {
        let (first_s, every_s) = match self {
            Role::Restarts => (4.0, Role::RESTART_EVERY_S),
            Role::LosesFrames => (2.0, Role::LOSS_EVERY_S),
            _ => return false,
        };
        let batches = |s: f64| if rate > 0.0 { (rate * s).round().max(10.0) as u64 } else { (s * 250.0) as u64 };
        let (first, every) = (batches(first_s), batches(every_s));
        sent >= first && (sent - first).is_multiple_of(every)
    }

    /// The mode line's words for the cast of a fleet of `workers`.
    pub fn cast(workers: u32) -> String {
        let of = |role: Role| (0..workers).filter(|w| Role::of(*w, workers) == role).map(|w| w.to_string()).collect::<Vec<_>>();
        let mut parts = Vec::new();
        for (role, words) in [
            (Role::Offload, "behind a CPU-offload connector at block size 256"),
            (Role::Restarts, "restarting"),
            (Role::LosesFrames, "losing frames replay cannot fill"),
            (Role::OlderRelease, "on vLLM 0.23.0"),
        ] {
            let ids = of(role);
            if !ids.is_empty() {
                parts.push(format!("{} {words}", ids.join(", ")));
            }
        }
        if parts.is_empty() { "every worker healthy".to_owned() } else { format!("workers {}", parts.join("; ")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles(workers: u32) -> Vec<(u32, Role)> {
        (0..workers).map(|w| (w, Role::of(w, workers))).filter(|(_, r)| *r != Role::Healthy).collect()
    }

    #[test]
    fn a_fleet_of_64_has_four_offload_workers_and_one_of_each_other_fault() {
        let count = |role: Role| roles(64).iter().filter(|(_, r)| *r == role).count();
        assert_eq!([Role::Offload, Role::Restarts, Role::LosesFrames, Role::OlderRelease].map(count), [4, 1, 1, 1]);
        assert_eq!(
            Role::cast(64),
            "workers 5, 21, 37, 53 behind a CPU-offload connector at block size 256; 13 restarting; \
             29 losing frames replay cannot fill; 46 on vLLM 0.23.0"
        );
    }

    #[test]
    fn faults_come_soon_after_start_then_at_their_period() {
        let at = |role: Role, rate: f64| (0..2_000).filter(|n| role.misbehaves_at(*n, rate)).collect::<Vec<u64>>();
        assert_eq!(at(Role::LosesFrames, 50.0), [100, 600, 1100, 1600]);
        assert_eq!(at(Role::Restarts, 50.0), [200, 1200]);
        assert!(at(Role::Offload, 50.0).is_empty() && at(Role::Healthy, 50.0).is_empty());
    }

    #[test]
    fn every_fault_is_cast_at_any_size_from_five_workers() {
        for workers in [5, 8, 15, 16, 100, 256, 512] {
            let cast: Vec<Role> = roles(workers).into_iter().map(|(_, r)| r).collect();
            for role in [Role::Offload, Role::Restarts, Role::LosesFrames, Role::OlderRelease] {
                assert!(cast.contains(&role), "{workers} workers: no {role:?} in {cast:?}");
            }
            let healthy = (0..workers).filter(|w| Role::of(*w, workers) == Role::Healthy).count() as u32;
            assert!(workers < 16 || healthy >= workers / 2, "{workers} workers, {healthy} healthy");
        }
    }
}
