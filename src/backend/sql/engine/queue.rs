//! The queue that group commit and batched reads share: requests from every client
//! connection wait in it, and a few tasks each take everything waiting (up to a bound) as one
//! batch, so one statement or one transaction serves them all.

use super::conn::Held;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Mutex};

/// How long a task keeps its connection while no request waits. Under load the next batch
/// comes well within it; an idle backend hands its connections back soon after.
const LINGER: Duration = Duration::from_millis(1);

/// The receiving side, shared by the tasks that take batches.
pub struct Queue<T>(Mutex<mpsc::Receiver<T>>);

impl<T> Queue<T> {
    /// A queue holding at most `capacity` requests (a full one makes submitters wait).
    pub fn new(capacity: usize) -> (mpsc::Sender<T>, Arc<Queue<T>>) {
        let (sender, receiver) = mpsc::channel(capacity);
        (sender, Arc::new(Queue(Mutex::new(receiver))))
    }

    /// Waits for one item, then takes more without waiting until they weigh `max` in all
    /// (`weight`: the requests an item holds; the first is taken whatever it weighs). None
    /// once every sender is gone (the backend was dropped).
    pub async fn next_batch(&self, max: usize, weight: impl Fn(&T) -> usize) -> Option<Vec<T>> {
        let mut receiver = self.0.lock().await;
        let first = receiver.recv().await?;
        let mut load = weight(&first);
        let mut batch = vec![first];
        while load < max {
            match receiver.try_recv() {
                Ok(item) => {
                    load += weight(&item);
                    batch.push(item);
                }
                Err(_) => break,
            }
        }
        Some(batch)
    }

    /// The next batch for a task that holds a connection: one that starts within
    /// [`LINGER`] runs on it; past that, the connection goes back to its pool before the task
    /// waits on.
    pub async fn next_batch_holding(
        &self,
        max: usize,
        weight: impl Fn(&T) -> usize,
        held: &mut Held,
    ) -> Option<Vec<T>> {
        if held.holds() {
            if let Ok(batch) = tokio::time::timeout(LINGER, self.next_batch(max, &weight)).await {
                return batch;
            }
            held.release();
        }
        self.next_batch(max, weight).await
    }
}
