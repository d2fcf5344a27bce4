//! The connection's unit tests: a request's bytes as counted, and a held command ended by
//! its client going.

use super::forward::decimal_digits;
use super::*;
use crate::exec::Activity;
use std::time::Duration;

/// An inline command counts as the multibulk of its arguments; a multibulk as sent.
#[test]
fn a_request_counts_its_bytes_as_resp() {
    let args = |words: &[&str]| words.iter().map(|w| Bytes::from(w.to_string())).collect();
    let inline = Command::parse_raw(args(&["SET", "a", "b"]), None).unwrap();
    assert_eq!(
        wire_len(&inline),
        b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\nb\r\n".len()
    );
    let long = Command::parse_raw(args(&["GET", &"k".repeat(12)]), None).unwrap();
    assert_eq!(
        wire_len(&long),
        b"*2\r\n$3\r\nGET\r\n$12\r\nkkkkkkkkkkkk\r\n".len()
    );
    let raw = Bytes::from_static(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    let sent = Command::parse_raw(args(&["GET", "k"]), Some(raw.clone())).unwrap();
    assert_eq!(wire_len(&sent), raw.len());
    assert_eq!(decimal_digits(0), 1);
    assert_eq!(decimal_digits(9), 1);
    assert_eq!(decimal_digits(10), 2);
}

/// A command whose client closed: dropped at once while it waits between attempts; left
/// to finish while a dispatch is in flight, and then nothing more; never watched before a
/// dispatch of it failed.
#[tokio::test]
async fn a_command_stops_with_its_client_once_nothing_is_in_flight() {
    use std::sync::atomic::Ordering::Relaxed;
    let (client, mut socket) = tokio::io::duplex(64);
    drop(client);
    let activity = Activity::default();
    let mut input = BytesMut::new();
    // Held between attempts: dropped as soon as the close is seen.
    let waiting = async {
        activity.failed.store(true, Relaxed);
        std::future::pending::<Flow>().await
    };
    let waiting = std::pin::pin!(waiting);
    let ended = until_gone(waiting, &activity, &mut socket, &mut input);
    let ended = tokio::time::timeout(Duration::from_secs(5), ended).await;
    assert!(matches!(ended, Ok(None)), "{ended:?}");
    // In flight: finishes first, and what it answers goes nowhere.
    let (finish, finished) = tokio::sync::oneshot::channel::<()>();
    let in_flight = std::pin::pin!(async {
        activity.failed.store(true, Relaxed);
        activity.in_flight.store(true, Relaxed);
        let _ = finished.await;
        activity.in_flight.store(false, Relaxed);
        Flow::Continue
    });
    {
        let ended = until_gone(in_flight, &activity, &mut socket, &mut input);
        tokio::pin!(ended);
        let early = tokio::time::timeout(Duration::from_millis(50), &mut ended).await;
        assert!(early.is_err(), "a dispatch in flight was cut short");
        let _ = finish.send(());
        assert_eq!(ended.await, None);
    }
    // Nothing failed: the client's socket is not looked at, and the command's flow stands.
    let quiet = async { Flow::Continue };
    let ended = until_gone(std::pin::pin!(quiet), &activity, &mut socket, &mut input).await;
    assert_eq!(ended, Some(Flow::Continue));
}
