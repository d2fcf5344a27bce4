//! The data model's cost on each SQLite driver, without the network or the engine: a group of
//! 25 `INCR`s (a read and an upsert each) in one transaction, through `model::run`, on sqlx's
//! `Any` connection (each statement a round trip to sqlx's worker thread) and on a `rusqlite`
//! connection the benchmark's thread owns (each statement run in the call). Same file
//! settings as holdfast's (WAL, `synchronous = normal`). Run with
//! `cargo bench --bench sqlite_drivers`; it measures what moving SQLite off sqlx's worker
//! thread can gain before any engine is built on it.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use holdfast::backend::sql::migrate;
use holdfast::backend::sql::model::{
    self,
    store::{Ctx, Db, Dialect},
};
use holdfast::backend::Proto;
use sqlx::{Connection as _, Executor as _};

const GROUP: usize = 25;

fn commands() -> Vec<Vec<Bytes>> {
    (0..GROUP)
        .map(|i| {
            vec![
                Bytes::from_static(b"INCR"),
                Bytes::from(format!("counter:{i}")),
            ]
        })
        .collect()
}

async fn group_on(db: Db<'_>, commands: &[Vec<Bytes>]) {
    let mut ctx = Ctx::on(db, 0, Proto::Resp2, Dialect::Sqlite, true);
    for args in commands {
        if model::run(&mut ctx, args, true).await.is_err() {
            panic!("INCR failed");
        }
    }
}

fn drivers(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bench.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    sqlx::any::install_default_drivers();
    let mut any = rt.block_on(async {
        let mut conn = sqlx::AnyConnection::connect(&url).await.expect("open");
        for pragma in ["PRAGMA journal_mode = WAL", "PRAGMA synchronous = NORMAL"] {
            conn.execute(pragma).await.expect("pragma");
        }
        migrate(Db::Any(&mut conn), Dialect::Sqlite)
            .await
            .expect("schema");
        conn
    });
    let mut lite = rusqlite::Connection::open(&path).expect("open");
    lite.set_prepared_statement_cache_capacity(512);
    lite.execute_batch("PRAGMA synchronous = NORMAL")
        .expect("pragma");
    let commands = commands();
    let mut group = c.benchmark_group("sqlite_group_of_25_incr");
    group.throughput(Throughput::Elements(GROUP as u64));
    group.bench_function("sqlx", |b| {
        b.iter(|| {
            rt.block_on(async {
                any.execute("BEGIN IMMEDIATE").await.expect("begin");
                group_on(Db::Any(&mut any), &commands).await;
                any.execute("COMMIT").await.expect("commit");
            })
        })
    });
    group.bench_function("rusqlite", |b| {
        b.iter(|| {
            lite.execute_batch("BEGIN IMMEDIATE").expect("begin");
            rt.block_on(group_on(Db::Lite(&mut lite), &commands));
            lite.execute_batch("COMMIT").expect("commit");
        })
    });
    group.finish();
}

criterion_group!(benches, drivers);
criterion_main!(benches);
