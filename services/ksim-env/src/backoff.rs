//! When the environment restarts a service that died: at once the first time, then after doubling
//! delays up to a cap, and from scratch again once a restart has stayed up a while. Time is
//! passed in, so the policy is tested without waiting.

use std::time::{Duration, Instant};

/// Delay before the second restart in a row; each further one doubles it.
const FIRST_DELAY: Duration = Duration::from_secs(1);
/// The longest wait between restarts of a service that keeps dying.
const MAX_DELAY: Duration = Duration::from_secs(30);
/// A service up this long counts as recovered: its next death restarts it at once.
const STABLE_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct Backoff {
    /// Restarts since the service last stayed up [`STABLE_AFTER`].
    restarts: u32,
    started: Instant,
    /// When the dead service is to be started again.
    due: Option<Instant>,
}

impl Backoff {
    pub fn new(started: Instant) -> Self {
        Self {
            restarts: 0,
            started,
            due: None,
        }
    }

    /// The service was found dead at `now`; returns how long until it is started again.
    pub fn died(&mut self, now: Instant) -> Duration {
        if now.saturating_duration_since(self.started) >= STABLE_AFTER {
            self.restarts = 0;
        }
        let delay = match self.restarts {
            0 => Duration::ZERO,
            n => FIRST_DELAY
                .saturating_mul(1 << (n - 1).min(16))
                .min(MAX_DELAY),
        };
        self.restarts = self.restarts.saturating_add(1);
        self.due = Some(now + delay);
        delay
    }

    /// Whether a dead service's restart is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        self.due.is_some_and(|due| now >= due)
    }

    /// Whether the service is dead and waiting for its restart.
    pub fn waiting(&self) -> bool {
        self.due.is_some()
    }

    /// The service was started again at `now`.
    pub fn restarted(&mut self, now: Instant) {
        self.started = now;
        self.due = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_at_once_then_doubles_up_to_the_cap_and_forgets_after_a_stable_run() {
        let t0 = Instant::now();
        let mut backoff = Backoff::new(t0);
        let mut now = t0 + Duration::from_secs(5);
        let mut delays = Vec::new();
        for _ in 0..8 {
            let delay = backoff.died(now);
            assert!(backoff.waiting());
            assert!(!backoff.due(now + delay - Duration::from_millis(1)) || delay.is_zero());
            assert!(backoff.due(now + delay));
            now += delay;
            backoff.restarted(now);
            assert!(!backoff.waiting());
            now += Duration::from_secs(2);
            delays.push(delay.as_secs());
        }
        assert_eq!(delays, [0, 1, 2, 4, 8, 16, 30, 30]);

        // Up for a minute: the next death restarts it at once again.
        now += STABLE_AFTER;
        assert_eq!(backoff.died(now), Duration::ZERO);
    }
}
