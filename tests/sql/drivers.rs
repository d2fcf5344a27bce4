//! The data model on either SQLite driver: every command of the differential's fixed script
//! run through `model::run` on a `rusqlite` connection the test owns and on sqlx's `Any`
//! connection, each in a transaction of its own (committed, or rolled back after an error
//! reply, as the engine does), in RESP2 and then RESP3: the replies must agree, as the
//! differential compares them with Redis's. The one body of SQL (`model/statement.rs`) is
//! what makes the second driver a few lines: this pins that it answers alike.

use crate::differential::{agree, cmp_for, fixed_script, runtime, show};
use crate::support::*;
use bytes::{Bytes, BytesMut};
use holdfast::backend::sql::model::{
    self,
    store::{Ctx, Db, Dialect, Fail},
};
use holdfast::backend::Proto;
use holdfast::resp::{encode_reply, DoubleStyle, Nils};
use redis_protocol::resp3::types::BytesFrame as Frame;
use sqlx::Connection as _;

/// A command's reply as the client would read it, or the database's failure.
fn encoded(result: Result<Frame, Fail>, proto: Proto) -> Vec<u8> {
    let frame = match result {
        Ok(frame) => frame,
        Err(Fail::Reply(text)) => Frame::SimpleError {
            data: text.into(),
            attributes: None,
        },
        Err(other) => return format!("database failure: {other:?}").into_bytes(),
    };
    let mut out = BytesMut::new();
    let nils = Nils {
        top: false,
        nested: None,
    };
    encode_reply(&mut out, &frame, proto, nils, DoubleStyle::default());
    out.to_vec()
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// `args` in a transaction of its own on `conn`, either driver's.
async fn in_transaction(conn: Db<'_>, args: &[Bytes], proto: Proto, now: i64) -> Vec<u8> {
    let mut ctx = Ctx::on(conn, now, proto, Dialect::Sqlite, true);
    ctx.conn.batch("BEGIN IMMEDIATE").await.expect("begin");
    let result = model::run(&mut ctx, args, true).await;
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    ctx.conn.batch(end).await.expect("end");
    encoded(result, proto)
}

#[test]
fn the_model_answers_alike_on_rusqlite_and_on_sqlx() {
    let rt = runtime();
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("temp dir");
        let (lite_path, any_path) = (dir.path().join("lite.db"), dir.path().join("any.db"));
        // A holdfast on each file creates the schema, then leaves the files to the test.
        for path in [&lite_path, &any_path] {
            let proxy = Proxy::start(&sql_namespace(&format!(
                "kind = \"sqlite\"\npath = \"{}\"",
                path.display()
            )))
            .await;
            // The backend connects (and migrates) on its first command.
            let mut c = RawConn::connect(&proxy.addr).await;
            assert_eq!(c.command(&["DEL", "nothing"]).await, b":0\r\n");
            drop(proxy);
        }
        let mut lite = rusqlite::Connection::open(&lite_path).expect("open");
        lite.set_prepared_statement_cache_capacity(512);
        sqlx::any::install_default_drivers();
        let mut any = sqlx::AnyConnection::connect(&format!("sqlite://{}", any_path.display()))
            .await
            .expect("open");
        let mut differences = Vec::new();
        for proto in [Proto::Resp2, Proto::Resp3] {
            let flush = [Bytes::from_static(b"FLUSHALL")];
            in_transaction(Db::Lite(&mut lite), &flush, proto, now_ms()).await;
            in_transaction(Db::Any(&mut any), &flush, proto, now_ms()).await;
            for (i, cmd) in fixed_script().iter().enumerate() {
                let args: Vec<Bytes> = cmd.iter().map(|a| Bytes::from(a.clone())).collect();
                // One instant for both: an expiry falls on the same side of it on each.
                let now = now_ms();
                let a = in_transaction(Db::Lite(&mut lite), &args, proto, now).await;
                let b = in_transaction(Db::Any(&mut any), &args, proto, now).await;
                if !agree(cmp_for(cmd), &a, &b) {
                    let shown: Vec<String> = cmd.iter().map(|x| show(x)).collect();
                    differences.push(format!(
                        "{proto:?} step {i} `{}`: rusqlite {} sqlx {}",
                        shown.join(" "),
                        show(&a),
                        show(&b)
                    ));
                }
            }
        }
        assert!(
            differences.is_empty(),
            "{} differences:\n{}",
            differences.len(),
            differences.join("\n")
        );
    });
}
