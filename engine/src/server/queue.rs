//! The request queue: one request runs on the engine at a time, up to `capacity` wait
//! behind it in arrival order, and any more are turned away (429).
//!
//! Requests wait here, not in the engine's own channel, so that one whose client goes
//! away while waiting simply leaves the queue: it never reaches the engine, and never
//! disturbs the cached conversations the engine keeps for prefix reuse.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Admission and turn-taking.
#[derive(Debug)]
pub struct Queue {
    /// One permit per request allowed in (running or waiting).
    admitted: Arc<Semaphore>,
    /// The running request's permit. Tokio's semaphore serves waiters first come, first
    /// served, which keeps the order of arrival.
    turn: Arc<Semaphore>,
    capacity: usize,
}

/// A request let into the queue.
#[derive(Debug)]
pub struct Ticket {
    admitted: OwnedSemaphorePermit,
    turn: Arc<Semaphore>,
    since: Instant,
}

/// A request whose turn it is; the next one waits until this is dropped.
#[derive(Debug)]
pub struct Turn {
    _admitted: OwnedSemaphorePermit,
    _turn: OwnedSemaphorePermit,
    /// Seconds spent waiting.
    pub queue_s: f64,
}

/// Requests in the queue now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct QueueStatus {
    /// Running (0 or 1).
    pub running: usize,
    /// Waiting behind it.
    pub waiting: usize,
    /// Most that may wait.
    pub capacity: usize,
}

impl Queue {
    /// A queue where `capacity` requests may wait behind the running one.
    pub fn new(capacity: usize) -> Self {
        Self {
            admitted: Arc::new(Semaphore::new(capacity.saturating_add(1))),
            turn: Arc::new(Semaphore::new(1)),
            capacity,
        }
    }

    /// Lets a request in, or `None` when the queue is full.
    pub fn admit(&self) -> Option<Ticket> {
        let admitted = self.admitted.clone().try_acquire_owned().ok()?;
        Some(Ticket {
            admitted,
            turn: self.turn.clone(),
            since: Instant::now(),
        })
    }

    /// How many requests are in.
    pub fn status(&self) -> QueueStatus {
        let inside = self.capacity + 1 - self.admitted.available_permits();
        let running = 1 - self.turn.available_permits();
        QueueStatus {
            running,
            waiting: inside.saturating_sub(running),
            capacity: self.capacity,
        }
    }

    /// Most requests that may wait.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

impl Ticket {
    /// Waits for this request's turn (dropping the future leaves the queue).
    pub async fn turn(self) -> Turn {
        let turn = self
            .turn
            .acquire_owned()
            .await
            .expect("the turn semaphore is never closed");
        Turn {
            _admitted: self.admitted,
            _turn: turn,
            queue_s: self.since.elapsed().as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_take_turns_in_order_and_overflow_is_refused() {
        let queue = Queue::new(2);
        let first = queue.admit().unwrap().turn().await;
        let (a, b) = (queue.admit().unwrap(), queue.admit().unwrap());
        assert!(
            queue.admit().is_none(),
            "one running and two waiting is full"
        );
        assert_eq!(
            queue.status(),
            QueueStatus {
                running: 1,
                waiting: 2,
                capacity: 2
            }
        );
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (name, ticket) in [("a", a), ("b", b)] {
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let _turn = ticket.turn().await;
                order.lock().unwrap().push(name);
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }));
            tokio::task::yield_now().await;
        }
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec!["a", "b"]);
        assert_eq!(queue.status().running + queue.status().waiting, 0);
    }

    #[tokio::test]
    async fn a_request_that_gives_up_leaves_the_queue() {
        let queue = Queue::new(0);
        let running = queue.admit().unwrap().turn().await;
        assert!(queue.admit().is_none());
        drop(running);
        let ticket = queue.admit().unwrap();
        drop(ticket);
        assert!(queue.admit().is_some());
    }
}
