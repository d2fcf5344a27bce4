//! The commands holdfast answers itself: `PING`, `ECHO`, `SELECT`, `HELLO`, `AUTH`,
//! `CLIENT`, `INFO`, `COMMAND`, `RESET`, `MULTI`/`EXEC`/`DISCARD`, `WATCH`/`UNWATCH`, and the
//! Pub/Sub commands of a connection.

use super::auth::open_to_all;
use super::info::command_reply;
use super::{bulk, error, ok, simple, ClientConn, Flow, Multi};
use crate::backend::Proto;
use crate::command::table::Local;
use crate::command::Command;
use crate::resp::Output;
use quanta::Instant;

impl ClientConn {
    pub(super) async fn local(&mut self, local: Local, command: Command, out: &mut Output) -> Flow {
        let args = &command.args;
        let frame = match local {
            Local::Ping => match (self.subscribed_ping(args.get(1)), args.get(1)) {
                (Some(pong), _) => pong,
                (None, Some(message)) => bulk(message.clone()),
                (None, None) => simple("PONG"),
            },
            Local::Subscribe => return self.subscription(&command, out).await,
            Local::Pubsub => {
                let (reply, doubles) = self.pubsub_query(&command, Instant::now()).await;
                self.reply_to(out, reply, &command, doubles);
                return Flow::Continue;
            }
            Local::Echo => bulk(args.get(1).cloned().unwrap_or_default()),
            // holdfast is one standalone server to its clients, as Redis without cluster
            // mode answers (a cluster client would otherwise think its replicas readable).
            Local::ClusterOnly => error("ERR This instance has cluster support disabled"),
            Local::Quit => {
                self.reply(out, &ok());
                return Flow::Close;
            }
            Local::Hello => self.hello(args),
            Local::Auth => self.auth(args),
            Local::Select => match std::str::from_utf8(args.get(1).map_or(&b""[..], |a| a))
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
            {
                Some(0) => ok(),
                Some(_) => error("ERR DB index is out of range"),
                None => error("ERR value is not an integer or out of range"),
            },
            Local::Client => self.client(args),
            Local::Info => bulk(self.info(args)),
            Local::Monitor if !self.is_admin() => error(super::auth::cannot_run("monitor")),
            Local::Monitor => self.start_monitoring(),
            Local::Acl => self.acl(args),
            Local::Holdfast => self.holdfast(args).await,
            Local::Command => command_reply(args),
            Local::Reset => {
                self.unsubscribe_all().await;
                self.monitoring = None;
                self.multi = None;
                self.unwatch().await;
                self.exec.proto = Proto::Resp2;
                self.name = None;
                self.authed = open_to_all(&self.state);
                self.user = None;
                simple("RESET")
            }
            Local::Multi => {
                if self.multi.is_some() {
                    error("ERR MULTI calls can not be nested")
                } else {
                    self.multi = Some(Multi {
                        queue: Vec::new(),
                        dirty: false,
                    });
                    ok()
                }
            }
            Local::Discard => {
                if self.multi.take().is_some() {
                    self.unwatch().await;
                    ok()
                } else {
                    error("ERR DISCARD without MULTI")
                }
            }
            Local::Watch => {
                if self.multi.is_some() {
                    error("ERR WATCH inside MULTI is not allowed")
                } else {
                    self.watch(&command).await
                }
            }
            Local::Unwatch => {
                self.unwatch().await;
                ok()
            }
            Local::Exec => return self.exec(out).await,
        };
        // `CLIENT SETNAME`, `HELLO … SETNAME`, `AUTH` and `RESET` change what `CLIENT LIST`
        // shows of this client: shown before the reply, so another client that lists them
        // after reading it sees the change.
        if matches!(
            local,
            Local::Client | Local::Hello | Local::Auth | Local::Reset
        ) {
            self.show_identity();
        }
        self.reply(out, &frame);
        Flow::Continue
    }
}
