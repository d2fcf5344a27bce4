//! A command held through retries, raced against its client going away: the socket is read
//! while the command waits, so a client that closed is noticed and its held command stops.

use super::Flow;
use crate::exec::Activity;
use bytes::BytesMut;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use tokio::io::AsyncRead;

/// How much a held command's client may send meanwhile before holdfast stops reading it (and
/// so stops noticing that it closed) until the command is done.
const READ_WHILE_HELD: usize = 64 * 1024;

/// Runs `handled` (one command) to its end, or until its client is gone: `None` when the
/// client closed while the command was held. A client that is gone gets nothing more, so its
/// held command stops there: one waiting between attempts is dropped (nothing more is
/// dispatched for it), one in flight is left to finish first (its dispatch is counted like
/// any), and the commands it pipelined behind are not sent. The client's socket is read only once a dispatch of the command has failed, so an
/// unheld command costs no read; what the client sends meanwhile is kept in `input` for the
/// commands after it, up to [`READ_WHILE_HELD`].
pub(super) async fn until_gone<R: AsyncRead + Unpin>(
    mut handled: Pin<&mut impl Future<Output = Flow>>,
    activity: &Activity,
    reader: &mut R,
    input: &mut BytesMut,
) -> Option<Flow> {
    use std::task::Poll;
    activity.failed.store(false, Ordering::Relaxed);
    let mut gone = false;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(flow) = handled.as_mut().poll(cx) {
            // A dispatch in flight when the client closed has finished: nothing behind it
            // is sent.
            return Poll::Ready((!gone).then_some(flow));
        }
        // `handled` was just polled in this task, so a change of `activity` (made inside
        // that poll) is seen here without a wake-up of its own.
        while !gone && activity.failed.load(Ordering::Relaxed) && input.len() < READ_WHILE_HELD {
            let mut room = [0u8; 4096];
            let mut buf = tokio::io::ReadBuf::new(&mut room);
            match Pin::new(&mut *reader).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    input.extend_from_slice(buf.filled());
                }
                Poll::Ready(_) => gone = true,
                Poll::Pending => break,
            }
        }
        if gone && !activity.in_flight.load(Ordering::Relaxed) {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}
