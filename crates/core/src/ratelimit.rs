//! Token bucket arithmetic, shared by the client's rate limit (kruise-manager's `throttle`) and the
//! Event spam filter (kruise-controllers' `events`). Pure: the caller passes the time.

use std::time::{Duration, Instant};

/// A token bucket: `reserve` returns how long the caller must wait for its token, `try_take`
/// whether one is there to take now.
#[derive(Debug)]
pub struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    pub fn new(qps: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: qps.max(0.001),
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// The apiserver asked for a pause of `delay`: no request leaves before `now + delay`, and the
    /// queue behind resumes at the steady rate after it (no burst right after a 429).
    pub fn back_off(&mut self, now: Instant, delay: Duration) {
        self.refill(now);
        self.tokens = self.tokens.min(-delay.as_secs_f64() * self.qps + 1.0);
    }

    /// Takes one token if one is there at `now`; false (and nothing taken) when none is.
    pub fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Whether the bucket is full again at `now` (as good as a new one).
    pub fn is_full(&self, now: Instant) -> bool {
        self.tokens_at(now) >= self.burst
    }

    /// When a token was last taken or the bucket last refilled.
    pub fn last(&self) -> Instant {
        self.last
    }

    fn tokens_at(&self, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        (self.tokens + elapsed * self.qps).min(self.burst)
    }

    fn refill(&mut self, now: Instant) {
        self.tokens = self.tokens_at(now);
        self.last = now;
    }

    /// Takes one token; tokens may go negative (queued requests), each waiting its turn.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_back_off_holds_the_next_requests_then_the_steady_rate_resumes() {
        let start = Instant::now();
        let mut bucket = Bucket::new(10.0, 5, start);
        // A full burst is available, but the apiserver said "wait 2 s".
        bucket.back_off(start, Duration::from_secs(2));
        let waits: Vec<Duration> = (0..3).map(|_| bucket.reserve(start)).collect();
        assert_eq!(
            waits,
            [
                Duration::from_secs(2),
                Duration::from_millis(2100),
                Duration::from_millis(2200)
            ]
        );
        // A shorter back-off never shortens a wait already owed.
        let mut bucket = Bucket::new(10.0, 5, start);
        bucket.back_off(start, Duration::from_secs(5));
        bucket.back_off(start, Duration::from_secs(1));
        assert_eq!(bucket.reserve(start), Duration::from_secs(5));
    }

    #[test]
    fn burst_then_steady_rate() {
        let start = Instant::now();
        let mut bucket = Bucket::new(10.0, 3, start);
        let waits: Vec<Duration> = (0..5).map(|_| bucket.reserve(start)).collect();
        assert_eq!(
            &waits[..3],
            &[Duration::ZERO; 3],
            "the burst passes at once"
        );
        assert_eq!(waits[3], Duration::from_millis(100));
        assert_eq!(waits[4], Duration::from_millis(200));
        // After a quiet second the bucket is full again (capped at the burst).
        let later = start + Duration::from_secs(2);
        assert_eq!(bucket.reserve(later), Duration::ZERO);
    }

    #[test]
    fn a_token_is_taken_only_when_one_is_there() {
        let start = Instant::now();
        let mut bucket = Bucket::new(1.0, 2, start);
        assert!(bucket.is_full(start));
        assert!(bucket.try_take(start));
        assert!(bucket.try_take(start));
        assert!(!bucket.try_take(start), "the burst is used");
        assert!(!bucket.is_full(start));
        assert!(
            bucket.try_take(start + Duration::from_secs(1)),
            "one refilled"
        );
        assert!(bucket.is_full(start + Duration::from_secs(10)));
    }
}
