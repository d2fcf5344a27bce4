//! Sends what an application using fred sends (its handshake, then typed commands in RESP2
//! and RESP3) to the address given, for capturing a fuzz seed corpus (fuzz/capture.py).
//! Usage: cargo run --example fred_traffic -- 127.0.0.1:PORT

use fred::prelude::*;
use fred::types::RespVersion;
use std::collections::HashMap;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:6380".to_string());
    for version in [RespVersion::RESP2, RespVersion::RESP3] {
        let mut config = Config::from_url(&format!("redis://{addr}/0"))?;
        config.version = version;
        let client = Builder::from_config(config)
            .with_connection_config(|c| c.auto_client_setname = true)
            .build()?;
        client.init().await?;
        let _: () = client
            .set("fred:k", "v", Some(Expiration::EX(60)), None, false)
            .await?;
        let _: Option<String> = client.get("fred:k").await?;
        let _: i64 = client.incr("fred:n").await?;
        let _: () = client.hset("fred:h", [("f", "1"), ("g", "2")]).await?;
        let _: HashMap<String, String> = client.hgetall("fred:h").await?;
        let _: i64 = client.sadd("fred:s", ["a", "b"]).await?;
        let _: Vec<String> = client.smembers("fred:s").await?;
        let _: i64 = client
            .zadd("fred:z", None, None, false, false, (1.5, "m"))
            .await?;
        let _: Vec<(String, f64)> = client
            .zrange("fred:z", 0, -1, None, false, None, true)
            .await?;
        let _: String = client.xadd("fred:x", false, None, "*", ("f", "v")).await?;
        let _: i64 = client.del(vec!["fred:k", "fred:n"]).await?;
        let _: String = client.info(None).await?;
        client.quit().await?;
    }
    Ok(())
}
