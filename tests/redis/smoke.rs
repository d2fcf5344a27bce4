use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn proxies_a_get() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(&one_backend(&redis.url(), "smoke", "")).await;
    let mut c = proxy.connect().await;
    assert_eq!(c.command(&["SET", "k", "v"]).await, b"+OK\r\n");
    assert_eq!(c.command(&["GET", "k"]).await, b"$1\r\nv\r\n");
    proxy.stop().await;
}
