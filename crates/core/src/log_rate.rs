//! A budget of log lines a second, for what a peer can make Tandem log as often as it likes
//! (a refused HTTP request, a downstream server's stderr): the first lines of each second
//! are logged, the rest only counted, and the count logged once a second at most.
//!
//! ```
//! use tandem::log_rate::LogBudget;
//!
//! let refusals = LogBudget::new(10);
//! # let peer = "127.0.0.1";
//! if refusals.allow() {
//!     tracing::warn!("refused a request from {peer}");
//! }
//! if let Some(n) = refusals.suppressed() {
//!     tracing::warn!("{n} more refusals not logged");
//! }
//! ```

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many lines a second may be logged; thread-safe, shared by reference.
#[derive(Debug)]
pub struct LogBudget {
    per_second: u32,
    state: Mutex<Window>,
}

/// The current second's count, and the refused lines not yet reported.
#[derive(Debug)]
struct Window {
    start: Instant,
    allowed: u32,
    /// Refused in the current second.
    refused: u64,
    /// Refused in seconds now over, not yet reported.
    unreported: u64,
}

impl LogBudget {
    /// A budget of `per_second` lines a second.
    pub fn new(per_second: u32) -> LogBudget {
        LogBudget {
            per_second,
            state: Mutex::new(Window {
                start: Instant::now(),
                allowed: 0,
                refused: 0,
                unreported: 0,
            }),
        }
    }

    /// Whether one more line may be logged now; a refused one is counted.
    pub fn allow(&self) -> bool {
        self.allow_at(Instant::now())
    }

    /// How many lines were refused in the seconds now over and not reported yet: `Some` at
    /// most once a second, for one line saying how many were not logged.
    pub fn suppressed(&self) -> Option<u64> {
        self.suppressed_at(Instant::now())
    }

    /// Every refused line not reported yet, the current second's included: for the line
    /// logged when the stream being logged ends.
    pub fn flush(&self) -> Option<u64> {
        let mut w = self.window(Instant::now());
        let n = std::mem::take(&mut w.unreported) + std::mem::take(&mut w.refused);
        (n > 0).then_some(n)
    }

    fn allow_at(&self, now: Instant) -> bool {
        let mut w = self.window(now);
        if w.allowed < self.per_second {
            w.allowed += 1;
            true
        } else {
            w.refused += 1;
            false
        }
    }

    fn suppressed_at(&self, now: Instant) -> Option<u64> {
        let n = std::mem::take(&mut self.window(now).unreported);
        (n > 0).then_some(n)
    }

    /// The window at `now`: a new second starts when the last one is over, and its
    /// refused lines wait to be reported.
    fn window(&self, now: Instant) -> std::sync::MutexGuard<'_, Window> {
        // A panic elsewhere while holding the lock leaves counts that are still counts.
        let mut w = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if now.saturating_duration_since(w.start) >= Duration::from_secs(1) {
            w.start = now;
            w.allowed = 0;
            w.unreported += std::mem::take(&mut w.refused);
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn the_first_lines_of_each_second_are_allowed_and_the_rest_counted_once() {
        let budget = LogBudget::new(3);
        let t0 = budget.state.lock().unwrap().start;
        let allowed = (0..10).filter(|_| budget.allow_at(t0)).count();
        assert_eq!(allowed, 3);
        // Within the second, the count waits.
        assert_eq!(budget.suppressed_at(t0 + SECOND / 2), None);
        assert!(!budget.allow_at(t0 + SECOND / 2));

        // The next second: a new budget, and the last second's refusals reported once.
        let t1 = t0 + SECOND;
        assert!(budget.allow_at(t1));
        assert_eq!(budget.suppressed_at(t1), Some(8));
        assert_eq!(budget.suppressed_at(t1), None);

        // A quiet stretch: its refusals still wait for the next report.
        let t2 = t1 + 5 * SECOND;
        assert_eq!((0..5).filter(|_| budget.allow_at(t2)).count(), 3);
        assert_eq!(budget.suppressed_at(t2 + SECOND), Some(2));
    }

    #[test]
    fn flush_takes_the_current_seconds_refusals_too() {
        let budget = LogBudget::new(1);
        assert!(budget.allow());
        assert!(!budget.allow());
        assert!(!budget.allow());
        assert_eq!(budget.flush(), Some(2));
        assert_eq!(budget.flush(), None);
        assert_eq!(budget.suppressed(), None);
    }

    #[test]
    fn threads_share_one_budget() {
        let budget = LogBudget::new(100);
        let t0 = budget.state.lock().unwrap().start;
        let allowed: usize = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..1000).filter(|_| budget.allow_at(t0)).count()))
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).sum()
        });
        assert_eq!(allowed, 100);
        assert_eq!(budget.suppressed_at(t0 + SECOND), Some(3900));
    }
}
