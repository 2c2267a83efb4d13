//! A controller's work queue, first in, first out: under a backlog the oldest change is
//! handled first, so no pod waits behind a stream of newer ones. (kube-runtime's controller
//! hands ready work out newest-first; at 10,000 pods through a busy apiserver that left the
//! slowest pods a minute behind their bind.)
//!
//! As in client-go's workqueue: a key is handed to one worker at a time; a key added again
//! while a worker has it runs once more after `done`; adds of a key already waiting collapse
//! into one; a delayed add keeps only the earliest time asked for.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    hash::Hash,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

#[derive(Debug)]
pub struct WorkQueue<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

#[derive(Debug)]
struct Shared<K> {
    state: Mutex<State<K>>,
    ready: Notify,
}

#[derive(Debug)]
struct State<K> {
    /// Keys to hand out, oldest first; `queued` holds the same keys.
    waiting: VecDeque<K>,
    queued: HashSet<K>,
    /// Keys a worker has now, and those of them added again meanwhile.
    active: HashSet<K>,
    again: HashSet<K>,
    /// Delayed adds not yet due.
    scheduled: HashMap<K, Instant>,
}

impl<K> Default for WorkQueue<K> {
    fn default() -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    waiting: VecDeque::new(),
                    queued: HashSet::new(),
                    active: HashSet::new(),
                    again: HashSet::new(),
                    scheduled: HashMap::new(),
                }),
                ready: Notify::new(),
            }),
        }
    }
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static> WorkQueue<K> {
    pub fn add(&self, key: K) {
        let mut state = self.lock();
        if state.active.contains(&key) {
            state.again.insert(key);
            return;
        }
        if state.queued.insert(key.clone()) {
            state.waiting.push_back(key);
            drop(state);
            self.shared.ready.notify_one();
        }
    }

    /// Adds `key` after `delay`, unless it is already due to be added sooner.
    pub fn add_after(&self, key: K, delay: Duration) {
        let at = Instant::now() + delay;
        {
            let mut state = self.lock();
            if state.scheduled.get(&key).is_some_and(|due| *due <= at) {
                return;
            }
            state.scheduled.insert(key.clone(), at);
        }
        let queue = self.clone();
        // Holds only the queue: if the controller stops, it fires into a queue no one reads.
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let due = {
                let mut state = queue.lock();
                // A sooner add replaced this one, and has already run or will.
                let current = state.scheduled.get(&key) == Some(&at);
                if current {
                    state.scheduled.remove(&key);
                }
                current
            };
            if due {
                queue.add(key);
            }
        });
    }

    /// The oldest waiting key, once there is one. The caller owns it until [`Self::done`].
    pub async fn next(&self) -> K {
        loop {
            let notified = self.shared.ready.notified();
            tokio::pin!(notified);
            // Registered before looking, so an add between the look and the wait is not missed.
            notified.as_mut().enable();
            if let Some(key) = self.try_next() {
                return key;
            }
            notified.await;
        }
    }

    fn try_next(&self) -> Option<K> {
        let mut state = self.lock();
        let key = state.waiting.pop_front()?;
        state.queued.remove(&key);
        state.active.insert(key.clone());
        let more = !state.waiting.is_empty();
        drop(state);
        if more {
            // Another worker may be asleep while keys wait.
            self.shared.ready.notify_one();
        }
        Some(key)
    }

    /// The worker is finished with `key`; if it was added meanwhile, it waits again (last).
    pub fn done(&self, key: &K) {
        let mut state = self.lock();
        state.active.remove(key);
        if state.again.remove(key) && state.queued.insert(key.clone()) {
            state.waiting.push_back(key.clone());
            drop(state);
            self.shared.ready.notify_one();
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    async fn next_now(queue: &WorkQueue<&'static str>) -> Option<&'static str> {
        tokio::time::timeout(Duration::from_millis(10), queue.next())
            .await
            .ok()
    }

    #[tokio::test]
    async fn keys_come_out_oldest_first_and_repeats_collapse() {
        let queue = WorkQueue::default();
        for key in ["a", "b", "a", "c", "b"] {
            queue.add(key);
        }
        assert_eq!(next_now(&queue).await, Some("a"));
        assert_eq!(next_now(&queue).await, Some("b"));
        assert_eq!(next_now(&queue).await, Some("c"));
        assert_eq!(next_now(&queue).await, None);
    }

    #[tokio::test]
    async fn a_key_in_work_is_not_handed_out_twice_but_runs_again_after() {
        let queue = WorkQueue::default();
        queue.add("a");
        let a = next_now(&queue).await.unwrap();
        queue.add("a");
        queue.add("b");
        assert_eq!(next_now(&queue).await, Some("b"), "a is still in work");
        assert_eq!(next_now(&queue).await, None);
        queue.done(&a);
        assert_eq!(next_now(&queue).await, Some("a"), "added while in work");
        queue.done(&"a");
        queue.done(&"b");
        assert_eq!(next_now(&queue).await, None);
    }

    #[tokio::test]
    async fn a_waiting_worker_wakes_on_add() {
        let queue = WorkQueue::default();
        let worker = tokio::spawn({
            let queue = queue.clone();
            async move { queue.next().await }
        });
        tokio::task::yield_now().await;
        queue.add("a");
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), worker)
                .await
                .unwrap()
                .unwrap(),
            "a"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_adds_keep_the_soonest_time() {
        let queue = WorkQueue::default();
        queue.add_after("late", Duration::from_secs(10));
        queue.add_after("a", Duration::from_secs(5));
        queue.add_after("a", Duration::from_secs(2));
        queue.add_after("a", Duration::from_secs(8));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(next_now(&queue).await, None, "nothing due yet");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(next_now(&queue).await, Some("a"));
        queue.done(&"a");
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(
            next_now(&queue).await,
            None,
            "the 5 s and 8 s adds were dropped"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(next_now(&queue).await, Some("late"));
    }
}
