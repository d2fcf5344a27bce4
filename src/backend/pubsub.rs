//! Pub/Sub: what a subscribed client is sent ([`Delivery`]) and the bounded queue it goes through
//! ([`Outbox`]): shared by the Redis feed and the SQL broker, which know nothing of each
//! other.

use bytes::Bytes;
use std::sync::Arc;
use tokio::sync::mpsc;

/// The three kinds of subscription Redis keeps apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubKind {
    /// `SUBSCRIBE channel`: `message` deliveries.
    Channel,
    /// `PSUBSCRIBE pattern`: `pmessage` deliveries.
    Pattern,
    /// `SSUBSCRIBE shardchannel`: `smessage` deliveries.
    Shard,
}

impl SubKind {
    /// Every kind, in [`SubKind::index`] order.
    pub const ALL: [SubKind; 3] = [SubKind::Channel, SubKind::Pattern, SubKind::Shard];

    /// Its place in a per-kind array (`[channels, patterns, shard channels]`).
    pub fn index(self) -> usize {
        match self {
            SubKind::Channel => 0,
            SubKind::Pattern => 1,
            SubKind::Shard => 2,
        }
    }

    /// The subscribe command of this kind.
    pub fn subscribe(self) -> &'static [u8] {
        match self {
            SubKind::Channel => b"SUBSCRIBE",
            SubKind::Pattern => b"PSUBSCRIBE",
            SubKind::Shard => b"SSUBSCRIBE",
        }
    }

    /// The unsubscribe command of this kind.
    pub fn unsubscribe(self) -> &'static [u8] {
        match self {
            SubKind::Channel => b"UNSUBSCRIBE",
            SubKind::Pattern => b"PUNSUBSCRIBE",
            SubKind::Shard => b"SUNSUBSCRIBE",
        }
    }
}

/// One published message for one subscribed client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The `[backends]` key of the backend that delivered it: a pattern subscribed on
    /// several backends takes a message only from the one its channel routes to.
    pub backend: Arc<str>,
    /// How the client subscribed to it.
    pub kind: SubKind,
    /// The pattern that matched (`SubKind::Pattern` only).
    pub pattern: Option<Bytes>,
    /// The channel it was published to.
    pub channel: Bytes,
    /// The message.
    pub payload: Bytes,
}

/// What happens to a client whose feed cannot carry on: its queue is full (it does not read
/// what it is sent), or its subscriptions could not be restored in time after a backend
/// failure. The connection closes it, as Redis closes such a client; its library connects
/// and subscribes again.
pub type Lost = Arc<dyn Fn(&'static str) + Send + Sync>;

/// The bounded queue of one subscribed client, shared by its feeds.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::Sender<Delivery>,
    lost: Lost,
}

impl Outbox {
    /// A queue of at most `backlog` deliveries, and its receiving end.
    pub fn new(backlog: usize, lost: Lost) -> (Outbox, mpsc::Receiver<Delivery>) {
        let (tx, rx) = mpsc::channel(backlog.max(1));
        (Outbox { tx, lost }, rx)
    }

    /// Queues a delivery; a full queue loses the client (never an unbounded one).
    pub fn put(&self, delivery: Delivery) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(delivery) {
            (self.lost)("max_pubsub_backlog");
        }
    }

    /// The client cannot be kept subscribed.
    pub fn lose(&self, why: &'static str) {
        (self.lost)(why);
    }

    /// Whether the client's end is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}
