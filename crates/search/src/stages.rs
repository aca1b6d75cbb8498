//! The steps of a hybrid search after its two searches, shared with the helper thread
//! that took part in them ([`crate::text::helpers`]): the hits' coverage of the query and
//! cosines, then the documents shown and their snippets. Each step is a [`Stage`]: a list of
//! items the searching thread publishes and both threads take, one at a time, whichever is
//! free. The helper waits for each list as soon as its share of the searches is done, so
//! it is running when the list comes (a helper put back to sleep can wake late, and a
//! search is short); the searching thread ends the wait with a [`Flag`] raised on every
//! path out of the search. These steps are a share of a hybrid search worth splitting on a
//! large base (`cargo bench --bench scale`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// A step's items and what each gives, taken in order by whichever thread is free.
pub struct Stage<T, O> {
    /// The items, once the searching thread publishes them.
    items: OnceLock<Published<T, O>>,
    /// The next item to take.
    next: AtomicUsize,
    /// Items done (or given up by a panic).
    done: AtomicUsize,
}

/// A stage's items and each one's output, once done.
struct Published<T, O> {
    items: Vec<T>,
    outputs: Vec<Mutex<Option<O>>>,
}

impl<T: Sync, O: Send> Default for Stage<T, O> {
    fn default() -> Stage<T, O> {
        Stage::new()
    }
}

impl<T: Sync, O: Send> Stage<T, O> {
    pub fn new() -> Stage<T, O> {
        Stage {
            items: OnceLock::new(),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
        }
    }

    /// On the searching thread: publishes `items`, does them beside the helper (alone
    /// without one), and returns their outputs in order once the items the helper began
    /// are done. Called once.
    pub fn run(&self, items: Vec<T>, work: &(impl Fn(&T) -> O + Sync)) -> Vec<O> {
        let outputs = items.iter().map(|_| Mutex::new(None)).collect();
        let published = self.items.get_or_init(|| Published { items, outputs });
        self.take(work);
        let n = published.items.len();
        let mut spins = 0u32;
        while self.done.load(Ordering::Acquire) < n {
            pause(&mut spins);
        }
        published
            .outputs
            .iter()
            .map(|output| {
                lock(output)
                    .take()
                    .expect("every item is done, or its thread's panic ends the search")
            })
            .collect()
    }

    /// On the helper: waits for the items until the search ends, and takes them.
    pub fn help(&self, ended: &Flag, work: &(impl Fn(&T) -> O + Sync)) {
        let mut spins = 0u32;
        while self.items.get().is_none() {
            if ended.is_raised() {
                return;
            }
            pause(&mut spins);
        }
        self.take(work);
    }

    /// Does the items no thread took, one at a time, until none is left.
    fn take(&self, work: &impl Fn(&T) -> O) {
        let Some(Published { items, outputs }) = self.items.get() else {
            return;
        };
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return;
            };
            // Counted done on a panic too: the searching thread stops waiting, and the
            // scope it runs in passes the panic on.
            let _done = Done(&self.done);
            let output = work(item);
            *lock(&outputs[i]) = Some(output);
        }
    }
}

/// A flag one thread raises and the other waits for, raised by a guard's drop: on every
/// way out (an error, a panic) too.
#[derive(Default)]
pub struct Flag(AtomicBool);

impl Flag {
    /// The guard that raises the flag when dropped.
    pub fn raise_on_drop(&self) -> RaiseOnDrop<'_> {
        RaiseOnDrop(self)
    }

    fn is_raised(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Waits for the other thread to raise the flag.
    pub fn wait(&self) {
        let mut spins = 0u32;
        while !self.is_raised() {
            pause(&mut spins);
        }
    }
}

pub struct RaiseOnDrop<'a>(&'a Flag);

impl Drop for RaiseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.0.store(true, Ordering::Release);
    }
}

/// Counts an item done when dropped.
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

/// A wait's step: spins a while (the other thread is running and about to be done),
/// then yields the core.
fn pause(spins: &mut u32) {
    if *spins < 64 {
        *spins += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::{Flag, Stage};

    #[test]
    fn alone_the_searching_thread_does_every_item_in_order() {
        let stage = Stage::new();
        assert_eq!(stage.run(vec![1, 2, 3], &|n: &i32| n * 10), [10, 20, 30]);
        let empty: Stage<i32, i32> = Stage::new();
        assert!(empty.run(Vec::new(), &|n: &i32| *n).is_empty());
    }

    #[test]
    fn a_helper_takes_items_and_the_outputs_stay_in_order() {
        let (first, second) = (Stage::new(), Stage::new());
        let ended = Flag::default();
        let by_helper = AtomicUsize::new(0);
        let helper = std::thread::current().id();
        let work = |n: &u64| {
            // Slow enough for both threads to take some.
            std::thread::sleep(std::time::Duration::from_millis(2));
            (n * n, std::thread::current().id())
        };
        std::thread::scope(|scope| {
            let _end = ended.raise_on_drop();
            scope.spawn(|| {
                first.help(&ended, &work);
                second.help(&ended, &work);
            });
            for (stage, items) in [(&first, 0..20u64), (&second, 20..40)] {
                let done = stage.run(items.clone().collect(), &work);
                let squares: Vec<u64> = done.iter().map(|(sq, _)| *sq).collect();
                assert_eq!(squares, items.map(|n| n * n).collect::<Vec<_>>());
                let helped = done.iter().filter(|(_, by)| *by != helper).count();
                by_helper.fetch_add(helped, Ordering::Relaxed);
            }
        });
        let helped = by_helper.into_inner();
        assert!((1..40).contains(&helped), "the helper did {helped} of 40");
    }

    #[test]
    fn a_helper_waiting_for_items_leaves_when_the_search_ends_without_them() {
        let never: Stage<u8, u8> = Stage::new();
        let ended = Flag::default();
        std::thread::scope(|scope| {
            let helper = scope.spawn(|| never.help(&ended, &|n: &u8| *n));
            std::thread::sleep(std::time::Duration::from_millis(5));
            assert!(!helper.is_finished(), "it waits for the items");
            drop(ended.raise_on_drop());
            helper.join().unwrap();
        });
    }

    #[test]
    fn an_item_that_panics_on_the_helper_does_not_leave_the_search_waiting() {
        let stage = Stage::new();
        let ended = Flag::default();
        let searching = std::thread::current().id();
        let work = |n: &u32| {
            if std::thread::current().id() != searching {
                panic!("item {n} on the helper");
            }
            // Slow enough for the helper to take one.
            std::thread::sleep(std::time::Duration::from_millis(5));
            *n
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            std::thread::scope(|scope| {
                let _end = ended.raise_on_drop();
                scope.spawn(|| stage.help(&ended, &work));
                stage.run((0..4).collect(), &work)
            })
        }));
        assert!(outcome.is_err(), "the panic is passed on, not waited for");
    }
}
