//! A client's subscriptions on one backend ([`Feed`]), delivering into its
//! [`Outbox`](super::pubsub::Outbox): a connection of its own to a Redis backend (`redis/feed.rs`), or a ticket
//! with the in-process broker of a SQL backend (`sql/engine/broker.rs`).
//!
//! A feed only carries messages. What the client is told (its confirmations and their
//! counts, over every backend it subscribed on) is the connection's (`connection/subscribe.rs`).

use super::pubsub::{Outbox, SubKind};

use super::redis::feed::RedisFeed;
use super::sql::broker::Ticket;
use super::{Backend, BackendError};
use bytes::Bytes;
use std::time::Duration;

/// A client's subscriptions on one backend.
pub enum Feed {
    /// A Redis connection of the client's own.
    Redis(RedisFeed),
    /// The in-process broker of a SQL backend.
    Local(Ticket),
}

impl Feed {
    /// Subscribes to `names`, returning once the backend has them: a message published
    /// after this returns is delivered.
    ///
    /// # Errors
    /// [`BackendError`] when the backend could not be reached in `timeout`.
    pub async fn subscribe(
        &self,
        kind: SubKind,
        names: &[Bytes],
        timeout: Duration,
    ) -> Result<(), BackendError> {
        match self {
            Feed::Redis(feed) => feed.subscribe(kind, names, timeout).await,
            Feed::Local(ticket) => ticket.subscribe(kind, names, timeout).await,
        }
    }

    /// Unsubscribes from `names`, returning once the backend released them (a Redis server
    /// answered; on PostgreSQL the registry changed; on SQLite at once).
    pub async fn unsubscribe(&self, kind: SubKind, names: &[Bytes]) {
        match self {
            Feed::Redis(feed) => feed.unsubscribe(kind, names).await,
            Feed::Local(ticket) => ticket.unsubscribe(kind, names).await,
        }
    }
}

impl Backend {
    /// A feed for one client on this backend, delivering into `outbox`.
    pub fn feed(&self, outbox: Outbox, hold: Duration) -> Feed {
        match self {
            Backend::Redis(redis) => Feed::Redis(redis.feed(outbox, hold)),
            Backend::Sql(sql) => Feed::Local(sql.feed(outbox)),
        }
    }
}
